#include "plan/calibration.hpp"

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <sstream>

namespace parallax::plan {

double CostCurve::at(double x) const {
  const size_t n = mb.size();
  if (n == 0) return 0;
  if (n == 1) return us[0] * (x / mb[0]);  // one point: proportional
  if (x <= mb.front()) {
    // Below the smallest size: along the first segment, but never under zero.
    const double slope = (us[1] - us[0]) / (mb[1] - mb[0]);
    return std::max(0.0, us[0] + slope * (x - mb[0]));
  }
  if (x >= mb.back()) {
    // Beyond the table: the line through its upper half (one noisy point should not set the slope).
    const size_t from = n / 2;
    const LinearFit f = fit_linear({mb.begin() + from, mb.end()}, {us.begin() + from, us.end()});
    return std::max(0.0, us.back() + f.per_sample_us * (x - mb.back()));
  }
  const size_t i = static_cast<size_t>(std::upper_bound(mb.begin(), mb.end(), x) - mb.begin());
  const double t = (x - mb[i - 1]) / (mb[i] - mb[i - 1]);
  return us[i - 1] + t * (us[i] - us[i - 1]);
}

namespace {

// Calls f(a's index, b's index) for each size both curves hold.
template <typename F>
void for_common_sizes(const CostCurve& a, const CostCurve& b, F f) {
  for (size_t i = 0; i < a.mb.size(); ++i)
    for (size_t j = 0; j < b.mb.size(); ++j)
      if (a.mb[i] == b.mb[j]) f(i, j);
}

void relative_differences(const CostCurve& a, const CostCurve& b, std::vector<double>* out) {
  for_common_sizes(a, b, [&](size_t i, size_t j) {
    const double low = std::min(a.us[i], b.us[j]);
    if (low > 0) out->push_back(std::abs(a.us[i] - b.us[j]) / low);
  });
}

CostCurve lower_curve(CostCurve a, const CostCurve& b) {
  for_common_sizes(a, b, [&](size_t i, size_t j) { a.us[i] = std::min(a.us[i], b.us[j]); });
  return a;
}

}  // namespace

double pass_difference(const SignatureCost& a, const SignatureCost& b) {
  std::vector<double> d;
  relative_differences(a.forward, b.forward, &d);
  relative_differences(a.backward, b.backward, &d);
  if (d.empty()) return 0;
  std::nth_element(d.begin(), d.begin() + static_cast<std::ptrdiff_t>(d.size() / 2), d.end());
  return d[d.size() / 2];
}

SignatureCost lower_of(const SignatureCost& a, const SignatureCost& b) {
  SignatureCost out = a;
  out.forward = lower_curve(a.forward, b.forward);
  out.forward_no_grad = lower_curve(a.forward_no_grad, b.forward_no_grad);
  out.backward = lower_curve(a.backward, b.backward);
  out.backward_no_input = lower_curve(a.backward_no_input, b.backward_no_input);
  // kept_bytes: a's (the allocator's count does not vary between passes).
  return out;
}

LinearFit fit_linear(const std::vector<double>& x, const std::vector<double>& y) {
  LinearFit f;
  const size_t n = std::min(x.size(), y.size());
  if (n == 0) return f;
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (size_t i = 0; i < n; ++i) {
    sx += x[i];
    sy += y[i];
    sxx += x[i] * x[i];
    sxy += x[i] * y[i];
  }
  const double det = n * sxx - sx * sx;
  if (n == 1 || std::abs(det) < 1e-12) {
    f.per_sample_us = sx > 0 ? sy / sx : 0;
  } else {
    f.per_sample_us = (n * sxy - sx * sy) / det;
    f.fixed_us = (sy - f.per_sample_us * sx) / n;
  }
  for (size_t i = 0; i < n; ++i) {
    const double fitted = f.fixed_us + f.per_sample_us * x[i];
    if (y[i] > 0) f.max_relative_residual = std::max(f.max_relative_residual, std::abs(fitted - y[i]) / y[i]);
  }
  return f;
}

InRunLine fit_in_run_line(const InRunPoint& small, const InRunPoint* large) {
  constexpr double kMinFactor = 0.8, kMaxFactor = 2.5;
  InRunLine line;
  if (large && large->alone_us > 2 * small.alone_us && small.in_run_us > 0 && large->in_run_us > 0) {
    line.fitted = (large->in_run_us - small.in_run_us) / (large->alone_us - small.alone_us);
    line.factor = std::clamp(line.fitted, kMinFactor, kMaxFactor);
    line.bounded = line.factor != line.fitted;
  }
  line.extra_us = small.in_run_us - line.factor * small.alone_us;
  return line;
}

const SignatureCost* Calibration::layer(const std::string& s) const {
  auto it = layers.find(s);
  return it == layers.end() ? nullptr : &it->second;
}

const SignatureCost* Calibration::loss(const std::string& s) const {
  auto it = losses.find(s);
  return it == losses.end() ? nullptr : &it->second;
}

double OptimizerCost::us(double params, int tensors) const {
  return by_params.at(params) + per_tensor_us * std::max(0, tensors - kCurveTensors);
}

const OptimizerCost* Calibration::optimizer(const std::string& kind, bool momentum) const {
  const OptimizerCost* any = nullptr;
  for (const auto& o : optimizers) {
    if (o.kind != kind) continue;
    if (o.momentum == momentum) return &o;
    any = &o;
  }
  return any;
}

namespace {
std::string form_signature(const LayerShape& sh) {
  const BlockForm& f = sh.form;
  std::ostringstream s;
  s << "decoder kv" << sh.kv_heads() << " " << name(f.mlp) << " " << name(f.norm) << (f.rope ? " rope" : "")
    << (f.bias ? "" : " nobias") << (f.qkv_bias && !f.bias ? " qkvbias" : "") << (f.tie_embeddings ? " tied" : "");
  if (f.head_dim > 0) s << " d" << f.head_dim;
  if (f.qk_norm) s << " qknorm";
  if (f.mla.on())
    s << " mla" << f.mla.q_lora_rank << "/" << f.mla.kv_lora_rank << "/" << f.mla.qk_nope_head_dim << "+" << f.mla.qk_rope_head_dim << "/"
      << f.mla.v_head_dim;
  if (sh.mtp) s << " mtp";
  if (sh.predictions > 1) s << " x" << sh.predictions;
  return s.str();
}
}  // namespace

std::string layer_signature(const Layer& l, Precision precision) {
  std::ostringstream s;
  const auto& sh = l.shape;
  s << name(l.kind) << " ";
  switch (l.kind) {
    case LayerKind::linear:
      s << sh.in << "x" << sh.out << (sh.relu ? " relu" : "") << (sh.bias ? "" : " nobias");
      break;
    case LayerKind::embedding: s << "vocab" << sh.vocab << " h" << sh.hidden << " seq" << sh.seq_len; break;
    case LayerKind::encoder:
      s << "h" << sh.hidden << " heads" << sh.heads << " ffn" << sh.ffn << " seq" << sh.seq_len;
      if (sh.window > 0) s << " window" << sh.window;
      break;
    case LayerKind::head: s << "h" << sh.hidden << " vocab" << sh.vocab << " seq" << sh.seq_len; break;
    case LayerKind::synthetic: s << l.name; break;
  }
  // A decoder block's form (a different layer at the same widths); LibTorch's encoder layer's
  // signatures stay as older profiles wrote them.
  if (l.shape.form.decoder && l.kind != LayerKind::linear && l.kind != LayerKind::synthetic) s << " " << form_signature(l.shape);
  // Dropout changes what a layer keeps and runs; a profile measured at 0 (the executor runs no
  // other) has no figure for it, and older profiles' signatures stay as they were.
  if (l.shape.form.dropout > 0 && l.kind != LayerKind::linear && l.kind != LayerKind::synthetic) s << " dropout" << l.shape.form.dropout;
  s << " " << name(precision);
  return s.str();
}

std::vector<std::string> unmeasured_signatures(const Calibration& calibration, const std::vector<Layer>& layers,
                                               Precision precision) {
  std::vector<std::string> out;
  for (const Layer& layer : layers) {
    std::string sig = layer_signature(layer, precision);
    if (!calibration.layer(sig) && std::find(out.begin(), out.end(), sig) == out.end()) out.push_back(std::move(sig));
  }
  return out;
}

std::string data_key(const std::string& source, const Layer& first_layer, bool with_input) {
  return source + " " + layer_signature(first_layer, Precision::fp32) + (with_input ? " input" : " target");
}

namespace {

CostCurve parse_curve(const Field& map, const std::string& key, const std::vector<double>& mb) {
  CostCurve c;
  Field f = map[key];
  if (!f.present()) return c;
  if (!f.is_sequence()) f.fail("'" + f.path() + "' must be a list of numbers, one per entry of 'mb'");
  for (const Field& e : f.elements()) {
    const double v = to_number(e, 0);  // to_number names the place when v < 0
    c.us.push_back(v);
  }
  if (c.us.size() != mb.size())
    f.fail("'" + f.path() + "' has " + std::to_string(c.us.size()) + " values for " + std::to_string(mb.size()) + " sizes");
  c.mb = mb;
  return c;
}

std::vector<double> parse_sizes(const Field& item, const char* key = "mb") {
  Field f = require(item, key);
  if (!f.is_sequence() || f.elements().empty()) f.fail("'" + f.path() + "' must be a non-empty ascending list of sizes");
  std::vector<double> mb;
  for (const Field& e : f.elements()) {
    const double v = to_number(e, 1);
    if (!mb.empty() && v <= mb.back()) e.fail("'" + f.path() + "' must be ascending");
    mb.push_back(v);
  }
  return mb;
}

SignatureCost parse_signature(const Field& item) {
  expect_keys(item, {"signature", "mb", "fwd_us", "fwd_no_grad_us", "bwd_us", "bwd_no_input_us", "kept_bytes", "fwd_launch_us",
                     "bwd_launch_us"});
  SignatureCost c;
  c.signature = to_text(require(item, "signature"));
  require(item, "fwd_us");
  const auto mb = parse_sizes(item);
  c.forward = parse_curve(item, "fwd_us", mb);
  c.forward_no_grad = parse_curve(item, "fwd_no_grad_us", mb);
  c.backward = parse_curve(item, "bwd_us", mb);
  c.backward_no_input = parse_curve(item, "bwd_no_input_us", mb);
  c.kept_bytes = parse_curve(item, "kept_bytes", mb);
  c.forward_launch = parse_curve(item, "fwd_launch_us", mb);
  c.backward_launch = parse_curve(item, "bwd_launch_us", mb);
  return c;
}

AlphaBeta parse_alpha_beta(const Field& map, std::initializer_list<const char*> more_keys = {}) {
  std::vector<std::string> keys = {"latency_us", "bandwidth_gb_per_s", "ranks"};
  keys.insert(keys.end(), more_keys.begin(), more_keys.end());
  expect_keys(map, keys);
  AlphaBeta ab;
  ab.latency_us = to_number(require(map, "latency_us"), 0);
  Field bw = require(map, "bandwidth_gb_per_s");
  ab.bandwidth_gb_per_s = to_number(bw, 0);
  if (ab.bandwidth_gb_per_s <= 0) bw.fail("'" + bw.path() + "' must be > 0");
  return ab;
}

std::map<std::string, SignatureCost> parse_signatures(const Field& list) {
  std::map<std::string, SignatureCost> out;
  if (!list.present()) return out;
  if (!list.is_sequence()) list.fail("'" + list.path() + "' must be a list of {signature, mb, fwd_us, ...}");
  for (const Field& item : list.elements()) {
    SignatureCost c = parse_signature(item);
    if (out.count(c.signature)) item.fail("signature '" + c.signature + "' appears twice");
    out.emplace(c.signature, std::move(c));
  }
  return out;
}

InRunFactors parse_in_run(const Field& in_run) {
  expect_keys(in_run, {"forward", "backward", "optimizer", "forward_extra_us", "backward_extra_us",
                       "optimizer_extra_us", "forward_probed_us", "backward_probed_us", "optimizer_probed_us", "allreduce", "sync_backward_extra_us_per_mb", "send_extra_us", "delivery_extra_us", "send_unposted_us",
                       "late_receive_us", "probe", "bounded"});
  InRunFactors f;
  f.forward = number_or(in_run, "forward", 1, kMinInRunFactor);
  f.backward = number_or(in_run, "backward", 1, kMinInRunFactor);
  f.optimizer = number_or(in_run, "optimizer", 1, kMinInRunFactor);
  f.allreduce = number_or(in_run, "allreduce", 1, kMinInRunFactor);
  // May be negative (a run can beat the time alone); the sum never goes below 0.
  f.forward_extra_us = number_or(in_run, "forward_extra_us", 0, -1e9);
  f.backward_extra_us = number_or(in_run, "backward_extra_us", 0, -1e9);
  f.optimizer_extra_us = number_or(in_run, "optimizer_extra_us", 0, -1e9);
  f.forward_probed_us = number_or(in_run, "forward_probed_us", 0, 0);
  f.backward_probed_us = number_or(in_run, "backward_probed_us", 0, 0);
  f.optimizer_probed_us = number_or(in_run, "optimizer_probed_us", 0, 0);
  f.sync_backward_extra_us_per_mb = number_or(in_run, "sync_backward_extra_us_per_mb", 0, -1e9);
  // Extras may be negative (the run can beat the isolated figure); the sum never goes below 0.
  f.send_extra_us = number_or(in_run, "send_extra_us", 0, -1e9);
  f.delivery_extra_us = number_or(in_run, "delivery_extra_us", 0, -1e9);
  // send_unposted_us and late_receive_us (a send posted before its receive) are read and not
  // used: profiles calibrated before the executor posted receives at the step's start have them.
  number_or(in_run, "send_unposted_us", 0, 0);
  number_or(in_run, "late_receive_us", 0, 0);
  if (in_run["probe"].present()) f.probe = to_text(in_run["probe"]);
  if (in_run["bounded"].present()) f.bounded = to_text(in_run["bounded"]);
  return f;
}

}  // namespace

Calibration parse_calibration(const Field& map) {
  for (const char* old : {"interference", "message_cpu_us"})
    if (map[old].present())
      map[old].fail("'" + map[old].path() + "' is from an older `parallax calibrate`; run it again to measure this machine");
  expect_keys(map, {"threads", "cores", "in_run", "in_run_data", "backward_call_us", "copy_gb_per_s", "host_probe_us", "send_call", "p2p",
                    "allreduce", "allgather", "layers", "losses", "data", "optimizers", "loss_scaler"});
  Calibration c;
  c.source = map.doc().file();
  c.threads = static_cast<int>(int_or(map, "threads", 1, 1, 4096));
  c.cores = static_cast<int>(int_or(map, "cores", 1, 1, 1 << 20));
  c.backward_call_us = number_or(map, "backward_call_us", 0, 0);
  c.copy_gb_per_s = number_or(map, "copy_gb_per_s", 0, 0);
  c.host_probe_us = number_or(map, "host_probe_us", 0, 0);
  if (Field in_run = map["in_run"]; in_run.present()) c.in_run = parse_in_run(in_run);
  if (Field in_run = map["in_run_data"]; in_run.present()) c.in_run_data = parse_in_run(in_run);
  if (Field send = map["send_call"]; send.present()) {
    expect_keys(send, {"bytes", "us"});
    c.send_call = parse_curve(send, "us", parse_sizes(send, "bytes"));
  }
  if (map["p2p"].present()) c.p2p = parse_alpha_beta(map["p2p"]);
  if (map["allreduce"].present()) {
    c.allreduce = parse_alpha_beta(map["allreduce"]);
    c.allreduce_ranks = static_cast<int>(int_or(map["allreduce"], "ranks", 2, 2, 1 << 20));
  }
  if (Field gather = map["allgather"]; gather.present()) {
    c.allgather = parse_alpha_beta(gather, {"cpu_share", "bytes", "us"});
    c.allgather_cpu_share = number_or(gather, "cpu_share", 0, 0);
    if (gather["bytes"].present()) c.allgather_by_bytes = parse_curve(gather, "us", parse_sizes(gather, "bytes"));
  }
  c.layers = parse_signatures(map["layers"]);
  c.losses = parse_signatures(map["losses"]);
  Field data = map["data"];
  if (data.present()) {
    if (!data.is_sequence()) data.fail("'" + data.path() + "' must be a list of {load, mb, us}");
    for (const Field& item : data.elements()) {
      expect_keys(item, {"load", "mb", "us"});
      const std::string load = to_text(require(item, "load"));
      c.data[load] = parse_curve(item, "us", parse_sizes(item));
    }
  }
  Field opt = map["optimizers"];
  if (opt.present()) {
    if (!opt.is_sequence()) opt.fail("'" + opt.path() + "' must be a list of {kind, momentum, mb, us[, per_tensor_us]}");
    for (const Field& item : opt.elements()) {
      expect_keys(item, {"kind", "momentum", "mb", "us", "per_tensor_us", "launch_us"});
      OptimizerCost o;
      o.kind = to_choice(require(item, "kind"), {"sgd", "adam", "adamw"});
      o.momentum = bool_or(item, "momentum", false);
      o.by_params = parse_curve(item, "us", parse_sizes(item));
      o.per_tensor_us = number_or(item, "per_tensor_us", 0, 0);
      o.launch = parse_curve(item, "launch_us", o.by_params.mb);
      c.optimizers.push_back(o);
    }
  }
  if (Field scaler = map["loss_scaler"]; scaler.present()) {
    expect_keys(scaler, {"params", "us"});
    c.loss_scaler = parse_curve(scaler, "us", parse_sizes(scaler, "params"));
  }
  return c;
}

}  // namespace parallax::plan
