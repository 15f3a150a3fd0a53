#include "exec/host_probe.hpp"

#include <torch/torch.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace parallax::exec {

double host_probe_us() {
  torch::NoGradGuard no_grad;
  thread_local const torch::Tensor input = torch::randn({8, 32, 32});
  double best = 1e300;
  for (int i = 0; i < 2; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    const torch::Tensor out = torch::softmax(input, -1);
    best = std::min(best, std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

namespace {

// Threads in state R outside this process group, from /proc/PID/task/TID/stat ("TID (comm) S PPID
// PGRP ..."; comm may hold spaces and parentheses, so the fields are read after its last ')').
// -1 without /proc.
int other_runnable_now() {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::directory_iterator procs("/proc", ec);
  if (ec) return -1;
  const pid_t own_group = getpgrp();
  int count = 0;
  for (const auto& proc : procs) {
    const std::string pid = proc.path().filename().string();
    if (pid.empty() || !std::all_of(pid.begin(), pid.end(), [](char c) { return c >= '0' && c <= '9'; })) continue;
    std::error_code gone;  // a process or thread may end while it is read
    for (const auto& task : fs::directory_iterator(proc.path() / "task", gone)) {
      std::ifstream in(task.path() / "stat");
      std::string line;
      if (!std::getline(in, line)) continue;
      const size_t close = line.rfind(')');
      if (close == std::string::npos) continue;
      std::istringstream fields(line.substr(close + 1));
      char state = 0;
      long ppid = 0, group = 0;
      if (fields >> state >> ppid >> group && state == 'R' && group != own_group) ++count;
    }
  }
  return count;
}

}  // namespace

double other_runnable_threads(int samples, int gap_ms) {
  double sum = 0;
  for (int i = 0; i < samples; ++i) {
    if (i > 0) std::this_thread::sleep_for(std::chrono::milliseconds(gap_ms));
    const int now = other_runnable_now();
    if (now < 0) return -1;
    sum += now;
  }
  return samples > 0 ? sum / samples : 0;
}

std::string busy_machine_warning(double others, int cores, const std::string& what) {
  // Half a thread on average is a core busy half the time: the ranks, one per core, share it.
  if (others < 0.5) return "";
  char text[512];
  std::snprintf(text, sizeof text,
                "warning: this machine is busy: %.1f threads of other programs were ready to run on its %d cores "
                "(on average) before %s were measured, and their time is measured with them; calibrate again on an "
                "idle machine",
                others, cores, what.c_str());
  return text;
}

}  // namespace parallax::exec
