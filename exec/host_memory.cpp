#include "exec/host_memory.hpp"

#include <malloc.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>

namespace parallax::exec {

int64_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t size = 0, resident = 0;
  statm >> size >> resident;
  return resident * sysconf(_SC_PAGESIZE);
}

int64_t peak_resident_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

void keep_freed_memory() {
  if (const char* t = std::getenv("GLIBC_TUNABLES"); t && std::string(t).find("glibc.malloc.") != std::string::npos) return;
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's upper limit on 64-bit; larger blocks are still mmap'd
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
  mallopt(M_TOP_PAD, 16 << 20);  // grow the heap in 16 MiB steps rather than per request
}

}  // namespace parallax::exec
