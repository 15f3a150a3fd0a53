// Sharded data parallelism (parallel.shard, ZeRO's stages 0-3; Rajbhandari et al. 2020, "ZeRO:
// Memory Optimizations Toward Training Trillion Parameter Models", arXiv 1910.02054, Figure 1):
// what each rank keeps of its stage's parameters, gradients and optimizer state, worked by hand,
// and the keys' checks.
#include <algorithm>
#include <vector>

#include <catch2/catch.hpp>

#include "plan/executable.hpp"
#include "plan/memory.hpp"
#include "plan/plan.hpp"
#include "sim/simulator.hpp"
#include "tests/test_util.hpp"

using namespace parallax;

namespace {

// Four replicas of one stage, torch.autocast at fp32 with Adam: 4 (parameter) + 4 (gradient) + 8
// (two moments) bytes a parameter, and DDP's 4-byte bucket copy. One micro-batch a step.
const std::string kModel =
    "model: {preset: transformer, layers: 2, hidden: 64, heads: 4, seq_len: 16, vocab: 128}\n"
    "data: {batch_size: 4}\n"
    "optimizer: {kind: adam}\nhardware: a100-nvlink-ib\n"
    "parallel: {data: 4, chunks: 1}\n";

// The model's parameters, counted from its layers.
int64_t total_params(const plan::Plan& p) {
  int64_t total = 0;
  for (const auto& l : p.scenario.layers) total += l.param_count(1);
  return total;
}

int64_t share(int64_t bytes, int64_t n) { return (bytes + n - 1) / n; }

}  // namespace

