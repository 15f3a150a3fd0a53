#include "tune/space.hpp"

#include <algorithm>

#include "plan/calibration.hpp"

namespace parallax::tune {
namespace {

[[noreturn]] void fail(const std::string& flag, const std::string& message) {
  throw plan::InputError(plan::Location{flag}, message);
}

// Whether a calibrated profile measured every layer of `s` at `precision`.
bool measured_at(const plan::Scenario& s, plan::Precision precision) {
  const auto& cal = s.hardware.calibration;
  return cal && !s.layers.empty() && plan::unmeasured_signatures(*cal, s.layers, precision).empty();
}

bool layout_key(const std::string& key) {
  return key == "parallel.data" || key == "parallel.context" || key == "parallel.pipeline" || key == "parallel.tensor";
}

template <typename T>
std::vector<plan::KnobValue> values_of(const std::vector<T>& xs) {
  return {xs.begin(), xs.end()};
}

// data, context, pipeline and tensor multiply to the world: each value must divide it. The
// enumeration takes the layouts whose product is the world.
void check_layout(const Space& sp, const std::string& key, const std::string& flag) {
  for (int n : sp.ints(key))
    if (sp.world % n != 0)
      fail(flag, plan::knob(key).name() + " " + std::to_string(n) + " does not divide the world of " +
                     std::to_string(sp.world) + " ranks (set it with --world)");
}

// Tensor parallelism's default values: the divisors of a node's devices, on machines with GPU
// collectives and models it can split (the check in plan/scenario.cpp refuses the others).
std::vector<int> default_tensor(const plan::Scenario& s, int world) {
  const bool splits =
      std::all_of(s.layers.begin(), s.layers.end(), [](const plan::Layer& l) { return plan::tensor_splits(l.kind); });
  if (!s.hardware.nccl || !splits) return {1};
  std::vector<int> out;
  for (int t : divisors(s.hardware.devices_per_node))
    if (world % t == 0) out.push_back(t);
  return out;
}

// Context parallelism's default values: 1, and on machines with GPU collectives, for transformer
// models costed from their shapes (a calibration measured whole sequences), the powers of two that
// leave every rank chunks of at least 512 tokens (2 x context chunks of seq_len): shorter ones give
// attention too little work to hide the ring's sends behind (Megatron-LM's guidance: context
// parallelism for sequences of 8K tokens and more).
std::vector<int> default_context(const plan::Scenario& s, int world) {
  const bool splits =
      std::all_of(s.layers.begin(), s.layers.end(), [](const plan::Layer& l) { return plan::tensor_splits(l.kind); });
  if (!s.hardware.nccl || !splits || s.hardware.calibration || s.layers.empty()) return {1};
  const int64_t seq = s.layers.front().shape.seq_len;
  std::vector<int> out = {1};
  for (int c = 2; world % c == 0 && seq % (2 * c) == 0 && seq / (2 * c) >= 512; c *= 2) out.push_back(c);
  return out;
}

}  // namespace

const std::vector<plan::KnobValue>& Space::of(const std::string& key) const {
  static const std::vector<plan::KnobValue> none;
  const auto it = values.find(key);
  return it == values.end() ? none : it->second;
}

std::vector<int> Space::ints(const std::string& key) const {
  std::vector<int> out;
  for (const auto& v : of(key)) out.push_back(std::get<int>(v));
  return out;
}

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

std::vector<std::string> search_keys() {
  std::vector<std::string> keys;
  for (const plan::Knob& k : plan::knobs())
    if (k.tuned) keys.push_back(k.key);
  return keys;
}

std::vector<std::string> split_values(const std::string& text) {
  std::vector<std::string> out(1);
  int depth = 0;
  for (char ch : text) {
    if (ch == ',' && depth == 0) {
      out.emplace_back();
      continue;
    }
    depth += ch == '[' ? 1 : ch == ']' ? -1 : 0;
    if (ch != ' ' || depth > 0) out.back() += ch;
  }
  return out;
}

Space default_space(const plan::Scenario& s, int world) {
  Space sp;
  sp.world = world > 0 ? world : s.parallel.world_size();
  const int layers = static_cast<int>(s.layers.size());
  std::vector<int> pipeline;
  for (int p : divisors(sp.world))
    if (p <= layers) pipeline.push_back(p);
  sp.values["parallel.data"] = values_of(divisors(sp.world));
  sp.values["parallel.context"] = values_of(default_context(s, sp.world));
  sp.values["parallel.pipeline"] = values_of(pipeline);
  const std::vector<int> tensor = default_tensor(s, sp.world);
  sp.values["parallel.tensor"] = values_of(tensor);
  sp.values["parallel.sequence_parallel"] = tensor.back() > 1 ? std::vector<plan::KnobValue>{false, true} : std::vector<plan::KnobValue>{false};
  for (const auto& name : plan::knob("parallel.schedule").choices)  // every generated one, not a CSV
    if (!name.ends_with(".csv")) sp.values["parallel.schedule"].push_back(name);
  sp.values["parallel.virtual"] = {2, 4};
  sp.values["parallel.chunks"] = {};
  sp.values["parallel.partition_len"] = {};
  // DDP's bucket size on a log grid (PyTorch's default, 25, is on it), and the first bucket.
  sp.values["parallel.bucket_cap_mb"] = values_of(std::vector<double>{1, 2, 5, 10, 25, 50, 100, 200, 400});
  sp.values["parallel.first_bucket_mb"] = {1.0, 4.0};
  // Accumulation changes the optimizer's batch statistics per step; only when asked for.
  sp.values["parallel.grad_accumulation"] = {s.parallel.grad_accumulation};
  // The rank order moves only communication, and only where a node holds several tensor groups;
  // searching it would double every search for that. Only when asked for.
  sp.values["parallel.rank_order"] = {std::string(plan::name(s.parallel.rank_order))};
  for (const auto& name : plan::knob("parallel.activation_checkpointing").choices)
    if (name != "true") sp.values["parallel.activation_checkpointing"].push_back(name);  // true is layer
  // The device's precisions; with a profile calibrated for this model, only those it measured: a
  // precision costed from the peak figures would race measured ones (on this project's CPUs a bf16
  // layer took 15-50x its fp32 time where the peaks say 1x, so the tuner picked bf16).
  const bool calibrated = measured_at(s, s.parallel.precision);
  std::vector<plan::KnobValue> precisions;
  for (const auto& [precision, peak] : s.hardware.device.peak_tflops)  // a std::map: fp32, bf16, fp16 order
    if (!calibrated || measured_at(s, precision)) precisions.push_back(std::string(plan::name(precision)));
  sp.values["parallel.precision"] = precisions;
  return sp;
}

void search(Space* sp, const std::string& assignment) {
  const std::string flag = "--search " + assignment;
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == assignment.size())
    fail(flag, "expected KEY=V1,V2,... (e.g. --search parallel.chunks=4,8,16)");
  const std::string key = assignment.substr(0, eq);
  const plan::Knob* knob = plan::find_knob(key);
  if (!knob || !knob->tuned) fail(flag, "'" + key + "' is not a key the tuner searches; it searches " + plan::join(search_keys()));
  std::vector<plan::KnobValue> values;
  for (const auto& v : split_values(assignment.substr(eq + 1))) {
    if (v.empty()) fail(flag, "an empty value in the list");
    values.push_back(knob->parse(v, plan::Location{flag}));
    if (key == "parallel.schedule" && std::get<std::string>(values.back()).ends_with(".csv"))
      fail(flag, "an imported CSV schedule cannot be tuned; search the generated ones (parallax keys lists them)");
  }
  // Duplicates would be simulated twice; the first of each stays.
  std::vector<plan::KnobValue> unique;
  for (const auto& v : values)
    if (std::find(unique.begin(), unique.end(), v) == unique.end()) unique.push_back(v);
  sp->values[key] = unique;
  if (layout_key(key)) check_layout(*sp, key, flag);
}

void fix(Space* sp, const plan::Scenario& s, const std::string& key) {
  const plan::Knob* knob = plan::find_knob(key);
  if (!knob || !knob->tuned)
    fail("--fix " + key, "'" + key + "' is not a key the tuner searches; it searches " + plan::join(search_keys()));
  const plan::Settings given = plan::settings_of(s);
  const bool layout = layout_key(key);
  if (layout && sp->world % std::get<int>(knob->get(given)) != 0)
    fail("--fix " + key, "the scenario's " + knob->name() + " " + knob->format(knob->get(given)) +
                             " does not divide the --world of " + std::to_string(sp->world) + " ranks");
  if (key == "parallel.schedule" && given.schedule == plan::ScheduleKind::csv)
    fail("--fix " + key, "an imported CSV schedule cannot be tuned");
  plan::Settings listed = given;
  listed.partition_len = plan::listed(given.partition_len, given.stages());
  sp->values[key] = {knob->get(listed)};
}

}  // namespace parallax::tune
