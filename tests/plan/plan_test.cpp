#include <catch2/catch.hpp>
#include <cmath>
#include <limits>

#include "plan/plan.hpp"
#include "tests/test_util.hpp"

using namespace parallax;

TEST_CASE("plan::Plan: rank grid is replica-major and nodes follow the profile", "[plan]") {
  // t4-pcie has 4 devices per node: 3 replicas x 2 stages = 6 ranks on 2 nodes.
  const auto p = test::plan_from(
      "model: {preset: mlp, layers: 3}\nparallel: {data: 3, pipeline: 2}\nhardware: t4-pcie\n");
  REQUIRE(p.ranks.size() == 6);
  CHECK(p.nodes == 2);
  CHECK(p.ranks[5].replica == 2);
  CHECK(p.ranks[5].pipeline_rank == 1);
  CHECK(p.ranks[5].node == 1);
  CHECK(p.ranks[5].local_rank == 1);
  CHECK(p.ranks[3].stages == std::vector<int>{1});
}

TEST_CASE("plan::Plan: interleaved ranks hold stages r, r+p, ...", "[plan]") {
  const auto p = test::plan_from(test::synthetic_scenario(8, 2, 4, "interleaved-1f1b", 2));
  CHECK(p.ranks[1].stages == std::vector<int>{1, 3});
  CHECK(p.stages[3].pipeline_rank == 1);
}

TEST_CASE("plan::Plan: GPipe's activation memory grows with chunks, 1F1B's stays at p micro-batches", "[plan]") {
  // 8 synthetic layers of 1 MB activation per sample over 4 stages: 2 MiB per sample per stage;
  // micro-batches of 2 samples hold 4 MiB each. The ideal profile runs Gloo's rules: a rank keeps
  // schedule::receive_window receives posted ahead (twice its most micro-batches in flight), each
  // buffer of 2 MiB (one layer's 1 MiB a sample), an input's until its forward (then it is one of
  // the activations), a gradient's until its backward.
  const int64_t MiB = 1024 * 1024, per_microbatch = 4 * MiB, buffer = 2 * MiB;
  std::vector<int64_t> ofob_at_16;
  for (int m : {4, 8, 16, 32}) {
    const auto gpipe = test::plan_from(test::synthetic_scenario(8, 4, m, "gpipe"));
    const auto ofob = test::plan_from(test::synthetic_scenario(8, 4, m, "1f1b"));
    for (int r = 0; r < 4; ++r) {
      INFO("m=" << m << " rank=" << r);
      // GPipe has all m in flight: its window (2m) covers every receive of the step. Its peak:
      // after the last forward, every input taken, no gradient yet.
      const int64_t gradients = r < 3 ? m * buffer : 0;
      CHECK(gpipe.ranks[r].memory.activations == m * per_microbatch + gradients);
      // 1F1B: w = min(m, p - r) micro-batches in flight, and besides at most 2w buffers posted
      // and the one taken by the RECV before the compute that uses it.
      const int64_t w = std::min(m, 4 - r);
      CHECK(ofob.ranks[r].memory.peak_inflight == w);
      CHECK(ofob.ranks[r].memory.activations >= w * per_microbatch);
      CHECK(ofob.ranks[r].memory.activations <= w * per_microbatch + (2 * w + 1) * buffer);
      // Flat in m once the window is full (m > 2w): 16 and 32 micro-batches hold the same.
      if (m == 16) ofob_at_16.push_back(ofob.ranks[r].memory.activations);
      if (m == 32) CHECK(ofob.ranks[r].memory.activations == ofob_at_16[r]);
    }
  }
}

TEST_CASE("plan::Plan: parameters, gradients and optimizer state per rank", "[plan]") {
  // 4 layers of 1 MiB over 2 stages: 2 MiB of parameters per rank; Adam keeps two more copies;
  // DDP adds the flat bucket buffers.
  const auto p = test::plan_from(test::synthetic_scenario(4, 2, 2, "gpipe"),
                                 {"optimizer.kind=adam", "parallel.data=2"});
  const int64_t MiB = 1024 * 1024;
  for (const auto& r : p.ranks) {
    CHECK(r.memory.params == 2 * MiB);
    CHECK(r.memory.gradients == 2 * MiB);
    CHECK(r.memory.optimizer == 4 * MiB);
    CHECK(r.memory.buckets == 2 * MiB);
  }
}

