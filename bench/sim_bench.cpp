// Simulator speed and memory: one 1F1B optimizer step of a 1.3B-parameter transformer, 8 pipeline
// stages x R replicas, 64 micro-batches, 25 MB buckets, DGX-A100-like nodes (8 GPUs on NVLink,
// 8 InfiniBand NICs per node). Prints figures; asserts nothing (goals are in docs/simulator.md).
//
//   parallax_sim_bench                 # published all-reduce bus bandwidths, then 1,024 ranks (128 replicas)
//   parallax_sim_bench --published F   # the published figures from F (default bench/data/nccl_allreduce_published.csv)
//   parallax_sim_bench --replicas 2048 # 16,384 ranks
//   parallax_sim_bench --mixed --replicas 512 # the interleaved p2p + DDP step of --scale at 8,192 ranks
//   parallax_sim_bench --queue         # raw event-queue throughput
//   parallax_sim_bench --scale         # the scale goals: up to 131,072 ranks, mixed p2p + DDP, ASTRA-sim's DP example
//   parallax_sim_bench --mixed-scaling # only --scale's mixed p2p + DDP ratio, 1,024 -> 8,192 ranks
//   parallax_sim_bench --kineto [DIR]  # the shared Kineto fixtures: NCCL kernels against prediction, and the
//                                      # slowdown of compute kernels that run inside NCCL kernels
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <sstream>
#include <string>
#include <vector>

#include "bench/nccl_bench.hpp"
#include "plan/plan.hpp"
#include "plan/yaml_reader.hpp"
#include "sim/event_queue.hpp"
#include "sim/metrics.hpp"
#include "sim/nccl_model.hpp"
#include "sim/simulator.hpp"
#include "timeline/compare.hpp"
#include "timeline/trace_reader.hpp"

using namespace parallax;

