// demote_helper_threads: the threads started since a snapshot become SCHED_BATCH; the caller and
// the threads from before stay as they were, as the kernel reports them.
#include "exec/threads.hpp"

#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <catch2/catch.hpp>
#include <cstdlib>
#include <set>
#include <thread>

namespace {

// A thread that reports its id and then waits to be told to stop.
struct Helper {
  std::atomic<long> tid{0};
  std::atomic<bool> stop{false};
  std::thread thread{[this] {
    tid = syscall(SYS_gettid);
    while (!stop) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }};
  Helper() {
    while (tid == 0) std::this_thread::yield();
  }
  ~Helper() {
    stop = true;
    thread.join();
  }
};

}  // namespace

TEST_CASE("exec: helper threads started since a snapshot become SCHED_BATCH, the others do not",
          "[exec]") {
  REQUIRE(sched_getscheduler(0) == SCHED_OTHER);
  Helper earlier;  // as LibTorch's intra-op workers, started before the process group
  const std::set<long> before = parallax::exec::thread_ids();
  CHECK(before.count(syscall(SYS_gettid)) == 1);
  CHECK(before.count(earlier.tid) == 1);
  Helper first, second;  // as Gloo's threads
  REQUIRE(sched_getscheduler(static_cast<pid_t>(first.tid)) == SCHED_OTHER);

  SECTION("by default") {
    CHECK(parallax::exec::demote_helper_threads(before) == 2);
    CHECK(sched_getscheduler(static_cast<pid_t>(first.tid)) == SCHED_BATCH);
    CHECK(sched_getscheduler(static_cast<pid_t>(second.tid)) == SCHED_BATCH);
    CHECK(sched_getscheduler(static_cast<pid_t>(earlier.tid)) == SCHED_OTHER);
    CHECK(sched_getscheduler(0) == SCHED_OTHER);
    // A thread the caller starts afterwards inherits the caller's policy, not the helpers'.
    Helper later;
    CHECK(sched_getscheduler(static_cast<pid_t>(later.tid)) == SCHED_OTHER);
  }
  SECTION("not with PARALLAX_HELPER_THREADS=normal") {
    setenv("PARALLAX_HELPER_THREADS", "normal", 1);
    CHECK(parallax::exec::demote_helper_threads(before) == 0);
    unsetenv("PARALLAX_HELPER_THREADS");
    CHECK(sched_getscheduler(static_cast<pid_t>(first.tid)) == SCHED_OTHER);
  }
}
