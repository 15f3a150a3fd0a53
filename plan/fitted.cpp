#include "plan/fitted.hpp"

#include <iomanip>
#include <sstream>

#include "plan/profile_copy.hpp"

namespace parallax::plan {

namespace {

// A factor: a positive number; a fit that came out at 0 or below is not a cost.
double factor(const Field& f) {
  const double v = to_number(f, 0);
  if (v <= 0) f.fail("'" + f.path() + "' must be a factor > 0");
  return v;
}

// A YAML double-quoted string.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (char c : s) out += c == '"' || c == '\\' ? std::string("\\") + c : std::string(1, c);
  return out + "\"";
}

}  // namespace

FittedCosts::Layer FittedCosts::layer(const std::string& signature) const {
  const auto it = layers.find(signature);
  return it == layers.end() ? Layer{} : it->second;
}

FittedCosts parse_fitted(const Field& map) {
  expect_keys(map, {"from", "statistic", "base", "precision", "layers", "optimizer", "allreduce", "send_forward_us", "send_backward_us", "kernels"});
  FittedCosts f;
  if (const Field from = map["from"]; from.present()) {
    if (!from.is_sequence()) from.fail("'" + from.path() + "' must be a list of trace files");
    for (const Field& t : from.elements()) f.from.push_back(to_text(t));
  }
  f.statistic = string_or(map, "statistic", "");
  f.base = string_or(map, "base", "");
  f.precision = string_or(map, "precision", "");
  if (const Field layers = map["layers"]; layers.present()) {
    if (!layers.is_sequence()) layers.fail("'" + layers.path() + "' must be a list of {signature, forward, backward}");
    for (const Field& l : layers.elements()) {
      expect_keys(l, {"signature", "forward", "backward"});
      FittedCosts::Layer x;
      if (l["forward"].present()) x.forward = factor(l["forward"]);
      if (l["backward"].present()) x.backward = factor(l["backward"]);
      f.layers[to_text(require(l, "signature"))] = x;
    }
  }
  if (map["optimizer"].present()) f.optimizer = factor(map["optimizer"]);
  if (map["allreduce"].present()) f.allreduce = factor(map["allreduce"]);
  if (map["send_forward_us"].present()) f.send_forward_us = to_number(map["send_forward_us"], 0);
  if (map["send_backward_us"].present()) f.send_backward_us = to_number(map["send_backward_us"], 0);
  if (const Field k = map["kernels"]; k.present()) {
    expect_keys(k, {"gemm", "flash", "memory"});
    if (k["gemm"].present()) f.kernels.gemm = factor(k["gemm"]);
    if (k["flash"].present()) f.kernels.flash = factor(k["flash"]);
    if (k["memory"].present()) f.kernels.memory = factor(k["memory"]);
  }
  return f;
}

std::string fitted_yaml(const FittedCosts& f) {
  std::ostringstream s;
  s << std::setprecision(6);
  s << "  base: " << quoted(f.base) << "\n";
  s << "  statistic: " << quoted(f.statistic) << "\n";
  if (!f.precision.empty()) s << "  precision: " << f.precision << "\n";
  s << "  from:\n";
  for (const auto& t : f.from) s << "    - " << quoted(t) << "\n";
  if (!f.layers.empty()) {
    s << "  layers:\n";
    for (const auto& [signature, l] : f.layers)
      s << "    - {signature: " << quoted(signature) << ", forward: " << l.forward << ", backward: " << l.backward << "}\n";
  }
  if (f.optimizer != 1) s << "  optimizer: " << f.optimizer << "\n";
  if (f.allreduce != 1) s << "  allreduce: " << f.allreduce << "\n";
  if (f.send_forward_us != 0) s << "  send_forward_us: " << f.send_forward_us << "\n";
  if (f.send_backward_us != 0) s << "  send_backward_us: " << f.send_backward_us << "\n";
  if (f.kernels != FittedCosts::Kernels{})
    s << "  kernels: {gemm: " << f.kernels.gemm << ", flash: " << f.kernels.flash << ", memory: " << f.kernels.memory << "}\n";
  return s.str();
}

std::string fitted_copy_yaml(const std::string& base_text, const std::string& name, const FittedCosts& f,
                             const std::vector<std::string>& header) {
  return renamed_profile_text(base_text, name, header, "fitted") + "fitted:\n" + fitted_yaml(f);
}

}  // namespace parallax::plan