TEST_CASE("plan::memory: each shard level keeps ZeRO's share of the state, plus what it holds unsharded", "[plan][shard]") {
  const plan::Plan ddp = test::plan_from(kModel);
  const int64_t P = ddp.stages[0].param_count;
  REQUIRE(P == total_params(ddp));
  const auto& none = ddp.ranks[0].memory;
  CHECK(none.params + none.gradients + none.optimizer + none.buckets == 20 * P);
  CHECK(none.gathered == 0);

  const plan::MemoryEstimate z1 = test::plan_from(kModel, {"parallel.shard=optimizer"}).ranks[0].memory;
  CHECK(z1.params == 4 * P);
  CHECK(z1.gradients == 4 * P);
  CHECK(z1.optimizer == share(8 * P, 4));
  CHECK(z1.buckets == 4 * P);  // DDP's buckets stay: ZeRO-1 reduces them
  CHECK(z1.gathered == 0);

  // The layers in forward order: embedding e, two blocks b, head h. The rank is fullest during one
  // layer's backward (walked h, b, b, e): the layers after it reduced to shards (1/4, 4 bytes
  // each), its own gradients twice (held, and copied into the reduce-scatter's input: FSDP2's
  // foreach_reduce_scatter_copy_in); `gathered` is that moment beyond the shards of all gradients.
  const auto& layers = ddp.scenario.layers;
  REQUIRE(layers.size() == 4);
  const int64_t e = layers[0].param_count(1), b = layers[1].param_count(1), h = layers[3].param_count(1);
  REQUIRE(layers[2].param_count(1) == b);
  auto beyond_shards = [&](std::vector<int64_t> moments) { return *std::max_element(moments.begin(), moments.end()) - share(4 * P, 4); };

  // ZeRO-2: no DDP bucket copy; a layer's gradients whole until its reduce-scatter.
  const plan::MemoryEstimate z2 = test::plan_from(kModel, {"parallel.shard=gradients"}).ranks[0].memory;
  CHECK(z2.params == 4 * P);
  CHECK(z2.gradients == share(4 * P, 4));
  CHECK(z2.optimizer == share(8 * P, 4));
  CHECK(z2.buckets == 0);
  CHECK(z2.gathered == beyond_shards({2 * 4 * h, share(4 * h, 4) + 2 * 4 * b, share(4 * (h + b), 4) + 2 * 4 * b,
                                      share(4 * (h + 2 * b), 4) + 2 * 4 * e}));

  // ZeRO-3 / FSDP: the parameters too; the layer gathered and the one before it prefetched (fp32).
  const plan::MemoryEstimate z3 = test::plan_from(kModel, {"parallel.shard=full"}).ranks[0].memory;
  CHECK(z3.params == share(4 * P, 4));
  CHECK(z3.gradients == share(4 * P, 4));
  CHECK(z3.optimizer == share(8 * P, 4));
  CHECK(z3.gathered == beyond_shards({2 * 4 * h + 4 * (h + b), share(4 * h, 4) + 2 * 4 * b + 4 * (b + b),
                                      share(4 * (h + b), 4) + 2 * 4 * b + 4 * (b + e),
                                      share(4 * (h + 2 * b), 4) + 2 * 4 * e + 4 * e}));
  // Kept from forward to backward: every layer up to the one in backward stays gathered.
  const plan::MemoryEstimate kept = test::plan_from(kModel, {"parallel.shard=full", "parallel.reshard_after_forward=false"}).ranks[0].memory;
  CHECK(kept.gathered == beyond_shards({2 * 4 * h + 4 * P, share(4 * h, 4) + 2 * 4 * b + 4 * (e + 2 * b),
                                        share(4 * (h + b), 4) + 2 * 4 * b + 4 * (e + b),
                                        share(4 * (h + 2 * b), 4) + 2 * 4 * e + 4 * e}));
  // In bf16 (FSDP2's MixedPrecisionPolicy) the gathered layers take 2 bytes a parameter, and so
  // do their gradients, which FSDP2 copies into its fp32 reduce-scatter input (4 bytes).
  const plan::MemoryEstimate bf16 = test::plan_from(kModel, {"parallel.shard=full", "parallel.precision=bf16"}).ranks[0].memory;
  CHECK(bf16.gathered == beyond_shards({(4 + 2) * h + 2 * (h + b), share(4 * h, 4) + (4 + 2) * b + 2 * (b + b),
                                        share(4 * (h + b), 4) + (4 + 2) * b + 2 * (b + e),
                                        share(4 * (h + 2 * b), 4) + (4 + 2) * e + 2 * e}));
  // Several micro-batches a step: every layer up to the one reduced holds its summed gradients
  // whole until the last micro-batch's backward reaches it.
  const plan::MemoryEstimate chunked = test::plan_from(kModel, {"parallel.shard=full", "parallel.chunks=2"}).ranks[0].memory;
  CHECK(chunked.gathered == beyond_shards({4 * (P + h) + 4 * (h + b), share(4 * h, 4) + 4 * (e + 2 * b + b) + 4 * (b + b),
                                           share(4 * (h + b), 4) + 4 * (e + b + b) + 4 * (b + e),
                                           share(4 * (h + 2 * b), 4) + 4 * (e + e) + 4 * e}));
  // Reduced every micro-batch (FSDP2's default, Megatron-FSDP): only the layer in backward holds
  // its gradients whole, as with one micro-batch; torch's pipelining on two stages turns that off.
  const plan::MemoryEstimate each =
      test::plan_from(kModel, {"parallel.shard=full", "parallel.chunks=2", "parallel.reduce_scatter_every_microbatch=true"}).ranks[0].memory;
  CHECK(each.gathered == z3.gathered);
  const plan::Plan piped = test::plan_from(kModel, {"parallel.shard=full", "parallel.chunks=2", "parallel.pipeline=2",
                                                    "parallel.data=2", "parallel.reduce_scatter_every_microbatch=true"});
  CHECK_FALSE(piped.scenario.parallel.reduces_every_microbatch());
  CHECK(test::plan_from(kModel, {"parallel.shard=full", "parallel.chunks=2", "parallel.pipeline=2", "parallel.data=2",
                                 "parallel.reduce_scatter_every_microbatch=true", "parallel.p2p=megatron"})
            .scenario.parallel.reduces_every_microbatch());
  // HSDP: shards of 2 ranks, 2 copies of each.
  const plan::MemoryEstimate hsdp = test::plan_from(kModel, {"parallel.shard=full", "parallel.shard_group=2"}).ranks[0].memory;
  CHECK(hsdp.params == share(4 * P, 2));
  CHECK(hsdp.optimizer == share(8 * P, 2));
}

