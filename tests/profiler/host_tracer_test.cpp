#include <catch2/catch.hpp>
#include <thread>

#include "profiler/host_tracer.hpp"
#include "tests/alloc_counter.hpp"

using namespace parallax;
using schedule::Action;
using schedule::ActionKind;
using timeline::Lane;

TEST_CASE("profiler::HostTracer: threads record into their own buffers, nothing lost", "[profiler]") {
  profiler::HostTracer tracer(3, 1000);
  auto record = [&tracer](int stage) {
    tracer.register_thread();
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
  tracer.register_thread();
  for (int i = 0; i < 25; ++i) tracer.span(Lane::send, {ActionKind::SEND_F, 0, i}, i, i + 1, 64);
  CHECK(tracer.events().size() == 10);
  CHECK(tracer.dropped() == 15);
}

TEST_CASE("profiler::HostTracer: instants, counters, begin/end and the off switch", "[profiler]") {
  profiler::HostTracer tracer(1, 100);
  tracer.register_thread();
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

TEST_CASE("profiler::HostTracer: a registered thread's first records allocate nothing", "[profiler]") {
  profiler::HostTracer tracer(0, 1000);
  size_t registering = 0, recording = 0;
  std::thread t([&] {
    const size_t before = test::allocations_on_this_thread();
    tracer.register_thread();
    const size_t registered = test::allocations_on_this_thread();
    tracer.span(Lane::compute, {ActionKind::F, 0, 0}, 10, 20);  // the thread's first record
    tracer.instant("step", 5, 0);
    tracer.counter("held MiB", 1.0, 6);
    tracer.end(Lane::send, {ActionKind::SEND_F, 0, 0}, profiler::Tracer::begin(), 64);
    registering = registered - before;
    recording = test::allocations_on_this_thread() - registered;
  });
  t.join();
  CHECK(registering > 0);  // the counter sees allocations: the buffers are made when registering
  CHECK(recording == 0);
  CHECK(tracer.events().size() == 2);
  CHECK(tracer.instants().size() == 1);
  CHECK(tracer.dropped() == 0);
}

TEST_CASE("profiler::HostTracer: a thread that never registered is counted as dropped, allocating nothing", "[profiler]") {
  profiler::HostTracer tracer(0, 100);
  tracer.register_thread();
  tracer.register_thread();  // again: nothing new
  tracer.span(Lane::compute, {ActionKind::F, 0, 0}, 0, 1);
  size_t allocated = 0;
  std::thread t([&] {
    const size_t before = test::allocations_on_this_thread();
    for (int i = 0; i < 3; ++i) tracer.span(Lane::compute, {ActionKind::F, 0, i}, 0, 1);
    tracer.instant("step", 0, 0);
    allocated = test::allocations_on_this_thread() - before;
  });
  t.join();
  CHECK(allocated == 0);
  CHECK(tracer.events().size() == 1);
  CHECK(tracer.dropped() == 4);
}

TEST_CASE("profiler::HostTracer: one thread records into several tracers, each its own", "[profiler]") {
  profiler::HostTracer a(0, 10), b(1, 10);
  a.register_thread();
  b.register_thread();
  for (int i = 0; i < 3; ++i) {
    a.span(Lane::compute, {ActionKind::F, 0, i}, i, i + 1);
    b.span(Lane::compute, {ActionKind::B, 0, i}, i, i + 1);
  }
  REQUIRE(a.events().size() == 3);
  REQUIRE(b.events().size() == 3);
  CHECK(a.events()[2].action.kind == ActionKind::F);
  CHECK(b.events()[2].rank == 1);
}
