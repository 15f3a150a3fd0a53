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

/// Runs `argv` (this program's own command line) as `nproc` ranks; returns 0 when all succeed,
/// 1 otherwise, after printing which rank failed and how.
int launch_local(int nproc, const std::vector<std::string>& argv, std::chrono::seconds timeout);

}  // namespace parallax::exec