TEST_CASE("plan::memory: sharded gradients meet the loss's gradients at the backward's start, not in a layer's backward", "[plan][shard]") {
  // A vocabulary of 8192: torch's cross_entropy holds 8 bytes a logit for a moment in the loss's
  // backward (64 x 8192 x 4 logits: 16 MiB), the backward's first moment, before any layer has made
  // a gradient. Sharded gradients are then not yet made (the step freed them), the head is gathered
  // and the last block prefetched under full; a layer's backward later holds the walk's gradients
  // and gathered layers (`gathered`) but not the loss's.
  const std::string yaml =
      "model: {preset: transformer, layers: 2, hidden: 64, heads: 4, seq_len: 64, vocab: 8192}\n"
      "data: {batch_size: 4}\noptimizer: {kind: adam}\nhardware: a100-nvlink-ib\nparallel: {data: 4, chunks: 1}\n";
  const int64_t loss = int64_t{64} * 8192 * 4 * 8;
  const plan::Plan z2 = test::plan_from(yaml, {"parallel.shard=gradients"});
  const auto& layers = z2.scenario.layers;
  const int64_t P = z2.stages[0].param_count, b = layers[1].param_count(1), h = layers[3].param_count(1);
  for (const std::string level : {"gradients", "full"}) {
    const plan::MemoryEstimate m = test::plan_from(yaml, {"parallel.shard=" + level}).ranks[0].memory;
    INFO(level);
    CHECK(m.recompute == loss);  // the transient column
    const int64_t start = level == "full" ? 4 * (h + b) : 0;
    const int64_t at_start = m.activations + loss + start, in_a_layer = m.activations + m.gradients + m.gathered;
    CHECK(at_start > in_a_layer);  // this case's fullest is the backward's start
    CHECK(m.allocated() == m.params + m.optimizer + at_start);
    // The rule before counted the loss's gradients on top of a layer's moment.
    CHECK(m.allocated() < m.params + m.optimizer + in_a_layer + loss);
    // What that moment lacks, part by part (the GUI's bars): no sharded gradient yet, the
    // unsharded part but the gathered layers, the whole transient and activations held.
    CHECK(m.lacks.transient == 0);
    CHECK(m.lacks.activations == 0);
    CHECK(m.lacks.gradients == m.gradients);
    CHECK(m.lacks.gathered == m.gathered - start);
    CHECK(m.lacks.gradients + m.lacks.gathered == m.not_at_once());
  }
  // Several micro-batches a step, reduced once: the earlier ones' summed gradients are whole then.
  const plan::MemoryEstimate chunked = test::plan_from(yaml, {"parallel.shard=gradients", "parallel.chunks=2"}).ranks[0].memory;
  const int64_t at_start = chunked.activations + chunked.recompute + 4 * P;
  CHECK(chunked.allocated() == chunked.params + chunked.optimizer +
                                   std::max(at_start, chunked.activations + chunked.gradients + chunked.gathered));
}

TEST_CASE("plan::memory: a model whose parameters dominate takes less under FSDP than under DDP", "[plan][shard]") {
  // 8 replicas of a 16-block transformer with a short sequence: parameters and state dominate.
  const std::string yaml =
      "model: {preset: transformer, layers: 16, hidden: 1024, heads: 16, seq_len: 64, vocab: 1024}\n"
      "data: {batch_size: 2}\noptimizer: {kind: adam}\nhardware: a100-nvlink-ib\n"
      "parallel: {data: 8, chunks: 1, precision: bf16}\n";
  const plan::MemoryEstimate ddp = test::plan_from(yaml).ranks[0].memory;
  const plan::MemoryEstimate fsdp = test::plan_from(yaml, {"parallel.shard=full"}).ranks[0].memory;
  CHECK(ddp.params + ddp.gradients + ddp.optimizer + ddp.buckets > 3 * ddp.activations);
  CHECK(fsdp.allocated() < ddp.allocated() / 3);
  const plan::MemoryEstimate zero1 = test::plan_from(yaml, {"parallel.shard=optimizer"}).ranks[0].memory;
  const plan::MemoryEstimate zero2 = test::plan_from(yaml, {"parallel.shard=gradients"}).ranks[0].memory;
  CHECK(fsdp.allocated() < zero2.allocated());
  CHECK(zero2.allocated() < zero1.allocated());
  CHECK(zero1.allocated() < ddp.allocated());
}

