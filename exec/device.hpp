#pragma once
// Where a rank trains: the device its hardware profile names (`device.kind`). A cpu profile
// trains on the host CPU over Gloo; a cuda one on the GPU at the rank's LOCAL_RANK (as torchrun
// and srun number them) over NCCL. The runtime is the same code for both: modules, data and
// buffers are created on the rank's device.
#include <torch/torch.h>

#include "plan/scenario.hpp"

namespace parallax::exec {

/// Refuses, before any rank starts, a cuda profile where this binary's LibTorch has no CUDA or
/// no GPU is visible, and a profile whose `collectives` do not go with its device (Gloo on the
/// CPU, NCCL on CUDA): a plan::InputError that names the profile and what to do instead: `instead`,
/// which a command words in its own flags ("": run's and tune's, add --set hardware=cpu-host).
void check_device(const plan::Scenario& scenario, const std::string& instead = "");

/// The device of the rank numbered `local_rank` on its node; for cuda, also makes it the current
/// GPU. Throws when the node has fewer GPUs than local ranks.
torch::Device rank_device(const plan::Scenario& scenario, int local_rank);

}  // namespace parallax::exec
