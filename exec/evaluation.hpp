#pragma once
// Test-set accuracy after training: forward-only through the pipeline, each replica on its share
// of the test set, micro-batch by micro-batch, stage to stage over the same process groups the
// training used (on tags of their own). The runtime calls it once its steps are done.
#include <cstdint>
#include <map>

#include <torch/torch.h>

#include "exec/comm.hpp"
#include "exec/data.hpp"
#include "exec/model.hpp"
#include "plan/plan.hpp"

namespace parallax::exec {

/// Adds this rank's correct predictions and tested samples (last stage only) to the counts.
/// `stages`: this rank's stages by index. Every rank of the job must call it.
void evaluate_test_set(const plan::Plan& job, const DataSource& data, int replica, const std::map<int, Stage*>& stages,
                       torch::Device device, torch::ScalarType dtype, Communicator& comm, int64_t* correct,
                       int64_t* tested);

}  // namespace parallax::exec