namespace {

double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // ru_maxrss is KiB on Linux
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void bench_queue() {
  sim::EventQueue q;
  const int n = 10'000'000;
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t state = 1;
  for (int i = 0; i < 1024; ++i) q.push(sim::Time::ns(static_cast<int64_t>(i)), 0, i);
  for (int i = 0; i < n; ++i) {
    const sim::Event e = q.pop();
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    q.push(e.time() + sim::Time::ns(static_cast<int64_t>(state >> 54)), 0, e.a);
  }
  const double s = seconds_since(t0);
  std::printf("event queue: %d pop+push with 1024 pending in %.3f s = %.1f M events/s\n", n, s, n / s / 1e6);
}

std::string transformer_1b3(int replicas) {
  return "name: bench-1.3b\n"
         "model: {preset: transformer, layers: 24, hidden: 2048, heads: 16, ffn: 8192, seq_len: 2048, vocab: 32000}\n"
         "data: {batch_size: 64}\n"
         "parallel: {data: " + std::to_string(replicas) +
         ", pipeline: 8, chunks: 64, schedule: 1f1b, bucket_cap_mb: 25, precision: bf16}\n"
         "hardware: a100-nvlink-ib\n";
}

// Pipeline sends and DDP all-reduces on the same links: interleaved 1F1B, 16 stages x 2 virtual,
// 16 x R ranks.
std::string interleaved_mixed(int replicas) {
  return "name: bench-mixed\n"
         "model: {preset: transformer, layers: 32, hidden: 2048, heads: 16, ffn: 8192, seq_len: 2048, vocab: 32000}\n"
         "data: {batch_size: 32}\n"
         "parallel: {data: " + std::to_string(replicas) +
         ", pipeline: 16, virtual: 2, chunks: 32, schedule: interleaved-1f1b, bucket_cap_mb: 25, precision: bf16}\n"
         "hardware: a100-nvlink-ib\n";
}

// The 1,024-rank step (by default), simulated `repeats` times: the simulate figures are the
// median run's, with the fastest and slowest beside them (this machine's run-to-run spread).
void bench_step(int replicas, int repeats, bool mixed) {
  const std::string yaml = mixed ? interleaved_mixed(replicas) : transformer_1b3(replicas);
  auto t0 = std::chrono::steady_clock::now();
  const plan::Plan p = plan::resolve_plan(plan::parse_scenario(plan::YamlDocument::from_text(yaml, "bench")));
  const double plan_s = seconds_since(t0);
  int64_t params = 0;
  for (const auto& l : p.layers()) params += l.param_count();
  size_t buckets = 0;
  for (const auto& st : p.stages) buckets += st.buckets.size();

  sim::SimOptions options;
  options.record_link_samples = false;
  std::vector<double> sim_s, loop_s;
  sim::SimRun run;
  for (int i = 0; i < repeats; ++i) {
    run = sim::SimRun();  // frees the previous run's memory first, as a lone simulation would start
    t0 = std::chrono::steady_clock::now();
    run = sim::simulate(p, options);
    sim_s.push_back(seconds_since(t0));
    loop_s.push_back(run.wall.to_seconds());
  }
  t0 = std::chrono::steady_clock::now();
  const sim::Metrics m = sim::compute_metrics(p, run);
  const double metrics_s = seconds_since(t0);
  const double sim_median = timeline::median(sim_s);
  const auto [fastest, slowest] = std::minmax_element(sim_s.begin(), sim_s.end());

  std::printf("step of %d ranks (%d stages x %d replicas, %d nodes), %.2fB params, %zu buckets, %d micro-batches\n",
              p.world_size, p.scenario.parallel.pipeline, replicas, p.nodes, static_cast<double>(params) / 1e9, buckets,
              p.scenario.parallel.chunks);
  std::printf("  plan        %.3f s\n", plan_s);
  std::printf("  simulate    %.3f s  (median of %d; %.3f-%.3f s; event loop %.3f s of it)\n", sim_median, repeats,
              *fastest, *slowest, timeline::median(loop_s));
  std::printf("              %llu events, %.2f M events/s (median run), %zu timeline events\n",
              static_cast<unsigned long long>(run.events), static_cast<double>(run.events) / sim_median / 1e6,
              run.timeline.events.size());
  std::printf("  metrics     %.3f s  (critical path of %zu actions)\n", metrics_s, m.critical_path.size());
  std::printf("  total       %.3f s, peak RSS %.0f MiB\n", plan_s + sim_median + metrics_s, peak_rss_mib());
  std::printf("  predicted   step %.1f ms, bubble %.1f%%, fits %s\n", m.step_time.to_ms(), 100 * m.bubble_fraction,
              m.fits ? "yes" : "no");
}

// How a scale case is simulated: every rank, the step time alone (the tuner), or one replica
// played for all with its timeline and every rank's metrics (SimOptions::fold_replicas).
enum class Mode { full, step_only, folded };

// Runs `work` in a child process, so that its memory (peak RSS, first touches) is its own, and
// returns the seconds it reports; negative if the child failed (an exception, a crash).
double in_child(const std::function<double()>& work) {
  std::fflush(stdout);
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
  const pid_t pid = fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    close(fds[0]);
    double s = -1;
    try {
      s = work();
    } catch (const std::exception& e) {
      std::fprintf(stderr, "%s\n", e.what());
      _exit(1);
    }
    std::fflush(stdout);
    _exit(write(fds[1], &s, sizeof s) == sizeof s ? 0 : 1);
  }
  close(fds[1]);
  double s = -1;
  if (read(fds[0], &s, sizeof s) != sizeof s) s = -1;
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? s : -1;
}

