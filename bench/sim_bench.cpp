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

#include "plan/plan.hpp"
#include "plan/yaml_reader.hpp"
#include "profiler/compare.hpp"
#include "profiler/trace_reader.hpp"
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

// `tweak` changes the profile before the plan is made (another network, say).
Predicted predict_allreduce(const std::string& profile, int nodes, int per_node, double bytes, const std::string& algorithm,
                            const std::function<void(plan::HardwareProfile&)>& tweak = {}) {
  const int ranks = nodes * per_node;
  const std::string yaml =
      "name: allreduce\n"
      "model: {preset: synthetic, layers: 1, fwd_us_per_sample: 1, params_mb: " + std::to_string(bytes / 1048576.0) + "}\n"
      "data: {batch_size: 1}\n"
      "parallel: {data: " + std::to_string(ranks) + ", pipeline: 1, chunks: 1, first_bucket_mb: 100000, bucket_cap_mb: 100000}\n"
      "hardware: {profile: " + profile + ", nodes: " + std::to_string(nodes) + "}\n";
  plan::Scenario s = plan::parse_scenario(plan::YamlDocument::from_text(yaml, "bench"));
  if (s.hardware.nccl) s.hardware.nccl->algorithm = algorithm;  // as NCCL_ALGO forces one
  if (tweak) tweak(s.hardware);
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

// One size of a published sweep: the predicted and the published bus bandwidth.
struct SweepPoint {
  double bytes = 0, predicted = 0, published = 0;
};

// The size (bytes) at which a sweep's bus bandwidth first reaches half of its largest size's,
// interpolated on log2(size): where the latency-bound ramp gives way to the bandwidth-bound plateau.
double half_size(const std::vector<SweepPoint>& pts, double SweepPoint::*busbw) {
  const double half = pts.back().*busbw / 2;
  for (size_t i = 1; i < pts.size(); ++i) {
    const double lo = pts[i - 1].*busbw, hi = pts[i].*busbw;
    if (lo < half && hi >= half) {
      const double f = (half - lo) / (hi - lo);
      return std::exp2(std::log2(pts[i - 1].bytes) + f * (std::log2(pts[i].bytes) - std::log2(pts[i - 1].bytes)));
    }
  }
  return pts.front().*busbw >= half ? pts.front().bytes : pts.back().bytes;
}

// Shape of each sweep (one setup and source, 4 sizes or more): worst error on large messages
// (256 MiB and up) and on the ramp below, and the half-bandwidth size predicted and published.
void print_sweeps(std::map<std::string, std::vector<SweepPoint>>& sweeps) {
  bool header = false;
  for (auto& [key, pts] : sweeps) {
    if (pts.size() < 4) continue;
    if (!header) {
      std::printf("sweeps: worst error at 256 MiB and up / below, and the size where bus bandwidth reaches half its 4 GiB figure\n");
      header = true;
    }
    std::sort(pts.begin(), pts.end(), [](const SweepPoint& a, const SweepPoint& b) { return a.bytes < b.bytes; });
    double large = 0, ramp = 0;
    for (const SweepPoint& p : pts) {
      const double err = (p.predicted - p.published) / p.published;
      double& worst = p.bytes >= 256.0 * 1048576 ? large : ramp;
      if (std::abs(err) > std::abs(worst)) worst = err;
    }
    std::printf("  %-28s large %+6.1f%%  ramp %+6.1f%%  half bandwidth at %6.1f MiB predicted, %6.1f MiB published\n",
                key.substr(0, key.find('\t')).c_str(), 100 * large, 100 * ramp,
                half_size(pts, &SweepPoint::predicted) / 1048576, half_size(pts, &SweepPoint::published) / 1048576);
  }
}

void bench_published(const std::string& path) {
  std::printf("all-reduce bus bandwidth, predicted vs published (nccl-tests busbw; %s)\n", path.c_str());
  std::printf("  %-16s %5s %4s %8s %-6s %-20s %9s %9s %7s\n", "profile", "nodes", "gpus", "MiB", "forced", "chosen",
              "predicted", "published", "error");
  std::map<std::string, std::vector<SweepPoint>> sweeps;  // by setup and source
  for (const Published& r : read_published(path)) {
    const Predicted p = predict_allreduce(r.profile, r.nodes, r.gpus_per_node, r.bytes, r.algorithm);
    std::printf("  %-16s %5d %4d %8.0f %-6s %-20s %9.1f %9.1f %+6.1f%%\n", r.profile.c_str(), r.nodes, r.gpus_per_node,
                r.bytes / 1048576.0, r.algorithm.c_str(), how(p.event).c_str(), p.busbw, r.busbw,
                100.0 * (p.busbw - r.busbw) / r.busbw);
    const std::string setup = r.profile + " " + std::to_string(r.nodes) + " x " + std::to_string(r.gpus_per_node) + " " +
                              r.algorithm;
    sweeps[setup + "\t" + r.source].push_back({r.bytes, p.busbw, r.busbw});
  }
  print_sweeps(sweeps);
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

// --- the shared Kineto fixtures (../shared/fixtures/kineto): two ranks of a 128-GPU NCCL job ---

struct KernelSpan {
  std::string name, shape;  // shape: grid and block, which tell launches of one kernel apart
  double start_us = 0, dur_us = 0;
};

// One NCCL kernel with the collective and message that launched it.
struct NcclKernel {
  int rank = 0;
  std::string collective;  // "all_reduce", "all_to_all", "_all_gather_base"
  double bytes = 0;        // the input tensor
  double dur_us = 0;
};

struct KinetoRank {
  std::vector<KernelSpan> compute, nccl;
  std::vector<NcclKernel> collectives;
};

double dtype_bytes(const std::string& t) {
  if (t == "float" || t == "int") return 4;
  if (t == "double" || t == "long") return 8;
  if (t == "c10::Half" || t == "c10::BFloat16" || t == "short") return 2;
  return 1;  // unsigned char, signed char, bool
}

// Joins each NCCL kernel to its launch (the CUDA runtime call of the same correlation id) and the
// `nccl:<collective>` annotation around that launch on the launching thread, which records the
// input's dims and type (PyTorch's record_param_comms).
KinetoRank read_kineto(const std::string& path, int rank) {
  const auto doc = nlohmann::json::parse(profiler::read_file_maybe_gzip(path));
  KinetoRank out;
  std::map<int64_t, const nlohmann::json*> launches;  // correlation -> cuda_runtime event
  std::vector<const nlohmann::json*> annotations;
  for (const auto& e : doc.at("traceEvents")) {
    const std::string cat = e.value("cat", "");
    if (!e.contains("ts") || !e.contains("dur") || !e.contains("tid")) continue;
    if (cat == "cuda_runtime" && e.contains("args") && e["args"].contains("correlation"))
      launches[e["args"]["correlation"].get<int64_t>()] = &e;
    else if (cat == "user_annotation" && e.value("name", "").rfind("nccl:", 0) == 0)
      annotations.push_back(&e);
  }
  static const nlohmann::json none = nlohmann::json::object();
  for (const auto& e : doc.at("traceEvents")) {
    if (e.value("cat", "") != "kernel" || !e.contains("ts") || !e.contains("dur")) continue;
    const auto& args = e.contains("args") ? e["args"] : none;
    KernelSpan k{e.value("name", ""), args.value("grid", nlohmann::json()).dump() + args.value("block", nlohmann::json()).dump(),
                 e["ts"].get<double>(), e["dur"].get<double>()};
    if (k.name.find("nccl") == std::string::npos) {
      out.compute.push_back(std::move(k));
      continue;
    }
    out.nccl.push_back(k);
    auto launch = launches.find(args.value("correlation", int64_t{-1}));
    if (launch == launches.end()) continue;
    const auto& l = *launch->second;
    const double at = l["ts"].get<double>();
    for (const nlohmann::json* a : annotations) {
      const double from = (*a)["ts"].get<double>(), to = from + (*a)["dur"].get<double>();
      if ((*a)["tid"] != l["tid"] || at < from || at > to) continue;
      const auto& aargs = a->contains("args") ? (*a)["args"] : none;
      if (!aargs.contains("Input Dims") || !aargs.contains("Input type") || aargs["Input Dims"].empty()) break;
      double elems = 1;
      for (const auto& d : aargs["Input Dims"][0]) elems *= d.get<double>();
      const double bytes = elems * dtype_bytes(aargs["Input type"][0].get<std::string>());
      out.collectives.push_back({rank, (*a)["name"].get<std::string>().substr(5), bytes, k.dur_us});
      break;
    }
  }
  return out;
}

// Compute kernels wholly inside an NCCL kernel against launches of the same kernel (name, grid
// and block) that overlap none: the ratio of their medians, averaged weighted by the time spent
// overlapped. Kernels partly overlapped are left out.
void kineto_interference(const std::vector<KinetoRank>& ranks) {
  std::printf("compute slowed by NCCL kernels on the same GPU (same kernel and launch shape, inside vs clear of one)\n");
  for (size_t r = 0; r < ranks.size(); ++r) {
    std::map<std::string, std::pair<std::vector<double>, std::vector<double>>> by_kernel;  // inside, clear
    for (const KernelSpan& k : ranks[r].compute) {
      const double end = k.start_us + k.dur_us;
      bool inside = false, touches = false;
      for (const KernelSpan& n : ranks[r].nccl) {
        const double nend = n.start_us + n.dur_us;
        touches = touches || (n.start_us < end && k.start_us < nend);
        inside = inside || (n.start_us <= k.start_us && end <= nend);
      }
      auto& slot = by_kernel[k.name + k.shape];
      if (inside) slot.first.push_back(k.dur_us);
      else if (!touches) slot.second.push_back(k.dur_us);
    }
    double weighted = 0, weight = 0;
    int kinds = 0;
    for (const auto& [key, v] : by_kernel) {
      if (v.first.empty() || v.second.empty()) continue;
      double inside_us = 0;
      for (double d : v.first) inside_us += d;
      weighted += inside_us * profiler::median(v.first) / profiler::median(v.second);
      weight += inside_us;
      ++kinds;
    }
    std::printf("  rank %zu: %d kernels seen both ways, %.1f ms of them inside NCCL kernels: %.2fx (weighted by that time)\n", r,
                kinds, weight / 1e3, weight > 0 ? weighted / weight : 0.0);
  }
}

void bench_kineto(const std::string& dir) {
  std::vector<KinetoRank> ranks;
  for (int r : {0, 1}) {
    const std::string path = dir + "/sampled_rank-" + std::to_string(r) + ".json.gz";
    if (!std::ifstream(path)) {
      std::printf("kineto: %s is absent; skipped\n", path.c_str());
      return;
    }
    ranks.push_back(read_kineto(path, r));
  }
  std::printf("NCCL kernels of the shared Kineto fixtures (128 ranks: 16 nodes x 8 assumed) against prediction\n");
  std::printf("  The trace names no GPU or network. Its kernels report 16 blocks = 0.148 blocks per SM: 108 SMs, an A100.\n");
  std::printf("  Two networks: a100-nvlink-ib as shipped (DGX A100, 8 x 200 Gb/s HDR per node), and the same\n");
  std::printf("  node with 4 x 100 Gb/s per node (as AWS p4d's EFA). A kernel's time includes waiting for the\n");
  std::printf("  slowest of the 128 ranks to arrive, so measured >= transfer; the smallest of one size is the fairest.\n");
  auto efa = [](plan::HardwareProfile& hw) {
    hw.nics_per_node = 4;
    hw.network->bandwidth_gb_per_s = 12.5;
  };
  std::printf("  %4s %-16s %9s %11s %-13s %-14s\n", "rank", "collective", "MB", "kernel ms", "  DGX pred ms", "  4x100G pred ms");
  std::map<double, double> smallest;  // all-reduce bytes -> smallest measured
  for (const KinetoRank& kr : ranks) {
    for (const NcclKernel& k : kr.collectives) {
      if (k.collective != "all_reduce") {
        std::printf("  %4d %-16s %9.2f %11.2f   (not a collective Parallax plans)\n", k.rank, k.collective.c_str(),
                    k.bytes / 1e6, k.dur_us / 1e3);
        continue;
      }
      const Predicted dgx = predict_allreduce("a100-nvlink-ib", 16, 8, k.bytes, "auto");
      const Predicted p4d = predict_allreduce("a100-nvlink-ib", 16, 8, k.bytes, "auto", efa);
      auto ms = [](const Predicted& p) { return static_cast<double>((p.event.end - p.event.start).count_ns()) / 1e6; };
      std::printf("  %4d %-16s %9.2f %11.2f %8.2f %-4s %8.2f %-4s\n", k.rank, k.collective.c_str(), k.bytes / 1e6,
                  k.dur_us / 1e3, ms(dgx), plan::name(dgx.event.algorithm), ms(p4d), plan::name(p4d.event.algorithm));
      auto [it, fresh] = smallest.emplace(k.bytes, k.dur_us);
      if (!fresh) it->second = std::min(it->second, k.dur_us);
    }
  }
  std::printf("  smallest all-reduce kernel of each size against the 4 x 100G prediction:");
  for (const auto& [bytes, us] : smallest) {
    const Predicted p4d = predict_allreduce("a100-nvlink-ib", 16, 8, bytes, "auto", efa);
    std::printf(" %.0f MB %.2fx;", bytes / 1e6, us * 1e3 / static_cast<double>((p4d.event.end - p4d.event.start).count_ns()));
  }
  std::printf("\n");
  kineto_interference(ranks);
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
  const double sim_median = profiler::median(sim_s);
  const auto [fastest, slowest] = std::minmax_element(sim_s.begin(), sim_s.end());

  std::printf("step of %d ranks (%d stages x %d replicas, %d nodes), %.2fB params, %zu buckets, %d micro-batches\n",
              p.world_size, p.scenario.parallel.pipeline, replicas, p.nodes, static_cast<double>(params) / 1e9, buckets,
              p.scenario.parallel.chunks);
  std::printf("  plan        %.3f s\n", plan_s);
  std::printf("  simulate    %.3f s  (median of %d; %.3f-%.3f s; event loop %.3f s of it)\n", sim_median, repeats,
              *fastest, *slowest, profiler::median(loop_s));
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
  std::snprintf(text, sizeof text, "%.3f s (%.3f-%.3f)", profiler::median(v), *lo, *hi);
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
              median_range(large).c_str(), profiler::median(large) / profiler::median(small));
  std::printf("    second simulation (memory reused): %s -> %s = %.1fx for 8x the ranks\n",
              median_range(small_warm).c_str(), median_range(large_warm).c_str(),
              profiler::median(large_warm) / profiler::median(small_warm));
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
      bench_kineto(i + 1 < argc ? argv[i + 1] : PARALLAX_SOURCE_DIR "/../shared/fixtures/kineto");
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
  if (!step_only_bench) bench_published(published);
  bench_step(replicas, repeats, mixed);
  return 0;
}
