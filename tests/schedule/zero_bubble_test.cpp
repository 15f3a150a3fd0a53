// The schedules that split backwards (I, W) and the V-shaped ones, against torch itself: the
// action lists torch.distributed.pipelining 2.x generates, dumped by bench/torch_schedules.py.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "plan/error.hpp"
#include "schedule/csv.hpp"
#include "schedule/schedule.hpp"
#include "schedule/validate.hpp"
#include "tests/test_util.hpp"

using namespace parallax;
using schedule::Action;
using schedule::ActionKind;
using schedule::ScheduleKind;

namespace {

std::string read(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

ScheduleKind kind_named(const std::string& n) {
  for (ScheduleKind k : {ScheduleKind::gpipe, ScheduleKind::one_f_one_b, ScheduleKind::interleaved_1f1b, ScheduleKind::looped_bfs,
                         ScheduleKind::interleaved_zero_bubble, ScheduleKind::zbv_zero_bubble, ScheduleKind::dualpipev})
    if (n == schedule::name(k)) return k;
  FAIL("unknown schedule " << n);
  return ScheduleKind::gpipe;
}

// Every <schedule>-p<P>-v<V>-m<M>.csv of `dir` compared with Parallax's order; returns how many.
int compare_with_torch(const std::filesystem::path& dir) {
  const std::regex name(R"(([a-z0-9-]+)-p(\d+)-v(\d+)-m(\d+)\.csv)");
  int compared = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    std::smatch m;
    const std::string file = entry.path().filename().string();
    if (!std::regex_match(file, m, name)) continue;
    const ScheduleKind kind = kind_named(m[1]);
    const int p = std::stoi(m[2]), v = std::stoi(m[3]), chunks = std::stoi(m[4]);
    INFO(file);
    std::string text = read(entry.path());
    // torch 2.11's Schedule1F1B._get_pipeline_order, which only its visualizer and _dump_csv
    // use, numbers the last rank's forwards from 1 (3F1 .. 3F8 for 8 micro-batches); its
    // runtime, _step_microbatches, runs 0 .. 7 as Parallax does (docs/scenarios.md). That row
    // is left out.
    const bool torch_1f1b_ir = kind == ScheduleKind::one_f_one_b;
    if (torch_1f1b_ir) text = text.substr(0, text.rfind('\n', text.size() - 2) + 1) + "\n";
    const schedule::ComputeOrder torch = schedule::parse_schedule_csv(text, file, p, p * v, chunks, schedule::v_shaped(kind));
    const schedule::ComputeOrder ours = schedule::generated_order(kind, p, v, chunks);
    REQUIRE(ours.size() == torch.size());
    for (int r = 0; r < p; ++r) {
      INFO("rank " << r);
      if (torch_1f1b_ir && r == p - 1) continue;
      std::vector<std::string> a, b;
      for (const Action& x : ours[r]) a.push_back(x.id());
      for (const Action& x : torch[r]) b.push_back(x.id());
      CHECK(a == b);
    }
    ++compared;
  }
  return compared;
}

}  // namespace

TEST_CASE("schedule: every generated order equals torch.distributed.pipelining's, action for action", "[schedule]") {
  // Kept from torch 2.11 (tests/schedule/torch-schedules/TORCH_VERSION): all seven schedules at
  // several shapes, including fewer micro-batches than ranks.
  CHECK(compare_with_torch(std::filesystem::path(PARALLAX_SOURCE_DIR) / "tests/schedule/torch-schedules") == 15);
  // CI (the LibTorch 2.x build) points this at every shape bench/torch_schedules.py makes with the
  // torch it installed, so that a torch release that changes a schedule shows here.
  if (const char* dir = std::getenv("PARALLAX_TORCH_SCHEDULES")) CHECK(compare_with_torch(dir) > 100);
}

