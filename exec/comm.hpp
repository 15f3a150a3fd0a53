#pragma once
// Communication through c10d: a TCPStore rendezvous, one process group for all ranks and one
// per pipeline stage across its replicas (the DDP groups): the profile's `collectives`, Gloo
// (on the CPU) or NCCL (on CUDA GPUs, exec/gpu.hpp). Every wait has a deadline and, when it
// passes or a peer vanishes, fails with the rank, the action and the peer it was waiting on, so a
// dead or hung rank stops the job instead of hanging it. A failed wait also says which rank the
// job lost, when the ranks' reports and heartbeats tell (see liveness.hpp).
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/torch.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "exec/liveness.hpp"
#include "exec/torch_compat.hpp"
#include "plan/plan.hpp"
#include "profiler/clock_sync.hpp"

namespace parallax::exec {

struct LaunchInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::chrono::seconds timeout{60};

  /// From RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT (as torchrun and srun set them).
  static bool from_environment(LaunchInfo* out);
};

class Communicator {
 public:
  /// NCCL groups when the plan's profile says `collectives: nccl`, else Gloo.
  Communicator(const plan::Plan& plan, const LaunchInfo& launch);
  /// The store and the world group only (calibration: Gloo).
  explicit Communicator(const LaunchInfo& launch, bool nccl = false);

  using Work = c10::intrusive_ptr<c10d::Work>;
  /// Posts a send (receive); a peer already lost makes it throw at once, naming `what` and whom.
  Work send(torch::Tensor& t, int dst, int tag, const std::string& what);
  Work recv(torch::Tensor& t, int src, int tag, const std::string& what);
  /// The DDP group of `stage`, or nullptr without data parallelism.
  Group* stage_group(int stage) const;
  /// The global ranks of `stage`'s DDP group (every replica of the stage).
  const std::vector<int>& stage_group_ranks(int stage) const { return stage_ranks_.at(stage); }
  /// With parallel.expert > 1 (exec/moe.hpp): `stage`'s expert group, the `expert` neighbouring
  /// replicas this rank's replica is one of (Megatron-core's order: replica r is expert rank
  /// r % expert), and its expert-data-parallel group, the replicas holding the same experts, which
  /// reduce their gradients (nullptr when this rank alone holds them). Else nullptr.
  struct ExpertGroups {
    int rank = 0;  ///< this rank's place in `experts`: its expert rank
    GroupPtr experts, expert_data;
    std::vector<int> expert_ranks, expert_data_ranks;  ///< global ranks, in group order
  };
  const ExpertGroups* expert_groups(int stage) const;
  /// Waits for `work`, an operation with `peers` (empty: every rank); on timeout or a lost peer
  /// throws naming `what` (e.g. "1RECV_F3 from rank 0") and the rank the job lost, if the reports tell.
  void wait(const Work& work, const std::string& what, const std::vector<int>& peers) const;
  /// The same, with every other rank as a peer (collectives of the world group).
  void wait(const Work& work, const std::string& what) const;
  /// Where this rank is, for a peer's message should it wait in vain (Liveness::at); no-ops for
  /// calibration's own exchanges, which have no liveness.
  void set_actions(std::vector<std::string> actions) {
    if (liveness_) liveness_->set_actions(std::move(actions));
  }
  void at(int64_t step, int action) const noexcept {
    if (liveness_) liveness_->at(step, action);
  }
  /// Leaves this rank's failure in the store for its peers to read (see liveness.hpp); never
  /// throws and returns within about 2 s.
  void report_failure(const std::string& message) const noexcept;
  void barrier(const std::string& what);
  /// Round trips to rank 0's clock through the store (rank 0 answers every rank and gets none).
  std::vector<profiler::RoundTrip> clock_round_trips(const std::string& round, int count);
  /// Rank 0's `value` under `key` of the store, on every rank (the others' `value` is ignored).
  std::string share_from_rank0(const std::string& key, const std::string& value);
  /// Every rank hands in `mine`; rank 0 gets all of them in rank order, the others nothing.
  std::vector<std::string> gather_to_rank0(const std::string& mine);
  int rank() const { return launch_.rank; }
  Group& world() const { return *world_; }
  c10d::Store& store() const { return *store_; }
  std::chrono::seconds timeout() const { return launch_.timeout; }

 private:
  /// Throws "rank R DOING: REASON; lost rank 2 (...)", the last part from the peers' reports
  /// (`peers` empty: every rank's).
  [[noreturn]] void fail(const std::string& doing, const std::exception& e, const std::vector<int>& peers) const;

  LaunchInfo launch_;
  c10::intrusive_ptr<c10d::Store> store_;
  bool nccl_ = false;
  GroupPtr world_;
  std::vector<GroupPtr> stage_groups_;  // indexed by stage
  std::vector<std::vector<int>> stage_ranks_;                              // indexed by stage
  std::vector<std::unique_ptr<ExpertGroups>> expert_groups_;  // indexed by stage; null off this rank
  std::unique_ptr<Liveness> liveness_;  // with a plan only (not for calibration's own exchanges)
};

}  // namespace parallax::exec