TEST_CASE("plan::memory: gradients freed by each optimizer step are not held with GPipe's peak", "[plan]") {
  // 4 layers of 1 MiB parameters and 1 MiB of activations a sample over 2 stages, micro-batches of
  // 1, 4 of them, GPipe: each stage keeps 2 MiB a micro-batch, 8 MiB at its peak, after its last
  // forward. The gradients, 2 MiB, are freed by each optimizer step (torch 2.x's
  // zero_grad(set_to_none)) and made by the step's first backward, which frees a micro-batch: from
  // then on at most 6 MiB of activations and 2 of gradients. So 2 MiB of the two are never held at
  // once, on the last stage; the first also holds Gloo's buffers for the output gradients, 1 MiB
  // each, 4 posted at the start and one taken by the first backward: 8 + 4 before, 6 + 3 + 2 after.
  const auto p = test::plan_from(test::synthetic_scenario(4, 2, 4, "gpipe"), {"data.batch_size=4"});
  const int64_t MiB = 1024 * 1024;
  CHECK(p.ranks[0].memory.activations == 8 * MiB + 4 * MiB);
  CHECK(p.ranks[0].memory.not_at_once() == 12 * MiB + 2 * MiB - 12 * MiB);
  CHECK(p.ranks[1].memory.activations == 8 * MiB);
  CHECK(p.ranks[1].memory.not_at_once() == 2 * MiB);
  // Megatron-LM's contiguous gradient buffer (master_weights) is never freed: all of it counts.
  const auto megatron = test::plan_from(test::synthetic_scenario(4, 2, 4, "gpipe"),
                                        {"data.batch_size=4", "parallel.precision=bf16", "parallel.master_weights=true"});
  CHECK(megatron.ranks[1].memory.not_at_once() == 0);
}

TEST_CASE("plan::Plan: activation checkpointing keeps only each stage's input", "[plan]") {
  const auto full = test::plan_from(test::synthetic_scenario(8, 2, 4, "gpipe"));
  const auto ckpt = test::plan_from(test::synthetic_scenario(8, 2, 4, "gpipe"),
                                    {"parallel.activation_checkpointing=stage"});
  // Stage of 4 layers x 1 MiB per sample, micro-batch 2: 8 MiB without, 2 MiB of inputs with, plus
  // one micro-batch recomputed during backward; and on Gloo 4 output-gradient buffers of 2 MiB
  // posted at the step's start (the GPipe test above). Beside the recompute, a backward after the
  // step's first makes a layer's 1 MiB gradient anew before adding it in.
  const int64_t MiB = 1024 * 1024;
  CHECK(full.ranks[0].memory.activations == 4 * 8 * MiB + 4 * 2 * MiB);
  CHECK(ckpt.ranks[0].memory.activations == 4 * 2 * MiB + 4 * 2 * MiB);
  CHECK(ckpt.ranks[0].memory.recompute == 8 * MiB + 1 * MiB);
}

TEST_CASE("plan::LoweredSchedules: a kept schedule is the one lowering makes, and only for the same inputs", "[plan]") {
  plan::LoweredSchedules kept;
  // Two plans differing in what lowering reads (chunks, buckets) and two in what it does not (the
  // layers' sizes); each resolved with the cache after another, and without it.
  const std::vector<std::string> yamls = {
      test::synthetic_scenario(8, 4, 8, "interleaved-1f1b", 2),
      test::synthetic_scenario(8, 4, 4, "interleaved-1f1b", 2),
      "model: {preset: synthetic, layers: 8, fwd_us_per_sample: 30, params_mb: 7, activation_mb: 2}\n"
      "data: {batch_size: 16}\nparallel: {pipeline: 4, virtual: 2, chunks: 8, schedule: interleaved-1f1b}\nhardware: ideal\n",
      "model: {preset: mlp, layers: 6, hidden: 2048}\nparallel: {data: 2, pipeline: 2, chunks: 4, schedule: 1f1b, bucket_cap_mb: 1}\n"
      "hardware: a100-nvlink-ib\n",
      "model: {preset: mlp, layers: 6, hidden: 2048}\nparallel: {data: 2, pipeline: 2, chunks: 4, schedule: 1f1b, bucket_cap_mb: 400}\n"
      "hardware: a100-nvlink-ib\n",
  };
  for (int round = 0; round < 2; ++round)
    for (const auto& yaml : yamls) {
      const plan::Scenario s = test::scenario_from(yaml);
      const plan::Plan plain = plan::resolve_plan(s), cached = plan::resolve_plan(s, true, &kept);
      INFO(yaml << "round " << round);
      CHECK(cached.schedule.ranks == plain.schedule.ranks);
      CHECK(cached.schedule.buckets_per_stage == plain.schedule.buckets_per_stage);
      CHECK(cached.schedule.chunks == plain.schedule.chunks);
    }
  // The two MLP plans differ only in their buckets: their schedules too.
  CHECK(plan::resolve_plan(test::scenario_from(yamls[3])).schedule.ranks !=
        plan::resolve_plan(test::scenario_from(yamls[4])).schedule.ranks);
}

