// exec/gpu.hpp on CUDA: linked where the LibTorch has CUDA; compiled in every build that finds
// the CUDA toolkit and LibTorch's ProcessGroupNCCL header (the `parallax_cuda_check` object
// library), so that it keeps compiling on machines without a GPU.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAGraph.h>
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "exec/gpu.hpp"

namespace parallax::exec::gpu {

bool built_with_cuda() { return true; }

int visible_devices() { return static_cast<int>(c10::cuda::device_count()); }

void select(int index) { c10::cuda::set_device(static_cast<c10::DeviceIndex>(index)); }

std::string device_name(int index) {
  cudaDeviceProp prop{};
  C10_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  return prop.name;
}

namespace {
// The caching allocator's statistics exist once CUDA is initialised for the device, which
// LibTorch does lazily at the first CUDA tensor ("Invalid device argument: did you call init?"
// before it): one tiny tensor makes sure.
void touch_allocator(int index) {
  (void)at::empty({1}, at::TensorOptions().device(at::kCUDA, static_cast<c10::DeviceIndex>(index)));
}
}  // namespace

int64_t peak_allocated_bytes(int index) {
  touch_allocator(index);
  namespace alloc = c10::cuda::CUDACachingAllocator;
  const auto stats = alloc::getDeviceStats(static_cast<c10::DeviceIndex>(index));
  return stats.allocated_bytes[0].peak;  // [0]: StatType::AGGREGATE, small and large pools together
}

int64_t allocated_bytes(int index) {
  touch_allocator(index);
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(index));
  return stats.allocated_bytes[0].current;
}

void reset_peak_memory(int index) {
  touch_allocator(index);
  c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(index));
}

GroupPtr make_nccl_group(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
                         std::chrono::milliseconds timeout) {
  // NCCL's own environment (NCCL_SOCKET_IFNAME, NCCL_IB_HCA, NCCL_DEBUG, NCCL_ALGO, ...) reaches
  // NCCL unchanged: ProcessGroupNCCL reads none of it and passes nothing over it.
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
}

namespace {

// Events are created once and reused from step to step (cudaEventCreate is not free); timing
// events, since cudaEventElapsedTime needs them.
class CudaComputeTimer final : public ComputeTimer {
 public:
  ~CudaComputeTimer() override {
    for (cudaEvent_t e : pool_) cudaEventDestroy(e);
  }

  void start_step(int64_t host_now_ns) override {
    used_ = 0;
    anchor_host_ns_ = host_now_ns;
    anchor_ = record();
  }
  void begin() override { pairs_.emplace_back(record(), nullptr); }
  void end() override { pairs_.back().second = record(); }

  std::vector<std::pair<int64_t, int64_t>> collect() override {
    std::vector<std::pair<int64_t, int64_t>> out;
    out.reserve(pairs_.size());
    for (const auto& [b, e] : pairs_) out.emplace_back(on_host(b), on_host(e));
    pairs_.clear();
    return out;
  }

 private:
  cudaEvent_t record() {
    if (used_ == pool_.size()) {
      cudaEvent_t e = nullptr;
      C10_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDefault));
      pool_.push_back(e);
    }
    cudaEvent_t e = pool_[used_++];
    C10_CUDA_CHECK(cudaEventRecord(e, c10::cuda::getCurrentCUDAStream().stream()));
    return e;
  }

  int64_t on_host(cudaEvent_t e) const {
    float ms = 0;
    C10_CUDA_CHECK(cudaEventElapsedTime(&ms, anchor_, e));  // ~0.5 us resolution
    return anchor_host_ns_ + static_cast<int64_t>(static_cast<double>(ms) * 1e6);
  }

  std::vector<cudaEvent_t> pool_;
  size_t used_ = 0;
  cudaEvent_t anchor_ = nullptr;
  int64_t anchor_host_ns_ = 0;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> pairs_;
};

}  // namespace

std::unique_ptr<ComputeTimer> make_compute_timer() { return std::make_unique<CudaComputeTimer>(); }

namespace {
// Two timing events around `body` on the current stream, in microseconds.
double between_events(const std::function<void()>& body) {
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream().stream();
  cudaEvent_t start = nullptr, stop = nullptr;
  C10_CUDA_CHECK(cudaEventCreate(&start));
  C10_CUDA_CHECK(cudaEventCreate(&stop));
  C10_CUDA_CHECK(cudaEventRecord(start, stream));
  body();
  C10_CUDA_CHECK(cudaEventRecord(stop, stream));
  C10_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  C10_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return static_cast<double>(ms) * 1e3;
}
}  // namespace

double event_time_us(const std::function<void()>& work) {
  c10::cuda::device_synchronize();
  return between_events(work);
}

double device_time_us(const std::function<void()>& work, int calls, int replays, bool* graphed) {
  // A graph is captured on a stream other than the legacy default one.
  c10::cuda::CUDAStreamGuard guard(c10::cuda::getStreamFromPool());
  work();
  c10::cuda::device_synchronize();
  try {
    at::cuda::CUDAGraph graph;
    graph.capture_begin();
    for (int i = 0; i < calls; ++i) work();
    graph.capture_end();
    graph.replay();
    const double us = between_events([&] {
      for (int r = 0; r < replays; ++r) graph.replay();
    });
    if (graphed) *graphed = true;
    return us / (static_cast<double>(calls) * replays);
  } catch (const std::exception&) {
    (void)cudaGetLastError();  // the failed capture's error, not to be reported by the next call
  }
  if (graphed) *graphed = false;
  c10::cuda::device_synchronize();
  const double us = between_events([&] {
    for (int i = 0; i < calls * replays; ++i) work();
  });
  return us / (static_cast<double>(calls) * replays);
}

void keep_busy(double us) {
  if (us > 0) at::cuda::sleep(static_cast<int64_t>(us * 2000.0));  // cycles at 2 GHz
}

}  // namespace parallax::exec::gpu
