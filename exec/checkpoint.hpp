#pragma once
// Checkpoints: DIR/step-N/stage-S.pt holds stage S's parameters, its optimizer state and N after
// N optimizer steps. One writer per file: replica 0 of each stage (under DDP every replica holds
// the same parameters and optimizer state, so the others have nothing to add); a sharded stage's
// replicas each write their shards and their optimizer state, DIR/step-N/stage-S-shard-R.pt. A shard is written
// to a temporary name, synced, renamed and its folder synced; DIR/step-N/COMPLETE is written the
// same way, last, by rank 0 once every rank has passed a barrier after its writes. A writer first
// removes the step's marker, so a step whose shards are being replaced never looks complete, and
// a crash at any point leaves the previous complete checkpoint as it was. Resuming loads the
// highest N with COMPLETE.
#include <torch/torch.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "exec/comm.hpp"
#include "plan/plan.hpp"

namespace parallax::exec {

/// DIR/step-N, the folder of one checkpoint.
std::string checkpoint_folder(const std::string& dir, int64_t step);

/// Writes stage `stage`'s shard of step `step` durably (DIR/step-N/stage-S.pt; with `shard` >= 0,
/// one rank's part of a sharded stage, stage-S-shard-R.pt). `before_rename` runs between writing
/// the temporary file and renaming it (tests inject a crash there).
void save_stage(const std::string& dir, int64_t step, int stage, torch::nn::Module& module,
                torch::optim::Optimizer& opt, const std::function<void()>& before_rename = {}, int shard = -1);
/// Writes DIR/step-N/COMPLETE durably; call once every shard of the step is durable. `state`
/// (one line, e.g. the loss scaler's) is kept in the marker for every rank to read on resume, and
/// `layout` (checkpoint_layout's lines) after it.
void mark_complete(const std::string& dir, int64_t step, const std::string& state = {}, const std::string& layout = {});
/// The first file of step N's checkpoint that is not a readable PyTorch archive (a save cut short,
/// a file truncated since), as "PATH: why"; "" when every one reads. Reads each file's index only.
std::string unreadable_shard(const std::string& dir, int64_t step);
/// The `state` line that mark_complete kept for step N ("" if none).
std::string marker_state(const std::string& dir, int64_t step);
/// The layout lines that mark_complete kept for step N ("" for a checkpoint written without them).
std::string marker_layout(const std::string& dir, int64_t step);

/// What a plan's checkpoint files depend on, one "key: value" a line: the model's layers and
/// parameters, the stages and their layers, what is sharded over how many ranks, the optimizer and
/// the precision's masters. A resume under another layout would load shards of other shapes.
std::string checkpoint_layout(const plan::Plan& p);
/// "" when `saved` (marker_layout) is empty or equals `current`; else the first entry that
/// differs, as "KEY: SAVED in the checkpoint, CURRENT in this plan".
std::string layout_difference(const std::string& saved, const std::string& current);

struct CheckpointScan {
  std::optional<int64_t> latest;  ///< the highest step with its COMPLETE marker
  std::vector<int64_t> skipped;   ///< higher steps without it (torn saves), ascending
};
/// The checkpoints in `dir` (none if it does not exist).
CheckpointScan scan_checkpoints(const std::string& dir);

/// Loads stage `stage` of step `step`; throws naming the file when it is missing or not that step.
void load_stage(const std::string& dir, int64_t step, int stage, torch::nn::Module& module, torch::optim::Optimizer& opt,
                int shard = -1);

// --- a job's checkpoint, each rank calling with its own stages ---

/// One of a rank's stages as its checkpoint holds it.
struct StageShard {
  int stage = 0;
  torch::nn::Module* module = nullptr;
  torch::optim::Optimizer* optimizer = nullptr;
  int shard = -1;  ///< a sharded stage (parallel.shard): this rank's place in the shard, its own file
  /// False: a replica holding the same shard writes it (expert parallelism: the expert rank's file
  /// is written by the first replica of that expert rank, and read by every one).
  bool writer = true;
};

/// This rank's part of step `step`'s checkpoint. Replicas of a stage hold the same parameters and
/// optimizer state (DDP averages every gradient before the step), so replica 0 writes each stage
/// (a sharded stage: every replica writes its own shards and optimizer state):
/// one writer per file (`fault` runs before each rename there, where tests inject a crash; once
/// on the other replicas). Every rank then waits at a barrier, so every shard is durable, and
/// only then does rank 0 write the marker, with `state` and `layout` (checkpoint_layout).
void save_job_checkpoint(Communicator& comm, const std::string& dir, int64_t step, int replica,
                         const std::vector<StageShard>& shards, const std::string& state,
                         const std::function<void()>& fault, const std::string& layout = {});

/// What resume_job found: the step to start from (0: none) and the marker's state line.
struct Resumed {
  int64_t step = 0;
  std::string state;
};
/// Loads the newest complete checkpoint on every rank (replicas read the same shard). Rank 0 picks
/// it, says which (`say`), and hands the choice to the others, so all ranks load the same step
/// even when they see the folder at different moments.
Resumed resume_job(Communicator& comm, const std::string& dir, const std::vector<StageShard>& shards,
                   const std::function<void(const std::string&)>& say);

}  // namespace parallax::exec
