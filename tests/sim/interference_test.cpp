// Interference between compute and communication on one device (docs/simulator.md): checked
// against the timing it implies when worked out by hand.
#include <catch2/catch.hpp>

#include "sim/cost_model.hpp"
#include "sim/simulator.hpp"
#include "tests/test_util.hpp"

using namespace parallax;

namespace {

// Two replicas on one node of two devices joined by a 10 GB/s link (or, `apart`, on two nodes of
// one device joined by a 10 GB/s network); `device` and `interference` are the profile's maps.
std::string two_replicas(const std::string& model, const std::string& device, const std::string& interference,
                         bool apart = false) {
  return model +
         "data: {batch_size: 1}\n"
         "parallel: {data: 2, chunks: 1, first_bucket_mb: 1}\n"
         "hardware:\n"
         "  device: " + device + "\n" +
         (apart ? "  node: {devices: 1, link: {name: l, bandwidth_gb_per_s: 10, latency_us: 0}}\n"
                  "  network: {name: n, bandwidth_gb_per_s: 10, latency_us: 0}\n"
                : "  node: {devices: 2, link: {name: l, bandwidth_gb_per_s: 10, latency_us: 0}}\n") +
         (interference.empty() ? "" : "  interference: " + interference + "\n");
}

const timeline::TimelineEvent& find(const sim::SimRun& run, int rank, const std::string& id) {
  for (const auto& e : run.timeline.events)
    if (e.rank == rank && e.action.id() == id) return e;
  FAIL("no event " << id << " on rank " << rank);
  return run.timeline.events.front();
}

double ns(plan::Time t) { return static_cast<double>(t.count_ns()); }

}  // namespace

TEST_CASE("sim: compute slows by the profile's factor exactly while an all-reduce runs on its device", "[sim]") {
  // Two synthetic layers of 16 MiB: the last backward hands layer 1's bucket over after layer 1's
  // backward (t1), and its all-reduce (A, alone) overlaps layer 0's backward (R). At 1/f speed
  // for A, the backward ends at t1 + A + (R - A/f), as long as the all-reduce ends first.
  const std::string model = "model: {preset: synthetic, layers: 2, fwd_us_per_sample: 1000, params_mb: 16}\n";
  const std::string device = "{memory_gb: 80, memory_bandwidth_gb_per_s: .inf, peak_tflops: {fp32: 100}}";
  const double f = 1.5;
  const auto base = test::plan_from(two_replicas(model, device, ""));
  const auto slowed = test::plan_from(two_replicas(model, device, "{compute_while_communicating: 1.5}"));
  REQUIRE(base.stages[0].buckets.size() == 2);
  const auto costs = sim::stage_costs(base);
  const double t1 = ns(costs[0].bucket_ready[0]), R = ns(costs[0].backward) - t1;

  const sim::SimRun alone = sim::simulate(base), run = sim::simulate(slowed);
  const auto& ar = find(alone, 0, "0ALLREDUCE0");
  const double A = ns(ar.end - ar.start);
  REQUIRE(A < R * f);  // the all-reduce ends before the backward does
  const auto& b_alone = find(alone, 0, "0B0");
  CHECK(ns(b_alone.end - b_alone.start) == Approx(t1 + R).margin(1));
  for (int rank : {0, 1}) {
    const auto& b = find(run, rank, "0B0");
    CHECK(ns(b.end - b.start) == Approx(t1 + A + (R - A / f)).margin(2));
    // The all-reduce itself is not slowed (the layers are not memory-bound), and the forward,
    // with nothing communicating, takes what it takes alone.
    const auto& a = find(run, rank, "0ALLREDUCE0");
    CHECK(ns(a.end - a.start) == Approx(A).margin(1));
    CHECK(find(run, rank, "0F0").end - find(run, rank, "0F0").start == find(alone, rank, "0F0").end - find(alone, rank, "0F0").start);
  }
  CHECK(run.step_time > alone.step_time);
  // Step-only simulation (the tuner's) follows the same clock.
  sim::SimOptions step_only;
  step_only.step_only = true;
  CHECK(sim::simulate(slowed, step_only).step_time == run.step_time);
}

