// Ranks started by hand, as torchrun, srun or a user's script would: one process each with RANK,
// WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT, and no Parallax launcher watching them.
// When one rank is killed or hangs, every other one must end by itself, non-zero, within
// --timeout + 5 s.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "exec/launcher.hpp"

extern char** environ;

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr int kTimeout = 5;  // --timeout of the ranks, seconds

std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// One rank of a world-4 job (data 2 x pipeline 2) with its stderr in `err`. Everything the child
// needs is built before fork(): the test process may have threads, so the child only execs.
pid_t start_rank(int rank, int port, const fs::path& err) {
  const std::string scenario = std::string(PARALLAX_SOURCE_DIR) + "/scenarios/mlp-fashion-mnist-ddp2.yaml";
  std::vector<std::string> args = {PARALLAX_BINARY, "run", scenario, "--timeout", std::to_string(kTimeout)};
  for (const char* set : {"parallel.data=2", "parallel.pipeline=2", "parallel.chunks=2", "model.layers=3",
                          "model.hidden=32", "data.batch_size=32", "data.steps=1000000"})
    args.insert(args.end(), {"--set", set});
  std::vector<std::string> env = {"RANK=" + std::to_string(rank), "LOCAL_RANK=" + std::to_string(rank),
                                  "WORLD_SIZE=4", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + std::to_string(port)};
  for (char** e = environ; *e; ++e) {
    const std::string var = *e;
    const std::string name = var.substr(0, var.find('='));
    if (name != "RANK" && name != "LOCAL_RANK" && name != "WORLD_SIZE" && name != "MASTER_ADDR" &&
        name != "MASTER_PORT" && name != "PARALLAX_FAULT")
      env.push_back(var);
  }
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  for (auto& e : env) envp.push_back(e.data());
  argv.push_back(nullptr);
  envp.push_back(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlive a test that fails half-way
    const int fd = open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int null = open("/dev/null", O_WRONLY);
    dup2(fd, 2);
    dup2(null, 1);
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  return pid;
}

struct Job {
  std::map<int, pid_t> pids;  // rank -> pid, of the ranks still running
  fs::path dir;

  explicit Job(const std::string& name) : dir(fs::temp_directory_path() / name) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    const int port = parallax::exec::free_port();
    for (int r = 0; r < 4; ++r) pids[r] = start_rank(r, port, err(r));
  }
  ~Job() {
    for (const auto& [r, pid] : pids) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    fs::remove_all(dir);
  }
  fs::path err(int rank) const { return dir / ("rank-" + std::to_string(rank) + ".err"); }

  // Until the first replica's last stage (rank 1) reports a step: the job trains. False when a
  // rank ended before (a failed rendezvous, say) or the limit passed.
  bool wait_training(std::chrono::seconds limit) {
    for (const auto end = Clock::now() + limit; Clock::now() < end;) {
      // Replica 0's last stage prints the loss: rank 2, ranked tp-dp-pp (plan::rank_of).
      if (slurp(err(2)).find("] step ") != std::string::npos) return true;
      for (const auto& [r, pid] : pids)
        if (waitpid(pid, nullptr, WNOHANG) == pid) {
          pids.erase(r);
          return false;
        }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  std::string all_errors() const {
    std::string out;
    for (int r = 0; r < 4; ++r) out += "rank " + std::to_string(r) + ": " + slurp(err(r)) + "\n";
    return out;
  }

  // Waits up to `limit` for every rank but `victim`; their exit statuses (-1: still running).
  std::map<int, int> wait_others(int victim, std::chrono::seconds limit) {
    std::map<int, int> status;
    for (const auto& [r, pid] : pids)
      if (r != victim) status[r] = -1;
    for (const auto end = Clock::now() + limit; Clock::now() < end;) {
      bool running = false;
      for (auto& [r, st] : status) {
        if (st != -1) continue;
        int raw = 0;
        if (waitpid(pids[r], &raw, WNOHANG) == pids[r]) {
          st = raw;
          pids.erase(r);
        } else {
          running = true;
        }
      }
      if (!running) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return status;
  }
};

bool fashion_mnist_installed() { return fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"); }

// Sends `signal` to rank `victim` once the job trains; every other rank must exit with a non-zero
// code (not a signal: a crash is no clean stop) within timeout + 5 s. Returns their stderr.
std::map<int, std::string> survivors_after(const std::string& name, int victim, int signal) {
  Job job(name);
  const bool training = job.wait_training(std::chrono::seconds(120));
  INFO(job.all_errors());
  REQUIRE(training);
  kill(job.pids[victim], signal);
  const auto t0 = Clock::now();
  const auto status = job.wait_others(victim, std::chrono::seconds(kTimeout + 5));
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  std::map<int, std::string> errs;
  for (const auto& [r, st] : status) {
    errs[r] = slurp(job.err(r));
    INFO("rank " << r << " stderr:\n" << errs[r]);
    REQUIRE(st != -1);  // ended within timeout + 5 s
    CHECK(WIFEXITED(st));
    CHECK(WEXITSTATUS(st) != 0);
  }
  INFO("the other ranks ended " << seconds << " s after signal " << signal << " to rank " << victim);
  CHECK(seconds <= kTimeout + 5);
  return errs;
}

}  // namespace

TEST_CASE("exec: under an external launcher, a killed rank ends every other rank, naming it", "[exec][run][launcher]") {
  INFO("Fashion-MNIST is missing: scripts/setup.sh installs dataset-fashion-mnist");
  REQUIRE(fashion_mnist_installed());
  // Rank 2 is replica 0's stage 1 (ranks tp-dp-pp): rank 1, replica 1's stage 0, never talks to it,
  // yet must name it.
  const auto errs = survivors_after("parallax_launch_kill", 2, SIGKILL);
  for (const auto& [r, err] : errs) {
    INFO("rank " << r << " stderr:\n" << err);
    CHECK_THAT(err, Catch::Contains("rank " + std::to_string(r) + ": error:"));
    CHECK_THAT(err, Catch::Contains("lost rank 2"));
  }
}

TEST_CASE("exec: under an external launcher, a hung rank ends every other rank within the timeout", "[exec][run][launcher]") {
  INFO("Fashion-MNIST is missing: scripts/setup.sh installs dataset-fashion-mnist");
  REQUIRE(fashion_mnist_installed());
  const auto errs = survivors_after("parallax_launch_hang", 2, SIGSTOP);
  for (const auto& [r, err] : errs) {
    INFO("rank " << r << " stderr:\n" << err);
    CHECK_THAT(err, Catch::Contains("rank " + std::to_string(r) + ": error:"));
  }
}

TEST_CASE("exec::rank_cores: the allowed CPUs in equal runs, one per rank, and none with more ranks than CPUs", "[exec]") {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  REQUIRE(sched_getaffinity(0, sizeof allowed, &allowed) == 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &allowed)) cpus.push_back(c);
  const int n = static_cast<int>(cpus.size());
  for (int nproc = 1; nproc <= n; ++nproc) {
    const auto cores = parallax::exec::rank_cores(nproc);
    REQUIRE(static_cast<int>(cores.size()) == nproc);
    std::vector<int> seen;
    for (const auto& c : cores) {
      CHECK(static_cast<int>(c.size()) == n / nproc);
      seen.insert(seen.end(), c.begin(), c.end());
    }
    // Disjoint, in order, each one allowed.
    CHECK(std::equal(seen.begin(), seen.end(), cpus.begin()));
  }
  CHECK(parallax::exec::rank_cores(n + 1).empty());
  CHECK(parallax::exec::describe_cores({}) == "ranks not bound to cores");
  CHECK(parallax::exec::describe_cores({{0}, {1, 2, 3}}) == "ranks bound to cores [0] [1-3]");
  setenv("PARALLAX_CPU_AFFINITY", "off", 1);
  CHECK(parallax::exec::rank_cores(1).empty());
  unsetenv("PARALLAX_CPU_AFFINITY");
}
