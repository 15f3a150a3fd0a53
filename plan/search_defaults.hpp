#pragma once
// What the tuner searches of each tuned knob when it is not told (`tune --search`): the values a
// scenario's layers, batch and device allow over a world of ranks. The knob table (knobs.cpp)
// gives each tuned knob one of these; tune/space.cpp reads them there and decides nothing per key.
// Also PyTorch's own defaults, which every search simulates beside the scenario as given.
#include <vector>

#include "plan/knobs.hpp"

namespace parallax::plan {

/// Every divisor of n, ascending.
std::vector<int> divisors(int n);

/// PyTorch's defaults on the scenario's layout and schedule: chunks = pipeline (the smallest
/// divisor of the batch at or above it), DDP's 25 MiB buckets with a 1 MiB first bucket, and an
/// even split of the layers (the first stages take one more when they do not divide). `given`:
/// the scenario's knob values (settings_of(scenario), which the tuner has at hand).
Settings pytorch_defaults(const Scenario& scenario, const Settings& given);

/// data: every divisor of the world.
std::vector<KnobValue> default_data(const Scenario& s, int world);
/// context: 1, and on NCCL machines, for transformer models costed from their shapes, the powers of
/// two that leave every rank chunks of at least 512 tokens.
std::vector<KnobValue> default_context(const Scenario& s, int world);
/// The most experts a rank holds in the default search: the published MoE runs hold 1 to 8
/// (Mixtral 8x22B at EP 8: 1; DeepSeek-V3 at EP 64 and Qwen3-235B at EP 32: 4; Qwen3-30B at EP 16:
/// 8), and each halving of the expert degree doubles the experts' weights a rank keeps and every
/// configuration the search crosses with it.
constexpr int kMostExpertsPerRank = 16;
/// expert: the divisors of a MoE model's experts that leave a rank at most kMostExpertsPerRank of
/// them, and the scenario's own (the enumeration drops those that do not divide the ranks); 1 for
/// a dense model.
std::vector<KnobValue> default_expert(const Scenario& s, int world);
/// expert_tensor: the scenario's own (searched when asked: --search parallel.expert_tensor=tensor,1).
std::vector<KnobValue> default_expert_tensor(const Scenario& s, int world);
/// pipeline: the divisors of the world up to the layer count.
std::vector<KnobValue> default_pipeline(const Scenario& s, int world);
/// tensor: the divisors of a node's devices on NCCL machines, for models it can split; else 1.
std::vector<KnobValue> default_tensor(const Scenario& s, int world);
/// sequence_parallel: off, and on where tensor parallelism is searched.
std::vector<KnobValue> default_sequence_parallel(const Scenario& s, int world);
/// schedule: every generated schedule.
std::vector<KnobValue> default_schedule(const Scenario& s, int world);
/// virtual: 2 and 4 stages per rank (the looped schedules; the V-shaped ones take 2 themselves).
std::vector<KnobValue> default_virtual(const Scenario& s, int world);
/// chunks and partition_len: none given; the enumeration derives them from each configuration.
std::vector<KnobValue> derived(const Scenario& s, int world);
/// bucket_cap_mb: a log grid that holds PyTorch's default, 25.
std::vector<KnobValue> default_bucket_cap(const Scenario& s, int world);
/// first_bucket_mb: 1 (DDP's) and 4.
std::vector<KnobValue> default_first_bucket(const Scenario& s, int world);
/// grad_accumulation and rank_order: the scenario's own (accumulation changes the optimizer's
/// batch statistics; the rank order moves only communication): searched only when asked.
std::vector<KnobValue> scenario_grad_accumulation(const Scenario& s, int world);
std::vector<KnobValue> scenario_rank_order(const Scenario& s, int world);
/// overlap_moe_expert_parallel_comm: the scenario's own (it asks for Megatron-core's combined 1F1B,
/// which only some schedules take): searched only when asked.
std::vector<KnobValue> scenario_moe_overlap(const Scenario& s, int world);
std::vector<KnobValue> scenario_reshard(const Scenario& s, int world);
/// activation_checkpointing: each choice (true is layer, so not twice).
std::vector<KnobValue> default_recompute(const Scenario& s, int world);
/// shard: none, and full (FSDP) on NCCL machines; the scenario's own besides.
std::vector<KnobValue> default_shard(const Scenario& s, int world);
/// shard_group: all of data, and on NCCL machines of several nodes a node's devices (HSDP: shard
/// inside a node, replicate across nodes); the scenario's own besides.
std::vector<KnobValue> default_shard_group(const Scenario& s, int world);
/// precision: the device's; with a profile calibrated for this model, only those it measured.
std::vector<KnobValue> default_precision(const Scenario& s, int world);

}  // namespace parallax::plan
