#include "plan/search_defaults.hpp"

#include <algorithm>

#include "plan/calibration.hpp"

namespace parallax::plan {
namespace {

template <typename T>
std::vector<KnobValue> values_of(const std::vector<T>& xs) {
  return {xs.begin(), xs.end()};
}

// Whether a calibrated profile measured every layer of `s` at `precision`.
bool measured_at(const Scenario& s, Precision precision) {
  const auto& cal = s.hardware.calibration;
  return cal && !s.layers.empty() && unmeasured_signatures(*cal, s.layers, precision).empty();
}

bool tensor_splits_all(const Scenario& s) {
  return std::all_of(s.layers.begin(), s.layers.end(), [](const Layer& l) { return tensor_splits(l.kind); });
}

std::vector<int> tensor_values(const Scenario& s, int world) {
  if (!s.hardware.nccl || !tensor_splits_all(s)) return {1};
  std::vector<int> out;
  for (int t : divisors(s.hardware.devices_per_node))
    if (world % t == 0) out.push_back(t);
  return out;
}

}  // namespace

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

std::vector<KnobValue> default_data(const Scenario&, int world) { return values_of(divisors(world)); }

// Shorter chunks than 512 tokens give attention too little work to hide the ring's sends behind
// (Megatron-LM's guidance: context parallelism for sequences of 8K tokens and more). A calibration
// measured whole sequences, so a calibrated profile cannot cost a split one.
std::vector<KnobValue> default_context(const Scenario& s, int world) {
  if (!s.hardware.nccl || !tensor_splits_all(s) || s.hardware.calibration || s.layers.empty()) return {1};
  const int64_t seq = s.layers.front().shape.seq_len;
  std::vector<int> out = {1};
  for (int c = 2; world % c == 0 && seq % (2 * c) == 0 && seq / (2 * c) >= 512; c *= 2) out.push_back(c);
  return values_of(out);
}

std::vector<KnobValue> default_expert(const Scenario& s, int world) {
  for (const Layer& l : s.layers)
    if (l.shape.moe.on()) {
      const int64_t experts = l.shape.moe.experts;
      std::vector<KnobValue> out;
      for (int e : divisors(static_cast<int>(std::min<int64_t>(experts, world))))
        if (experts % e == 0 && world % e == 0 && experts / e <= kMostExpertsPerRank) out.push_back(e);
      if (std::find(out.begin(), out.end(), KnobValue(s.parallel.expert)) == out.end()) out.push_back(s.parallel.expert);
      return out;
    }
  return {1};
}

std::vector<KnobValue> default_expert_tensor(const Scenario& s, int) { return {s.parallel.expert_tensor}; }

std::vector<KnobValue> default_pipeline(const Scenario& s, int world) {
  std::vector<int> out;
  for (int p : divisors(world))
    if (p <= static_cast<int>(s.layers.size())) out.push_back(p);
  return values_of(out);
}

// The divisors of a node's devices: a tensor group stays in one node (the check in scenario.cpp
// refuses the others).
std::vector<KnobValue> default_tensor(const Scenario& s, int world) { return values_of(tensor_values(s, world)); }

std::vector<KnobValue> default_sequence_parallel(const Scenario& s, int world) {
  if (tensor_values(s, world).back() > 1) return {false, true};
  return {false};
}

std::vector<KnobValue> default_schedule(const Scenario&, int) {
  std::vector<KnobValue> out;
  for (const auto& name : knob("parallel.schedule").choices)  // every generated one, not a CSV
    if (!name.ends_with(".csv")) out.push_back(name);
  return out;
}

std::vector<KnobValue> default_virtual(const Scenario&, int) { return {2, 4}; }

std::vector<KnobValue> derived(const Scenario&, int) { return {}; }

std::vector<KnobValue> default_bucket_cap(const Scenario&, int) {
  return values_of(std::vector<double>{1, 2, 5, 10, 25, 50, 100, 200, 400});
}

std::vector<KnobValue> default_first_bucket(const Scenario&, int) { return {1.0, 4.0}; }

std::vector<KnobValue> scenario_grad_accumulation(const Scenario& s, int) { return {s.parallel.grad_accumulation}; }

// Where a node holds several tensor groups, searching it would double every search; only when asked.
std::vector<KnobValue> scenario_rank_order(const Scenario& s, int) { return {std::string(name(s.parallel.rank_order))}; }

std::vector<KnobValue> scenario_moe_overlap(const Scenario& s, int) { return {s.parallel.overlap_moe_expert_parallel_comm}; }
std::vector<KnobValue> scenario_reshard(const Scenario& s, int) { return {s.parallel.reshard_after_forward}; }

// selective is Megatron-core's (by module), selective_op torchtitan's (by op, dense blocks with
// flash attention only): each searched where the scenario's trainer runs it.
std::vector<KnobValue> default_recompute(const Scenario& s, int) {
  const bool torchtitan = s.framework == Framework::torchtitan;
  const bool op_derived = std::all_of(s.layers.begin(), s.layers.end(), op_checkpointing_derived);
  std::vector<KnobValue> out;
  for (const auto& name : knob("parallel.activation_checkpointing").choices) {
    if (name == "true") continue;  // true is layer
    if (name == "selective" && torchtitan) continue;
    if (name == "selective_op" && (!torchtitan || !op_derived)) continue;
    out.push_back(name);
  }
  return out;
}

// A precision costed from the peak figures would race measured ones (on this project's CPUs a bf16
// layer took 15-50x its fp32 time where the peaks say 1x, so the tuner picked bf16).
// Likewise a profile fitted to runs at one precision (calibrate --from-trace): its layer factors
// apply at that precision only, another costs as the base profile's, so the tuner keeps to it (the
// scenario's own precision competes too, as the plan as given always does). A fitted fp32 TorchRec
// job had been sped up 2.3x by bf16, which was only the fit's factors left out.
std::vector<KnobValue> default_precision(const Scenario& s, int) {
  if (const auto& fitted = s.hardware.fitted; fitted && !fitted->precision.empty()) {
    std::vector<KnobValue> out = {fitted->precision};
    if (const std::string own = name(s.parallel.precision); own != fitted->precision) out.push_back(own);
    return out;
  }
  const bool calibrated = measured_at(s, s.parallel.precision);
  std::vector<KnobValue> out;
  for (const auto& [precision, peak] : s.hardware.device.peak_tflops)  // a std::map: fp32, bf16, fp16 order
    if (!calibrated || measured_at(s, precision)) out.push_back(std::string(name(precision)));
  return out;
}

std::vector<KnobValue> default_shard(const Scenario& s, int) {
  std::vector<KnobValue> out = {std::string(name(Shard::none))};
  if (s.hardware.nccl) out.push_back(std::string(name(Shard::full)));
  const std::string own = name(s.parallel.shard);
  if (std::find(out.begin(), out.end(), KnobValue(own)) == out.end()) out.push_back(own);
  return out;
}

std::vector<KnobValue> default_shard_group(const Scenario& s, int world) {
  std::vector<KnobValue> out = {0};
  const int node = s.hardware.devices_per_node;
  if (s.hardware.nccl && world > node) {
    out.push_back(node);
    // An FSDP job (shard: full) also weighs groups of 2, 4, ... nodes (HSDP over a rack's worth):
    // on the Llama 3.1 8B job a 32-GPU group beat both a node and all 64 (2026-12-06).
    if (s.parallel.shard == Shard::full)
      for (int g = 2 * node; g < world; g *= 2) out.push_back(g);
  }
  const KnobValue own = s.parallel.shard_group;
  if (std::find(out.begin(), out.end(), own) == out.end()) out.push_back(own);
  return out;
}

Settings pytorch_defaults(const Scenario& s, const Settings& given) {
  Settings c = given;
  c.chunks = c.batch_size;
  for (int d : divisors(c.batch_size))
    if (d >= c.pipeline) {
      c.chunks = d;
      break;
    }
  c.bucket_cap_mb = 25;
  c.first_bucket_mb = 1;
  const int layers = static_cast<int>(s.layers.size()), stages = c.stages();
  std::vector<int> even;
  if (stages > 1 && stages <= layers)
    for (int i = 0; i < stages; ++i) even.push_back(layers / stages + (i < layers % stages ? 1 : 0));
  c.partition_len = partition_of(even);
  return c;
}

}  // namespace parallax::plan
