#include "exec/launcher.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <algorithm>
#include <map>
#include <stdexcept>
#include <thread>

namespace parallax::exec {
namespace {

std::string describe(int status) {
  if (WIFSIGNALED(status)) return std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" + strsignal(WTERMSIG(status)) + ")";
  return "exited with code " + std::to_string(WEXITSTATUS(status));
}

}  // namespace

int free_port() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof addr;
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    if (fd >= 0) close(fd);
    throw std::runtime_error("cannot find a free port on 127.0.0.1 for the rendezvous");
  }
  const int port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

std::vector<std::vector<int>> rank_cores(int nproc) {
  if (const char* setting = std::getenv("PARALLAX_CPU_AFFINITY")) {
    const std::string s = setting;
    if (s == "off") return {};
    if (s != "on" && !s.empty())  // a typo ("0", "false") must not pass for "off" unsaid
      std::fprintf(stderr, "warning: PARALLAX_CPU_AFFINITY=%s is neither on nor off; binding ranks to cores\n", setting);
  }
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  if (nproc < 1 || sched_getaffinity(0, sizeof allowed, &allowed) != 0) return {};
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  const size_t each = cpus.size() / static_cast<size_t>(nproc);
  if (each == 0) return {};  // more ranks than cores: the scheduler shares them out
  std::vector<std::vector<int>> out(static_cast<size_t>(nproc));
  for (size_t r = 0; r < out.size(); ++r) out[r].assign(cpus.begin() + static_cast<std::ptrdiff_t>(r * each),
                                                         cpus.begin() + static_cast<std::ptrdiff_t>((r + 1) * each));
  return out;
}

std::string describe_cores(const std::vector<std::vector<int>>& cores) {
  if (cores.empty()) return "ranks not bound to cores";
  std::string out = "ranks bound to cores";
  for (const auto& c : cores) {  // appended piece by piece: g++ 12 warns falsely (-Wrestrict) on " [" + to_string
    out += " [";
    out += std::to_string(c.front());
    if (c.size() > 1) {
      out += '-';
      out += std::to_string(c.back());
    }
    out += ']';
  }
  return out;
}

int launch_local(int nproc, const std::vector<std::string>& argv, std::chrono::seconds timeout) {
  // Messages name the command that started the ranks ("parallax run", "parallax calibrate").
  const std::string who = "parallax " + (argv.size() > 1 ? argv[1] : std::string("run"));
  const int port = free_port();
  const pid_t launcher = getpid();
  const std::vector<std::vector<int>> cores = rank_cores(nproc);
  std::map<pid_t, int> ranks;
  for (int r = 0; r < nproc; ++r) {
    const pid_t pid = fork();
    if (pid < 0) throw std::runtime_error("fork failed");
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != launcher) _exit(1);
      setenv("RANK", std::to_string(r).c_str(), 1);
      setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
      setenv("WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", std::to_string(nproc).c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      // The cores are shared out between the ranks; BLAS and OpenMP pools that each assume the
      // whole machine would spin against each other. A user's own setting wins.
      const std::string threads = std::to_string(std::max(1u, std::thread::hardware_concurrency() / nproc));
      setenv("OMP_NUM_THREADS", threads.c_str(), 0);
      setenv("OPENBLAS_NUM_THREADS", threads.c_str(), 0);
      if (!cores.empty()) {
        cpu_set_t set;
        CPU_ZERO(&set);
        for (int c : cores[static_cast<size_t>(r)]) CPU_SET(c, &set);
        sched_setaffinity(0, sizeof set, &set);
      }
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv("/proc/self/exe", args.data());
      std::perror((who + ": exec").c_str());
      _exit(127);
    }
    ranks[pid] = r;
  }
  std::fprintf(stderr, "%s: started %d ranks (rendezvous 127.0.0.1:%d, timeout %lld s, %s)\n", who.c_str(), nproc, port,
               static_cast<long long>(timeout.count()), describe_cores(cores).c_str());

  int failures = 0;
  std::string first_failure;
  auto stop_others = [&] {
    for (const auto& [pid, r] : ranks) kill(pid, SIGTERM);
    // Grace period, then SIGKILL whatever is left.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!ranks.empty() && std::chrono::steady_clock::now() < deadline) {
      int status = 0;
      const pid_t pid = waitpid(-1, &status, WNOHANG);
      if (pid > 0) ranks.erase(pid);
      else std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    for (const auto& [pid, r] : ranks) kill(pid, SIGKILL);
    while (!ranks.empty()) {
      int status = 0;
      const pid_t pid = waitpid(-1, &status, 0);
      if (pid < 0) break;
      ranks.erase(pid);
    }
  };
  while (!ranks.empty()) {
    int status = 0;
    const pid_t pid = waitpid(-1, &status, 0);
    if (pid < 0) break;
    const int r = ranks[pid];
    ranks.erase(pid);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) continue;
    ++failures;
    first_failure = "rank " + std::to_string(r) + " " + describe(status);
    // The ranks still running then: where the failed rank gave up waiting on one (a hang, a lost
    // peer), the one it waited on is among them, and the user reads its number here.
    std::vector<int> running;
    for (const auto& [other_pid, other] : ranks) running.push_back(other);
    std::sort(running.begin(), running.end());
    std::string names;
    for (int other : running) names += (names.empty() ? "" : ", ") + std::to_string(other);
    if (!names.empty()) first_failure += " (still running then, and stopped: rank" + std::string(running.size() > 1 ? "s " : " ") + names + ")";
    std::fprintf(stderr, "%s: %s; stopping the other ranks\n", who.c_str(), first_failure.c_str());
    stop_others();
  }
  if (failures) {
    std::fprintf(stderr, "%s: failed: %s\n", who.c_str(), first_failure.c_str());
    return 1;
  }
  return 0;
}

}  // namespace parallax::exec
