// CUPTI's activity parsing, fed records built here: no GPU needed.
#include <cupti_activity.h>

#include <catch2/catch.hpp>
#include <cstring>

#include "profiler/cupti_records.hpp"
#include "profiler/cupti_tracer.hpp"

using namespace parallax;

namespace {

template <class T>
T zeroed(CUpti_ActivityKind kind) {
  T record;
  std::memset(&record, 0, sizeof record);
  record.kind = kind;
  return record;
}

}  // namespace

TEST_CASE("profiler::parse_activity_records: kernels, NCCL, memcpy and correlations from synthetic records", "[profiler]") {
  auto gemm = zeroed<CUpti_ActivityKernel10>(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  gemm.start = 1000;
  gemm.end = 3000;
  gemm.streamId = 7;
  gemm.correlationId = 11;
  gemm.name = "ampere_sgemm_128x64_nn";
  auto nccl = zeroed<CUpti_ActivityKernel10>(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  nccl.start = 2500;
  nccl.end = 9000;
  nccl.streamId = 84;
  nccl.correlationId = 12;
  nccl.name = "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t";
  auto copy = zeroed<CUpti_ActivityMemcpy6>(CUPTI_ACTIVITY_KIND_MEMCPY);
  copy.start = 100;
  copy.end = 400;
  copy.bytes = 4096;
  copy.streamId = 7;
  copy.correlationId = 13;
  auto link_gemm = zeroed<CUpti_ActivityExternalCorrelation>(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION);
  link_gemm.externalId = 500;
  link_gemm.correlationId = 11;
  auto link_nccl = zeroed<CUpti_ActivityExternalCorrelation>(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION);
  link_nccl.externalId = 501;
  link_nccl.correlationId = 12;
  auto other = zeroed<CUpti_ActivityMemcpy6>(CUPTI_ACTIVITY_KIND_DRIVER);

  const auto parsed = profiler::parse_activity_records({&gemm, &nccl, &copy, &link_gemm, &link_nccl, &other});
  REQUIRE(parsed.activities.size() == 3);
  CHECK(parsed.unsupported == 1);
  CHECK(parsed.activities[0].name == "ampere_sgemm_128x64_nn");
  CHECK_FALSE(parsed.activities[0].nccl);
  CHECK(parsed.activities[1].nccl);
  CHECK(parsed.activities[2].kind == profiler::GpuActivity::Kind::memcpy);
  CHECK(parsed.activities[2].bytes == 4096);
  CHECK(parsed.external_of.at(11) == 500);

  // Action 500 is rank's forward of micro-batch 3 on stage 1; 501 its gradient send.
  const std::map<uint64_t, std::pair<schedule::Action, int32_t>> actions = {
      {500, {{schedule::ActionKind::F, 1, 3}, 2}}, {501, {{schedule::ActionKind::SEND_B, 1, 3}, 2}}};
  const auto spans = profiler::attribute(parsed, actions, 1'000'000);
  REQUIRE(spans.size() == 3);
  CHECK(spans[0].attributed);
  CHECK(spans[0].action.id() == "1F3");
  CHECK(spans[0].step == 2);
  CHECK(spans[0].host_start_ns == 1'001'000);
  CHECK(spans[0].host_end_ns == 1'003'000);
  CHECK(spans[0].lane == "gpu stream 7");
  CHECK(spans[1].action.id() == "1SEND_B3");
  CHECK(spans[1].lane == "gpu stream 84 nccl");
  CHECK_FALSE(spans[2].attributed);  // the memcpy's launch had no action around it
  CHECK(spans[2].lane == "gpu stream 7 memcpy");
}

TEST_CASE("profiler::attribute: activity without an external id goes to the CUDA-event span holding its start", "[profiler]") {
  // Autograd's device thread launched these: no external correlation record ties them to B.
  profiler::ParsedActivity parsed;
  profiler::GpuActivity bwd;
  bwd.start_ns = 2000;
  bwd.end_ns = 2500;
  bwd.correlation = 21;
  profiler::GpuActivity nccl = bwd;
  nccl.nccl = true;
  profiler::GpuActivity late = bwd;
  late.start_ns = 9000;
  late.end_ns = 9100;
  parsed.activities = {bwd, nccl, late};
  // The B span on the host axis (cupti_to_host_ns 1,000,000 below): [1,001,500, 1,003,000).
  timeline::DeviceSpan span;
  span.action = {schedule::ActionKind::B, 0, 5};
  span.step = 4;
  span.start = plan::Time::ns(1'001'500);
  span.end = plan::Time::ns(1'003'000);
  const auto spans = profiler::attribute(parsed, {}, 1'000'000, {span});
  REQUIRE(spans.size() == 3);
  CHECK(spans[0].attributed);
  CHECK(spans[0].action.id() == "0B5");
  CHECK(spans[0].step == 4);
  CHECK_FALSE(spans[1].attributed);  // NCCL's kernels are communication, never a compute action's
  CHECK_FALSE(spans[2].attributed);  // outside every span
  CHECK(profiler::attribute(parsed, {}, 1'000'000).front().attributed == false);  // no spans: as before
}

TEST_CASE("profiler::CuptiTracer: without a driver or device it says why and gives nothing", "[profiler]") {
  const std::string why = profiler::cupti_unavailable_reason();
  if (why.empty()) {
    WARN("a CUDA device is present: the no-device path is not exercised here");
    return;
  }
  CHECK(profiler::CuptiTracer::start(/*quiet=*/true) == nullptr);
  CHECK_THAT(why, Catch::Contains("CUDA"));
}