// One simulation in a child process: prints ranks, wall time (plan + simulate; folded: +
// metrics), events, events/s, peak RSS and the predicted step, unless `quiet`. Returns the
// simulate time (negative if the child failed). `warm`: the child simulates the plan once first
// and times the second, which reuses the first's freed memory, as a session that simulates again
// does (the GUI, validate, a sweep).
double scale_case(const char* label, const std::string& yaml, Mode mode, bool quiet = false, bool warm = false) {
  const double sim_s = in_child([&] {
    const auto t0 = std::chrono::steady_clock::now();
    const plan::Plan p = plan::resolve_plan(plan::parse_scenario(plan::YamlDocument::from_text(yaml, "bench")));
    const double plan_s = seconds_since(t0);
    sim::SimOptions options;
    options.record_link_samples = false;
    options.step_only = mode == Mode::step_only;
    options.fold_replicas = mode == Mode::folded;
    if (warm) sim::simulate(p, options);
    const auto t1 = std::chrono::steady_clock::now();
    const sim::SimRun run = sim::simulate(p, options);
    double s = seconds_since(t1);
    if (mode == Mode::folded) {
      const sim::Metrics m = sim::compute_metrics(p, run);
      s = seconds_since(t1);
      if (m.ranks.size() != static_cast<size_t>(p.world_size)) throw std::logic_error("folded metrics miss ranks");
    }
    const char* mode_name = mode == Mode::full ? "full" : mode == Mode::step_only ? "step-only" : "folded+metrics";
    if (!quiet)
      std::printf("  %-34s %7d %-14s %7.2f s %7.2f s %10llu %7.2f M/s %7.0f MiB %10.1f ms%s\n", label, p.world_size,
                  mode_name, plan_s, s, static_cast<unsigned long long>(run.events),
                  static_cast<double>(run.events) / s / 1e6, peak_rss_mib(), run.step_time.to_ms(),
                  run.folded ? " (one replica played)" : "");
    return s;
  });
  if (sim_s < 0) std::printf("  %-34s failed\n", label);
  return sim_s;
}

// Seconds a new process takes to write `mib` MiB of fresh memory the first time (negative if the
// child failed). On these VMs it is the host's work and varies tenfold between processes (180 MiB:
// 0.03-0.33 s), where writing the same memory again takes 0.01 s: it says how much of a first
// simulation's time is the machine's rather than the simulator's.
double first_touch_s(size_t mib) {
  return in_child([mib] {
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<char> buffer(mib << 20, 1);  // every page written once
    const double s = seconds_since(t0);
    const volatile char last = buffer.back();  // the writes are used: not elided
    (void)last;
    return s;
  });
}

// "0.073 s (0.070-0.082)": the median and range of times.
std::string median_range(const std::vector<double>& v) {
  const auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  char text[64];
  std::snprintf(text, sizeof text, "%.3f s (%.3f-%.3f)", timeline::median(v), *lo, *hi);
  return text;
}

// The mixed p2p + DDP step at 1,024 and 8,192 ranks, `runs` processes of each, alternated so that
// both sizes see the same moments of a shared machine: the ratio of the medians, with the ranges
// beside it (one run of the small case varies by tens of percent here). Twice: a process's first
// simulation, which writes its timeline into fresh memory, and its second, which reuses it; and
// the first touch of as much memory as each case's peak, for the machine's share of the first.
void mixed_scaling(int runs) {
  std::vector<double> small, large, small_warm, large_warm, touch_small, touch_large;
  for (int i = 0; i < runs; ++i) {
    small.push_back(scale_case("mixed 1,024", interleaved_mixed(64), Mode::full, true));
    large.push_back(scale_case("mixed 8,192", interleaved_mixed(512), Mode::full, true));
    small_warm.push_back(scale_case("mixed 1,024, warm", interleaved_mixed(64), Mode::full, true, true));
    large_warm.push_back(scale_case("mixed 8,192, warm", interleaved_mixed(512), Mode::full, true, true));
    touch_small.push_back(first_touch_s(35));
    touch_large.push_back(first_touch_s(241));
  }
  // A failed child says so itself (scale_case) and returns a negative time: no ratio then.
  for (const auto* v : {&small, &large, &small_warm, &large_warm})
    if (*std::min_element(v->begin(), v->end()) < 0) return;
  std::printf("  mixed p2p + DDP, 1,024 -> 8,192 ranks, %d processes each, alternated:\n", runs);
  std::printf("    first simulation (fresh memory):  %s -> %s = %.1fx for 8x the ranks\n", median_range(small).c_str(),
              median_range(large).c_str(), timeline::median(large) / timeline::median(small));
  std::printf("    second simulation (memory reused): %s -> %s = %.1fx for 8x the ranks\n",
              median_range(small_warm).c_str(), median_range(large_warm).c_str(),
              timeline::median(large_warm) / timeline::median(small_warm));
  if (*std::min_element(touch_small.begin(), touch_small.end()) < 0 ||
      *std::min_element(touch_large.begin(), touch_large.end()) < 0) {
    std::printf("    first touch of fresh memory: a child failed\n");
    return;
  }
  std::printf("    first touch of 35 MiB / 241 MiB (each case's peak RSS) in a new process: %s / %s\n",
              median_range(touch_small).c_str(), median_range(touch_large).c_str());
}

