#include <catch2/catch.hpp>

#include "plan/calibration.hpp"
#include "profiler/compare.hpp"

using namespace parallax;
using plan::Action;
using plan::ActionKind;
using plan::Lane;
using plan::Time;

namespace {

void add(plan::Timeline& t, int rank, Lane lane, Action a, double start_ms, double end_ms, int step = 0) {
  plan::TimelineEvent e;
  e.rank = rank;
  e.lane = lane;
  e.action = a;
  e.start = Time::ms(start_ms);
  e.end = Time::ms(end_ms);
  e.step = step;
  t.events.push_back(e);
}

// One rank: F (0-2 ms), B (2-6 ms) predicted. Measured over steps 0 (warm-up, ignored), 1 and 2:
// F 0-3, B 3-7 in step 1 (starting at 100 ms) and F 0-3, B 3-9 in step 2 (starting at 200 ms).
void build(plan::Timeline& predicted, plan::Timeline& measured) {
  predicted.world_size = measured.world_size = 1;
  const Action f{ActionKind::F, 0, 0}, b{ActionKind::B, 0, 0};
  add(predicted, 0, Lane::compute, f, 0, 2);
  add(predicted, 0, Lane::compute, b, 2, 6);
  add(measured, 0, Lane::compute, f, 0, 50, 0);
  add(measured, 0, Lane::compute, b, 50, 90, 0);
  add(measured, 0, Lane::compute, f, 100, 103, 1);
  add(measured, 0, Lane::compute, b, 103, 107, 1);
  add(measured, 0, Lane::compute, f, 200, 203, 2);
  add(measured, 0, Lane::compute, b, 203, 209, 2);
}

}  // namespace

TEST_CASE("profiler::compare: step times and per-kind errors, worked by hand", "[profiler]") {
  plan::Timeline predicted, measured;
  build(predicted, measured);
  const auto r = profiler::compare(predicted, measured);
  CHECK(r.measured_steps == std::vector<int>{1, 2});
  CHECK(r.predicted_step_ms == Approx(6));
  CHECK(r.measured_step_ms.min == Approx(7));
  CHECK(r.measured_step_ms.max == Approx(9));
  CHECK(r.measured_step_ms.median == Approx(8));
  CHECK(r.step_error == Approx((6.0 - 8.0) / 8.0));
  REQUIRE(r.kinds.size() == 2);
  // F: predicted 2 ms, measured mean 3 ms: (2-3)/3. B: predicted 4, measured mean 5: (4-5)/5.
  CHECK(r.kinds[0].kind == "F");
  CHECK(r.kinds[0].worst_error == Approx(-1.0 / 3));
  CHECK(r.kinds[1].kind == "B");
  CHECK(r.kinds[1].mean_abs_error == Approx(0.2));
  // The largest difference: B ends at 6 ms predicted, 8 ms measured (mean of 7 and 9).
  REQUIRE(!r.worst.empty());
  CHECK(r.worst.front().action == "0B0");
  CHECK(r.worst.front().difference_ms == Approx(2));
  CHECK(r.only_predicted.empty());
  CHECK(r.only_measured.empty());
}

TEST_CASE("profiler::compare: actions on one side only mean the plans differ", "[profiler]") {
  plan::Timeline predicted, measured;
  build(predicted, measured);
  add(predicted, 0, Lane::compute, {ActionKind::OPTIM, 0}, 6, 7);
  add(measured, 0, Lane::send, {ActionKind::SEND_F, 0, 0}, 103, 104, 1);
  const auto r = profiler::compare(predicted, measured);
  CHECK(r.only_predicted == std::vector<std::string>{"0:0OPTIM"});
  CHECK(r.only_measured == std::vector<std::string>{"0:0SEND_F0"});
}

TEST_CASE("profiler::compare: bubbles per rank, both sides", "[profiler]") {
  plan::Timeline predicted, measured;
  build(predicted, measured);
  const auto r = profiler::compare(predicted, measured);
  REQUIRE(r.ranks.size() == 1);
  CHECK(r.ranks[0].predicted_bubble_ms == Approx(0));
  CHECK(r.ranks[0].measured_bubble_ms == Approx(0));
}

TEST_CASE("profiler::compare: memory per rank, the plan's estimate against the run's", "[profiler]") {
  plan::Timeline predicted, measured;
  build(predicted, measured);
  // As cli's plan_json writes the plan: bytes per rank.
  predicted.plan_summary = R"({"memory": [{"rank": 0, "total": 104857600}]})";
  auto r = profiler::compare(predicted, measured);
  REQUIRE(r.ranks.size() == 1);
  CHECK(r.ranks[0].predicted_memory_mb == Approx(100));
  CHECK(r.ranks[0].measured_memory_mb < 0);  // this run recorded none
  measured.memory = {{0, 300LL << 20, 180LL << 20}};
  r = profiler::compare(predicted, measured);
  CHECK(r.ranks[0].measured_memory_mb == Approx(120));
}

TEST_CASE("profiler::compare: given the calibrated host speed, measured figures are over the steps run at it",
          "[profiler]") {
  // Predicted: F 0-2 ms. Measured: 24 steps 100 ms apart; step 0 warms up. `fast` steps after it
  // ran with the host probe at 10 us (the reference) and F took 3 ms; the others at 15 us, 5 ms.
  auto build_run = [](int fast) {
    plan::Timeline predicted, measured;
    predicted.world_size = measured.world_size = 1;
    const Action f{ActionKind::F, 0, 0};
    add(predicted, 0, Lane::compute, f, 0, 2);
    plan::Counter probe{"host probe rank 0", "us", {}};
    for (int s = 0; s < 24; ++s) {
      const bool at_speed = s >= 1 && s <= fast;
      add(measured, 0, Lane::compute, f, 100.0 * s, 100.0 * s + (at_speed ? 3 : 5), s);
      probe.samples.emplace_back(Time::ms(100.0 * s - 0.05), at_speed ? 10.0 : 15.0);
    }
    measured.counters.push_back(probe);
    return std::pair{predicted, measured};
  };
  const auto [predicted, measured] = build_run(10);  // 10 of 23: enough, and 43% of them
  const auto r = profiler::compare(predicted, measured, 10.0);
  CHECK(r.host_probed_steps == 23);
  CHECK(r.host_steps_at_speed == 10);
  CHECK(r.host_matched);
  CHECK(r.measured_steps.size() == 10);
  CHECK(r.measured_step_ms.median == Approx(3));
  CHECK(r.all_steps_ms.median == Approx(5));  // 13 of the 23 took 5 ms
  CHECK(r.kinds.at(0).mean_abs_error == Approx(1.0 / 3));

  // Without a reference (an uncalibrated profile): every step, as before.
  const auto all = profiler::compare(predicted, measured);
  CHECK_FALSE(all.host_matched);
  CHECK(all.measured_step_ms.median == Approx(5));
  CHECK(all.host_probed_steps == 0);

  // Too few steps at speed to stand for the run: every step, and the count says so.
  const auto [p2, few] = build_run(profiler::kMinStepsAtSpeed - 1);
  const auto r2 = profiler::compare(p2, few, 10.0);
  CHECK(r2.host_steps_at_speed == profiler::kMinStepsAtSpeed - 1);
  CHECK_FALSE(r2.host_matched);
  CHECK(r2.measured_step_ms.median == Approx(5));
}
