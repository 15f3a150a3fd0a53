#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "schedule/csv.hpp"
#include "schedule/schedule.hpp"
#include "schedule/validate.hpp"
#include "tests/test_util.hpp"

using namespace parallax;
using schedule::Action;
using schedule::ActionKind;

namespace {

std::vector<std::string> ids(const std::vector<Action>& actions, bool compute_only = true) {
  std::vector<std::string> out;
  for (const auto& a : actions)
    if (!compute_only || schedule::is_compute(a.kind)) out.push_back(a.id());
  return out;
}

schedule::Schedule lowered(const schedule::ComputeOrder& order, int p, int v, int m, int ga = 1,
                       std::vector<int> buckets = {}) {
  return schedule::lower(order, schedule::ScheduleKind::gpipe, p, v, m, ga, buckets);
}

}  // namespace

TEST_CASE("schedule::Action: ids print and parse as torch.distributed.pipelining's", "[schedule]") {
  CHECK(Action{ActionKind::F, 2, 5}.id() == "2F5");
  CHECK(Action{ActionKind::SEND_F, 0, 3}.id() == "0SEND_F3");
  CHECK(Action{ActionKind::ALLREDUCE, 1, -1, 3}.id() == "1ALLREDUCE3");
  CHECK(Action{ActionKind::OPTIM, 1}.id() == "1OPTIM");
  Action exchange{ActionKind::ALL_TO_ALL, 1, 3};
  exchange.exchange = 2;
  CHECK(exchange.id() == "1ALL_TO_ALL3.2");  // a MoE exchange, measured only
  Action gather{ActionKind::ALL_GATHER, 1, 3};
  gather.exchange = 0;
  CHECK(gather.id() == "1ALL_GATHER3.0");  // a sharded layer's gather in micro-batch 3's F or B
  gather.mb = -1;
  gather.exchange = 4;
  CHECK(gather.id() == "1ALL_GATHER.4");  // in stage 1's OPTIM
  for (const std::string s : {"2F5", "0SEND_F3", "11RECV_B12", "1ALLREDUCE3", "1OPTIM", "3B0", "1ALL_TO_ALL3.2",
                              "1ALL_GATHER3.0", "1ALL_GATHER.4"}) {
    Action a;
    REQUIRE(schedule::parse_action_id(s, &a));
    CHECK(a.id() == s);
  }
  Action a;
  REQUIRE(schedule::parse_action_id("1ALL_TO_ALL3.2", &a));
  CHECK(a == exchange);
  REQUIRE(schedule::parse_action_id("1ALL_GATHER.4", &a));
  CHECK(a == gather);
  for (const std::string bad : {"F5", "2X5", "2F", "1OPTIM2", "2F5x", "", "2SEND_F", "1ALL_TO_ALL3", "1ALL_TO_ALL3.", "1ALL_TO_ALL.2",
                                "1ALL_TO_ALL3.2.1", "1ALL_GATHER3", "1ALL_GATHER3.", "1ALL_GATHER", "1ALL_GATHER.-1"})
    CHECK_FALSE(schedule::parse_action_id(bad, &a));
}

TEST_CASE("schedule::gpipe_order: every forward before any backward, micro-batches in order", "[schedule]") {
  const int p = 3, m = 5;
  const auto order = schedule::gpipe_order(p, m);
  for (int r = 0; r < p; ++r) {
    REQUIRE(order[r].size() == 2u * m);
    for (int i = 0; i < m; ++i) {
      CHECK(order[r][i] == Action{ActionKind::F, r, i});
      CHECK(order[r][m + i] == Action{ActionKind::B, r, i});
    }
  }
}

TEST_CASE("schedule::one_f_one_b_order: p-1-rank warm-up forwards, then alternate, at most p in flight", "[schedule]") {
  for (int p : {1, 2, 3, 4, 8}) {
    for (int m : {1, 2, 3, 4, 8, 16}) {
      const auto order = schedule::one_f_one_b_order(p, m);
      for (int r = 0; r < p; ++r) {
        INFO("p=" << p << " m=" << m << " rank=" << r);
        const int warmup = std::min(m, p - 1 - r);
        for (int i = 0; i < warmup; ++i) CHECK(order[r][i].kind == ActionKind::F);
        // After the warm-up: F, B, F, B, ... while forwards remain.
        int i = warmup;
        for (int k = 0; k < m - warmup; ++k, i += 2) {
          CHECK(order[r][i].kind == ActionKind::F);
          CHECK(order[r][i + 1].kind == ActionKind::B);
        }
        int inflight = 0, peak = 0;
        for (const auto& a : order[r]) {
          inflight += a.kind == ActionKind::F ? 1 : -1;
          peak = std::max(peak, inflight);
        }
        CHECK(peak <= p);
        CHECK(peak == std::min(m, p - r));
      }
    }
  }
}

