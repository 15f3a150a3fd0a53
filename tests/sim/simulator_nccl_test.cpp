// The simulator on profiles with `collectives: nccl`, where a send holds its rank until the peer
// has posted the receive.
#include <catch2/catch.hpp>

#include "schedule/schedule.hpp"
#include "sim/simulator.hpp"
#include "tests/test_util.hpp"

using namespace parallax;
using schedule::ActionKind;
using sim::Time;

namespace {

// Free links, so only compute and the send rule shape the timeline.
std::string free_links(const std::string& collectives) {
  return "hardware={collectives: " + collectives +
         ", device: {memory_gb: 80, memory_bandwidth_gb_per_s: .inf, peak_tflops: {fp32: 100}, efficiency: 1},"
         " node: {devices: 8, link: {bandwidth_gb_per_s: .inf, latency_us: 0}}}";
}

const timeline::TimelineEvent& event(const sim::SimRun& run, int rank, const std::string& id) {
  for (const auto& e : run.timeline.events)
    if (e.rank == rank && e.action.id() == id) return e;
  FAIL("no event " << id << " on rank " << rank);
  return run.timeline.events.front();
}

}  // namespace

TEST_CASE("sim: on NCCL profiles every generated schedule simulates to the end", "[sim]") {
  struct Case {
    std::string schedule;
    int virtual_stages;
  };
  for (const Case& c : {Case{"gpipe", 1}, Case{"1f1b", 1}, Case{"interleaved-1f1b", 2}}) {
    for (const std::string hw : {"t4-pcie", "a100-nvlink-ib"}) {
      for (int p : {2, 4}) {
        for (int m : {2, 4, 8}) {
          for (int data : {1, 2}) {
            INFO(c.schedule << " on " << hw << " p=" << p << " m=" << m << " data=" << data);
            const auto plan = test::plan_from(test::synthetic_scenario(p * c.virtual_stages, p, m, c.schedule, c.virtual_stages),
                                              {"hardware=" + hw, "parallel.data=" + std::to_string(data)});
            REQUIRE(plan.schedule.collectives == schedule::Collectives::nccl);
            sim::SimRun run;
            REQUIRE_NOTHROW(run = sim::simulate(plan));
            // Every rank performed every compute action of its list.
            std::vector<size_t> computed(plan.world_size, 0);
            for (const auto& e : run.timeline.events)
              if (e.lane == timeline::Lane::compute) ++computed[e.rank];
            for (int r = 0; r < plan.world_size; ++r) {
              size_t expected = 0;
              for (const auto& a : plan.schedule.ranks[r % p])
                expected += schedule::is_compute(a.kind) || a.kind == ActionKind::OPTIM;
              CHECK(computed[r] == expected);
            }
          }
        }
      }
    }
  }
}

TEST_CASE("sim: a NCCL send holds its rank until the receive is posted", "[sim]") {
  // Stage 1 has three layers to stage 0's one. Rank 1 posts RECV_F(i) only once it has finished
  // F(i-1), so under NCCL rank 0, stuck in SEND_F(i), cannot start F(i+1) before then; under Gloo
  // its sends return at once and it runs its forwards back to back.
  const std::string yaml = test::synthetic_scenario(4, 2, 4, "gpipe");
  for (const std::string collectives : {"gloo", "nccl"}) {
    INFO(collectives);
    const auto plan = test::plan_from(yaml, {"parallel.partition_len=[1, 3]", free_links(collectives)});
    const auto run = sim::simulate(plan);
    for (int i = 1; i + 1 < 4; ++i) {
      const auto& next = event(run, 0, "0F" + std::to_string(i + 1));
      const auto& own = event(run, 0, "0F" + std::to_string(i));
      const auto& peer_before = event(run, 1, "1F" + std::to_string(i - 1));
      if (collectives == "gloo") CHECK(next.start == own.end);
      else CHECK(next.start >= peer_before.end);
      if (collectives == "nccl") CHECK(next.start > own.end);
    }
  }
}

TEST_CASE("sim: a schedule that deadlocks under NCCL is reported with its cycle", "[sim]") {
  // Gloo's placement of 1F1B: rank 0 posts SEND_F1 before RECV_B0, rank 1 SEND_B0 before RECV_F1.
  const std::string yaml = test::synthetic_scenario(2, 2, 2, "1f1b");
  const auto gloo_lists =
      schedule::lower(schedule::one_f_one_b_order(2, 2), schedule::ScheduleKind::one_f_one_b, 2, 1, 2, 1, {}).ranks;
  for (const std::string collectives : {"gloo", "nccl"}) {
    INFO(collectives);
    auto plan = test::plan_from(yaml, {free_links(collectives)});
    plan.schedule.ranks = gloo_lists;
    if (collectives == "gloo") {
      CHECK(sim::simulate(plan).step_time > Time());
      continue;
    }
    try {
      sim::simulate(plan);
      FAIL("no deadlock reported");
    } catch (const sim::Deadlock& e) {
      CHECK_THAT(e.what(), Catch::Contains("rank 0 waits in 0SEND_F1 for rank 1"));
      CHECK_THAT(e.what(), Catch::Contains("rank 1 waits in 1SEND_B0 for rank 0"));
    }
  }
}
