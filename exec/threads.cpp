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

int demote_helper_threads() {
  if (const char* v = std::getenv("PARALLAX_HELPER_THREADS"); v && std::string(v) == "normal") return 0;
  int changed = 0;
#ifdef __linux__
  const long self = syscall(SYS_gettid);
  DIR* tasks = opendir("/proc/self/task");
  if (!tasks) return 0;
  while (const dirent* entry = readdir(tasks)) {
    const long tid = std::strtol(entry->d_name, nullptr, 10);
    if (tid <= 0 || tid == self) continue;  // "." and "..", and the training thread
    const sched_param normal_priority{};
    // A helper that exited meanwhile fails with ESRCH; any failure leaves the thread as it was.
    if (sched_setscheduler(static_cast<pid_t>(tid), SCHED_BATCH, &normal_priority) == 0) ++changed;
  }
  closedir(tasks);
#endif
  return changed;
}

}  // namespace parallax::exec