TEST_CASE("schedule::interleaved_1f1b_order: PyTorch's order, worked by hand for p=2, v=2, m=2", "[schedule]") {
  // rounds = max(1, 2/2) = 1, per_round = 2. Rank 0: warm-up min((2-1)*2 + 2*(2-1-0), 4) = 4,
  // forwards on stages ((op/2)%2)*2 = 0,0,2,2, then 4 backwards on (1-((op-4)/2)%2)*2 = 2,2,0,0.
  // Rank 1: warm-up 2 (stage 1), then F/B pairs on stage 3, then backwards on stage 1.
  const auto order = schedule::interleaved_1f1b_order(2, 2, 2);
  CHECK(ids(order[0]) == std::vector<std::string>{"0F0", "0F1", "2F0", "2F1", "2B0", "2B1", "0B0", "0B1"});
  CHECK(ids(order[1]) == std::vector<std::string>{"1F0", "1F1", "3F0", "3B0", "3F1", "3B1", "1B0", "1B1"});
}

TEST_CASE("schedule::interleaved_1f1b_order: a rank holds stages r, r+p, ...", "[schedule]") {
  const int p = 4, v = 3, m = 8;
  const auto order = schedule::interleaved_1f1b_order(p, v, m);
  for (int r = 0; r < p; ++r) {
    std::vector<int> f_count(p * v), b_count(p * v);
    for (const auto& a : order[r]) {
      CHECK(a.stage % p == r);
      (a.kind == ActionKind::F ? f_count : b_count)[a.stage]++;
    }
    for (int k = 0; k < v; ++k) {
      CHECK(f_count[r + k * p] == m);
      CHECK(b_count[r + k * p] == m);
    }
  }
}

TEST_CASE("schedule::validate_schedule: every generated schedule is complete and deadlock-free", "[schedule]") {
  for (int p : {1, 2, 3, 4}) {
    for (int m : {1, 2, 4, 6, 8}) {
      for (int ga : {1, 2}) {
        const std::vector<int> buckets(p, 2);
        INFO("p=" << p << " m=" << m << " ga=" << ga);
        CHECK(schedule::validate_schedule(lowered(schedule::gpipe_order(p, m), p, 1, m, ga, buckets)).empty());
        CHECK(schedule::validate_schedule(lowered(schedule::one_f_one_b_order(p, m), p, 1, m, ga)).empty());
        for (int v : {1, 2, 3}) {
          if (m % std::max(1, m / p) != 0) continue;
          const std::vector<int> vb(p * v, 1);
          INFO("v=" << v);
          CHECK(schedule::validate_schedule(lowered(schedule::interleaved_1f1b_order(p, v, m), p, v, m, ga, vb)).empty());
        }
      }
    }
  }
}

TEST_CASE("schedule::lower: sends follow, receives precede, all-reduces follow the last backward", "[schedule]") {
  const auto s = lowered(schedule::one_f_one_b_order(2, 2), 2, 1, 2, 2, {2, 1});
  CHECK(ids(s.ranks[0], false) ==
        std::vector<std::string>{"0F0", "0SEND_F0", "0F1", "0SEND_F1", "0RECV_B0", "0B0", "0RECV_B1", "0B1",
                                 "0F2", "0SEND_F2", "0F3", "0SEND_F3", "0RECV_B2", "0B2", "0RECV_B3", "0B3",
                                 "0ALLREDUCE0", "0ALLREDUCE1", "0OPTIM"});
  CHECK(ids(s.ranks[1], false) ==
        std::vector<std::string>{"1RECV_F0", "1F0", "1B0", "1SEND_B0", "1RECV_F1", "1F1", "1B1", "1SEND_B1",
                                 "1RECV_F2", "1F2", "1B2", "1SEND_B2", "1RECV_F3", "1F3", "1B3", "1SEND_B3",
                                 "1ALLREDUCE0", "1OPTIM"});
}