TEST_CASE("sim: an all-reduce under memory-bound compute moves at the port's capacity over the factor", "[sim]") {
  // Linear layers on a device with FLOPs to spare and 1 GB/s of memory: every layer is
  // memory-bound, its backward takes tens of ms, and layer 1's bucket (16 MiB + bias) all-reduces
  // well inside layer 0's backward. A ring of two moves S bytes through each port: alone S / 10
  // GB/s; under the backward, S / (10 / g) GB/s.
  const std::string model =
      "model:\n"
      "  layers:\n"
      "    - {kind: linear, in: 2048, out: 2048}\n"
      "    - {kind: linear, in: 2048, out: 2048}\n";
  const std::string device = "{memory_gb: 80, memory_bandwidth_gb_per_s: 1, peak_tflops: {fp32: 1000000}}";
  const double g = 4;
  const auto base = test::plan_from(two_replicas(model, device, ""));
  const auto slowed = test::plan_from(two_replicas(model, device, "{communication_while_memory_bound: 4}"));
  const auto costs = sim::stage_costs(base);
  REQUIRE(costs[0].backward_memory_bound);
  REQUIRE(base.stages[0].buckets.size() == 2);

  const sim::SimRun alone = sim::simulate(base), run = sim::simulate(slowed);
  const auto& ar_alone = find(alone, 0, "0ALLREDUCE0");
  const auto& ar = find(run, 0, "0ALLREDUCE0");
  const double S = static_cast<double>(ar.bytes);
  CHECK(ns(ar_alone.end - ar_alone.start) == Approx(S / 10).margin(2));
  CHECK(ns(ar.end - ar.start) == Approx(g * S / 10).margin(2));
  REQUIRE(ar.end < find(run, 0, "0B0").end);  // it ran under the backward throughout
  // The second bucket all-reduces after the backward, at the port's full capacity again.
  const auto& ar1 = find(run, 0, "0ALLREDUCE1");
  CHECK(ns(ar1.end - ar1.start) == Approx(static_cast<double>(ar1.bytes) / 10).margin(2));
}

TEST_CASE("sim: interference factors are checked like every other key", "[sim]") {
  const std::string model = "model: {preset: synthetic, layers: 2, fwd_us_per_sample: 1000, params_mb: 16}\n";
  const std::string device = "{memory_gb: 80, memory_bandwidth_gb_per_s: .inf, peak_tflops: {fp32: 100}}";
  CHECK_THAT(test::parse_error(two_replicas(model, device, "{compute_while_communicating: 0.5}")),
             Catch::Contains("compute_while_communicating") && Catch::Contains("[1, 10]") && Catch::Contains(":7:47:"));
  CHECK_THAT(test::parse_error(two_replicas(model, device, "{compute_while_communicate: 1.2}")),
             Catch::Contains("compute_while_communicate"));
  CHECK(test::parse_error(two_replicas(model, device, "{compute_while_communicating: 1.2, communication_while_memory_bound: 1.3}")).empty());
}

TEST_CASE("sim: ranks that share cores compute a factor slower while both compute, and not across nodes", "[sim]") {
  // Two replicas start their forwards together and run them side by side: at 1/k speed each for
  // the whole forward, k x its time alone. With one device per node they share nothing.
  const std::string model = "model: {preset: synthetic, layers: 2, fwd_us_per_sample: 1000, params_mb: 1}\n";
  const std::string device = "{memory_gb: 80, memory_bandwidth_gb_per_s: .inf, peak_tflops: {fp32: 100}}";
  const double k = 1.6;
  const auto base = test::plan_from(two_replicas(model, device, ""));
  const auto shared = test::plan_from(two_replicas(model, device, "{compute_while_computing: 1.6}"));
  const sim::SimRun alone = sim::simulate(base), run = sim::simulate(shared);
  for (int rank : {0, 1}) {
    const auto& f_alone = find(alone, rank, "0F0");
    const auto& f = find(run, rank, "0F0");
    CHECK(ns(f.end - f.start) == Approx(k * ns(f_alone.end - f_alone.start)).margin(2));
  }
  CHECK(ns(run.step_time) > 1.5 * ns(alone.step_time));
  // Every rank is played when cores are shared (replicas on one node slow each other), so the
  // tuner's step-only simulation gives the same step.
  sim::SimOptions step_only;
  step_only.step_only = true;
  CHECK(sim::simulate(shared, step_only).step_time == run.step_time);

  // One device per node: two nodes, nothing shared, the step as without the factor.
  CHECK(sim::simulate(test::plan_from(two_replicas(model, device, "{compute_while_computing: 1.6}", true))).step_time ==
        sim::simulate(test::plan_from(two_replicas(model, device, "", true))).step_time);
}
