#pragma once
// The one place that knows which LibTorch line this build compiles against: Debian's 1.13 (CPU)
// or a pip torch 2.x (with CUDA where it has it). Everything else in exec/ is written once, in
// the terms defined here:
// - the process group type: in 2.x ProcessGroupGloo and ProcessGroupNCCL derive from
//   c10d::Backend, and an intrusive_ptr<ProcessGroup> no longer converts from them; Backend keeps
//   send, recv, allreduce, barrier and broadcast, which is all the executor uses;
// - autocast: the *_gpu_* / *_cpu_* calls are deprecated wrappers from 2.4 on, replaced by calls
//   that take the device type;
// - waiting for a collective or point-to-point work (see wait_work);
// - an allocator of our own (AllocatorBase).
#include <ATen/autocast_mode.h>
#include <c10/core/Allocator.h>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <torch/version.h>

#include <chrono>

#if TORCH_VERSION_MAJOR >= 2
#include <torch/csrc/distributed/c10d/Backend.hpp>
#else
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#endif

namespace parallax::exec {

#if TORCH_VERSION_MAJOR >= 2
using Group = c10d::Backend;
#else
using Group = c10d::ProcessGroup;
#endif
using GroupPtr = c10::intrusive_ptr<Group>;

namespace autocast {

#if TORCH_VERSION_MAJOR >= 2
inline bool enabled(c10::DeviceType d) { return at::autocast::is_autocast_enabled(d); }
inline void set_enabled(c10::DeviceType d, bool on) { at::autocast::set_autocast_enabled(d, on); }
inline void set_dtype(c10::DeviceType d, c10::ScalarType t) { at::autocast::set_autocast_dtype(d, t); }
#else
inline bool enabled(c10::DeviceType d) {
  return d == c10::kCUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
}
inline void set_enabled(c10::DeviceType d, bool on) {
  if (d == c10::kCUDA) at::autocast::set_enabled(on);
  else at::autocast::set_cpu_enabled(on);
}
inline void set_dtype(c10::DeviceType d, c10::ScalarType t) {
  if (d == c10::kCUDA) at::autocast::set_autocast_gpu_dtype(t);
  else at::autocast::set_autocast_cpu_dtype(t);
}
#endif

}  // namespace autocast

/// c10::Allocator as both lines declare it: allocate() is const in 1.13 and not in 2.x, where
/// copy_data() must be defined too. A derived allocator defines allocate_bytes() instead.
struct AllocatorBase : c10::Allocator {
#if TORCH_VERSION_MAJOR >= 2
  c10::DataPtr allocate(size_t n) final { return allocate_bytes(n); }
  void copy_data(void* dest, const void* src, std::size_t count) const final { default_copy_data(dest, src, count); }
#else
  c10::DataPtr allocate(size_t n) const final { return allocate_bytes(n); }
#endif
  virtual c10::DataPtr allocate_bytes(size_t n) const = 0;
};

/// Waits for `work`. On Gloo the calling thread blocks until the work is done or `timeout`
/// passes. On NCCL the calling thread's current CUDA stream is made to wait for the work instead
/// (no host block: what follows on that stream runs after it); the group's own timeout and
/// watchdog abort a work that never completes. WorkNCCL::wait(timeout) with any other timeout
/// makes the host poll every millisecond until the GPU is done, in 1.13 and 2.x alike, which would
/// serialize the host with the device at every receive.
inline void wait_work(c10d::Work& work, bool nccl, std::chrono::milliseconds timeout) {
  if (nccl) work.wait();
  else work.wait(timeout);
}

}  // namespace parallax::exec