TEST_CASE("schedule::Action: I, W and OVERLAP_F_B print and parse as torch's", "[schedule]") {
  CHECK(Action{ActionKind::I, 1, 2}.id() == "1I2");
  CHECK(Action{ActionKind::W, 3, 0}.id() == "3W0");
  const Action overlap{ActionKind::OVERLAP_F_B, 0, 3, -1, 3, 1};
  CHECK(overlap.id() == "(0F3;3B1)OVERLAP_F_B");
  for (const std::string s : {"1I2", "3W0", "(0F3;3B1)OVERLAP_F_B", "(2F10;1B0)OVERLAP_F_B"}) {
    Action a;
    REQUIRE(schedule::parse_action_id(s, &a));
    CHECK(a.id() == s);
  }
  Action a;
  CHECK_FALSE(schedule::parse_action_id("(0F3;3I1)OVERLAP_F_B", &a));  // torch pairs a forward with a full backward
  CHECK_FALSE(schedule::parse_action_id("(0F3)OVERLAP_F_B", &a));
  CHECK_FALSE(schedule::parse_action_id("0X1", &a));
}

TEST_CASE("plan: V-shaped stages: rank r holds r and 2p-1-r, as torch's generate_stage_to_rank_mapping(style=v)", "[schedule]") {
  // torch 2.11: {0: 0, 1: 1, 2: 2, 3: 3, 4: 3, 5: 2, 6: 1, 7: 0} for 4 ranks and 8 stages.
  const std::vector<int> torch_v = {0, 1, 2, 3, 3, 2, 1, 0};
  for (int s = 0; s < 8; ++s) {
    CHECK(schedule::pipeline_rank_of_stage(s, 4, true) == torch_v[s]);
    CHECK(schedule::pipeline_rank_of_stage(s, 4, false) == s % 4);
  }
}

TEST_CASE("schedule::validate_schedule: the split and V-shaped schedules are complete and deadlock-free", "[schedule]") {
  for (ScheduleKind kind : {ScheduleKind::looped_bfs, ScheduleKind::interleaved_zero_bubble, ScheduleKind::zbv_zero_bubble,
                            ScheduleKind::dualpipev}) {
    const bool v_fixed = schedule::v_shaped(kind);
    for (int p : {1, 2, 3, 4})
      for (int v : {1, 2, 3}) {
        if (v_fixed && v != 2) continue;
        for (int m : {1, 2, 3, 4, 6, 8, 9, 16}) {
          if (kind == ScheduleKind::dualpipev && m < 2 * p) {
            // Fewer micro-batches than stages: the order would name micro-batches past m.
            CHECK_THROWS_WITH(schedule::generated_order(kind, p, v, m),
                              Catch::Contains("at least as many micro-batches as stages"));
            continue;
          }
          if (kind == ScheduleKind::interleaved_zero_bubble && m % std::max(1, m / p) != 0) continue;
          for (int ga : {1, 2})
            for (auto coll : {schedule::Collectives::gloo, schedule::Collectives::nccl})
              for (bool ddp : {false, true}) {
                INFO(schedule::name(kind) << " p=" << p << " v=" << v << " m=" << m << " ga=" << ga << " ddp=" << ddp
                                      << " nccl=" << (coll == schedule::Collectives::nccl));
                const auto order = schedule::generated_order(kind, p, v, m);
                const auto s = schedule::lower(order, kind, p, v, m, ga, ddp ? std::vector<int>(p * v, 2) : std::vector<int>{}, coll);
                const auto problems = schedule::validate_schedule(s);
                CHECK(problems.empty());
                if (!problems.empty()) FAIL(problems.front());
              }
        }
      }
  }
}