TEST_CASE("plan::memory: a ZeRO-1 step's gradient slices come when the activations are gone", "[plan]") {
  // 4 layers of 1 MiB parameters and 1 MiB of activations a sample on one stage, 2 replicas of one
  // sample, shard optimizer (torch semantics, exec/fsdp.cpp): 4 MiB of gradients, made by the
  // backward that frees the 4 MiB of activations. Before its step a rank copies its half of each
  // layer's gradients out and frees the layer's whole ones: 0.5 MiB beyond the gradients at the
  // first layer, 1 - 1 at the second, 1.5 - 2 at the third: 0.5 MiB at most.
  const auto p = test::plan_from(test::synthetic_scenario(4, 1, 1, "gpipe"),
                                 {"parallel.data=2", "data.batch_size=1", "parallel.shard=optimizer"});
  const int64_t MiB = 1024 * 1024;
  const auto& m = p.ranks[0].memory;
  REQUIRE(m.gradients == 4 * MiB);
  REQUIRE(m.activations == 4 * MiB);
  CHECK(m.recompute == MiB / 2);
  // Activations 4 before the backward, gradients 4 and slices 0.5 after: 4.5 of 4 + 4 + 0.5 at once.
  CHECK(m.not_at_once() == 4 * MiB);
  CHECK(m.allocated() == m.params + m.optimizer + m.buckets + 4 * MiB + MiB / 2);
}

// Numbers out of scale end as bad input rather than wrapping: a duration past kMaxNs (or NaN) is
// refused where it becomes a count (llround's result past int64 is unspecified: a step of 1e290 s
// had printed as 0.000 ms), bytes past int64 likewise, and a device of 10^10 GiB holds anything.
TEST_CASE("plan: durations, bytes and device memory out of scale are refused or saturate, never wrap", "[plan]") {
  CHECK(plan::Time::seconds(1e6).count_ns() == 1'000'000'000'000'000);  // 11.6 days: the longest counted
  CHECK_THROWS_AS(plan::Time::seconds(1.1e6), plan::DurationOutOfRange);
  CHECK_THROWS_AS(plan::Time::us(1e300), plan::OutOfScale);
  CHECK_THROWS_AS(plan::Time::us(std::nan("")), plan::OutOfScale);
  CHECK_THROWS_AS(plan::Time::ms(1).scaled(1e20), plan::OutOfScale);
  CHECK(plan::Time::us(-5).count_ns() == -5000);

  plan::Device d;
  d.memory_gb = 80;
  CHECK(d.memory_bytes() == 80LL << 30);
  d.memory_gb = 1e10;  // past int64's bytes: the cast alone would be undefined (it came out negative)
  CHECK(d.memory_bytes() == std::numeric_limits<int64_t>::max());
  CHECK(d.holds(int64_t{1} << 62));

  const std::string synthetic =
      "model: {preset: synthetic, layers: 4, fwd_us_per_sample: 10, params_mb: 1, activation_mb: 1e9}\n"
      "data: {batch_size: 16}\nparallel: {pipeline: 2, chunks: 4}\nhardware: ideal\n";
  CHECK(test::plan_from(synthetic).ranks.front().memory.activations > 0);  // a petabyte a sample: counted
  CHECK_THROWS_AS(test::plan_from(synthetic, {"data.batch_size=16777216"}), plan::OutOfScale);  // 16M of them: refused
  CHECK_THAT(test::parse_error(synthetic, {"model.activation_mb=1e13"}), Catch::Contains("at most 1e9 (a petabyte)"));
}
