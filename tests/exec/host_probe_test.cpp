// other_runnable_threads: a program busy on a core is counted (a child in a process group of its
// own spinning), as /proc says of it; busy_machine_warning speaks from half a thread on.
#include "exec/host_probe.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>

using namespace parallax;

TEST_CASE("exec: another program's busy thread counts as runnable, once it runs", "[exec]") {
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    setpgid(0, 0);  // another program: not the caller's group
    alarm(30);      // never outlives a test run that died before it killed the child
    std::atomic<unsigned long> spins{0};
    for (;;) spins.fetch_add(1, std::memory_order_relaxed);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // its setpgid done
  const double busy = exec::other_runnable_threads(10, 20);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  // The child is in state R at every reading (running, or ready for a core); other programs on
  // the machine may add to it, never take from it.
  CHECK(busy >= 0.9);
}

TEST_CASE("exec: the busy-machine warning speaks from half a busy thread on", "[exec]") {
  CHECK(exec::busy_machine_warning(0.0, 2, "the layers").empty());
  CHECK(exec::busy_machine_warning(0.45, 2, "the layers").empty());
  CHECK_THAT(exec::busy_machine_warning(2.0, 2, "Gloo's messages"),
             Catch::Contains("2.0 threads of other programs were ready to run on its 2 cores") &&
                 Catch::Contains("before Gloo's messages were measured") && Catch::Contains("calibrate again on an idle machine"));
}
