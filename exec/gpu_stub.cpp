// The CPU-only build's exec/gpu.hpp: no GPU, and a clear error if one is asked for anyway
// (run_command refuses CUDA profiles before any rank starts, so these throws are a second line).
#include "exec/gpu.hpp"

#include <stdexcept>

namespace parallax::exec::gpu {

namespace {
[[noreturn]] void refuse(const std::string& what) {
  throw std::runtime_error(what + ": this Parallax is built with a LibTorch without CUDA");
}
}  // namespace

bool built_with_cuda() { return false; }
int visible_devices() { return 0; }
void select(int index) { refuse("selecting GPU " + std::to_string(index)); }
std::string device_name(int) { return ""; }
int64_t peak_allocated_bytes(int) { return 0; }
void reset_peak_memory(int) {}
int64_t allocated_bytes(int) { return 0; }
GroupPtr make_nccl_group(const c10::intrusive_ptr<c10d::Store>&, int, int, std::chrono::milliseconds) {
  refuse("creating an NCCL process group");
}
std::unique_ptr<ComputeTimer> make_compute_timer() { return nullptr; }
void keep_busy(double) {}
double device_time_us(const std::function<void()>&, int, int, bool*) { refuse("timing on a GPU"); }
double event_time_us(const std::function<void()>&) { refuse("timing on a GPU"); }

}  // namespace parallax::exec::gpu
