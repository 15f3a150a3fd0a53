#include <catch2/catch.hpp>
#include <sstream>

#include "plan/plan.hpp"
#include "plan/scenario.hpp"
#include "sim/simulator.hpp"
#include "timeline/compare.hpp"
#include "timeline/plan_summary.hpp"
#include "timeline/trace_writer.hpp"

using namespace parallax;
using schedule::Action;
using schedule::ActionKind;
using timeline::Lane;
using plan::Time;

namespace {

void add(timeline::Timeline& t, int rank, Lane lane, Action a, double start_ms, double end_ms, int step = 0) {
  timeline::TimelineEvent e;
  e.rank = rank;
  e.lane = lane;
  e.action = a;
  e.start = Time::ms(start_ms);
  e.end = Time::ms(end_ms);
  e.step = step;
  t.events.push_back(e);
}

// One rank: F (0-2 ms), B (2-6 ms) predicted. Measured over steps 0 (warm-up, ignored), 1 and 2:
// F 0-3, B 3-7 in step 1 (starting at 100 ms) and F 0-3, B 3-7.5 in step 2 (starting at 200 ms).
void build(timeline::Timeline& predicted, timeline::Timeline& measured) {
  predicted.world_size = measured.world_size = 1;
  const Action f{ActionKind::F, 0, 0}, b{ActionKind::B, 0, 0};
  add(predicted, 0, Lane::compute, f, 0, 2);
  add(predicted, 0, Lane::compute, b, 2, 6);
  add(measured, 0, Lane::compute, f, 0, 50, 0);
  add(measured, 0, Lane::compute, b, 50, 90, 0);
  add(measured, 0, Lane::compute, f, 100, 103, 1);
  add(measured, 0, Lane::compute, b, 103, 107, 1);
  add(measured, 0, Lane::compute, f, 200, 203, 2);
  add(measured, 0, Lane::compute, b, 203, 207.5, 2);
}

}  // namespace

TEST_CASE("timeline::compare: step times and per-kind errors, worked by hand", "[timeline]") {
  timeline::Timeline predicted, measured;
  build(predicted, measured);
  const auto r = timeline::compare(predicted, measured);
  CHECK(r.measured_steps == std::vector<int>{1, 2});
  CHECK(r.predicted_step.to_ms() == Approx(6));
  CHECK(r.measured_step.min.to_ms() == Approx(7));
  CHECK(r.measured_step.max.to_ms() == Approx(7.5));
  CHECK(r.measured_step.median.to_ms() == Approx(7.25));
  CHECK(r.measured_step.undisturbed.to_ms() == Approx(7.1));  // p20 of {7, 7.5}
  CHECK(r.measured_step.disturbed_share == 0);           // 7.5 is within 10% of 7.1
  CHECK(r.step_error == Approx((6.0 - 7.1) / 7.1));
  CHECK(r.median_error == Approx((6.0 - 7.25) / 7.25));
  REQUIRE(r.kinds.size() == 2);
  // F: predicted 2 ms, measured mean 3 ms: (2-3)/3. B: predicted 4, measured mean 4.25.
  CHECK(r.kinds[0].kind == "F");
  CHECK(r.kinds[0].worst_error == Approx(-1.0 / 3));
  CHECK(r.kinds[1].kind == "B");
  CHECK(r.kinds[1].mean_abs_error == Approx(0.25 / 4.25));
  // The largest difference: B ends at 6 ms predicted, 7.25 ms measured (mean of 7 and 7.5).
  REQUIRE(!r.worst.empty());
  CHECK(r.worst.front().action == "0B0");
  CHECK(r.worst.front().difference.to_ms() == Approx(1.25));
  CHECK(r.only_predicted.empty());
  CHECK(r.only_measured.empty());
}

