#pragma once
// What the executor needs from CUDA, behind a header free of CUDA: the one place that knows
// whether this binary's LibTorch has CUDA. exec/cuda/gpu.cpp implements it against c10's CUDA
// API and ProcessGroupNCCL, linked where CMake finds a CUDA LibTorch (and compiled everywhere
// the CUDA toolkit is, to keep it building: the `parallax_cuda_check` object library);
// exec/gpu_stub.cpp stands in elsewhere and refuses.
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "exec/torch_compat.hpp"

namespace parallax::exec::gpu {

/// True when this binary's LibTorch was built with CUDA and NCCL.
bool built_with_cuda();
/// GPUs this process can see (0 without CUDA).
int visible_devices();
/// Makes GPU `index` the current device of the calling thread (kernels, NCCL, allocations).
void select(int index);
/// The GPU's name as CUDA reports it ("NVIDIA H100 80GB HBM3"); "" without CUDA.
std::string device_name(int index);
/// The most bytes LibTorch's CUDA caching allocator has held allocated on GPU `index` at once
/// since the last reset_peak_memory (tensors only, not the allocator's cached free blocks).
int64_t peak_allocated_bytes(int index);
void reset_peak_memory(int index);
/// The bytes LibTorch's CUDA caching allocator has allocated on GPU `index` now (tensors only).
int64_t allocated_bytes(int index);
/// An NCCL process group of `size` ranks meeting through `store`. NCCL matches point-to-point
/// messages by order per peer, not by tag: the schedule must post them in the same order on
/// both sides. Collectives and point-to-point run on NCCL's own streams; a work's wait() makes
/// the calling thread's current stream wait for it (compute and communication overlap, ordered
/// by CUDA events).
GroupPtr make_nccl_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                         std::chrono::milliseconds timeout);

/// Times a rank's compute actions on the GPU with CUDA events on the current stream: a host span
/// around an action ends when its kernels are queued, the events when they are done. No host
/// sync between start_step() and collect().
class ComputeTimer {
 public:
  virtual ~ComputeTimer() = default;
  /// Anchors the step: records an event now, `host_now_ns` being the host clock at that moment.
  /// Call with the device idle (after a synchronize), so that the event runs at once.
  virtual void start_step(int64_t host_now_ns) = 0;
  /// Around one action's kernel launches.
  virtual void begin() = 0;
  virtual void end() = 0;
  /// After the step's synchronize: each begin/end pair's interval on the device, on the host
  /// clock (anchor + elapsed event time), in the order they were recorded. Clears the step.
  virtual std::vector<std::pair<int64_t, int64_t>> collect() = 0;
};

/// Queues a kernel on the current stream that keeps the GPU busy for at least `us` microseconds
/// (ATen's spin kernel, at::cuda::sleep, counted at 2 GHz: longer on a slower clock), so that
/// what the host launches meanwhile queues behind it and then runs back to back at the device's
/// own pace. A no-op without CUDA.
void keep_busy(double us);

/// Microseconds one call of `work` takes on the current GPU, its host launches apart: `calls` calls
/// captured once in a CUDA graph on a side stream and the graph replayed `replays` times between
/// two events, after one call outside the capture (cuBLAS's handle and workspace) and one replay.
/// Where the capture fails (an operation that cannot be captured), the calls are timed eagerly
/// between events instead and `*graphed` says so. Throws without CUDA.
double device_time_us(const std::function<void()>& work, int calls, int replays, bool* graphed = nullptr);
/// Microseconds between two events around `work` on the current stream, after a synchronize:
/// for calls long enough that their launches do not set the pace (attention's forward and
/// backward). Throws without CUDA.
double event_time_us(const std::function<void()>& work);

/// A timer for the current GPU (nullptr without CUDA).
std::unique_ptr<ComputeTimer> make_compute_timer();

}  // namespace parallax::exec::gpu