TEST_CASE("schedule::lower: the bucket counts add all-reduces and change nothing else (one bare lowering serves all)",
          "[schedule]") {
  // plan::LoweredSchedules keeps one lowering without buckets for every bucket count: this holds
  // lower() to that. Without its ALLREDUCEs a lowering equals the one with no data parallelism, and
  // each stage's come right after its last weight gradient (under Gloo, after that action's sends).
  using schedule::ScheduleKind;
  const std::tuple<ScheduleKind, int, int, int> cases[] = {
      {ScheduleKind::one_f_one_b, 4, 1, 8},          {ScheduleKind::interleaved_1f1b, 2, 2, 4},
      {ScheduleKind::interleaved_zero_bubble, 2, 2, 4}, {ScheduleKind::zbv_zero_bubble, 3, 2, 6},
      {ScheduleKind::dualpipev, 2, 2, 8},            {ScheduleKind::gpipe, 3, 1, 3}};
  for (const auto& [kind, p, v, m] : cases)
    for (auto collectives : {schedule::Collectives::gloo, schedule::Collectives::nccl})
      for (int ga : {1, 2}) {
        const auto order = schedule::generated_order(kind, p, v, m);
        const auto none = schedule::lower(order, kind, p, v, m, ga, {}, collectives);
        std::vector<int> buckets;
        for (int s = 0; s < p * v; ++s) buckets.push_back(1 + s % 3);
        const auto with = schedule::lower(order, kind, p, v, m, ga, buckets, collectives);
        INFO(schedule::name(kind) << " p" << p << " v" << v << " m" << m << " ga" << ga << " nccl " << (collectives == schedule::Collectives::nccl));
        CHECK(with.buckets_per_stage == buckets);
        for (int r = 0; r < p; ++r) {
          std::vector<Action> stripped;
          for (const Action& a : with.ranks[r])
            if (a.kind != ActionKind::ALLREDUCE) stripped.push_back(a);
          CHECK(stripped == none.ranks[r]);
          for (size_t i = 0; i < with.ranks[r].size(); ++i) {
            const Action& a = with.ranks[r][i];
            if (a.kind != ActionKind::ALLREDUCE || a.bucket != 0) continue;
            size_t j = i;  // back over the sends to the action before them
            while (j > 0 && (with.ranks[r][j - 1].kind == ActionKind::SEND_F || with.ranks[r][j - 1].kind == ActionKind::SEND_B) &&
                   collectives == schedule::Collectives::gloo)
              --j;
            REQUIRE(j > 0);
            const Action& last = with.ranks[r][j - 1];
            bool weight = false;
            for (const Action& part : last.parts()) weight |= part.stage == a.stage && schedule::makes_weight_gradient(part.kind);
            CHECK(weight);
            for (size_t k = j; k < with.ranks[r].size(); ++k)  // and no later weight gradient of that stage
              for (const Action& part : with.ranks[r][k].parts())
                CHECK_FALSE((part.stage == a.stage && schedule::makes_weight_gradient(part.kind)));
            for (int b = 0; b < buckets[a.stage]; ++b) CHECK(with.ranks[r][i + b] == Action{ActionKind::ALLREDUCE, a.stage, -1, b});
          }
        }
      }
}

TEST_CASE("schedule::validate_schedule: catches missing, misordered and deadlocking schedules", "[schedule]") {
  auto s = lowered(schedule::gpipe_order(2, 2), 2, 1, 2);
  REQUIRE(schedule::validate_schedule(s).empty());

  SECTION("a missing forward") {
    auto& r1 = s.ranks[1];
    r1.erase(std::find(r1.begin(), r1.end(), Action{ActionKind::F, 1, 1}));
    CHECK_THAT(schedule::validate_schedule(s).front(), Catch::Contains("missing 1F1"));
  }
  SECTION("a backward before its forward") {
    auto& r0 = s.ranks[0];
    std::iter_swap(std::find(r0.begin(), r0.end(), Action{ActionKind::F, 0, 1}),
                   std::find(r0.begin(), r0.end(), Action{ActionKind::B, 0, 1}));
    CHECK_THAT(plan::join(schedule::validate_schedule(s)), Catch::Contains("0F1 comes after 0B1"));
  }
  SECTION("a receive without its send") {
    auto& r0 = s.ranks[0];
    r0.erase(std::find(r0.begin(), r0.end(), Action{ActionKind::SEND_F, 0, 0}));
    CHECK_THAT(plan::join(schedule::validate_schedule(s)), Catch::Contains("missing 0SEND_F0"));
  }
  SECTION("a receive ordered before the send it depends on") {
    // Rank 0 waits for the gradient of micro-batch 0 before sending its activation.
    s.ranks[0] = {{ActionKind::F, 0, 0}, {ActionKind::RECV_B, 0, 0}, {ActionKind::SEND_F, 0, 0},
                  {ActionKind::B, 0, 0}, {ActionKind::F, 0, 1},      {ActionKind::SEND_F, 0, 1},
                  {ActionKind::RECV_B, 0, 1}, {ActionKind::B, 0, 1}, {ActionKind::OPTIM, 0}};
    const auto problems = schedule::validate_schedule(s);
    REQUIRE(problems.size() == 1);
    CHECK_THAT(problems.front(), Catch::StartsWith("deadlock"));
  }
}

