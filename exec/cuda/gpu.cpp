// exec/gpu.hpp on CUDA: linked where the LibTorch has CUDA; compiled in every build that finds
// the CUDA toolkit and LibTorch's ProcessGroupNCCL header (the `parallax_cuda_check` object
// library), so that it keeps compiling on machines without a GPU.
#include <c10/cuda/CUDAFunctions.h>
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "exec/gpu.hpp"

namespace parallax::exec::gpu {

bool built_with_cuda() { return true; }

int visible_devices() { return static_cast<int>(c10::cuda::device_count()); }

void select(int index) { c10::cuda::set_device(static_cast<c10::DeviceIndex>(index)); }

c10::intrusive_ptr<c10d::ProcessGroup> make_nccl_group(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                                       int size, std::chrono::milliseconds timeout) {
  // NCCL's own environment (NCCL_SOCKET_IFNAME, NCCL_IB_HCA, NCCL_DEBUG, NCCL_ALGO, ...) reaches
  // NCCL unchanged: ProcessGroupNCCL reads none of it and passes nothing over it.
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, options);
}

}  // namespace parallax::exec::gpu
