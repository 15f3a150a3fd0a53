#pragma once
// How a rank's threads share the cores. A rank runs one training thread (with LibTorch's
// intra-op workers) and helpers: Gloo's event loop, which moves every message, and the send
// watcher. On a machine where the ranks share few cores (two ranks on two cores here) every
// message wakes a helper, and Linux's scheduler lets a waking thread preempt the one running: the
// training thread of the receiving rank is set aside, often behind the other rank's training
// thread, for up to a scheduler slice. The interleaved MLP of the accuracy set was preempted about
// 20 times a step and ran 2.5x its prediction (docs/accuracy.md). Helpers marked SCHED_BATCH still
// run on any idle core at once, but no longer preempt a running thread when they wake.
#include <set>

namespace parallax::exec {

/// The kernel's ids of this process's threads now (Linux; elsewhere empty).
std::set<long> thread_ids();

/// Marks every thread of this process started since `before` was taken (thread_ids()) SCHED_BATCH,
/// except the caller. Threads started later inherit the policy of the thread that starts them.
/// Returns how many threads were changed. `PARALLAX_HELPER_THREADS=normal` in the environment
/// turns it off (returns 0), to compare with a process whose threads are all alike
/// (bench/ddp_pytorch.py honours it too).
int demote_helper_threads(const std::set<long>& before);

}  // namespace parallax::exec
