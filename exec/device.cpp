#include "exec/device.hpp"

#include <stdexcept>
#include <string>

#include "exec/gpu.hpp"
#include "plan/error.hpp"

namespace parallax::exec {

void check_device(const plan::Scenario& s, const std::string& instead) {
  const plan::HardwareProfile& hw = s.hardware;
  const bool cuda = hw.device.kind == plan::DeviceKind::cuda, nccl = hw.collectives == schedule::Collectives::nccl;
  if (cuda != nccl)
    throw plan::InputError(s.where("hardware"),
                           "hardware '" + hw.name + "' has device.kind: " + plan::name(hw.device.kind) + " and collectives: " +
                               schedule::name(hw.collectives) + ", which the executor cannot run: it trains over " +
                               "Gloo on the CPU and over NCCL on CUDA GPUs (the simulator alone can use such a profile)");
  if (!cuda) return;
  std::string why;
  if (!gpu::built_with_cuda()) why = "this Parallax is built with a LibTorch without CUDA (see docs/executor.md, GPUs)";
  else if (gpu::visible_devices() == 0) why = "no GPU is visible on this machine";
  if (why.empty()) return;
  throw plan::InputError(s.where("hardware"), "hardware '" + hw.name + "' trains on CUDA GPUs (device.kind: cuda), but " +
                                                  why + "; " +
                                                  (instead.empty() ? "to run the plan on this machine's CPU, add --set hardware=cpu-host" : instead));
}

torch::Device rank_device(const plan::Scenario& s, int local_rank) {
  if (s.hardware.device.kind != plan::DeviceKind::cuda) return torch::Device(torch::kCPU);
  const int visible = gpu::visible_devices();
  if (local_rank >= visible)
    throw std::runtime_error("local rank " + std::to_string(local_rank) + " needs GPU " + std::to_string(local_rank) +
                             ", but this node shows " + std::to_string(visible) +
                             " (start at most one rank per GPU; CUDA_VISIBLE_DEVICES limits what a process sees)");
  gpu::select(local_rank);
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
}

}  // namespace parallax::exec
