#pragma once
// Communication through c10d: a TCPStore rendezvous, one Gloo process group for all ranks and one
// per pipeline stage across its replicas (the DDP groups). Every wait has a deadline and, when it
// passes or a peer vanishes, fails with the rank, the action and the peer it was waiting on, so a
// dead or hung rank stops the job instead of hanging it.
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/torch.h>

#include <chrono>
#include <string>
#include <vector>

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
  Communicator(const plan::Plan& plan, const LaunchInfo& launch);
  /// The store and the world group only (calibration).
  explicit Communicator(const LaunchInfo& launch);

  using Work = c10::intrusive_ptr<c10d::Work>;
  Work send(torch::Tensor& t, int dst, int tag);
  Work recv(torch::Tensor& t, int src, int tag);
  /// The DDP group of `stage`, or nullptr without data parallelism.
  c10d::ProcessGroup* stage_group(int stage) const;
  /// Waits for `work`; on timeout or a lost peer throws naming `what` (e.g. "1RECV_F3 from rank 0").
  void wait(const Work& work, const std::string& what) const;
  void barrier(const std::string& what);
  /// Round trips to rank 0's clock through the store (rank 0 answers every rank and gets none).
  std::vector<profiler::RoundTrip> clock_round_trips(const std::string& round, int count);
  /// Rank 0's `value` under `key` of the store, on every rank (the others' `value` is ignored).
  std::string share_from_rank0(const std::string& key, const std::string& value);
  /// Every rank hands in `mine`; rank 0 gets all of them in rank order, the others nothing.
  std::vector<std::string> gather_to_rank0(const std::string& mine);
  int rank() const { return launch_.rank; }
  c10d::ProcessGroup& world() const { return *world_; }
  c10d::Store& store() const { return *store_; }
  std::chrono::seconds timeout() const { return launch_.timeout; }

 private:
  LaunchInfo launch_;
  c10::intrusive_ptr<c10d::Store> store_;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> world_;
  std::vector<c10::intrusive_ptr<c10d::ProcessGroupGloo>> stage_groups_;  // indexed by stage
};

}  // namespace parallax::exec
