#include "profiler/messages.hpp"

#include <catch2/catch.hpp>

#include <algorithm>

#include "tests/test_util.hpp"

namespace {

using namespace parallax;
using schedule::Action;
using schedule::ActionKind;
using timeline::Lane;

using test::add_event;

// One micro-batch through a two-stage pipeline, with hand-picked times (microseconds).
void add_step(timeline::Timeline& t, int step, double at) {
  // Rank 0: F, then a SEND posted at +100 whose main-thread part ends when RECV_B starts (+130).
  add_event(t, 0, Lane::compute, {ActionKind::F, 0, 0}, at, at + 100, step);
  add_event(t, 0, Lane::send, {ActionKind::SEND_F, 0, 0}, at + 100, at + 400, step, 4096);
  add_event(t, 0, Lane::recv, {ActionKind::RECV_B, 0, 0}, at + 130, at + 700, step);
  // Rank 1 waits from the start: its data left rank 0 at +130 and arrives at +210.
  add_event(t, 1, Lane::recv, {ActionKind::RECV_F, 1, 0}, at, at + 210, step);
  add_event(t, 1, Lane::compute, {ActionKind::F, 1, 0}, at + 210, at + 300, step);
  add_event(t, 1, Lane::compute, {ActionKind::B, 1, 0}, at + 300, at + 500, step);
  // Its SEND_B's main-thread part: +500..+540, before its OPTIM.
  add_event(t, 1, Lane::send, {ActionKind::SEND_B, 1, 0}, at + 500, at + 650, step, 4096);
  add_event(t, 1, Lane::compute, {ActionKind::OPTIM, 1, -1}, at + 540, at + 560, step);
  // Rank 0 was waiting since +130: delivery +540..+700.
  add_event(t, 0, Lane::compute, {ActionKind::B, 0, 0}, at + 700, at + 900, step);
}

plan::ParallelSpec two_stages() {
  plan::ParallelSpec p;
  p.pipeline = 2;
  return p;
}

}  // namespace

TEST_CASE("profiler::message_timing: send time on the main thread and delivery to a waiting receiver", "[profiler]") {
  timeline::Timeline t;
  t.world_size = 2;
  add_step(t, 0, 0);      // warm-up, left out
  add_step(t, 1, 1000);
  add_step(t, 2, 2000);
  const auto m = profiler::message_timing(t, two_stages());
  // Two sends per step over two steps: 30 us (rank 0) and 40 us (rank 1).
  REQUIRE(m.send_us.size() == 4);
  std::vector<double> sends = m.send_us;
  std::sort(sends.begin(), sends.end());
  CHECK(sends[0] == Approx(30));
  CHECK(sends[3] == Approx(40));
  CHECK(m.bytes[0] == Approx(4096));
  // Deliveries: 210 - 130 = 80 (forward) and 700 - 540 = 160 (backward), each twice.
  REQUIRE(m.delivery_us.size() == 4);
  std::vector<double> d = m.delivery_us;
  std::sort(d.begin(), d.end());
  CHECK(d[0] == Approx(80));
  CHECK(d[3] == Approx(160));
}

TEST_CASE("profiler::message_timing: a send before its RECV counts its call but not a delivery", "[profiler]") {
  timeline::Timeline t;
  t.world_size = 2;
  for (int step = 0; step < 2; ++step) {
    const double at = 1000.0 * step;
    add_event(t, 0, Lane::compute, {ActionKind::F, 0, 0}, at, at + 100, step);
    add_event(t, 0, Lane::send, {ActionKind::SEND_F, 0, 0}, at + 100, at + 150, step, 64);
    add_event(t, 0, Lane::compute, {ActionKind::OPTIM, 0, -1}, at + 120, at + 130, step);
    // Rank 1 is busy until +500 and finds the data there: its RECV's end says nothing of when
    // the data came.
    add_event(t, 1, Lane::recv, {ActionKind::RECV_F, 1, 0}, at + 500, at + 502, step);
  }
  const auto m = profiler::message_timing(t, two_stages());
  REQUIRE(m.send_us.size() == 1);
  CHECK(m.send_us[0] == Approx(20));
  CHECK(m.bytes[0] == Approx(64));
  CHECK(m.delivery_us.empty());
}