TEST_CASE("schedule: Megatron-core's combined 1F1B pairs each steady-state forward with an earlier backward", "[schedule][moe]") {
  // One stage on one rank: the user guide's table (fill F0, then F(k+1) beside B(k), drain B(n-1)).
  const auto one = schedule::combined_1f1b_order(1, 1, 4);
  std::vector<std::string> ids;
  for (const Action& a : one[0]) ids.push_back(a.id());
  CHECK(ids == std::vector<std::string>{"0F0", "(0F1;0B0)OVERLAP_F_B", "(0F2;0B1)OVERLAP_F_B", "(0F3;0B2)OVERLAP_F_B", "0B3"});
  for (int p : {1, 2, 3, 4})
    for (int v : {1, 2, 3})
      for (int m : {1, 2, 4, 8, 9, 16}) {
        if (m % std::max(1, m / p) != 0) continue;
        INFO("p=" << p << " v=" << v << " m=" << m);
        const auto order = schedule::combined_1f1b_order(p, v, m), plain = schedule::interleaved_1f1b_order(p, v, m);
        for (int r = 0; r < p; ++r) {
          // The same forwards and backwards in the same order as interleaved 1F1B's.
          std::vector<Action> forwards, backwards, plain_forwards, plain_backwards;
          int pairs = 0, first_backward = -1, plain_first_backward = -1, forwards_seen = 0;
          for (const Action& a : order[r]) {
            if (a.kind == ActionKind::OVERLAP_F_B) {
              ++pairs;
              CHECK_FALSE((a.stage == a.b_stage && a.mb == a.b_mb));  // never a micro-batch beside its own backward
            }
            if (a.kind != ActionKind::F && first_backward < 0) first_backward = forwards_seen;  // forwards before it
            for (const Action& part : a.parts()) {
              (part.kind == ActionKind::F ? forwards : backwards).push_back(part);
              if (part.kind == ActionKind::F) ++forwards_seen;
            }
          }
          int seen = 0;
          for (const Action& a : plain[r]) {
            if (a.kind == ActionKind::B && plain_first_backward < 0) plain_first_backward = seen;
            (a.kind == ActionKind::F ? plain_forwards : plain_backwards).push_back(a);
            if (a.kind == ActionKind::F) ++seen;
          }
          CHECK(forwards == plain_forwards);
          CHECK(backwards == plain_backwards);
          // The forwards before the first backward are interleaved 1F1B's warm-up and its first
          // steady-state forward: the warm-up is one longer, and every later step a pair.
          CHECK(first_backward == plain_first_backward);
          CHECK(pairs == v * m - first_backward);
        }
        for (int ga : {1, 2})
          for (auto coll : {schedule::Collectives::gloo, schedule::Collectives::nccl}) {
            INFO("ga=" << ga << " nccl=" << (coll == schedule::Collectives::nccl));
            const auto problems = schedule::validate_schedule(schedule::lower(
                order, v > 1 ? ScheduleKind::interleaved_1f1b : ScheduleKind::one_f_one_b, p, v, m, ga, std::vector<int>(p * v, 2), coll));
            CHECK(problems.empty());
            if (!problems.empty()) FAIL(problems.front());
          }
      }
}

TEST_CASE("schedule::lower: a split backward's RECV_B comes before its I, its SEND_B after, its all-reduce after the last W",
          "[schedule]") {
  const auto s = schedule::lower(schedule::zbv_zero_bubble_order(2, 4), ScheduleKind::zbv_zero_bubble, 2, 2, 4, 1, {1, 1, 1, 1});
  REQUIRE(schedule::validate_schedule(s).empty());
  // Rank 1 holds stages 1 and 2; 2's output goes to stage 3 on rank 0, 1's to 2 on its own rank.
  const auto& r1 = s.ranks[1];
  auto at = [&](const std::string& id) {
    for (size_t i = 0; i < r1.size(); ++i)
      if (r1[i].id() == id) return static_cast<int>(i);
    FAIL("no " << id);
    return -1;
  };
  CHECK(at("2RECV_B0") < at("2I0"));
  CHECK(at("2I0") < at("2SEND_B0"));
  CHECK(at("2I0") < at("2W0"));
  CHECK(at("1SEND_F0") < at("2RECV_F0"));  // a hand-over on the rank: send first
  CHECK(at("2W3") < at("2ALLREDUCE0"));
  CHECK(at("1W3") < at("1ALLREDUCE0"));
}

