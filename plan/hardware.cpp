#include "plan/hardware.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <functional>

#include "plan/builtin.hpp"

namespace parallax::plan {

using schedule::Collectives;
namespace {

const double kInf = std::numeric_limits<double>::infinity();

Link parse_link(const Field& map, bool with_nics) {
  std::vector<std::string> keys = {"name", "bandwidth_gb_per_s", "latency_us"};
  if (with_nics) keys.push_back("nics_per_node");
  expect_keys(map, keys);
  Link link;
  link.name = string_or(map, "name", map.path());
  Field bw = require(map, "bandwidth_gb_per_s");
  link.bandwidth_gb_per_s = to_number(bw, 0);
  if (link.bandwidth_gb_per_s <= 0) bw.fail("'" + bw.path() + "' must be > 0 (use .inf for free links)");
  link.latency_us = to_number(require(map, "latency_us"), 0);
  return link;
}

// A fraction in (0, 1].
double fraction(const Field& f) {
  const double v = to_number(f, 0);
  if (v <= 0 || v > 1) f.fail("'" + f.path() + "' must be a fraction in (0, 1]");
  return v;
}

// A curve written as [x, y] pairs, x > 0 and increasing (nccl.stretch_by_size,
// device.compute.gemm_efficiency); `pair` names the pair in messages ("MiB, factor"), `x_what`
// the x ("a size in MiB"), and `y_of` reads and checks a y.
std::vector<std::pair<double, double>> parse_curve(const Field& points, const std::string& pair, const std::string& x_what,
                                                   const std::function<double(const Field&)>& y_of) {
  if (!points.is_sequence()) points.fail("'" + points.path() + "' must be a list of [" + pair + "] pairs");
  std::vector<std::pair<double, double>> out;
  for (const Field& p : points.elements()) {
    if (!p.is_sequence() || p.elements().size() != 2) p.fail("'" + p.path() + "' must be a [" + pair + "] pair");
    const std::vector<Field> e = p.elements();
    const double x = to_number(e[0], 0);
    if (x <= 0) e[0].fail("'" + e[0].path() + "' must be " + x_what + " > 0");
    if (!out.empty() && x <= out.back().first) e[0].fail("'" + e[0].path() + "' must be larger than the size before it");
    out.emplace_back(x, y_of(e[1]));
  }
  if (out.empty()) points.fail("'" + points.path() + "' must give at least one [" + pair + "] pair");
  return out;
}

// A curve's y at x: interpolated on log2(x) between its points, held flat beyond the ends.
double log2_interpolate(const std::vector<std::pair<double, double>>& pts, double x) {
  if (x <= pts.front().first) return pts.front().second;
  if (x >= pts.back().first) return pts.back().second;
  size_t i = 1;
  while (pts[i].first < x) ++i;
  const auto [lo_x, lo] = pts[i - 1];
  const auto [hi_x, hi] = pts[i];
  return lo + (std::log2(x) - std::log2(lo_x)) / (std::log2(hi_x) - std::log2(lo_x)) * (hi - lo);
}

// An increasing list of positive sizes (a GEMM grid's m, n or k).
std::vector<double> parse_axis(const Field& list) {
  if (!list.is_sequence() || list.elements().empty()) list.fail("'" + list.path() + "' must be a list of sizes, increasing");
  std::vector<double> out;
  for (const Field& e : list.elements()) {
    const double v = to_number(e, 0);
    if (v <= 0) e.fail("'" + e.path() + "' must be a size > 0");
    if (!out.empty() && v <= out.back()) e.fail("'" + e.path() + "' must be larger than the size before it");
    out.push_back(v);
  }
  return out;
}

// `compute.gemm.<precision>`: {m, n, k, tflops}, the TFLOP/s of every (m, n, k), m outermost;
// none may pass the device's dense peak at that precision.
GemmGrid parse_gemm_grid(const Field& map, double peak) {
  expect_keys(map, {"m", "n", "k", "tflops"});
  GemmGrid g{parse_axis(require(map, "m")), parse_axis(require(map, "n")), parse_axis(require(map, "k")), {}};
  // Flat, or one list of k figures per (m, n), as scripts/gemm_tables.py writes it.
  Field list = require(map, "tflops");
  std::vector<Field> figures;
  if (list.is_sequence())
    for (const Field& e : list.elements()) {
      if (!e.is_sequence()) figures.push_back(e);
      else for (const Field& f : e.elements()) figures.push_back(f);
    }
  const size_t want = g.m.size() * g.n.size() * g.k.size();
  if (figures.size() != want)
    list.fail("'" + list.path() + "' must list " + std::to_string(want) + " TFLOP/s figures: one per (m, n, k), m outermost, then n, then k");
  for (const Field& e : figures) {
    const double v = to_number(e, 0);
    if (v <= 0) e.fail("'" + e.path() + "' must be > 0");
    if (v > peak) e.fail("'" + e.path() + "' is above the device's dense peak at this precision (" + std::to_string(static_cast<int>(peak)) + " TFLOP/s)");
    g.tflops.push_back(v);
  }
  return g;
}

// `compute.clock_fraction`: the device holds this fraction of the clock its tables were measured
// at (a lower power limit than theirs): the compute-bound rates (GEMMs, flash attention) scale by
// it, memory-bound kernels do not. Scaled here, where the tables are read, so that a profile can
// state the tables as measured and the rest of the model never sees the difference.
void scale_compute_rates(ComputeModel& c, double clock) {
  for (auto& [size, efficiency] : c.gemm_efficiency) efficiency *= clock;
  for (auto& [precision, grid] : c.gemm)
    for (double& tflops : grid.tflops) tflops *= clock;
  for (auto& [precision, tflops] : c.sustained_tflops) tflops *= clock;
  c.flash_forward_efficiency *= clock;
  c.flash_backward_efficiency *= clock;
  if (c.flash2_forward_efficiency) *c.flash2_forward_efficiency *= clock;
  if (c.flash2_backward_efficiency) *c.flash2_backward_efficiency *= clock;
}

Device parse_device(const Field& map);

// `compute.same_as: NAME`: the compute model of the built-in profile NAME, whose tables were
// measured on the same chip, so that a profile that shares them (the H200's, a power-limited
// H100's) names them instead of copying them. NAME's own must be measured ones: not taken from a
// third profile, not scaled by a clock_fraction.
ComputeModel compute_of_builtin(const Field& from) {
  const std::string name = to_text(from);
  const char* text = builtin_hardware_text(name);
  if (!text) from.fail("'" + from.path() + "' names no built-in profile; built-in profiles: " + join(builtin_hardware_names()));
  const YamlDocument doc = YamlDocument::from_text(text, "hardware/" + name + ".yaml (built-in)");
  const Field device = Field::root(doc)["device"];
  const Field compute = device["compute"];
  if (!compute.present()) from.fail("'" + from.path() + "': profile '" + name + "' has no device.compute to take");
  if (compute["same_as"].present() || compute["clock_fraction"].present())
    from.fail("'" + from.path() + "': profile '" + name + "' takes or scales another's tables; name the profile they were measured for");
  return *parse_device(device).compute;
}

ComputeModel parse_compute(const Field& map, const std::map<Precision, double>& peaks) {
  expect_keys(map, {"same_as", "gemm_efficiency", "gemm", "memory_efficiency", "flash_forward_efficiency", "flash_backward_efficiency",
                    "flash2_forward_efficiency", "flash2_backward_efficiency", "flash_by_sequence", "flash2_by_sequence", "precisions",
                    "sustained_tflops", "clock_fraction"});
  // Every key below replaces what same_as gave (a gemm precision by precision).
  ComputeModel c = map["same_as"].present() ? compute_of_builtin(map["same_as"]) : ComputeModel{};
  if (Field f = map["gemm_efficiency"]; f.present())
    c.gemm_efficiency = parse_curve(f, "GFLOP, fraction of peak", "a GEMM size in GFLOP", fraction);
  if (Field f = map["memory_efficiency"]; f.present()) c.memory_efficiency = fraction(f);
  if (Field f = map["flash_forward_efficiency"]; f.present()) c.flash_forward_efficiency = fraction(f);
  if (Field f = map["flash_backward_efficiency"]; f.present()) c.flash_backward_efficiency = fraction(f);
  if (Field f = map["flash2_forward_efficiency"]; f.present()) c.flash2_forward_efficiency = fraction(f);
  if (Field f = map["flash2_backward_efficiency"]; f.present()) c.flash2_backward_efficiency = fraction(f);
  auto by_sequence = [](const Field& f) {
    expect_keys(f, {"full", "causal"});
    ComputeModel::BySequence b;
    for (auto [key, curve] : {std::pair{"full", &b.full}, std::pair{"causal", &b.causal}})
      if (Field points = f[key]; points.present()) *curve = parse_curve(points, "tokens, fraction", "a sequence length", fraction);
    return b;
  };
  if (Field f = map["flash_by_sequence"]; f.present()) c.flash_by_sequence = by_sequence(f);
  if (Field f = map["flash2_by_sequence"]; f.present()) c.flash2_by_sequence = by_sequence(f);
  if (Field list = map["precisions"]; list.present()) {
    if (!list.is_sequence() || list.elements().empty()) list.fail("'" + list.path() + "' must be a list such as [bf16, fp16]");
    c.precisions.clear();
    for (const Field& e : list.elements()) c.precisions.push_back(*precision_from_name(to_choice(e, {"fp32", "bf16", "fp16", "fp8"})));
  }
  // A map by precision (`gemm`, `sustained_tflops`): each value read against the device's dense
  // peak at its precision, which must be given.
  auto by_precision = [&](const Field& map_of, const std::function<void(const Field&, Precision, double)>& read) {
    expect_keys(map_of, {"fp32", "bf16", "fp16", "fp8"});
    for (const char* name : {"fp32", "bf16", "fp16", "fp8"}) {
      Field f = map_of[name];
      if (!f.present()) continue;
      const Precision p = *precision_from_name(name);
      const auto peak = peaks.find(p);
      if (peak == peaks.end()) f.fail("'" + f.path() + "' has no peak: give device.peak_tflops." + name + " first");
      read(f, p, peak->second);
    }
  };
  if (Field grids = map["gemm"]; grids.present())
    by_precision(grids, [&](const Field& f, Precision p, double peak) { c.gemm[p] = parse_gemm_grid(f, peak); });
  if (Field caps = map["sustained_tflops"]; caps.present())
    by_precision(caps, [&](const Field& f, Precision p, double peak) {
      const double v = to_number(f, 0);
      if (v <= 0 || v > peak)
        f.fail("'" + f.path() + "' must be > 0 and at most the device's dense peak at " + name(p) + " (" +
               std::to_string(static_cast<int>(peak)) + " TFLOP/s)");
      c.sustained_tflops[p] = v;
    });
  for (Precision p : c.precisions)
    if (c.gemm_efficiency.empty() && !c.gemm.count(p))
      map.fail("'" + map.path() + "' covers " + name(p) + " but gives neither gemm_efficiency nor gemm." + name(p));
  // Taken tables were checked against their own device's peaks; they must fit this one's too.
  if (Field from = map["same_as"]; from.present())
    for (const auto& [p, grid] : c.gemm) {
      const auto peak = peaks.find(p);
      if (peak == peaks.end() || *std::max_element(grid.tflops.begin(), grid.tflops.end()) > peak->second)
        from.fail("'" + from.path() + "': its " + name(p) + " table passes this device's dense peak at " + name(p) +
                  " (device.peak_tflops." + name(p) + ", or none given)");
    }
  if (Field f = map["clock_fraction"]; f.present()) {
    c.clock_fraction = fraction(f);
    scale_compute_rates(c, c.clock_fraction);
  }
  return c;
}

Device parse_device(const Field& map) {
  expect_keys(map, {"name", "kind", "memory_gb", "memory_bandwidth_gb_per_s", "peak_tflops", "efficiency",
                    "layer_overhead_us", "compute"});
  Device d;
  d.name = string_or(map, "name", "device");
  if (Field kind = map["kind"]; kind.present()) d.kind = to_choice(kind, {"cpu", "cuda"}) == "cuda" ? DeviceKind::cuda : DeviceKind::cpu;
  d.memory_gb = to_number(require(map, "memory_gb"), 0);
  d.memory_bandwidth_gb_per_s = number_or(map, "memory_bandwidth_gb_per_s", kInf, 0);
  Field peaks = require(map, "peak_tflops");
  expect_keys(peaks, {"fp32", "bf16", "fp16", "fp8"});
  for (const char* p : {"fp32", "bf16", "fp16", "fp8"}) {
    Field f = peaks[p];
    if (!f.present()) continue;
    const double v = to_number(f, 0);
    if (v <= 0) f.fail("'" + f.path() + "' must be > 0 (leave the key out if the device lacks it)");
    d.peak_tflops[*precision_from_name(p)] = v;
  }
  if (!d.peak_tflops.count(Precision::fp32)) peaks.fail("'" + peaks.path() + "' must give fp32");
  Field eff = map["efficiency"];
  d.efficiency = number_or(map, "efficiency", 0.5, 0);
  if (d.efficiency <= 0 || d.efficiency > 1) eff.fail("'" + eff.path() + "' must be in (0, 1]");
  d.layer_overhead_us = number_or(map, "layer_overhead_us", 0, 0);
  if (Field c = map["compute"]; c.present()) d.compute = parse_compute(c, d.peak_tflops);
  return d;
}

MeasuredLayerCost parse_measured(const Field& item) {
  expect_keys(item, {"layer", "kind", "fwd_us_fixed", "fwd_us_per_sample", "bwd_us_fixed", "bwd_us_per_sample"});
  MeasuredLayerCost m;
  m.layer = string_or(item, "layer", "");
  if (item["kind"].present()) m.kind = to_choice(item["kind"], {"linear", "embedding", "encoder", "head", "synthetic"});
  if (m.layer.empty() == m.kind.empty()) item.fail("each measured layer cost needs exactly one of 'layer' (a name) or 'kind'");
  m.fwd_us_fixed = number_or(item, "fwd_us_fixed", 0, 0);
  m.fwd_us_per_sample = number_or(item, "fwd_us_per_sample", 0, 0);
  m.bwd_us_fixed = number_or(item, "bwd_us_fixed", 0, 0);
  m.bwd_us_per_sample = number_or(item, "bwd_us_per_sample", 0, 0);
  return m;
}

// nccl.stretch_by_size: [[MiB, factor], ...], sizes increasing, factors in [1, 10].
std::vector<std::pair<double, double>> parse_stretch(const Field& points) {
  return parse_curve(points, "MiB, factor", "a size in MiB", [](const Field& f) {
    const double factor = to_number(f, 0);
    if (factor < 1 || factor > 10) f.fail("'" + f.path() + "' must be a slowdown factor in [1, 10]");
    return factor;
  });
}

NcclConfig parse_nccl(const Field& map, const HardwareProfile& hw) {
  expect_keys(map, {"generation", "nvlinks", "channels", "nvls", "cpu", "algorithm", "protocol", "stretch_by_size"});
  NcclConfig c;
  const std::string gen = to_choice(require(map, "generation"), {"volta", "ampere", "hopper", "blackwell"});
  c.generation = gen == "volta"    ? NcclConfig::Generation::volta
                 : gen == "ampere" ? NcclConfig::Generation::ampere
                 : gen == "hopper" ? NcclConfig::Generation::hopper
                                   : NcclConfig::Generation::blackwell;
  c.nvlinks = static_cast<int>(to_int(require(map, "nvlinks"), 0, 64));
  c.channels = static_cast<int>(to_int(require(map, "channels"), 1, 64));
  c.nvls = bool_or(map, "nvls", false);
  if (map["cpu"].present())
    c.cpu = to_choice(map["cpu"], {"intel", "amd"}) == "amd" ? NcclConfig::Cpu::amd : NcclConfig::Cpu::intel;
  const bool sharp = c.generation == NcclConfig::Generation::hopper || c.generation == NcclConfig::Generation::blackwell;
  if (c.nvls && (!sharp || c.nvlinks == 0))
    map["nvls"].fail("'" + map["nvls"].path() +
                     "' needs generation hopper or blackwell and nvlinks > 0 (NVLink SHARP is an NVSwitch feature from Hopper on)");
  if (map["algorithm"].present()) c.algorithm = to_choice(map["algorithm"], {"auto", "ring", "tree", "nvls", "hierarchical"});
  if (c.algorithm == "nvls" && !c.nvls) map["algorithm"].fail("'" + map["algorithm"].path() + "' is nvls but the profile has no 'nvls: true'");
  if (map["protocol"].present()) c.protocol = to_choice(map["protocol"], {"auto", "ll", "ll128", "simple"});
  if (Field points = map["stretch_by_size"]; points.present()) c.stretch_by_size = parse_stretch(points);
  // NCCL's model turns link bandwidths into times; a free link has none to give.
  const bool free_node = std::isinf(hw.node_link.bandwidth_gb_per_s);
  const bool free_net = hw.network && std::isinf(hw.network->bandwidth_gb_per_s);
  if (free_node || free_net) map.fail("'" + map.path() + "' needs finite link bandwidths (node.link and network)");
  return c;
}

Interference parse_interference(const Field& map) {
  expect_keys(map, {"compute_while_communicating", "communication_while_memory_bound", "compute_while_computing"});
  Interference out;
  auto factor = [&](const char* key, double& into) {
    Field f = map[key];
    if (!f.present()) return;
    into = to_number(f, 0);
    if (into < 1 || into > 10) f.fail("'" + f.path() + "' must be a slowdown factor in [1, 10] (1: no effect)");
  };
  factor("compute_while_communicating", out.compute);
  factor("communication_while_memory_bound", out.communication);
  factor("compute_while_computing", out.shared_cores);
  return out;
}

PublishedCheck parse_published_check(const Field& map) {
  if (!map.is_map())
    map.fail("'published_check' entries are maps {runs_of, bench, rows, mean_error, mean_absolute_error, worst, results}");
  expect_keys(map, {"runs_of", "bench", "rows", "mean_error", "mean_absolute_error", "worst", "results"});
  PublishedCheck c;
  c.runs_of = to_text(require(map, "runs_of"));
  c.bench = to_text(require(map, "bench"));
  c.rows = static_cast<int>(to_int(require(map, "rows"), 1, 1 << 20));
  c.mean_error = to_number(require(map, "mean_error"), -100);
  c.mean_absolute_error = to_number(require(map, "mean_absolute_error"), 0);
  c.worst = to_number(require(map, "worst"), -100);
  if (std::abs(c.mean_error) > c.mean_absolute_error + 0.05 || c.mean_absolute_error > std::abs(c.worst) + 0.05)
    map.fail("'published_check' needs |mean_error| <= mean_absolute_error <= |worst| (percent)");
  c.results = to_text(require(map, "results"));
  return c;
}

std::string source_name(const Field& f) { return f.doc().file(); }

HardwareProfile from_document(const YamlDocument& doc) {
  return parse_hardware(Field::root(doc));
}

HardwareProfile load_named(const Field& value, const std::string& name) {
  if (names_hardware_file(name)) {
    const std::filesystem::path p = value.resolve_path(name);
    if (!std::filesystem::exists(p)) value.fail("hardware profile file '" + p.string() + "' does not exist");
    return from_document(YamlDocument::from_file(p.string()));
  }
  if (const char* text = builtin_hardware_text(name)) {
    return from_document(YamlDocument::from_text(text, "hardware/" + name + ".yaml (built-in)"));
  }
  value.fail("unknown hardware profile '" + name + "'; built-in profiles: " +
             join(builtin_hardware_names()) + "; or give a path to a .yaml profile or an inline map");
}

}  // namespace

bool names_hardware_file(const std::string& name) {
  return name.find('/') != std::string::npos || name.ends_with(".yaml") || name.ends_with(".yml");
}

int64_t Device::memory_bytes() const {
  // Past int64 (8 EiB) a device holds anything a plan can need; the cast alone would be undefined.
  const double bytes = memory_gb * 1024.0 * 1024.0 * 1024.0;
  if (!(bytes < 9.2e18)) return std::numeric_limits<int64_t>::max();
  return static_cast<int64_t>(bytes);
}

HardwareProfile parse_hardware(const Field& map) {
  expect_keys(map, {"name", "device", "node", "network", "nodes", "collectives", "measured_layers", "calibration",
                    "nccl", "interference", "fitted", "published_check"});
  HardwareProfile hw;
  hw.name = string_or(map, "name", "inline");
  hw.source = source_name(map);
  hw.device = parse_device(require(map, "device"));
  Field node = require(map, "node");
  expect_keys(node, {"devices", "link"});
  hw.devices_per_node = static_cast<int>(to_int(require(node, "devices"), 1, 1 << 20));
  hw.node_link = parse_link(require(node, "link"), false);
  Field net = map["network"];
  if (net.present()) {
    Link link = parse_link(net, true);
    hw.nics_per_node = static_cast<int>(int_or(net, "nics_per_node", 1, 1, 1024));
    hw.network = link;
  }
  Field nodes = map["nodes"];
  if (nodes.present()) hw.max_nodes = static_cast<int>(to_int(nodes, 1, 1 << 24));
  if (map["collectives"].present())
    hw.collectives = to_choice(map["collectives"], {"gloo", "nccl"}) == "nccl" ? Collectives::nccl : Collectives::gloo;
  Field measured = map["measured_layers"];
  if (measured.present()) {
    if (!measured.is_sequence()) measured.fail("'measured_layers' must be a list of {layer | kind, fwd_us_fixed, ...}");
    for (const Field& item : measured.elements()) hw.measured_layers.push_back(parse_measured(item));
  }
  if (map["nccl"].present()) hw.nccl = parse_nccl(map["nccl"], hw);
  if (map["interference"].present()) hw.interference = parse_interference(map["interference"]);
  if (map["calibration"].present()) hw.calibration = parse_calibration(map["calibration"]);
  if (map["fitted"].present()) hw.fitted = parse_fitted(map["fitted"]);
  if (Field checks = map["published_check"]; checks.present()) {
    if (!checks.is_sequence()) checks.fail("'published_check' must be a list of {runs_of, rows, mean_error, ...}");
    for (const Field& item : checks.elements()) hw.published_check.push_back(parse_published_check(item));
  }
  return hw;
}

HardwareProfile resolve_hardware(const Field& value) {
  if (!value.present()) value.fail("missing required key 'hardware' (a profile name such as t4-pcie)");
  if (value.is_scalar()) return load_named(value, to_text(value));
  if (value.is_map() && value["profile"].present()) {
    expect_keys(value, {"profile", "nodes"});
    HardwareProfile hw = load_named(value["profile"], to_text(value["profile"]));
    Field nodes = value["nodes"];
    if (nodes.present()) hw.max_nodes = static_cast<int>(to_int(nodes, 1, 1 << 24));
    return hw;
  }
  if (value.is_map()) return parse_hardware(value);
  value.fail("'hardware' must be a profile name, a path to a .yaml profile, or a map");
}

std::vector<std::string> builtin_hardware_names() {
  std::vector<std::string> names;
  for (const auto& f : builtin_hardware_files()) names.emplace_back(f.name);
  return names;
}

std::string describe(const PublishedCheck& c) {
  char figures[128];
  std::snprintf(figures, sizeof figures, "mean error %+.1f%%, mean absolute %.1f%%, worst %+.1f%%", c.mean_error,
                c.mean_absolute_error, c.worst);
  return c.runs_of + ", " + std::to_string(c.rows) + " runs: " + figures;
}

const char* builtin_hardware_text(const std::string& name) {
  for (const auto& f : builtin_hardware_files())
    if (name == f.name) return f.text;
  return nullptr;
}

const char* name(DeviceKind kind) { return kind == DeviceKind::cuda ? "cuda" : "cpu"; }

double NcclConfig::stretch(double bytes) const {
  return stretch_by_size.empty() ? 1.0 : log2_interpolate(stretch_by_size, bytes / 1048576.0);
}

bool ComputeModel::covers(Precision p) const { return std::find(precisions.begin(), precisions.end(), p) != precisions.end(); }

namespace {

// Where x falls on an increasing axis: the index below it and the fraction of the way (in log2)
// to the next; held at the ends.
std::pair<size_t, double> locate(const std::vector<double>& axis, double x) {
  if (axis.size() == 1 || x <= axis.front()) return {0, 0.0};
  if (x >= axis.back()) return {axis.size() - 2, 1.0};
  size_t i = 1;
  while (axis[i] < x) ++i;
  return {i - 1, (std::log2(x) - std::log2(axis[i - 1])) / (std::log2(axis[i]) - std::log2(axis[i - 1]))};
}

}  // namespace

double GemmGrid::at(double qm, double qn, double qk) const {
  const auto [i, fi] = locate(m, qm);
  const auto [j, fj] = locate(n, qn);
  const auto [l, fl] = locate(k, qk);
  auto value = [&](size_t a, size_t b, size_t c) {  // an index past a one-value axis stays at 0
    a = std::min(a, m.size() - 1), b = std::min(b, n.size() - 1), c = std::min(c, k.size() - 1);
    return tflops[(a * n.size() + b) * k.size() + c];
  };
  double sum = 0;
  for (int da = 0; da < 2; ++da)
    for (int db = 0; db < 2; ++db)
      for (int dc = 0; dc < 2; ++dc)
        sum += (da ? fi : 1 - fi) * (db ? fj : 1 - fj) * (dc ? fl : 1 - fl) * value(i + da, j + db, l + dc);
  return sum;
}

double ComputeModel::flash_sequence_fraction(bool flash2, bool causal, double tokens) const {
  const BySequence& own = flash2 && (!flash2_by_sequence.full.empty() || !flash2_by_sequence.causal.empty()) ? flash2_by_sequence
                                                                                                           : flash_by_sequence;
  const auto& curve = causal ? own.causal : own.full;
  return curve.empty() ? 1.0 : log2_interpolate(curve, tokens);
}

double ComputeModel::gemm_fraction(Precision p, double m, double n, double k, double peak_tflops) const {
  const auto grid = gemm.find(p);
  double fraction = grid != gemm.end()         ? grid->second.at(m, n, k) / peak_tflops
                    : gemm_efficiency.empty() ? 1.0
                                              : log2_interpolate(gemm_efficiency, 2 * m * n * k / 1e9);
  if (const auto cap = sustained_tflops.find(p); cap != sustained_tflops.end()) fraction = std::min(fraction, cap->second / peak_tflops);
  return std::min(1.0, fraction);
}

}  // namespace parallax::plan