TEST_CASE("timeline::compare: actions on one side only mean the plans differ", "[timeline]") {
  timeline::Timeline predicted, measured;
  build(predicted, measured);
  add(predicted, 0, Lane::compute, {ActionKind::OPTIM, 0}, 6, 7);
  add(measured, 0, Lane::send, {ActionKind::SEND_F, 0, 0}, 103, 104, 1);
  const auto r = timeline::compare(predicted, measured);
  CHECK(r.only_predicted == std::vector<std::string>{"0:0OPTIM"});
  CHECK(r.only_measured == std::vector<std::string>{"0:0SEND_F0"});
}

TEST_CASE("timeline::compare: bubbles per rank, both sides", "[timeline]") {
  timeline::Timeline predicted, measured;
  build(predicted, measured);
  const auto r = timeline::compare(predicted, measured);
  REQUIRE(r.ranks.size() == 1);
  CHECK(r.ranks[0].predicted_bubble.to_ms() == Approx(0));
  CHECK(r.ranks[0].measured_bubble.to_ms() == Approx(0));
}

TEST_CASE("timeline::compare: the imbalance in each bubble, both sides", "[timeline]") {
  // Two ranks, each one forward of its own stage: rank 1 finishes first and waits out rank 0.
  timeline::Timeline predicted, measured;
  predicted.world_size = measured.world_size = 2;
  add(predicted, 0, Lane::compute, {ActionKind::F, 0, 0}, 0, 2);
  add(predicted, 1, Lane::compute, {ActionKind::F, 1, 0}, 0, 1);
  for (const auto& [step, rank1_ms] : {std::pair{0, 1.0}, {1, 2.0}, {2, 1.0}}) {  // step 0 is the warm-up
    add(measured, 0, Lane::compute, {ActionKind::F, 0, 0}, 100 * step, 100 * step + 3, step);
    add(measured, 1, Lane::compute, {ActionKind::F, 1, 0}, 100 * step, 100 * step + rank1_ms, step);
  }
  const auto r = timeline::compare(predicted, measured);
  REQUIRE(r.ranks.size() == 2);
  CHECK(r.ranks[0].predicted_imbalance_fraction == Approx(0).margin(1e-12));
  CHECK(r.ranks[1].predicted_imbalance_fraction == Approx(0.5));
  // Steps 1 and 2: rank 1 waits 1 and 2 ms of 3; their median.
  CHECK(r.ranks[1].measured_imbalance_fraction == Approx(0.5));
  CHECK(r.ranks[1].measured_bubble_fraction == Approx(0.5));
}

TEST_CASE("timeline::compare: memory per rank, the plan's estimate against the run's", "[timeline]") {
  timeline::Timeline predicted, measured;
  build(predicted, measured);
  // As a trace carries the plan: bytes per rank.
  predicted.plan = timeline::read_plan_summary(nlohmann::json::parse(R"({"memory": [{"rank": 0, "total": 104857600}]})"));
  auto r = timeline::compare(predicted, measured);
  REQUIRE(r.ranks.size() == 1);
  CHECK(r.ranks[0].predicted_memory_mb == Approx(100));
  CHECK(r.ranks[0].measured_memory_mb < 0);  // this run recorded none
  measured.memory = {{0, 300LL << 20, 180LL << 20}};
  r = timeline::compare(predicted, measured);
  CHECK(r.ranks[0].measured_memory_mb == Approx(120));
}

TEST_CASE("timeline::compare: the step is the undisturbed one, and action figures are over undisturbed steps",
          "[timeline]") {
  // Predicted: F 0-2 ms. Measured: 24 steps 100 ms apart; step 0 warms up. 10 steps after it ran
  // undisturbed (F 3 ms), 13 in a slow burst (F 5 ms).
  timeline::Timeline predicted, measured;
  predicted.world_size = measured.world_size = 1;
  const Action f{ActionKind::F, 0, 0};
  add(predicted, 0, Lane::compute, f, 0, 2);
  for (int s = 0; s < 24; ++s) add(measured, 0, Lane::compute, f, 100.0 * s, 100.0 * s + (s >= 1 && s <= 10 ? 3 : 5), s);
  const auto r = timeline::compare(predicted, measured);
  CHECK(r.measured_step.steps == 23);
  CHECK(r.measured_step.undisturbed.to_ms() == Approx(3));
  CHECK(r.measured_step.median.to_ms() == Approx(5));  // 13 of the 23 took 5 ms
  CHECK(r.measured_step.disturbed_share == Approx(13.0 / 23));
  CHECK(r.step_error == Approx(-1.0 / 3));
  CHECK(r.median_error == Approx(-0.6));
  CHECK(r.measured_steps.size() == 10);
  CHECK(r.kinds.at(0).mean_abs_error == Approx(1.0 / 3));  // against the undisturbed 3 ms, not 5
}