// The scale goals of docs/simulator.md: 1F1B PP x DP steps from 1,024 to 131,072 ranks, pipeline
// sends and DDP all-reduces sharing links (interleaved p=16, v=2) from 1,024 to 8,192 ranks, and
// ASTRA-sim's data-parallel example (48 x 1 ms compute, 12 x 100 MiB all-reduces per NPU).
void bench_scale() {
  std::printf("scale (each case in its own process; simulate includes metrics when folded)\n");
  std::printf("  %-34s %7s %-14s %9s %9s %10s %11s %11s %13s\n", "case", "ranks", "mode", "plan", "simulate", "events",
              "events/s", "peak RSS", "step");
  scale_case("1f1b 1.3B, 8 stages", transformer_1b3(128), Mode::full);
  scale_case("1f1b 1.3B, 8 stages", transformer_1b3(2048), Mode::full);
  for (int replicas : {128, 2048, 16384}) scale_case("1f1b 1.3B, 8 stages", transformer_1b3(replicas), Mode::step_only);
  for (int replicas : {2048, 16384}) scale_case("1f1b 1.3B, 8 stages", transformer_1b3(replicas), Mode::folded);
  for (int replicas : {64, 128, 256, 512}) scale_case("interleaved p16 v2 (p2p + DDP)", interleaved_mixed(replicas), Mode::full);
  mixed_scaling(5);
  for (int npus : {1024, 4096}) {
    // 48 layers of 1 ms; 12 buckets of 100 MiB (4 layers' gradients each), as ASTRA-sim's example.
    const std::string yaml =
        "name: bench-astra-dp\n"
        "model: {preset: synthetic, layers: 48, fwd_us_fixed: 333.333, fwd_us_per_sample: 0, bwd_ratio: 2, params_mb: 25}\n"
        "data: {batch_size: " + std::to_string(npus) + "}\n"
        "parallel: {data: " + std::to_string(npus) + ", pipeline: 1, chunks: 1, first_bucket_mb: 100, bucket_cap_mb: 100}\n"
        "hardware: a100-nvlink-ib\n";
    scale_case("ASTRA-sim DP example", yaml, Mode::full);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int replicas = 128;
  bool step_only_bench = false;  // --step: the step alone (for profiling it)
  bool mixed = false;            // --mixed: the interleaved p2p + DDP case instead of 1F1B
  int repeats = 5;
  std::string published = PARALLAX_SOURCE_DIR "/bench/data/nccl_allreduce_published.csv";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--queue")) {
      bench_queue();
      return 0;
    }
    if (!std::strcmp(argv[i], "--step")) {
      step_only_bench = true;
      continue;
    }
    if (!std::strcmp(argv[i], "--mixed")) {
      mixed = step_only_bench = true;
      continue;
    }
    if (!std::strcmp(argv[i], "--scale")) {
      bench_scale();
      return 0;
    }
    if (!std::strcmp(argv[i], "--mixed-scaling")) {
      mixed_scaling(5);
      return 0;
    }
    if (!std::strcmp(argv[i], "--kineto")) {
      bench::bench_kineto(i + 1 < argc ? argv[i + 1] : PARALLAX_SOURCE_DIR "/../shared/fixtures/kineto");
      return 0;
    }
    if (!std::strcmp(argv[i], "--replicas") && i + 1 < argc) {
      replicas = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--repeat") && i + 1 < argc) {
      repeats = std::max(1, std::atoi(argv[++i]));
    } else if (!std::strcmp(argv[i], "--published") && i + 1 < argc) {
      published = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--replicas N] [--repeat N] [--step | --mixed] [--published FILE] [--queue | --scale | --mixed-scaling | --kineto [DIR]]\n", argv[0]);
      return 2;
    }
  }
  if (!step_only_bench) bench::bench_published(published);
  bench_step(replicas, repeats, mixed);
  return 0;
}
