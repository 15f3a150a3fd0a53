#pragma once
// Checkpoints: DIR/step-N/stage-S.pt holds stage S's parameters, its optimizer state and N; each
// file is written to a temporary name and renamed, and DIR/step-N/COMPLETE appears (same way)
// only after every rank has written its stages, so a crash never leaves a checkpoint that looks
// complete but is torn. Resuming loads the highest N with COMPLETE.
#include <torch/torch.h>

#include <optional>
#include <string>

namespace parallax::exec {

void save_stage(const std::string& dir, int64_t step, int stage, torch::nn::Module& module, torch::optim::Optimizer& opt);
void mark_complete(const std::string& dir, int64_t step);
/// The latest complete checkpoint's step, if any.
std::optional<int64_t> latest_checkpoint(const std::string& dir);
void load_stage(const std::string& dir, int64_t step, int stage, torch::nn::Module& module, torch::optim::Optimizer& opt);

}  // namespace parallax::exec