TEST_CASE("plan::Plan: sharded gradients are reduce-scattered one layer at a time", "[plan][shard]") {
  const plan::Plan ddp = test::plan_from(kModel);
  const plan::Plan z2 = test::plan_from(kModel, {"parallel.shard=gradients"});
  const auto& layers = z2.scenario.layers;
  REQUIRE(z2.stages[0].buckets.size() == layers.size());  // every layer of the preset has parameters
  int64_t total = 0;
  for (size_t b = 0; b < layers.size(); ++b) {
    const auto& bucket = z2.stages[0].buckets[b];
    const auto& layer = layers[layers.size() - 1 - b];  // gradient-ready order: the last layer first
    CHECK(bucket.ready_layer == static_cast<int>(layers.size() - 1 - b));
    CHECK(bucket.bytes == 4 * layer.param_count(1));
    CHECK(bucket.params.size() == layer.params.size());
    total += bucket.bytes;
  }
  int64_t ddp_total = 0;
  for (const auto& b : ddp.stages[0].buckets) ddp_total += b.bytes;
  CHECK(total == ddp_total);
  // The schedule reduces each of them once a step.
  int reductions = 0;
  for (const auto& a : z2.schedule.ranks[0]) reductions += a.kind == schedule::ActionKind::ALLREDUCE;
  CHECK(reductions == static_cast<int>(layers.size()));
}

TEST_CASE("plan::scenario: shard's keys are checked, and distributed_optimizer names its replacement", "[plan][shard]") {
  try {
    test::plan_from(kModel, {"parallel.distributed_optimizer=true"});
    FAIL("distributed_optimizer was taken");
  } catch (const plan::InputError& e) {
    CHECK_THAT(e.message(), Catch::Contains("parallel.shard: optimizer"));
  }
  try {
    test::plan_from(kModel, {"parallel.shard=full", "parallel.shard_group=3"});
    FAIL("a shard group that does not divide data was taken");
  } catch (const plan::InputError& e) {
    CHECK_THAT(e.message(), Catch::Contains("shard_group 3 does not divide data 4"));
  }
  try {
    test::plan_from(kModel, {"parallel.shard=half"});
    FAIL("an unknown shard level was taken");
  } catch (const plan::InputError& e) {
    CHECK_THAT(e.message(), Catch::Contains("none | optimizer | gradients | full"));
  }
  CHECK(test::plan_from(kModel, {"parallel.shard=full", "parallel.shard_group=data"}).scenario.parallel.shard_ranks() == 4);
  CHECK(test::plan_from(kModel, {"parallel.shard=full", "parallel.shard_group=2"}).scenario.parallel.shard_copies() == 2);
  CHECK(test::plan_from(kModel).scenario.parallel.shard_ranks() == 1);
  // The executor runs one shard over all of data; HSDP is predicted, not run, this round: the
  // executor refuses it naming the key.
  CHECK(plan::executable(test::plan_from(kModel).scenario));
  CHECK(plan::executable(test::plan_from(kModel, {"parallel.shard=full"}).scenario));
  try {
    plan::check_executable(test::plan_from(kModel, {"parallel.shard=full", "parallel.shard_group=2"}).scenario);
    FAIL("HSDP was taken as runnable");
  } catch (const plan::InputError& e) {
    CHECK_THAT(e.message(), Catch::Contains("HSDP") && Catch::Contains("predict-only"));
    CHECK_THAT(e.message(), Catch::Contains("shard_group 2 of data 4"));
  }
}

