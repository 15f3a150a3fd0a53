#include <catch2/catch.hpp>

#include "plan/buckets.hpp"
#include "tests/test_util.hpp"

using namespace parallax;
using Groups = std::vector<std::vector<int>>;

namespace {
constexpr int64_t MiB = 1024 * 1024;
}

// Cases worked out by hand from Reducer's compute_bucket_assignment_by_size: add the tensor, then
// close the bucket if its size reached the current limit (limits: first bucket, then the cap).
TEST_CASE("plan::assign_buckets: the first bucket closes at first_bucket_mb, later ones at the cap", "[plan]") {
  // 0.5 + 0.5 = 1 MiB closes bucket 0; 3 + 1 = 4 MiB closes bucket 1; 2 MiB is left open.
  CHECK(plan::assign_buckets({MiB / 2, MiB / 2, 3 * MiB, MiB, 2 * MiB}, MiB, 4 * MiB) ==
        Groups{{0, 1}, {2, 3}, {4}});
}

TEST_CASE("plan::assign_buckets: a bucket overshoots its cap by one tensor", "[plan]") {
  // 0.75 < 1, 1.5 >= 1: bucket 0 holds 1.5 MiB. 3.5 < 4, 7 >= 4: bucket 1 holds 7 MiB.
  CHECK(plan::assign_buckets({3 * MiB / 4, 3 * MiB / 4, 7 * MiB / 2, 7 * MiB / 2, MiB}, MiB, 4 * MiB) ==
        Groups{{0, 1}, {2, 3}, {4}});
}

TEST_CASE("plan::assign_buckets: tensors larger than the cap are never split", "[plan]") {
  CHECK(plan::assign_buckets({10 * MiB, 10 * MiB, 1}, MiB, 4 * MiB) == Groups{{0}, {1}, {2}});
  CHECK(plan::assign_buckets({}, MiB, 4 * MiB).empty());
}

TEST_CASE("plan::mib_to_bytes: truncates like int(bucket_cap_mb * 1024 * 1024)", "[plan]") {
  CHECK(plan::mib_to_bytes(25) == 26214400);
  CHECK(plan::mib_to_bytes(0.25) == 262144);
  CHECK(plan::mib_to_bytes(1e-7) == 0);
}

TEST_CASE("plan::Plan: MLP buckets in gradient-ready order, worked by hand", "[plan]") {
  // 784 -> 256 -> 256 -> 10 in fp32. Ready order and bytes: out.bias 40, out.weight 10240,
  // fc1.bias 1024, fc1.weight 262144, fc0.bias 1024, fc0.weight 802816. With a 0.25 MiB
  // (262144 B) first bucket, the running sum reaches 273448 at fc1.weight: bucket 0 closes there;
  // the rest (803840 B) stays under 25 MiB and forms the last bucket.
  const auto p = test::plan_from(
      "model: {preset: mlp, layers: 2, hidden: 256}\n"
      "parallel: {data: 2, first_bucket_mb: 0.25, bucket_cap_mb: 25}\n"
      "hardware: cpu-host\n");
  REQUIRE(p.stages.size() == 1);
  const auto& b = p.stages[0].buckets;
  REQUIRE(b.size() == 2);
  CHECK(plan::param_names(p.layers(), b[0]) == std::vector<std::string>{"out.bias", "out.weight", "fc1.bias", "fc1.weight"});
  CHECK(b[0].bytes == 273448);
  CHECK(plan::param_names(p.layers(), b[1]) == std::vector<std::string>{"fc0.bias", "fc0.weight"});
  CHECK(b[1].bytes == 803840);
  CHECK(p.layers()[b[0].ready_layer].name == "fc1");
  CHECK(p.layers()[b[1].ready_layer].name == "fc0");
}

TEST_CASE("plan::Plan: no buckets without data parallelism, one set per stage with it", "[plan]") {
  const std::string yaml = test::synthetic_scenario(8, 2, 4, "1f1b");
  CHECK(test::plan_from(yaml).stages[0].buckets.empty());
  const auto p = test::plan_from(yaml, {"parallel.data=2", "parallel.bucket_cap_mb=2"});
  // Each stage holds 4 layers of 1 MiB: 1 MiB first bucket, then 2 + 1 MiB (open at the end).
  for (const auto& st : p.stages) {
    REQUIRE(st.buckets.size() == 3);
    CHECK(st.buckets[0].bytes == MiB);
    CHECK(st.buckets[1].bytes == 2 * MiB);
    CHECK(st.buckets[2].bytes == MiB);
  }
}

TEST_CASE("plan::Plan: Megatron-core's buckets, max(40M, 1M x replicas) parameters on stage 0, one elsewhere", "[plan]") {
  // 784 -> 8192 -> 8192 -> 8192 -> 10 in fp32, parameters in gradient-ready order per stage.
  // Stage 0 (fc0, fc1): fc1.bias 8192 + fc1.weight 67,108,864 = 67,117,056 reaches 40M with 2
  // replicas (bucket 0 closes there), fc0's 6,430,720 are bucket 1. With 80 replicas the cap is
  // 80M (megatron_bucket_params): the stage's 73,547,776 stay one bucket. Stage 1 (fc2, out) holds
  // 67,198,986 parameters, past either cap, and Megatron-core does not bucket it: one bucket.
  const std::string yaml =
      "framework: megatron\n"
      "model: {preset: mlp, layers: 3, hidden: 8192}\n"
      "parallel: {data: 2, pipeline: 2, partition_len: [2, 2], schedule: 1f1b, chunks: 2, overlap_grad_reduce: true}\n"
      "data: {batch_size: 2}\n"
      "hardware: h100-nvlink-ib\n";
  CHECK(plan::megatron_bucket_params(2) == 40'000'000);
  CHECK(plan::megatron_bucket_params(80) == 80'000'000);
  const auto p = test::plan_from(yaml);
  REQUIRE(p.stages.size() == 2);
  REQUIRE(p.stages[0].buckets.size() == 2);
  CHECK(p.stages[0].buckets[0].bytes == 67'117'056LL * 4);
  CHECK(plan::param_names(p.layers(), p.stages[0].buckets[1]) == std::vector<std::string>{"fc0.bias", "fc0.weight"});
  REQUIRE(p.stages[1].buckets.size() == 1);
  CHECK(p.stages[1].buckets[0].bytes == 67'198'986LL * 4);
  const auto wide = test::plan_from(yaml, {"parallel.data=80"});
  REQUIRE(wide.stages[0].buckets.size() == 1);
  CHECK(wide.stages[0].buckets[0].bytes == 73'547'776LL * 4);
  // A 0.25 MiB first bucket: torch's DDP closes stage 1's at out's 327,720 bytes, then fc2's;
  // Megatron-core's rule ignores it.
  const auto torch = test::plan_from(yaml, {"parallel.ddp_buckets=pytorch", "parallel.first_bucket_mb=0.25"});
  CHECK(torch.stages[1].buckets.size() == 2);
  CHECK(test::plan_from(yaml, {"parallel.first_bucket_mb=0.25"}).stages[1].buckets.size() == 1);
  // bucket_cap_mb decides nothing under Megatron-core's rule (the tuner does not vary it there).
  CHECK_FALSE(p.scenario.parallel.bucket_caps_apply());
  CHECK(torch.scenario.parallel.bucket_caps_apply());
}
