#pragma once
// The GPU activity of a rank's actions: the kernels, copies and NCCL work each action launched,
// on the host's time axis. Recorded with CUPTI where Parallax was built with it and the rank has a
// GPU; elsewhere there is none, and the runtime asks nothing of it (start gives null). The only
// place that knows whether CUPTI was built in: the runtime itself has no #ifdef for it.
#include <cstdint>
#include <memory>
#include <vector>

#include "schedule/schedule.hpp"
#include "timeline/timeline.hpp"

namespace parallax::exec {

class GpuActivity {
 public:
  /// The recorder for `rank`, or null without CUPTI, without a GPU, or with PARALLAX_CUPTI=0 (a
  /// run then times its actions as calibrate times layers: validate on a GPU, bench/gpu_check.sh).
  /// Rank 0 says once why there is none.
  static std::unique_ptr<GpuActivity> start(int rank);
  virtual ~GpuActivity() = default;

  /// Work launched from here on, until leave(), belongs to action `index` of step `step`.
  virtual void enter(int64_t step, size_t index, size_t actions_per_step) = 0;
  virtual void leave() = 0;
  /// This step's activity, attributed to the actions that launched it; what autograd's thread
  /// launched (B's kernels) by the compute actions' CUDA-event spans `timed`. Appended to `out`.
  virtual void collect(int64_t step, int rank, const std::vector<schedule::Action>& actions,
                       const std::vector<timeline::DeviceSpan>& timed, std::vector<timeline::DeviceSpan>* out) = 0;
};

}  // namespace parallax::exec