TEST_CASE("schedule::validate_schedule: a backward split wrongly is named", "[schedule]") {
  auto order = schedule::gpipe_order(1, 2);  // 0F0 0F1 0B0 0B1
  order[0][2] = {ActionKind::I, 0, 0};
  order[0].insert(order[0].begin() + 3, {ActionKind::W, 0, 0});
  CHECK(schedule::validate_schedule(schedule::lower(order, ScheduleKind::csv, 1, 1, 2, 1, {})).empty());
  auto w_first = order;
  std::swap(w_first[0][2], w_first[0][3]);  // 0W0 before 0I0
  const auto p1 = schedule::validate_schedule(schedule::lower(w_first, ScheduleKind::csv, 1, 1, 2, 1, {}));
  REQUIRE_FALSE(p1.empty());
  CHECK(p1.front().find("0I0 comes after 0W0") != std::string::npos);
  auto both = order;
  both[0].push_back({ActionKind::B, 0, 0});
  const auto p2 = schedule::validate_schedule(schedule::lower(both, ScheduleKind::csv, 1, 1, 2, 1, {}));
  REQUIRE_FALSE(p2.empty());
  CHECK(p2.front().find("split form") != std::string::npos);
}

TEST_CASE("schedule CSV: reads I, W and OVERLAP_F_B, refuses a W before its I at its row and column", "[schedule]") {
  const auto order = schedule::parse_schedule_csv("0F0,0F1,0I0,0W0,0I1,0W1\n1F0,1I0,1F1,1I1,1W1,1W0\n", "s.csv", 2, 2, 2);
  CHECK(order[1][4].id() == "1W1");
  const auto v = schedule::parse_schedule_csv("0F0,(0F1;3B0)OVERLAP_F_B\n1F0\n", "v.csv", 2, 4, 2, /*v_shape=*/true);
  CHECK(v[0][1].kind == ActionKind::OVERLAP_F_B);
  try {
    schedule::parse_schedule_csv("0F0,0W0,0I0\n1F0\n", "bad.csv", 2, 2, 1);
    FAIL("accepted a W before its I");
  } catch (const schedule::CsvError& e) {
    CHECK(std::string(e.what()).find("bad.csv:1:5") != std::string::npos);
    CHECK(std::string(e.what()).find("W before its I") != std::string::npos);
  }
  try {
    schedule::parse_schedule_csv("0F0,0UNSHARD\n1F0\n", "bad.csv", 2, 2, 1);
    FAIL("accepted UNSHARD");
  } catch (const schedule::CsvError& e) {
    CHECK(std::string(e.what()).find("bad.csv:1:5") != std::string::npos);
  }
  try {  // stage 3 is on rank 0 in a V, but looped (a CSV's placement) on rank 1
    schedule::parse_schedule_csv("0F0,3F0\n1F0\n", "bad.csv", 2, 4, 1);
    FAIL("accepted a stage on the wrong row");
  } catch (const schedule::CsvError& e) {
    CHECK(std::string(e.what()).find("bad.csv:1:5") != std::string::npos);
  }
}

TEST_CASE("plan: scenarios check what each schedule asks, as torch's classes do", "[schedule]") {
  const std::string base = "model: {preset: synthetic, layers: 8, fwd_us_per_sample: 10}\ndata: {batch_size: 60}\nhardware: ideal\n";
  auto error = [&](const std::string& parallel) {
    try {
      test::plan_from(base + "parallel: " + parallel + "\n");
    } catch (const plan::InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK(error("{pipeline: 2, virtual: 2, chunks: 4, schedule: zbv-zero-bubble}").empty());
  CHECK(error("{pipeline: 2, virtual: 1, chunks: 4, schedule: zbv-zero-bubble}").find("parallel.virtual: 2") != std::string::npos);
  CHECK(error("{pipeline: 2, virtual: 2, chunks: 3, schedule: dualpipev}").find("at least as many micro-batches") != std::string::npos);
  CHECK(error("{pipeline: 2, virtual: 2, chunks: 4, schedule: 1f1b}").find("several stages per rank") != std::string::npos);
  CHECK(error("{pipeline: 4, virtual: 2, chunks: 6, schedule: interleaved-zero-bubble}").empty());
  CHECK(error("{pipeline: 2, virtual: 2, chunks: 5, schedule: interleaved-zero-bubble}").find("multiple of its rounds") != std::string::npos);
}
