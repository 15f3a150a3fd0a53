#pragma once
// Which rank the job lost, for the messages of the ranks that remain. Gloo's errors say only that
// a connection closed or a wait timed out, not who is gone, and with ranks started by an external
// launcher (torchrun, srun, by hand) nobody else watches the processes. So, through the job's
// c10d store, on a connection of their own:
//
// - every rank bumps a heartbeat counter every 250 ms from a thread of its own;
// - a rank that fails leaves a report (whom it found lost, and its message) before it exits;
// - a rank whose wait failed looks at the peers it waited on: one with a report failed first and
//   names whom it lost in turn; one whose heartbeat still moves is alive (waiting on someone
//   else); one with neither stopped without a word (killed, crashed or hung): that is the rank
//   the job lost, and the verdict is posted for everyone;
// - each heartbeat also fetches that verdict, so a rank that fails after rank 0 (which hosts the
//   store) has gone still knows whom the job lost.
//
// So when rank 2 is killed, rank 1, which only ever waits on ranks 0 and 3, still says that rank 2
// was lost. Every look-up after a failure is bounded by a short deadline, since the store lives in
// rank 0, which may be the rank that hangs.
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace parallax::exec {

class Liveness {
 public:
  /// Connects to the store at `master_addr:master_port` and starts the heartbeat.
  Liveness(const std::string& master_addr, int master_port, int rank, int world_size);
  /// Stops the heartbeat (without waiting for a store that may hang).
  ~Liveness();
  Liveness(const Liveness&) = delete;
  Liveness& operator=(const Liveness&) = delete;

  /// After a failed wait on `peers`: "lost rank 2 (...)", "rank 3 failed first, having lost
  /// rank 2", ... or "" when nothing is known. Takes up to about 2 s (a silent peer is watched
  /// for 1.5 s before it counts as lost).
  std::string explain(const std::vector<int>& peers);
  /// Where this rank is, posted with the next heartbeat, for a peer whose wait failed to say where
  /// a live rank stands ("at 0F3 of step 3"): a rank stuck in its own work (a hang) beats on, and
  /// only its place tells it from one waiting on someone else. `actions`: the rank's action ids in
  /// schedule order, set once; then at(step, i) before action i of `step` (0-based), and
  /// at(step, actions.size()) when the step's actions are done. Cheap: two atomic stores.
  void set_actions(std::vector<std::string> actions);
  void at(int64_t step, int action) noexcept;
  /// The step this rank is in (0-based; -1 before its first).
  int64_t step() const noexcept;
  /// Leaves this rank's failure for the others. Rank 0, whose process holds the store, then waits
  /// up to 1 s for the others' reports, so those failing because it exits can still read them.
  /// Never throws.
  void report(const std::string& message) noexcept;

  struct State;  // shared with the heartbeat thread, which may outlive this object

 private:
  std::shared_ptr<State> state_;
};

}  // namespace parallax::exec
