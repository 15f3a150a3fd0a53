// Simulator speed and memory: one 1F1B optimizer step of a 1.3B-parameter transformer, 8 pipeline
// stages x R replicas, 64 micro-batches, 25 MB buckets, DGX-A100-like nodes (8 GPUs on NVLink,
// 8 InfiniBand NICs per node). Prints figures; asserts nothing (goals are in docs/simulator.md).
//
//   parallax_sim_bench                 # published all-reduce bus bandwidths, then 1,024 ranks (128 replicas)
//   parallax_sim_bench --published F   # the published figures from F (default bench/data/nccl_allreduce_published.csv)
//   parallax_sim_bench --replicas 2048 # 16,384 ranks
//   parallax_sim_bench --queue         # raw event-queue throughput
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <sstream>
#include <string>
#include <vector>

#include "plan/plan.hpp"
#include "plan/yaml_reader.hpp"
#include "sim/event_queue.hpp"
#include "sim/metrics.hpp"
#include "sim/nccl_model.hpp"
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

// One row of the published-measurement file.
struct Published {
  std::string profile, algorithm, source;
  int nodes = 1, gpus_per_node = 1;
  double bytes = 0, busbw = 0;
};

// Splits a CSV line; the last field (the source) may be quoted and hold commas.
std::vector<std::string> csv_fields(const std::string& line) {
  std::vector<std::string> out(1);
  bool quoted = false;
  for (char c : line) {
    if (c == '"') quoted = !quoted;
    else if (c == ',' && !quoted) out.emplace_back();
    else out.back() += c;
  }
  return out;
}

std::vector<Published> read_published(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot read " + path);
  std::vector<Published> rows;
  std::string line;
  bool header = true;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (header) {  // profile,nodes,gpus_per_node,bytes,algorithm,busbw_gb_per_s,source
      header = false;
      continue;
    }
    const auto f = csv_fields(line);
    if (f.size() != 7) throw std::runtime_error(path + ": expected 7 fields in: " + line);
    rows.push_back({f[0], f[4], f[6], std::stoi(f[1]), std::stoi(f[2]), std::stod(f[3]), std::stod(f[5])});
  }
  return rows;
}

// A lone all-reduce of `bytes` over the setup's GPUs, simulated: one DDP bucket, next to no compute.
struct Predicted {
  double busbw = 0;
  plan::TimelineEvent event;
};

Predicted predict_allreduce(const std::string& profile, int nodes, int per_node, double bytes, const std::string& algorithm) {
  const int ranks = nodes * per_node;
  const std::string yaml =
      "name: allreduce\n"
      "model: {preset: synthetic, layers: 1, fwd_us_per_sample: 1, params_mb: " + std::to_string(bytes / 1048576.0) + "}\n"
      "data: {batch_size: 1}\n"
      "parallel: {data: " + std::to_string(ranks) + ", pipeline: 1, chunks: 1, first_bucket_mb: 100000, bucket_cap_mb: 100000}\n"
      "hardware: {profile: " + profile + ", nodes: " + std::to_string(nodes) + "}\n";
  plan::Scenario s = plan::parse_scenario(plan::YamlDocument::from_text(yaml, "bench"));
  if (s.hardware.nccl) s.hardware.nccl->algorithm = algorithm;  // as NCCL_ALGO forces one
  const plan::Plan p = plan::resolve_plan(s);
  sim::SimOptions options;
  options.record_link_samples = false;
  const sim::SimRun run = sim::simulate(p, options);
  for (const auto& e : run.timeline.events) {
    if (e.lane != plan::Lane::allreduce || e.rank != 0) continue;
    const double us = static_cast<double>((e.end - e.start).count_ns()) / 1e3;
    return {sim::allreduce_bus_gb_per_s(bytes, us, ranks), e};
  }
  throw std::runtime_error("no all-reduce simulated for " + profile);
}

std::string how(const plan::TimelineEvent& e) {
  return std::string(plan::name(e.algorithm)) + "/" + plan::name(e.protocol);
}

void bench_published(const std::string& path) {
  std::printf("all-reduce bus bandwidth, predicted vs published (nccl-tests busbw; %s)\n", path.c_str());
  std::printf("  %-16s %5s %4s %8s %-6s %-20s %9s %9s %7s\n", "profile", "nodes", "gpus", "MiB", "forced", "chosen",
              "predicted", "published", "error");
  for (const Published& r : read_published(path)) {
    const Predicted p = predict_allreduce(r.profile, r.nodes, r.gpus_per_node, r.bytes, r.algorithm);
    std::printf("  %-16s %5d %4d %8.0f %-6s %-20s %9.1f %9.1f %+6.1f%%\n", r.profile.c_str(), r.nodes, r.gpus_per_node,
                r.bytes / 1048576.0, r.algorithm.c_str(), how(p.event).c_str(), p.busbw, r.busbw,
                100.0 * (p.busbw - r.busbw) / r.busbw);
  }
  std::printf("predicted bus bandwidth (GB/s) and NCCL's choice by message size\n");
  const std::vector<std::pair<std::string, int>> setups = {{"a100-nvlink-ib", 1}, {"a100-nvlink-ib", 2},
                                                           {"h100-nvlink-ib", 1}, {"h100-nvlink-ib", 4},
                                                           {"a100-nvlink-ib", 16}, {"h100-nvlink-ib", 16}};
  for (const auto& [profile, nodes] : setups) {
    std::printf("  %-16s %2d x 8:", profile.c_str(), nodes);
    for (double mib : {1.0, 16.0, 256.0, 4096.0}) {
      const Predicted p = predict_allreduce(profile, nodes, 8, mib * 1048576.0, "auto");
      std::printf("  %5.0f MiB %6.1f %-18s", mib, p.busbw, how(p.event).c_str());
    }
    std::printf("\n");
  }
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
  std::string published = PARALLAX_SOURCE_DIR "/bench/data/nccl_allreduce_published.csv";
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--queue")) {
      bench_queue();
      return 0;
    }
    if (!std::strcmp(argv[i], "--replicas") && i + 1 < argc) {
      replicas = std::atoi(argv[++i]);
    } else if (!std::strcmp(argv[i], "--published") && i + 1 < argc) {
      published = argv[++i];
    } else {
      std::fprintf(stderr, "usage: %s [--replicas N] [--published FILE] [--queue]\n", argv[0]);
      return 2;
    }
  }
  bench_published(published);
  bench_step(replicas);
  return 0;
}
