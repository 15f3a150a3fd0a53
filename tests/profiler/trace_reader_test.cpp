#include <catch2/catch.hpp>
#include <filesystem>
#include <set>
#include <sstream>

#include "plan/error.hpp"
#include "plan/trace_writer.hpp"
#include "profiler/trace_reader.hpp"
#include "sim/simulator.hpp"
#include "tests/test_util.hpp"

using namespace parallax;

namespace {

std::string error_of(const std::string& text) {
  try {
    profiler::parse_trace(text, "t.json");
  } catch (const plan::InputError& e) {
    return e.what();
  }
  return "";
}

const std::string kFixtures = std::string(PARALLAX_SOURCE_DIR) + "/../shared/fixtures/kineto";

}  // namespace

TEST_CASE("profiler::read_trace: a written trace reads back as the same timeline", "[profiler]") {
  const auto p = test::plan_from(test::synthetic_scenario(4, 2, 4, "1f1b"), {"parallel.data=2", "hardware=a100-nvlink-ib"});
  const plan::Timeline t = sim::simulate(p).timeline;
  std::ostringstream out;
  plan::write_chrome_trace(t, out);
  const auto back = profiler::parse_trace(out.str(), "t.json");
  CHECK(back.format == "parallax");
  CHECK(back.kind == "predicted");
  REQUIRE(back.timeline.events.size() == t.events.size());
  for (size_t i = 0; i < t.events.size(); ++i) {
    const auto &a = t.events[i], &b = back.timeline.events[i];
    INFO(a.action.id());
    CHECK(a.rank == b.rank);
    CHECK(a.lane == b.lane);
    CHECK(a.action == b.action);
    CHECK(a.start == b.start);
    CHECK(a.end == b.end);
    CHECK(a.bytes == b.bytes);
    CHECK(a.algorithm == b.algorithm);
  }
}

TEST_CASE("profiler::read_trace: malformed traces are rejected with their position", "[profiler]") {
  CHECK_THAT(error_of("{\"traceEvents\": [\n  {\"ph\": \"X\", \"ts\": 1,\n"), Catch::StartsWith("t.json:3:1: not valid JSON"));
  // A missing comma: the position is the end of the unexpected "ts" (column 32).
  CHECK_THAT(error_of("{\"traceEvents\": [{\"ph\": \"X\" \"ts\": 1}]}"), Catch::StartsWith("t.json:1:32: not valid JSON"));
  CHECK_THAT(error_of("[1, 2]"), Catch::Contains("expected an object with a \"traceEvents\" list"));
  CHECK_THAT(error_of("{\"traceEvents\": [{\"ph\": \"X\", \"ts\": 1}]}"), Catch::Contains("traceEvents[0]: an X event needs numeric ts and dur"));
  CHECK_THAT(error_of("{\"parallax\": {\"world_size\": 1}, \"traceEvents\": [{\"ph\": \"X\", \"ts\": 1, \"dur\": 1, \"pid\": 3, \"tid\": 0}]}"),
             Catch::Contains("pid 3 is not a rank"));
  CHECK_THAT(error_of("{\"parallax\": {\"world_size\": 1}, \"traceEvents\": [{\"ph\": \"X\", \"ts\": 1, \"dur\": 1, \"pid\": 0, \"tid\": 0, \"args\": {\"action\": \"zz\"}}]}"),
             Catch::Contains("'zz' is not an action id"));
}

TEST_CASE("profiler::read_trace: a truncated .gz is an error, not a crash", "[profiler]") {
  const std::string full = kFixtures + "/sampled_rank-0.json.gz";
  if (!std::filesystem::exists(full)) {
    WARN("skipped: ../shared/fixtures is not present");
    return;
  }
  const auto cut = std::filesystem::temp_directory_path() / "parallax_cut.json.gz";
  std::filesystem::copy_file(full, cut, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::resize_file(cut, std::filesystem::file_size(full) / 2);
  CHECK_THROWS_AS(profiler::read_trace(cut.string()), plan::InputError);
  std::filesystem::remove(cut);
}

TEST_CASE("profiler::read_trace: PyTorch profiler traces of a real NCCL job, ranks and lanes", "[profiler]") {
  if (!std::filesystem::exists(kFixtures)) {
    WARN("skipped: ../shared/fixtures is not present");
    return;
  }
  for (int r : {0, 1}) {
    const auto t = profiler::read_trace(kFixtures + "/sampled_rank-" + std::to_string(r) + ".json.gz");
    CHECK(t.format == "kineto");
    CHECK(t.world_size == 128);
    std::set<std::string> lanes;
    int nccl = 0;
    for (const auto& e : t.events) {
      CHECK(e.rank == r);  // from distributedInfo
      lanes.insert(e.lane);
      if (e.name.find("ncclKernel") != std::string::npos) {
        CHECK(e.communication);
        CHECK_THAT(e.lane, Catch::EndsWith(" nccl"));
        ++nccl;
      }
    }
    CHECK(nccl > 0);
    CHECK(lanes.count("gpu stream 7"));
    CHECK(lanes.count("annotations"));
    CHECK(t.steps.size() == 2);  // ProfilerStep#551 and #552
  }
}

TEST_CASE("profiler::read_trace: times before the origin and instants survive the round trip", "[profiler]") {
  plan::Timeline t;
  t.kind = "measured";
  t.world_size = 1;
  plan::TimelineEvent e;
  e.action = {plan::ActionKind::F, 0, 2};
  e.start = plan::Time::ns(-1234);
  e.end = plan::Time::ns(5678);
  t.events.push_back(e);
  t.instants.push_back({0, plan::Time::ns(-5), "step", 0});
  std::ostringstream out;
  plan::write_chrome_trace(t, out);
  const auto back = profiler::parse_trace(out.str(), "t.json");
  REQUIRE(back.timeline.events.size() == 1);
  CHECK(back.timeline.events[0].start == plan::Time::ns(-1234));
  CHECK(back.timeline.events[0].end == plan::Time::ns(5678));
}

TEST_CASE("profiler::read_trace: device lanes (GPU activity) round-trip beside the action lanes", "[profiler]") {
  plan::Timeline t;
  t.kind = "measured";
  t.world_size = 2;
  plan::DeviceSpan k;
  k.rank = 1;
  k.lane = "gpu stream 84 nccl";
  k.name = "ncclKernel_SendRecv";
  k.start = plan::Time::ns(1000);
  k.end = plan::Time::ns(4000);
  k.attributed = true;
  k.action = {plan::ActionKind::SEND_B, 1, 3};
  k.step = 2;
  t.device.push_back(k);
  std::ostringstream out;
  plan::write_chrome_trace(t, out);
  const auto back = profiler::parse_trace(out.str(), "t.json");
  REQUIRE(back.timeline.device.size() == 1);
  const auto& d = back.timeline.device[0];
  CHECK(d.rank == 1);
  CHECK(d.lane == "gpu stream 84 nccl");
  CHECK(d.name == "ncclKernel_SendRecv");
  CHECK(d.start == k.start);
  CHECK(d.end == k.end);
  CHECK(d.attributed);
  CHECK(d.action.id() == "1SEND_B3");
  CHECK(d.step == 2);
  REQUIRE(back.events.size() == 1);
  CHECK(back.events[0].communication);
}
