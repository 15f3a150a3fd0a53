#include "profiler/cupti_records.hpp"

#include <cupti_activity.h>

namespace parallax::profiler {
namespace {

bool is_nccl(const std::string& name) { return name.find("nccl") != std::string::npos; }

}  // namespace

ParsedActivity parse_activity_records(const std::vector<const void*>& records) {
  ParsedActivity out;
  for (const void* raw : records) {
    const auto* record = static_cast<const CUpti_Activity*>(raw);
    switch (record->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
        GpuActivity a;
        a.kind = GpuActivity::Kind::kernel;
        a.device = k->deviceId;
        a.stream = k->streamId;
        a.correlation = k->correlationId;
        a.start_ns = static_cast<int64_t>(k->start);
        a.end_ns = static_cast<int64_t>(k->end);
        a.name = k->name ? k->name : "";
        a.nccl = is_nccl(a.name);
        out.activities.push_back(std::move(a));
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
        out.activities.push_back({GpuActivity::Kind::memcpy, m->deviceId, m->streamId, m->correlationId,
                                  static_cast<int64_t>(m->start), static_cast<int64_t>(m->end), "memcpy",
                                  static_cast<int64_t>(m->bytes), false});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
        out.activities.push_back({GpuActivity::Kind::memset, m->deviceId, m->streamId, m->correlationId,
                                  static_cast<int64_t>(m->start), static_cast<int64_t>(m->end), "memset",
                                  static_cast<int64_t>(m->bytes), false});
        break;
      }
      case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
        const auto* c = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(record);
        out.external_of[c->correlationId] = c->externalId;
        break;
      }
      default: ++out.unsupported; break;
    }
  }
  return out;
}

std::vector<AttributedActivity> attribute(const ParsedActivity& parsed,
                                          const std::map<uint64_t, std::pair<schedule::Action, int32_t>>& actions,
                                          int64_t cupti_to_host_ns, const std::vector<timeline::DeviceSpan>& by_time) {
  std::vector<AttributedActivity> out;
  for (const GpuActivity& a : parsed.activities) {
    AttributedActivity x;
    x.activity = a;
    x.host_start_ns = a.start_ns + cupti_to_host_ns;
    x.host_end_ns = a.end_ns + cupti_to_host_ns;
    x.lane = "gpu stream " + std::to_string(a.stream) +
             (a.nccl ? " nccl" : a.kind == GpuActivity::Kind::kernel ? "" : " memcpy");
    if (auto ext = parsed.external_of.find(a.correlation); ext != parsed.external_of.end()) {
      if (auto act = actions.find(ext->second); act != actions.end()) {
        x.attributed = true;
        x.action = act->second.first;
        x.step = act->second.second;
      }
    }
    for (size_t i = 0; i < by_time.size() && !x.attributed && !a.nccl; ++i) {
      const timeline::DeviceSpan& t = by_time[i];
      if (x.host_start_ns >= t.start.count_ns() && x.host_start_ns < t.end.count_ns()) {
        x.attributed = true;
        x.action = t.action;
        x.step = t.step;
      }
    }
    out.push_back(std::move(x));
  }
  return out;
}

}  // namespace parallax::profiler
