#include "exec/faults.hpp"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace parallax::exec {

std::string fault_mode(int rank, int64_t step) {
  const char* spec = std::getenv("PARALLAX_FAULT");
  if (!spec) return "";
  int r = -1;
  long long s = -1;
  char mode[16] = {0};
  if (std::sscanf(spec, "%d:%lld:%15s", &r, &s, mode) != 3 || r != rank || s != step) return "";
  return mode;
}

void maybe_inject_fault(int rank, int64_t step, FaultPoint at) {
  const std::string mode = fault_mode(rank, step);
  if (mode.empty() || mode == "overflow") return;  // overflow: check_overflow's
  const bool save = mode == "save";
  if (save != (at == FaultPoint::checkpoint_save)) return;
  std::fprintf(stderr, "rank %d: injected fault (%s) at %s %lld\n", rank, mode.c_str(), save ? "checkpoint step" : "step",
               static_cast<long long>(step));
  if (mode == "hang")
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  std::_Exit(3);
}

}  // namespace parallax::exec
