#include <catch2/catch.hpp>
#include <thread>

#include "profiler/host_tracer.hpp"

using namespace parallax;
using plan::Action;
using plan::ActionKind;
using plan::Lane;

TEST_CASE("profiler::HostTracer: threads record into their own buffers, nothing lost", "[profiler]") {
  profiler::HostTracer tracer(3, 1000);
  auto record = [&tracer](int stage) {
    for (int i = 0; i < 500; ++i) tracer.span(Lane::compute, {ActionKind::F, stage, i}, 10 * i, 10 * i + 5);
  };
  std::thread a(record, 0), b(record, 1);
  a.join();
  b.join();
  const auto events = tracer.events();
  REQUIRE(events.size() == 1000);
  CHECK(tracer.dropped() == 0);
  int per_stage[2] = {0, 0};
  for (const auto& e : events) {
    CHECK(e.rank == 3);
    ++per_stage[e.action.stage];
  }
  CHECK(per_stage[0] == 500);
  CHECK(per_stage[1] == 500);
  CHECK(std::is_sorted(events.begin(), events.end(), [](const auto& x, const auto& y) { return x.start < y.start; }));
}

TEST_CASE("profiler::HostTracer: a full buffer drops and counts, never throws", "[profiler]") {
  profiler::HostTracer tracer(0, 10);
  for (int i = 0; i < 25; ++i) tracer.span(Lane::send, {ActionKind::SEND_F, 0, i}, i, i + 1, 64);
  CHECK(tracer.events().size() == 10);
  CHECK(tracer.dropped() == 15);
}

TEST_CASE("profiler::HostTracer: instants, counters, begin/end and the off switch", "[profiler]") {
  profiler::HostTracer tracer(1, 100);
  tracer.instant("step", 100, 4);
  tracer.counter("held MiB", 2.0, 200);
  tracer.counter("held MiB", 1.0, 300);
  const int64_t t0 = profiler::Tracer::begin();
  tracer.end(Lane::compute, {ActionKind::OPTIM, 0}, t0);
  tracer.set_enabled(false);
  tracer.span(Lane::compute, {ActionKind::F, 0, 0}, 0, 1);
  const auto instants = tracer.instants();
  REQUIRE(instants.size() == 1);
  CHECK(instants[0].name == "step");
  CHECK(instants[0].step == 4);
  const auto counters = tracer.counters();
  REQUIRE(counters.size() == 1);
  CHECK(counters[0].samples.size() == 2);
  CHECK(counters[0].samples[1].second == 1.0);
  const auto events = tracer.events();
  REQUIRE(events.size() == 1);
  CHECK(events[0].action.id() == "0OPTIM");
  CHECK(events[0].end >= events[0].start);
}
