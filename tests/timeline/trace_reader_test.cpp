#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <set>
#include <sstream>
#include <tuple>
#include <zlib.h>

#include "plan/error.hpp"
#include "sim/simulator.hpp"
#include "tests/test_util.hpp"
#include "timeline/trace_reader.hpp"
#include "timeline/trace_writer.hpp"

using namespace parallax;

namespace {

std::string error_of(const std::string& text) {
  try {
    timeline::parse_trace(text, "t.json");
  } catch (const plan::InputError& e) {
    return e.what();
  }
  return "";
}

const std::string kFixtures = std::string(PARALLAX_SOURCE_DIR) + "/../shared/fixtures/kineto";

}  // namespace

TEST_CASE("timeline::read_trace: a written trace reads back as the same timeline", "[timeline]") {
  const auto p = test::plan_from(test::synthetic_scenario(4, 2, 4, "1f1b"), {"parallel.data=2", "hardware=a100-nvlink-ib"});
  const timeline::Timeline t = sim::simulate(p).timeline;
  std::ostringstream out;
  timeline::write_chrome_trace(t, out);
  const auto back = timeline::parse_trace(out.str(), "t.json");
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

TEST_CASE("timeline::read_trace: malformed traces are rejected with their position", "[timeline]") {
  CHECK_THAT(error_of("{\"traceEvents\": [\n  {\"ph\": \"X\", \"ts\": 1,\n"), Catch::StartsWith("t.json:3:1: not valid JSON"));
  // A missing comma: the position is the end of the unexpected "ts" (column 32).
  CHECK_THAT(error_of("{\"traceEvents\": [{\"ph\": \"X\" \"ts\": 1}]}"), Catch::StartsWith("t.json:1:32: not valid JSON"));
  CHECK_THAT(error_of("{\"events\": []}"), Catch::Contains("expected a list of events or an object with a \"traceEvents\" list"));
  CHECK_THAT(error_of("[1, 2]"), Catch::StartsWith("t.json:1:2: event 0: not an object"));
  // Every event error names the event's own line and column.
  CHECK_THAT(error_of("{\"traceEvents\": [\n {\"ph\": \"i\", \"ts\": 1},\n   {\"ph\": \"X\", \"ts\": 1}]}"),
             Catch::StartsWith("t.json:3:4: event 1: an X event needs numeric ts and dur"));
  CHECK_THAT(error_of("[{\"ph\": \"X\", \"ts\": 1, \"dur\": -2}]"), Catch::StartsWith("t.json:1:2: event 0: dur is negative"));
  CHECK_THAT(error_of("[{\"ph\": \"B\", \"ts\": \"soon\"}]"), Catch::Contains("event 0: a B event needs a numeric ts"));
  CHECK_THAT(error_of("[{\"ph\": \"X\", \"ts\": 1e300, \"dur\": 1}]"), Catch::Contains("event 0: ts is out of range"));
  CHECK_THAT(error_of("[{\"ph\": \"X\", \"ts\": 1e999, \"dur\": 1}]"), Catch::StartsWith("t.json:1:20: not valid JSON (number overflow"));
  CHECK_THAT(error_of("{\"parallax\": {\"world_size\": 1}, \"traceEvents\": [{\"ph\": \"X\", \"ts\": 1, \"dur\": 1, \"pid\": 3, \"tid\": 0}]}"),
             Catch::Contains("pid 3 is not a rank"));
  CHECK_THAT(error_of("{\"parallax\": {\"world_size\": 1}, \"traceEvents\": [{\"ph\": \"X\", \"ts\": 1, \"dur\": 1, \"pid\": 0, \"tid\": 0, \"args\": {\"action\": \"zz\"}}]}"),
             Catch::StartsWith("t.json:1:49: event 0: args.action 'zz' is not an action id"));
  CHECK_THAT(error_of("{\"parallax\": {\"world_size\": 1}, \"traceEvents\": [{\"ph\": \"X\", \"ts\": 1, \"dur\": 1, \"pid\": 0, \"tid\": 0, \"args\": {\"action\": \"0F1\", \"step\": 1e30}}]}"),
             Catch::Contains("args.step must be an integer"));
  // Header errors point at the header.
  CHECK_THAT(error_of("{\"traceEvents\": [],\n \"parallax\": {\"world_size\": -1}}"),
             Catch::StartsWith("t.json:2:14: parallax.world_size must be an integer from 0 to"));
  CHECK_THAT(error_of("{\"distributedInfo\": {\"rank\": \"one\"}, \"traceEvents\": []}"),
             Catch::StartsWith("t.json:1:21: distributedInfo.rank must be an integer"));
}

TEST_CASE("timeline::read_trace: a truncated .gz is an error, not a crash", "[timeline]") {
  const std::string full = kFixtures + "/sampled_rank-0.json.gz";
  if (!std::filesystem::exists(full)) parallax::test::skip("fixtures", "../shared/fixtures is not present");
  const auto cut = parallax::test::temp_path("parallax_cut.json.gz");
  std::filesystem::copy_file(full, cut, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::resize_file(cut, std::filesystem::file_size(full) / 2);
  CHECK_THROWS_AS(timeline::read_trace(cut.string()), plan::InputError);
  std::filesystem::remove(cut);
}

TEST_CASE("timeline::read_trace: PyTorch profiler traces of a real NCCL job, ranks and lanes", "[timeline]") {
  if (!std::filesystem::exists(kFixtures)) parallax::test::skip("fixtures", "../shared/fixtures is not present");
  for (int r : {0, 1}) {
    const auto t = timeline::read_trace(kFixtures + "/sampled_rank-" + std::to_string(r) + ".json.gz");
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

TEST_CASE("timeline::read_trace: times before the origin and instants survive the round trip", "[timeline]") {
  timeline::Timeline t;
  t.kind = "measured";
  t.world_size = 1;
  timeline::TimelineEvent e;
  e.action = {schedule::ActionKind::F, 0, 2};
  e.start = plan::Time::ns(-1234);
  e.end = plan::Time::ns(5678);
  t.events.push_back(e);
  t.instants.push_back({0, plan::Time::ns(-5), "step", 0});
  std::ostringstream out;
  timeline::write_chrome_trace(t, out);
  const auto back = timeline::parse_trace(out.str(), "t.json");
  REQUIRE(back.timeline.events.size() == 1);
  CHECK(back.timeline.events[0].start == plan::Time::ns(-1234));
  CHECK(back.timeline.events[0].end == plan::Time::ns(5678));
}

TEST_CASE("timeline::read_trace: device lanes (GPU activity) round-trip beside the action lanes", "[timeline]") {
  timeline::Timeline t;
  t.kind = "measured";
  t.world_size = 2;
  timeline::DeviceSpan k;
  k.rank = 1;
  k.lane = "gpu stream 84 nccl";
  k.name = "ncclKernel_SendRecv";
  k.start = plan::Time::ns(1000);
  k.end = plan::Time::ns(4000);
  k.attributed = true;
  k.action = {schedule::ActionKind::SEND_B, 1, 3};
  k.step = 2;
  t.device.push_back(k);
  std::ostringstream out;
  timeline::write_chrome_trace(t, out);
  const auto back = timeline::parse_trace(out.str(), "t.json");
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

// A Parallax trace is read as the parser meets its events, once its header has come (first, as the
// writer puts it). A file with its header last, or its lanes' names after their spans, reads the same.
TEST_CASE("timeline::read_trace: a Parallax trace reads the same with its header last and its lane names after the spans", "[timeline]") {
  auto p = test::plan_from(test::synthetic_scenario(4, 2, 4, "1f1b"), {"parallel.data=2", "hardware=a100-nvlink-ib"});
  timeline::Timeline t = sim::simulate(p).timeline;
  t.plan = timeline::summarize(p);
  for (int rank : {0, 3}) {
    timeline::DeviceSpan k;
    k.rank = rank;
    k.lane = rank ? "gpu stream 7 nccl" : "gpu stream 7";
    k.name = "kernel";
    k.start = plan::Time::ns(1000 + rank);
    k.end = plan::Time::ns(4000);
    t.device.push_back(k);
  }
  std::ostringstream out;
  timeline::write_chrome_trace(t, out);
  const auto written = nlohmann::json::parse(out.str());
  nlohmann::ordered_json moved;
  nlohmann::json reversed = written["traceEvents"];
  std::reverse(reversed.begin(), reversed.end());
  moved["traceEvents"] = reversed;
  moved["parallax"] = written["parallax"];
  const auto ordered = timeline::parse_trace(out.str(), "t.json"), reordered = timeline::parse_trace(moved.dump(), "moved.json");
  for (const auto* back : {&ordered, &reordered}) {
    INFO(back->path);
    CHECK(back->format == "parallax");
    CHECK(back->timeline.plan.has_value());
    CHECK(back->timeline.events.size() == t.events.size());
    CHECK(back->timeline.counters.size() == t.counters.size());
    REQUIRE(back->timeline.device.size() == 2);
    for (const auto& d : back->timeline.device) CHECK(d.lane == (d.rank ? "gpu stream 7 nccl" : "gpu stream 7"));
    for (const auto& e : back->events) CHECK(e.communication == (e.lane != "compute" && e.lane != "gpu stream 7"));
  }
  // An error in a streamed event still names its place in the file.
  std::string bad = out.str();
  const size_t at = bad.find("\"ph\":\"X\"");
  bad.replace(bad.find("\"dur\":", at), 6, "\"dur\":\"x\",\"d\":");
  try {
    timeline::parse_trace(bad, "bad.json");
    FAIL("a bad X event was read");
  } catch (const plan::InputError& e) {
    CHECK_THAT(e.what(), Catch::StartsWith("bad.json:"));
    CHECK_THAT(e.what(), Catch::Contains("an X event needs numeric ts, dur, pid and tid"));
  }
}

namespace {

// The events of a lane, as (name, start_ns, end_ns), in start order.
std::vector<std::tuple<std::string, int64_t, int64_t>> lane(const timeline::LoadedTrace& t, const std::string& name) {
  std::vector<std::tuple<std::string, int64_t, int64_t>> v;
  for (const auto& e : t.events)
    if (e.lane == name) v.emplace_back(e.name, e.start_ns, e.end_ns);
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return std::get<1>(a) < std::get<1>(b); });
  return v;
}

using Ev = std::tuple<std::string, int64_t, int64_t>;

// One trace in every phase: X, nested B/E listed out of time order, an instant, a counter, a
// flow, metadata naming the process and a thread. Times in microseconds.
const char* kEveryPhase = R"([
  {"ph": "M", "name": "process_name", "pid": 7, "args": {"name": "trainer"}},
  {"ph": "M", "name": "thread_name", "pid": 7, "tid": 1, "args": {"name": "main"}},
  {"ph": "X", "name": "step", "pid": 7, "tid": 1, "ts": 100, "dur": 50.5},
  {"ph": "E", "pid": 7, "tid": 2, "ts": 40},
  {"ph": "B", "name": "outer", "pid": 7, "tid": 2, "ts": 10},
  {"ph": "B", "name": "inner", "pid": 7, "tid": 2, "ts": 20.25},
  {"ph": "E", "pid": 7, "tid": 2, "ts": 30},
  {"ph": "i", "name": "mark", "pid": 7, "tid": 1, "ts": 120, "s": "t"},
  {"ph": "C", "name": "memory", "pid": 7, "ts": 120, "args": {"bytes": 5}},
  {"ph": "s", "name": "flow", "pid": 7, "tid": 1, "ts": 100, "id": 1}
)";

}  // namespace

TEST_CASE("timeline::read_trace: every phase, in the array form without its closing bracket", "[timeline]") {
  for (const std::string ending : {"", ",", ",\n", "]", "\n]\n"}) {
    INFO("ending: '" << ending << "'");
    const auto t = timeline::parse_trace(kEveryPhase + ending, "t.json", 3);
    CHECK(t.format == "chrome");
    CHECK(t.warnings.empty());
    for (const auto& e : t.events) CHECK(e.rank == 3);  // the default rank
    CHECK(lane(t, "trainer / main") == std::vector<Ev>{{"step", 100'000, 150'500}, {"mark", 120'000, 120'000}});
    // B/E pair as a stack in time order, though the file lists the outer E first.
    CHECK(lane(t, "trainer / tid 2") == std::vector<Ev>{{"outer", 10'000, 40'000}, {"inner", 20'250, 30'000}});
    CHECK(t.events.size() == 4);  // the counter and the flow are not shown
  }
}

TEST_CASE("timeline::read_trace: the object form reads the same events", "[timeline]") {
  const std::string text = std::string("{\"displayTimeUnit\": \"ns\", \"traceEvents\": ") + kEveryPhase + "]}";
  const auto t = timeline::parse_trace(text, "t.json");
  CHECK(t.format == "chrome");
  CHECK(lane(t, "trainer / main") == std::vector<Ev>{{"step", 100'000, 150'500}, {"mark", 120'000, 120'000}});
  CHECK(lane(t, "trainer / tid 2") == std::vector<Ev>{{"outer", 10'000, 40'000}, {"inner", 20'250, 30'000}});
}

TEST_CASE("timeline::read_trace: B and E that do not pair up are left out with their position", "[timeline]") {
  const auto t = timeline::parse_trace(R"([
{"ph": "E", "pid": 1, "tid": 1, "ts": 5},
{"ph": "B", "name": "a", "pid": 1, "tid": 1, "ts": 10},
{"ph": "E", "pid": 1, "tid": 1, "ts": 12},
  {"ph": "B", "name": "cut", "pid": 1, "tid": 1, "ts": 20},)", "t.json");
  CHECK(lane(t, "pid 1 / tid 1") == std::vector<Ev>{{"a", 10'000, 12'000}});
  REQUIRE(t.warnings.size() == 2);
  CHECK_THAT(t.warnings[0], Catch::StartsWith("t.json:2:1: an E event with no B open"));
  CHECK_THAT(t.warnings[1], Catch::StartsWith("t.json:5:3: a B event that never ends"));
}

TEST_CASE("timeline::read_trace: the legacy autograd profiler's export_chrome_trace", "[timeline]") {
  // As torch.autograd.profiler.profile(use_cuda=True).export_chrome_trace() writes it: CPU ops
  // under pid "CPU functions", kernels under "CUDA functions" with the device as tid, flow
  // arrows (s/f) between them, a remote op's tid as a string.
  const auto t = timeline::parse_trace(R"([{"name": "aten::add", "ph": "X", "ts": 1000.5, "dur": 20.25, "tid": 4, "pid": "CPU functions", "args": {}}, )"
                                       R"({"name": "aten::add", "ph": "s", "ts": 1000.5, "tid": 4, "pid": "CPU functions", "id": 0, "cat": "cpu_to_cuda", "args": {}}, )"
                                       R"({"name": "add_kernel", "ph": "f", "ts": 1030, "tid": 0, "pid": "CUDA functions", "id": 0, "cat": "cpu_to_cuda", "args": {}}, )"
                                       R"({"name": "add_kernel", "ph": "X", "ts": 1030, "dur": 5, "tid": 0, "pid": "CUDA functions", "args": {}}, )"
                                       R"({"name": "ncclKernel_AllReduce", "ph": "X", "ts": 1040, "dur": 7, "tid": 0, "pid": "CUDA functions", "args": {}}, )"
                                       R"({"name": "rpc", "ph": "X", "ts": 2000, "dur": 1, "tid": " node_id:1, thread_id:9 ", "pid": "CPU functions", "args": {}}])",
                                       "legacy.json", 2);
  CHECK(t.format == "pytorch-legacy");
  CHECK(lane(t, "cpu thread 4") == std::vector<Ev>{{"aten::add", 1'000'500, 1'020'750}});
  CHECK(lane(t, "gpu 0") == std::vector<Ev>{{"add_kernel", 1'030'000, 1'035'000}});
  CHECK(lane(t, "gpu 0 nccl") == std::vector<Ev>{{"ncclKernel_AllReduce", 1'040'000, 1'047'000}});
  CHECK(lane(t, "cpu thread  node_id:1, thread_id:9 ") == std::vector<Ev>{{"rpc", 2'000'000, 2'001'000}});
  for (const auto& e : t.events) CHECK(e.rank == 2);
  int communication = 0;
  for (const auto& e : t.events) communication += e.communication;
  CHECK(communication == 1);
}

TEST_CASE("timeline::read_trace: Kineto traces with PyTorch 1.8's category names and with today's", "[timeline]") {
  const std::string old_names = R"({"schemaVersion": 1, "traceEvents": [
    {"ph": "X", "cat": "Operator", "name": "ProfilerStep#4", "pid": 10, "tid": 10, "ts": 0, "dur": 900},
    {"ph": "X", "cat": "Operator", "name": "aten::mm", "pid": 10, "tid": 10, "ts": 100, "dur": 50},
    {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 10, "ts": 110, "dur": 8},
    {"ph": "X", "cat": "Kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 130, "dur": 40, "args": {"stream": 7}},
    {"ph": "X", "cat": "Memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 7, "ts": 200, "dur": 4, "args": {"stream": 7}},
    {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler", "pid": "Spans", "tid": "PyTorch Profiler", "ts": 0, "dur": 1000}]})";
  const std::string new_names = R"j({"schemaVersion": 1, "distributedInfo": {"rank": 5, "world_size": 8}, "traceEvents": [
    {"ph": "M", "name": "thread_name", "pid": 10, "tid": 10, "args": {"name": "thread 10 (python)"}},
    {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#4", "pid": 10, "tid": 10, "ts": 0, "dur": 900},
    {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 10, "tid": 10, "ts": 100, "dur": 50},
    {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 10, "tid": 10, "ts": 110, "dur": 8},
    {"ph": "X", "cat": "kernel", "name": "gemm", "pid": 0, "tid": 7, "ts": 130, "dur": 40, "args": {"stream": 7}},
    {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "pid": 0, "tid": 7, "ts": 200, "dur": 4, "args": {"stream": 7}},
    {"ph": "i", "cat": "cpu_instant_event", "name": "[memory]", "pid": 10, "tid": 10, "ts": 300, "s": "t"}]})j";
  const auto a = timeline::parse_trace(old_names, "old.json", 1);
  const auto b = timeline::parse_trace(new_names, "new.json", 1);
  CHECK(a.format == "kineto");
  CHECK(b.format == "kineto");
  CHECK(lane(a, "cpu thread 10") == std::vector<Ev>{{"ProfilerStep#4", 0, 900'000}, {"aten::mm", 100'000, 150'000}});
  CHECK(lane(b, "cpu thread 10 (python)") == std::vector<Ev>{{"aten::mm", 100'000, 150'000}});
  for (const auto* t : {&a, &b}) {
    CHECK(lane(*t, "cuda runtime (thread 10)") == std::vector<Ev>{{"cudaLaunchKernel", 110'000, 118'000}});
    CHECK(lane(*t, "gpu stream 7") == std::vector<Ev>{{"gemm", 130'000, 170'000}});
    CHECK(lane(*t, "gpu stream 7 memcpy") == std::vector<Ev>{{"Memcpy HtoD", 200'000, 204'000}});
    REQUIRE(t->steps.size() == 1);
    CHECK(t->steps[0].step == 4);
    CHECK(t->steps[0].end_ns - t->steps[0].start_ns == 900'000);
  }
  CHECK(a.steps[0].rank == 1);  // no distributedInfo: the default rank
  CHECK(b.steps[0].rank == 5);
  CHECK(b.world_size == 8);
  CHECK(lane(b, "cpu_instant_event") == std::vector<Ev>{{"[memory]", 300'000, 300'000}});
  CHECK(a.events.size() == 5);  // the profiler's own "Trace" span is left out
}

namespace {

// `text` as one gzip member, compressed here with zlib.
std::string gzip(const std::string& text) {
  z_stream z{};
  REQUIRE(deflateInit2(&z, Z_BEST_SPEED, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) == Z_OK);
  std::string out(deflateBound(&z, text.size()) + 32, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

}  // namespace

TEST_CASE("timeline::gunzip: gzip members, concatenated or cut short", "[timeline]") {
  const std::string a = R"([{"ph": "X", "name": "a", "ts": 1, "dur": 2},)", b = R"({"ph": "X", "name": "b", "ts": 5, "dur": 1}])";
  CHECK(timeline::gunzip(gzip(a), "t.json.gz") == a);
  CHECK(timeline::gunzip(a, "t.json") == a);  // plain text as it is
  const std::string both = timeline::gunzip(gzip(a) + gzip(b), "t.json.gz");
  CHECK(both == a + b);
  const auto t = timeline::parse_trace(both, "t.json");
  CHECK(lane(t, "pid 0 / tid 0") == std::vector<Ev>{{"a", 1000, 3000}, {"b", 5000, 6000}});
  const std::string cut = gzip(a + b).substr(0, 20);
  CHECK_THROWS_WITH(timeline::gunzip(cut, "t.json.gz"), Catch::StartsWith("t.json.gz: cannot decompress the trace"));
  std::string corrupt = gzip(a);
  corrupt[12] ^= 0x55;
  CHECK_THROWS_AS(timeline::gunzip(corrupt, "t.json.gz"), plan::InputError);
}

TEST_CASE("timeline::read_trace: a measured trace's memory per rank round-trips, and bad entries are refused", "[timeline]") {
  timeline::Timeline t;
  t.kind = "measured";
  t.world_size = 2;
  t.memory = {{0, 700LL << 20, 400LL << 20, 900LL << 20}, {1, 650LL << 20, 410LL << 20, 800LL << 20}};
  std::ostringstream out;
  timeline::write_chrome_trace(t, out);
  const auto back = timeline::parse_trace(out.str(), "t.json").timeline;
  REQUIRE(back.memory.size() == 2);
  CHECK(back.memory[1].rank == 1);
  CHECK(back.memory[1].peak_bytes == 650LL << 20);
  CHECK(back.memory[1].peak_rss_bytes == 800LL << 20);
  CHECK(back.memory[1].training_bytes() == 240LL << 20);
  CHECK_THAT(error_of("{\"parallax\": {\"world_size\": 1, \"memory\": [{\"rank\": 0, \"peak_bytes\": 5, "
                      "\"baseline_bytes\": 9}]}, \"traceEvents\": []}"),
             Catch::StartsWith("t.json:1:14: parallax.baseline_bytes must be an integer from 0 to 5"));
  // A trace from before tensors were counted: its resident sizes are the figures.
  const auto old = timeline::parse_trace("{\"parallax\": {\"world_size\": 1, \"memory\": [{\"rank\": 0, "
                                         "\"peak_rss_bytes\": 700, \"baseline_rss_bytes\": 400}]}, \"traceEvents\": []}",
                                         "old.json")
                       .timeline;
  REQUIRE(old.memory.size() == 1);
  CHECK(old.memory[0].training_bytes() == 300);
  CHECK_THAT(error_of("{\"parallax\": {\"world_size\": 1, \"memory\": [{\"rank\": 0, \"peak_rss_bytes\": 5, "
                      "\"baseline_rss_bytes\": 9}]}, \"traceEvents\": []}"),
             Catch::StartsWith("t.json:1:14: parallax.baseline_rss_bytes must be an integer from 0 to 5"));
  CHECK_THAT(error_of("{\"parallax\": {\"world_size\": 1, \"memory\": [{\"rank\": 3}]}, \"traceEvents\": []}"),
             Catch::Contains("parallax.rank must be an integer from 0 to 0"));
}

// A Kineto trace's events are read as the parser meets them; what rests on the whole file waits
// for its end: distributedInfo after the events still gives the rank, a thread's name written
// last (as Kineto writes them) still names its lane, and a B/E pair still pairs.
TEST_CASE("timeline::parse_trace: kernels of two GPUs on streams of one id keep a lane each", "[timeline]") {
  // Kineto gives each GPU its own process; their stream ids repeat (one process driving two GPUs).
  const std::string kernel = "{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"sgemm\", \"ts\": 0, \"dur\": 500, ";
  const auto two = timeline::parse_trace("{\"schemaVersion\": 1, \"traceEvents\": [" + kernel +
                                             "\"pid\": 0, \"tid\": 7, \"args\": {\"device\": 0, \"stream\": 7}}, " + kernel +
                                             "\"pid\": 1, \"tid\": 7, \"args\": {\"device\": 1, \"stream\": 7}}]}",
                                         "k.json");
  REQUIRE(two.events.size() == 2);
  CHECK(two.events[0].lane == "gpu 0 stream 7");
  CHECK(two.events[1].lane == "gpu 1 stream 7");
  // One GPU: the lane names as before.
  const auto one = timeline::parse_trace("{\"schemaVersion\": 1, \"traceEvents\": [" + kernel + "\"pid\": 0, \"tid\": 7}]}", "k.json");
  CHECK(one.events.at(0).lane == "gpu stream 7");
}

TEST_CASE("timeline::parse_trace: an empty file, and a rank beyond its world size, are errors", "[timeline]") {
  CHECK(error_of("") == "t.json: an empty file: no trace in it");
  CHECK(error_of(" \n") == "t.json: only white space: no trace in it");
  CHECK_THAT(error_of("{\"distributedInfo\": {\"rank\": 200, \"world_size\": 128}, \"traceEvents\": []}"),
             Catch::Contains("distributedInfo.rank 200 is not a rank of world_size 128"));
}

TEST_CASE("timeline::parse_trace: a Kineto trace's rank and lane names after its events", "[timeline]") {
  const std::string text =
      "{\"schemaVersion\": 1, \"traceEvents\": [\n"
      " {\"ph\": \"X\", \"cat\": \"cpu_op\", \"name\": \"aten::mm\", \"pid\": 7, \"tid\": 9, \"ts\": 10, \"dur\": 5},\n"
      " {\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"ncclKernel_AllReduce\", \"pid\": 0, \"tid\": 3, \"ts\": 12, \"dur\": 4,"
      " \"args\": {\"stream\": 20, \"correlation\": 42}},\n"
      " {\"ph\": \"B\", \"cat\": \"user_annotation\", \"name\": \"ProfilerStep#4\", \"pid\": 7, \"tid\": 9, \"ts\": 8},\n"
      " {\"ph\": \"E\", \"pid\": 7, \"tid\": 9, \"ts\": 30},\n"
      " {\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": 7, \"tid\": 9, \"args\": {\"name\": \"main\"}}],\n"
      " \"distributedInfo\": {\"backend\": \"nccl\", \"rank\": 3, \"world_size\": 8}}";
  const auto t = timeline::parse_trace(text, "k.json");
  CHECK(t.format == "kineto");
  CHECK(t.world_size == 8);
  REQUIRE(t.events.size() == 3);
  for (const auto& e : t.events) CHECK(e.rank == 3);
  CHECK(t.events[0].lane == "cpu main");
  CHECK(t.events[1].lane == "gpu stream 20 nccl");
  CHECK(t.events[1].communication);
  CHECK(t.events[1].correlation == 42);
  CHECK(t.events[2].name == "ProfilerStep#4");
  CHECK(t.events[2].start_ns == 8000);
  CHECK(t.events[2].end_ns == 30000);
  REQUIRE(t.steps.size() == 1);
  CHECK(t.steps[0].rank == 3);
  CHECK(t.steps[0].step == 4);
}
