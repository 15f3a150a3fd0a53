// Simulator speed and memory: one 1F1B optimizer step of a 1.3B-parameter transformer, 8 pipeline
// stages x R replicas, 64 micro-batches, 25 MB buckets, DGX-A100-like nodes (8 GPUs on NVLink,
// 8 InfiniBand NICs per node). Prints figures; asserts nothing (goals are in docs/simulator.md).
//
//   parallax_sim_bench                 # 1,024 ranks (128 replicas)
//   parallax_sim_bench --replicas 2048 # 16,384 ranks
//   parallax_sim_bench --queue         # raw event-queue throughput
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "plan/plan.hpp"
#include "plan/yaml_reader.hpp"
#include "sim/event_queue.hpp"
#include "sim/metrics.hpp"
#include "sim/simulator.hpp"

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

void bench_step(int replicas) {
  const std::string yaml =
      "name: bench-1.3b\n"
      "model: {preset: transformer, layers: 24, hidden: 2048, heads: 16, ffn: 8192, seq_len: 2048, vocab: 32000}\n"
      "data: {batch_size: 64}\n"
      "parallel: {data: " + std::to_string(replicas) +
      ", pipeline: 8, chunks: 64, schedule: 1f1b, bucket_cap_mb: 25, precision: bf16}\n"
      "hardware: a100-nvlink-ib\n";
  auto t0 = std::chrono::steady_clock::now();
  const plan::Plan p = plan::resolve_plan(plan::parse_scenario(plan::YamlDocument::from_text(yaml, "bench")));
  const double plan_s = seconds_since(t0);
  int64_t params = 0;
  for (const auto& l : p.layers()) params += l.param_count();
  size_t buckets = 0;
  for (const auto& st : p.stages) buckets += st.buckets.size();

  sim::SimOptions options;
  options.record_link_samples = false;
  t0 = std::chrono::steady_clock::now();
  const sim::SimRun run = sim::simulate(p, options);
  const double sim_s = seconds_since(t0);
  t0 = std::chrono::steady_clock::now();
  const sim::Metrics m = sim::compute_metrics(p, run);
  const double metrics_s = seconds_since(t0);

  std::printf("step of %d ranks (8 stages x %d replicas, %d nodes), %.2fB params, %zu buckets, 64 micro-batches\n",
              p.world_size, replicas, p.nodes, static_cast<double>(params) / 1e9, buckets);
  std::printf("  plan        %.3f s\n", plan_s);
  std::printf("  simulate    %.3f s  (%llu events, %.2f M events/s, %zu timeline events)\n", sim_s,
              static_cast<unsigned long long>(run.events), static_cast<double>(run.events) / sim_s / 1e6,
              run.timeline.events.size());
  std::printf("  metrics     %.3f s  (critical path of %zu actions)\n", metrics_s, m.critical_path.size());
  std::printf("  total       %.3f s, peak RSS %.0f MiB\n", plan_s + sim_s + metrics_s, peak_rss_mib());
  std::printf("  predicted   step %.1f ms, bubble %.1f%%, fits %s\n", m.step_time.to_ms(), 100 * m.bubble_fraction,
              m.fits ? "yes" : "no");
}

}  // namespace

int main(int argc, char** argv) {
  int replicas = 128;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--queue")) {
      bench_queue();
      return 0;
    }
    if (!std::strcmp(argv[i], "--replicas") && i + 1 < argc) {
      replicas = std::atoi(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: %s [--replicas N] [--queue]\n", argv[0]);
      return 2;
    }
  }
  bench_step(replicas);
  return 0;
}
