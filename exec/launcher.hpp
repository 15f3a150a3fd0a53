#pragma once
// `parallax run --nproc N`: starts N ranks of this program on this host (one process each, with
// RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=127.0.0.1 and a free MASTER_PORT, as torchrun would)
// and watches them. When a rank fails or dies, the others are stopped (SIGTERM, then SIGKILL
// after a grace period) and the job fails; ranks die with the launcher (PR_SET_PDEATHSIG), so no
// orphan survives it.
#include <chrono>
#include <string>
#include <vector>

namespace parallax::exec {

/// A port on 127.0.0.1 that nothing listens on now.
int free_port();

/// The cores each of `nproc` local ranks is bound to: the launcher's allowed CPUs (a user's
/// taskset or cgroup is kept) cut into `nproc` equal runs of consecutive CPUs, rank r the r-th.
/// Why bind: ranks that share cores unbound had their threads (compute, Gloo's, the send
/// watcher) moved between cores and preempting each other's compute; on a 2-vCPU VM a run's
/// undisturbed step then moved by 33-60% from run to run and by 14-25% bound (docs/accuracy.md).
/// Empty (nothing bound) with more ranks than CPUs, or with PARALLAX_CPU_AFFINITY=off (any other
/// value than off or on binds, with a warning).
std::vector<std::vector<int>> rank_cores(int nproc);

/// "ranks bound to cores [0-7] [8-15]", or "ranks not bound to cores".
std::string describe_cores(const std::vector<std::vector<int>>& cores);

/// Runs `argv` (this program's own command line) as `nproc` ranks, each bound to its
/// rank_cores(); returns 0 when all succeed, 1 otherwise, after printing which rank failed and how.
int launch_local(int nproc, const std::vector<std::string>& argv, std::chrono::seconds timeout);

}  // namespace parallax::exec