TEST_CASE("plan::memory: fp8_param_gather gathers the blocks' weights in one byte, the embedding and head in two", "[plan][shard]") {
  const std::string llama =
      "model: {preset: transformer, layers: 4, hidden: 256, heads: 8, seq_len: 64, vocab: 128, kv_heads: 2, mlp: swiglu, "
      "norm: rmsnorm, positions: rope}\ndata: {batch_size: 1}\n"
      "parallel: {data: 4, shard: full, precision: fp8}\nhardware: h100-nvlink-ib\n";
  const auto bf16 = test::plan_from(llama), fp8 = test::plan_from(llama, {"parallel.fp8_param_gather=true"});
  const auto& layers = fp8.scenario.layers;
  for (const auto& l : layers)
    CHECK(plan::gathered_parameter_bytes(fp8.scenario.parallel, l) == (l.kind == plan::LayerKind::encoder ? 1 : 2));
  for (const auto& l : layers) CHECK(plan::gathered_parameter_bytes(bf16.scenario.parallel, l) == 2);
  // Under bf16 the fullest moment is a block's backward beside the block before it, prefetched;
  // in fp8 those two take one byte a parameter fewer each (2 x block), unless the fullest moment
  // moves to the head's backward beside the last block (the head still 2 bytes): at least one
  // block's parameters fewer.
  const int64_t block = layers[2].param_count();
  const int64_t saved = bf16.ranks[0].memory.gathered - fp8.ranks[0].memory.gathered;
  CHECK(saved >= block);
  CHECK(saved <= 2 * block);
  CHECK(sim::simulate(fp8).step_time <= sim::simulate(bf16).step_time);
  // It needs fp8 weights and FSDP's gathers.
  CHECK_THAT(test::parse_error(llama, {"parallel.fp8_param_gather=true", "parallel.precision=bf16"}),
             Catch::Contains("needs parallel.precision: fp8 and parallel.shard: full"));
  CHECK_THAT(test::parse_error(llama, {"parallel.fp8_param_gather=true", "parallel.shard=optimizer"}),
             Catch::Contains("needs parallel.precision: fp8"));
}

// A knob that says how sharding (or expert splitting) runs is refused where there is none, as
// fp8_param_gather is: left without effect, a user's `reshard_after_forward: false` had predicted
// DDP's memory with no word that it meant nothing.
TEST_CASE("shard: knobs of sharding and of experts need what they act on", "[plan]") {
  CHECK(test::parse_error(kModel, {"parallel.shard=full", "parallel.reshard_after_forward=false"}).empty());
  CHECK_THAT(test::parse_error(kModel, {"parallel.shard=gradients", "parallel.reshard_after_forward=false"}),
             Catch::Contains("parallel.reshard_after_forward") && Catch::Contains("it needs parallel.shard: full"));
  CHECK(test::parse_error(kModel, {"parallel.shard=full", "parallel.shard_group=2"}).empty());
  CHECK_THAT(test::parse_error(kModel, {"parallel.shard_group=2"}),
             Catch::Contains("parallel.shard_group") && Catch::Contains("it needs parallel.shard"));
  CHECK(test::parse_error(kModel, {"parallel.shard=optimizer", "parallel.overlap_param_gather=true"}).empty());
  CHECK_THAT(test::parse_error(kModel, {"parallel.overlap_param_gather=true"}),
             Catch::Contains("it needs parallel.shard: optimizer or more"));
  CHECK_THAT(test::parse_error(kModel, {"parallel.expert_tensor=1"}),
             Catch::Contains("parallel.expert_tensor (1) splits a mixture-of-experts model's experts") && Catch::Contains("this model has none"));
  CHECK(test::parse_error(kModel, {"parallel.expert_tensor=tensor"}).empty());  // the default, said in words
}