TEST_CASE("schedule CSV: round trip through PyTorch's compute-only form", "[schedule]") {
  struct Case {
    schedule::ComputeOrder order;
    int p, v, m;
  };
  for (const Case& c : {Case{schedule::gpipe_order(3, 4), 3, 1, 4}, Case{schedule::one_f_one_b_order(4, 8), 4, 1, 8},
                        Case{schedule::interleaved_1f1b_order(2, 3, 4), 2, 3, 4}}) {
    const auto s = lowered(c.order, c.p, c.v, c.m, 2);
    std::ostringstream csv;
    schedule::write_schedule_csv(s, csv);
    const auto back = schedule::parse_schedule_csv(csv.str(), "x.csv", c.p, c.p * c.v, c.m);
    CHECK(back == c.order);
    CHECK(lowered(back, c.p, c.v, c.m, 2).ranks == s.ranks);
  }
}

TEST_CASE("schedule CSV: reads PyTorch's empty cells and rejects bad ones with line:column", "[schedule]") {
  const auto order = schedule::parse_schedule_csv("0F0,,0F1,0B0,0B1\n,1F0,1B0,1F1,1B1\n", "p.csv", 2, 2, 2);
  CHECK(ids(order[1]) == std::vector<std::string>{"1F0", "1B0", "1F1", "1B1"});

  auto error = [](const std::string& text) -> std::string {
    try {
      schedule::parse_schedule_csv(text, "p.csv", 2, 2, 2);
    } catch (const schedule::CsvError& e) {
      return e.what();
    }
    return "";
  };
  CHECK_THAT(error("0F0,0X1\n1F0\n"), Catch::StartsWith("p.csv:1:5: '0X1' is not a compute or point-to-point action"));
  CHECK_THAT(error("0F0\n1F0,0B0\n"), Catch::StartsWith("p.csv:2:5: '0B0': stage 0 lives on rank 0, not on rank 1"));
  CHECK_THAT(error("0F0\n1F7\n"), Catch::StartsWith("p.csv:2:1: '1F7': micro-batch 7 does not exist"));
  CHECK_THAT(error("0F0\n"), Catch::Contains("has 1 rows, but the plan has 2 pipeline ranks"));
  CHECK_THAT(error("0F0,0ALLREDUCE0\n1F0\n"), Catch::StartsWith("p.csv:1:5: '0ALLREDUCE0' is not a compute or point-to-point action"));
  CHECK_THAT(error("0F0\n1F0,0SEND_F0\n"), Catch::StartsWith("p.csv:2:5: '0SEND_F0': stage 0 lives on rank 0, not on rank 1"));
}

TEST_CASE("plan::Plan: an imported CSV schedule is validated before use", "[schedule]") {
  const std::string dir = std::filesystem::temp_directory_path().string();
  const std::string path = dir + "/parallax_test_schedule.csv";
  const std::string yaml = test::synthetic_scenario(4, 2, 2, path);
  {
    std::ofstream(path) << "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n";
  }
  CHECK(test::plan_from(yaml).schedule.kind == schedule::ScheduleKind::csv);
  {
    // Rank 1 forgot micro-batch 1's backward.
    std::ofstream(path) << "0F0,0F1,0B0,0B1\n1F0,1B0,1F1\n";
  }
  CHECK_THAT(test::parse_error(yaml), Catch::Contains("cannot run: missing 1B1"));
  {
    // A cell that is no action: the scenario's InputError (exit 2) at the CSV's line and column.
    std::ofstream(path) << "0F0,0F1,0B0,0B1\n1F0,1X0\n";
  }
  try {
    test::plan_from(yaml);
    FAIL("accepted a CSV with a bad cell");
  } catch (const plan::InputError& e) {
    CHECK_THAT(std::string(e.what()), Catch::StartsWith(path + ":2:5: '1X0' is not a compute"));
  }
  std::filesystem::remove(path);
}
