#include "timeline/metrics.hpp"

#include <algorithm>

#include <catch2/catch.hpp>

#include "tests/test_util.hpp"

namespace {

using namespace parallax;
using schedule::ActionKind;
using timeline::Lane;

// One micro-batch through two stages on ranks `first` and `first + 1`, times shifted by `at` and
// rank 1's compute stretched by `slow` (microseconds).
void replica(timeline::Timeline& t, int first, double at, double slow) {
  const int r0 = first, r1 = first + 1;
  test::add_event(t, r0, Lane::compute, {ActionKind::F, 0, 0}, at, at + 100);
  test::add_event(t, r0, Lane::send, {ActionKind::SEND_F, 0, 0}, at + 100, at + 250);
  test::add_event(t, r0, Lane::recv, {ActionKind::RECV_B, 0, 0}, at + 110, at + 600 + 2 * slow);
  test::add_event(t, r0, Lane::compute, {ActionKind::B, 0, 0}, at + 600 + 2 * slow, at + 800 + 2 * slow);
  test::add_event(t, r1, Lane::recv, {ActionKind::RECV_F, 1, 0}, at, at + 250);
  test::add_event(t, r1, Lane::compute, {ActionKind::F, 1, 0}, at + 250, at + 350 + slow);
  test::add_event(t, r1, Lane::compute, {ActionKind::B, 1, 0}, at + 350 + slow, at + 500 + 2 * slow);
  test::add_event(t, r1, Lane::send, {ActionKind::SEND_B, 1, 0}, at + 500 + 2 * slow, at + 590 + 2 * slow);
}

}  // namespace

TEST_CASE("timeline::step_times: a wait splits into bubble (peer not yet sending) and exposed communication",
          "[timeline]") {
  timeline::Timeline t;
  t.world_size = 2;
  replica(t, 0, 0, 0);
  const auto s = timeline::step_times(t, 0);
  REQUIRE(s.ranks.size() == 2);
  CHECK(s.step_time.to_us() == Approx(800));
  // Rank 1 idles 0..250 and 500..800. Its RECV_F can flow only once rank 0 sends (100): 0..100
  // is bubble, 100..250 communication; its SEND_B flows at once (rank 0 waits since 110),
  // 500..590; the tail 590..800 is bubble.
  CHECK(s.ranks[1].busy.to_us() == Approx(250));
  CHECK(s.ranks[1].exposed_comm.to_us() == Approx(150 + 90));
  CHECK(s.ranks[1].bubble.to_us() == Approx(100 + 210));
  // Rank 0: its SEND_F flows 100..250; its RECV_B waits for rank 1's compute until 500 (bubble
  // 250..500), then flows 500..600.
  CHECK(s.ranks[0].exposed_comm.to_us() == Approx(150 + 100));
  CHECK(s.ranks[0].bubble.to_us() == Approx(250));
  CHECK(s.ranks[0].bubble_fraction == Approx(250.0 / 800));
  // Idle is always the sum of the two.
  for (const auto& r : s.ranks)
    CHECK((r.bubble + r.exposed_comm + r.busy).to_us() == Approx(s.step_time.to_us()));
  // Rank 0 had the more work (300 busy + 250 exposed against 250 + 240): rank 1's bubble holds 60
  // us of imbalance, and both are left 250 us of fill and drain.
  CHECK(s.ranks[0].imbalance.to_us() == Approx(0).margin(1e-9));
  CHECK(s.ranks[1].imbalance.to_us() == Approx(60));
  CHECK(s.ranks[1].imbalance_fraction == Approx(60.0 / 800));
  CHECK(s.imbalance_fraction == Approx(30.0 / 800));
  for (const auto& r : s.ranks) CHECK((r.bubble - r.imbalance).to_us() == Approx(250));
}

TEST_CASE("timeline::step_times: messages are matched within their replica", "[timeline]") {
  // Two replicas of the pipeline above (ranks 0-1 and 2-3); the second one's stage 1 is slower,
  // so the same action ids happen at other times there.
  timeline::Timeline t;
  t.world_size = 4;
  replica(t, 0, 0, 0);
  replica(t, 2, 0, 50);
  const auto s = timeline::step_times(t, 0);
  REQUIRE(s.ranks.size() == 4);
  CHECK(s.ranks[1].exposed_comm.to_us() == Approx(240));
  CHECK(s.ranks[3].exposed_comm.to_us() == Approx(240));
  // Rank 2's RECV_B waits until its own peer sends at 600 (not rank 1's 500), then flows 600..700.
  CHECK(s.ranks[2].exposed_comm.to_us() == Approx(150 + 100));
  CHECK(s.ranks[2].busy.to_us() == Approx(300));
}

TEST_CASE("timeline::step_times: a receive posted before the step's first work does not lengthen the step", "[timeline]") {
  // As in a real run: rank 1 finished the previous step first and has waited in RECV_F since
  // -300 us, while rank 0 still ran its optimizer. The step is the same 800 us as above.
  timeline::Timeline t;
  t.world_size = 2;
  replica(t, 0, 0, 0);
  for (auto& e : t.events)
    if (e.rank == 1 && e.action.kind == ActionKind::RECV_F) e.start = plan::Time::us(-300);
  const auto s = timeline::step_times(t, 0);
  CHECK(s.start.to_us() == Approx(0));
  CHECK(s.step_time.to_us() == Approx(800));
  // Rank 1's split is unchanged: the early part of its wait lies outside the step.
  CHECK(s.ranks[1].exposed_comm.to_us() == Approx(150 + 90));
  CHECK(s.ranks[1].bubble.to_us() == Approx(100 + 210));
}

TEST_CASE("timeline::step_times: events in any order give the same numbers, and a message's later event of one side counts",
          "[timeline]") {
  // A measured timeline lists events as the ranks' files give them, not in time order: reversed,
  // the replicas above split the same way (each rank's intervals are sorted before they merge).
  timeline::Timeline t;
  t.world_size = 4;
  replica(t, 0, 0, 0);
  replica(t, 2, 0, 50);
  const auto in_order = timeline::step_times(t, 0);
  std::reverse(t.events.begin(), t.events.end());
  const auto reversed = timeline::step_times(t, 0);
  for (int r = 0; r < 4; ++r) {
    CHECK(reversed.ranks[r].busy == in_order.ranks[r].busy);
    CHECK(reversed.ranks[r].exposed_comm == in_order.ranks[r].exposed_comm);
    CHECK(reversed.ranks[r].bubble == in_order.ranks[r].bubble);
  }
  // Two events for rank 0's SEND_F (a retried send, say): the later in the timeline, posted at
  // 200, is when the message can flow, so rank 1's RECV_F is communication only from 200 to 250.
  timeline::Timeline two;
  two.world_size = 2;
  replica(two, 0, 0, 0);
  test::add_event(two, 0, Lane::send, {ActionKind::SEND_F, 0, 0}, 200, 250);
  const auto s = timeline::step_times(two, 0);
  CHECK(s.ranks[1].exposed_comm.to_us() == Approx(50 + 90));
  CHECK(s.ranks[1].bubble.to_us() == Approx(200 + 210));
}

TEST_CASE("timeline::union_length: overlapping and touching intervals count once", "[timeline]") {
  CHECK(timeline::union_length({}) == 0);
  // [0,10) and [5,20) overlap: 20; [20,25) touches: 25; [30,31) apart: 26.
  CHECK(timeline::union_length({{5, 20}, {0, 10}, {30, 31}, {20, 25}}) == 26);
}