// Another DDP bucket layout all-reduces other sizes: compare had matched its buckets by number as
// the same actions (a 1.03 MiB bucket against a 0.26 MiB one), and calibrate fitted them.
TEST_CASE("timeline::plan_differences: another DDP bucket layout is another plan", "[timeline]") {
  const auto summary = [](const std::vector<std::string>& sets) {
    return timeline::summarize(plan::resolve_plan(plan::load_scenario(std::string(PARALLAX_SOURCE_DIR) + "/scenarios/mlp-fashion-mnist-ddp2.yaml", sets)));
  };
  const timeline::PlanSummary given = summary({}), one_bucket = summary({"parallel.bucket_cap_mb=25", "parallel.first_bucket_mb=25"});
  CHECK(timeline::plan_differences(given, summary({})).empty());
  CHECK_THAT(timeline::plan_differences(one_bucket, given),
             Catch::Equals("DDP buckets: predicted stage 0: 1 of 1.03 MiB, run stage 0: 2 of 0.26, 0.77 MiB"));
}

// Megatron-core numbers its ranks tp fastest, then cp, dp and pp (parallel_state.py's default
// order "tp-cp-ep-dp-pp"): rank = tp + t (cp + c (dp + d pp)). A simulated timeline shows one rank
// per tensor group, group g being rank g x t.
TEST_CASE("timeline::rank_role: where a timeline's rank sits, as Megatron-core's order places it", "[timeline]") {
  const std::string llama = std::string(PARALLAX_SOURCE_DIR) + "/scenarios/llama-3.1-70b-64xH100.yaml";
  const auto plan = plan::resolve_plan(plan::load_scenario(llama, {"parallel.context=2", "parallel.data=2", "parallel.pipeline=2", "parallel.partition_len=balanced"}));
  const timeline::PlanSummary s = timeline::summarize(plan);
  REQUIRE(s.world_size == 64);
  const int t = 8, c = 2, d = 2;
  for (int g = 0; g < 8; ++g) {
    const int r = g * t, cp = (r / t) % c, dp = (r / (t * c)) % d, pp = r / (t * c * d);
    CHECK(timeline::rank_role(s, g, 8) ==
          "pp " + std::to_string(pp) + ", dp " + std::to_string(dp) + ", cp " + std::to_string(cp));
  }
  // Every GPU (a measured trace's ranks): its tensor rank too.
  CHECK(timeline::rank_role(s, 21, 64) == "pp 0, dp 1, cp 0, tp 5");
  CHECK(timeline::rank_role(s, 8, 8).empty());  // not a rank of the plan
  // Only the dimensions above 1: a plain DDP job's ranks say their replica alone.
  const auto ddp = timeline::summarize(plan::resolve_plan(plan::load_scenario(std::string(PARALLAX_SOURCE_DIR) + "/scenarios/mlp-fashion-mnist-ddp2.yaml", {})));
  CHECK(timeline::rank_role(ddp, 1, 2) == "dp 1");
  // The trace names its processes so (Perfetto shows them).
  auto run = sim::simulate(plan);
  run.timeline.plan = s;
  std::ostringstream out;
  timeline::write_chrome_trace(run.timeline, out);
  CHECK_THAT(out.str(), Catch::Contains("\"args\":{\"name\":\"rank 5 (pp 1, dp 0, cp 1)\"}"));
}
