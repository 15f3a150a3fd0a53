// measured_timeline on synthetic rank results: on a GPU, compute actions take the times their
// CUDA events measured, and the host spans around them stay in the trace on a lane of their own.
#include "exec/runtime.hpp"
#include "plan/plan.hpp"
#include "plan/scenario.hpp"
#include "timeline/metrics.hpp"
// LibTorch's logging defines CHECK (glog's, which aborts the process); Catch's must win here.
#undef CHECK
#include <catch2/catch.hpp>

namespace {

using namespace parallax;

timeline::TimelineEvent compute(schedule::ActionKind kind, int mb, int64_t start, int64_t end, int32_t step) {
  timeline::TimelineEvent e;
  e.lane = timeline::Lane::compute;
  e.action.kind = kind;
  e.action.stage = 0;
  e.action.mb = mb;
  e.start = plan::Time::ns(start);
  e.end = plan::Time::ns(end);
  e.step = step;
  return e;
}

timeline::DeviceSpan timed(const timeline::TimelineEvent& host, int64_t start, int64_t end) {
  return {0, exec::kCudaEventLane, host.action.id(), plan::Time::ns(start), plan::Time::ns(end), true, host.action, host.step, 0};
}

}  // namespace

TEST_CASE("exec::measured_timeline: GPU-timed compute spans take the device's times, host spans kept aside", "[exec]") {
  exec::RankResult r;
  // Host: launches take 10 ns each; the device runs the kernels later and longer.
  const auto f0 = compute(schedule::ActionKind::F, 0, 1000, 1010, 0), f1 = compute(schedule::ActionKind::F, 1, 1010, 1020, 0);
  const auto f0_next = compute(schedule::ActionKind::F, 0, 5000, 5010, 1);  // step 1: not timed
  r.events = {f0, f1, f0_next};
  r.device = {timed(f0, 1005, 1400), timed(f1, 1400, 1900)};
  const timeline::Timeline t = exec::measured_timeline({r}, "s", 1);
  // The clock starts at the earliest host span (1000 ns).
  REQUIRE(t.events.size() == 3);
  CHECK(t.events[0].start.count_ns() == 5);
  CHECK(t.events[0].end.count_ns() == 400);
  CHECK(t.events[1].start.count_ns() == 400);
  CHECK(t.events[1].end.count_ns() == 900);
  CHECK(t.events[2].start.count_ns() == 4000);  // untimed: the host span as it was
  CHECK(t.events[2].end.count_ns() == 4010);
  int host_lanes = 0;
  for (const auto& d : t.device) {
    if (d.lane != exec::kHostLaunchLane) continue;
    ++host_lanes;
    CHECK(d.end - d.start == plan::Time::ns(10));
  }
  CHECK(host_lanes == 2);
}

TEST_CASE("exec::RankResult: the host probe survives the JSON hand-over and becomes a counter at each step's start",
          "[exec]") {
  exec::RankResult r;
  r.rank = 1;
  r.events = {compute(schedule::ActionKind::F, 0, 2000, 3000, 0), compute(schedule::ActionKind::F, 0, 9000, 9500, 1)};
  r.instants = {{1, plan::Time::ns(1900), "step", 0}, {1, plan::Time::ns(8900), "step", 1}};
  r.host_probe = {{0, 12.75}, {1, 16.5}};
  const exec::RankResult back = exec::result_from_json(exec::result_to_json(r));
  REQUIRE(back.host_probe.size() == 2);
  CHECK(back.host_probe[1].first == 1);
  CHECK(back.host_probe[1].second == 16.5);
  const timeline::Timeline t = exec::measured_timeline({back}, "s", 2);
  REQUIRE(t.counters.size() == 1);
  CHECK(t.counters[0].name == "host probe rank 1");
  REQUIRE(t.counters[0].samples.size() == 2);
  CHECK(t.counters[0].samples[1].first.count_ns() == 8900 - 1900);  // the origin is the first mark
  CHECK(t.counters[0].samples[0].second == 12.75);
  CHECK(t.counters[0].samples[1].second == 16.5);
}

// The tracer's room: every action of every step plus slack, capped at 4M spans; none without a
// trace (a long run without -o had reserved ~580 MB a rank for spans it threw away).
TEST_CASE("exec::tracer_capacity: every span of the run up to 4M, none when no trace is kept", "[exec]") {
  const auto plan_of = [](int64_t steps) {
    std::string set = "data.steps=";  // appended: g++ 12 warns falsely (-Warray-bounds) on "..." + std::to_string
    set += std::to_string(steps);
    return plan::resolve_plan(plan::load_scenario(std::string(PARALLAX_SOURCE_DIR) + "/scenarios/mlp-fashion-mnist-ddp2.yaml", {set}));
  };
  const plan::Plan short_run = plan_of(10);
  size_t most = 0;
  for (const auto& actions : short_run.schedule.ranks) most = std::max(most, actions.size());
  REQUIRE(most > 0);
  CHECK(exec::tracer_capacity(short_run, exec::RunOptions{}) == most * 10 + 1024);
  const plan::Plan long_run = plan_of(16'000'000);
  CHECK(exec::tracer_capacity(long_run, exec::RunOptions{}) == size_t{1} << 22);
  exec::RunOptions untraced;
  untraced.trace = false;
  CHECK(exec::tracer_capacity(long_run, untraced) == 0);
}
