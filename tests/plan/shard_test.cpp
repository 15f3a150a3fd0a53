// Sharded data parallelism (parallel.shard, ZeRO's stages 0-3; Rajbhandari et al. 2020, "ZeRO:
// Memory Optimizations Toward Training Trillion Parameter Models", arXiv 1910.02054, Figure 1):
// what each rank keeps of its stage's parameters, gradients and optimizer state, worked by hand,
// and the keys' checks.
#include <algorithm>

#include <catch2/catch.hpp>

#include "plan/executable.hpp"
#include "plan/memory.hpp"
#include "plan/plan.hpp"
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

// A layer's parameters, and the largest sum of two neighbouring layers' (a layer and the next
// one's prefetch), counted from the model's layers.
struct Units {
  int64_t largest = 0, largest_pair = 0, total = 0;
};
Units units(const plan::Plan& p) {
  Units u;
  int64_t previous = 0;
  for (const auto& l : p.scenario.layers) {
    const int64_t n = l.param_count(1);
    u.largest = std::max(u.largest, n);
    u.largest_pair = std::max(u.largest_pair, previous + n);
    u.total += n;
    previous = n;
  }
  return u;
}

int64_t share(int64_t bytes, int64_t n) { return (bytes + n - 1) / n; }

}  // namespace

TEST_CASE("plan::memory: each shard level keeps ZeRO's share of the state, plus what it holds unsharded", "[plan][shard]") {
  const plan::Plan ddp = test::plan_from(kModel);
  const Units u = units(ddp);
  const int64_t P = ddp.stages[0].param_count;
  REQUIRE(P == u.total);
  const auto& none = ddp.ranks[0].memory;
  CHECK(none.params + none.gradients + none.optimizer + none.buckets == 20 * P);
  CHECK(none.gathered == 0);

  const plan::MemoryEstimate z1 = test::plan_from(kModel, {"parallel.shard=optimizer"}).ranks[0].memory;
  CHECK(z1.params == 4 * P);
  CHECK(z1.gradients == 4 * P);
  CHECK(z1.optimizer == share(8 * P, 4));
  CHECK(z1.buckets == 4 * P);  // DDP's buckets stay: ZeRO-1 reduces them
  CHECK(z1.gathered == 0);

  // ZeRO-2: no DDP bucket copy; one layer's gradients whole until its reduce-scatter, twice while
  // they are copied into its input (FSDP2's foreach_reduce_scatter_copy_in).
  const plan::MemoryEstimate z2 = test::plan_from(kModel, {"parallel.shard=gradients"}).ranks[0].memory;
  CHECK(z2.params == 4 * P);
  CHECK(z2.gradients == share(4 * P, 4));
  CHECK(z2.optimizer == share(8 * P, 4));
  CHECK(z2.buckets == 0);
  CHECK(z2.gathered == 2 * 4 * u.largest);

  // ZeRO-3 / FSDP: the parameters too; a gathered layer and the next one's prefetch (fp32 here).
  const plan::MemoryEstimate z3 = test::plan_from(kModel, {"parallel.shard=full"}).ranks[0].memory;
  CHECK(z3.params == share(4 * P, 4));
  CHECK(z3.gradients == share(4 * P, 4));
  CHECK(z3.optimizer == share(8 * P, 4));
  CHECK(z3.gathered == 2 * 4 * u.largest + 4 * u.largest_pair);
  // Kept from forward to backward: every layer gathered.
  const plan::MemoryEstimate kept = test::plan_from(kModel, {"parallel.shard=full", "parallel.reshard_after_forward=false"}).ranks[0].memory;
  CHECK(kept.gathered == 2 * 4 * u.largest + 4 * P);
  // In bf16 (FSDP2's MixedPrecisionPolicy) the gathered layers take 2 bytes a parameter.
  const plan::MemoryEstimate bf16 = test::plan_from(kModel, {"parallel.shard=full", "parallel.precision=bf16"}).ranks[0].memory;
  CHECK(bf16.gathered == 2 * 4 * u.largest + 2 * u.largest_pair);
  // Several micro-batches a step: the gradients add up unsharded until the last one's backward
  // (and the layer being reduced is copied once more).
  const plan::MemoryEstimate chunked = test::plan_from(kModel, {"parallel.shard=full", "parallel.chunks=2"}).ranks[0].memory;
  CHECK(chunked.gathered == 4 * P + 4 * u.largest + 4 * u.largest_pair);
  // HSDP: shards of 2 ranks, 2 copies of each.
  const plan::MemoryEstimate hsdp = test::plan_from(kModel, {"parallel.shard=full", "parallel.shard_group=2"}).ranks[0].memory;
  CHECK(hsdp.params == share(4 * P, 2));
  CHECK(hsdp.optimizer == share(8 * P, 2));
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
