#pragma once
// GPU activity from CUPTI's activity API, as plain data. parse_activity_records() reads the records
// CUPTI hands over (kernels — NCCL's among them —, memcpy, memset, and the external-correlation
// records that tie a GPU activity to the host action that launched it); attribute() names each
// activity's action and puts its GPU timestamps on the host time axis. Both are ordinary
// functions, so tests feed them records they build themselves on machines without a GPU.
// Built only where CMake finds CUPTI's headers (PARALLAX_HAVE_CUPTI).
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "timeline/timeline.hpp"

namespace parallax::profiler {

struct GpuActivity {
  enum class Kind { kernel, memcpy, memset };
  Kind kind = Kind::kernel;
  uint32_t device = 0;
  uint32_t stream = 0;
  uint32_t correlation = 0;  ///< CUPTI's id of the launching API call
  int64_t start_ns = 0;      ///< CUPTI timestamps
  int64_t end_ns = 0;
  std::string name;
  int64_t bytes = 0;
  bool nccl = false;  ///< an NCCL kernel: communication
};

struct ParsedActivity {
  std::vector<GpuActivity> activities;
  std::map<uint32_t, uint64_t> external_of;  ///< correlation id -> the external id pushed around it
  uint64_t unsupported = 0;                  ///< records of other kinds, counted
};

/// `records`: pointers to CUpti_Activity records, as cuptiActivityGetNextRecord returns them.
ParsedActivity parse_activity_records(const std::vector<const void*>& records);

/// A GPU activity on the host axis, named by the action (external id) that launched it.
struct AttributedActivity {
  GpuActivity activity;
  bool attributed = false;
  schedule::Action action;  ///< valid when attributed
  int32_t step = 0;
  int64_t host_start_ns = 0, host_end_ns = 0;
  std::string lane;  ///< "gpu stream 7", "gpu stream 7 nccl", "gpu stream 7 memcpy"
};

/// `actions`: external id -> (action, step) as pushed by the runtime; `cupti_to_host_ns`: host
/// time minus CUPTI time, measured when tracing started. CUPTI's external ids belong to the
/// thread that pushes them, and LibTorch launches a backward's CUDA kernels from autograd's own
/// thread for the device, so those come without one: an activity (not NCCL's) left without an
/// action goes to the span of `by_time` (the actions' CUDA-event spans on the host axis) that
/// holds its start, if any.
std::vector<AttributedActivity> attribute(const ParsedActivity& parsed,
                                          const std::map<uint64_t, std::pair<schedule::Action, int32_t>>& actions,
                                          int64_t cupti_to_host_ns,
                                          const std::vector<timeline::DeviceSpan>& by_time = {});

}  // namespace parallax::profiler
