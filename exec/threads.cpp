#include "exec/threads.hpp"

#include <cstdlib>
#include <string>

#ifdef __linux__
#include <dirent.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace parallax::exec {

std::set<long> thread_ids() {
  std::set<long> out;
#ifdef __linux__
  DIR* tasks = opendir("/proc/self/task");
  if (!tasks) return out;
  while (const dirent* entry = readdir(tasks))
    if (const long tid = std::strtol(entry->d_name, nullptr, 10); tid > 0)
      out.insert(tid);  // not "." or ".."
  closedir(tasks);
#endif
  return out;
}

int demote_helper_threads(const std::set<long>& before) {
  if (const char* v = std::getenv("PARALLAX_HELPER_THREADS"); v && std::string(v) == "normal")
    return 0;
  int changed = 0;
#ifdef __linux__
  const long self = syscall(SYS_gettid);
  for (const long tid : thread_ids()) {
    // The caller and the threads from before (LibTorch's intra-op workers, if data loading started
    // them) keep their policy.
    if (tid == self || before.count(tid)) continue;
    const sched_param normal_priority{};
    // A helper that exited meanwhile fails with ESRCH; any failure leaves the thread as it was.
    if (sched_setscheduler(static_cast<pid_t>(tid), SCHED_BATCH, &normal_priority) == 0) ++changed;
  }
#endif
  return changed;
}

}  // namespace parallax::exec
