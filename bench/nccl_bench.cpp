#include "bench/nccl_bench.hpp"

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
#include "sim/event_queue.hpp"
#include "sim/metrics.hpp"
#include "sim/nccl_model.hpp"
#include "sim/simulator.hpp"
#include "timeline/compare.hpp"
#include "timeline/trace_reader.hpp"

namespace parallax::bench {
namespace {

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
  timeline::TimelineEvent event;
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
    if (e.lane != timeline::Lane::allreduce || e.rank != 0) continue;
    const double us = static_cast<double>((e.end - e.start).count_ns()) / 1e3;
    return {sim::allreduce_bus_gb_per_s(bytes, us, ranks), e};
  }
  throw std::runtime_error("no all-reduce simulated for " + profile);
}

std::string how(const timeline::TimelineEvent& e) {
  return std::string(timeline::name(e.algorithm)) + "/" + timeline::name(e.protocol);
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
  const auto doc = nlohmann::json::parse(timeline::read_file_maybe_gzip(path));
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
      weighted += inside_us * timeline::median(v.first) / timeline::median(v.second);
      weight += inside_us;
      ++kinds;
    }
    std::printf("  rank %zu: %d kernels seen both ways, %.1f ms of them inside NCCL kernels: %.2fx (weighted by that time)\n", r,
                kinds, weight / 1e3, weight > 0 ? weighted / weight : 0.0);
  }
}

}  // namespace

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
        std::printf("  %4d %-16s %9.2f %11.2f   (only all-reduces are compared here)\n", k.rank, k.collective.c_str(),
                    k.bytes / 1e6, k.dur_us / 1e3);
        continue;
      }
      const Predicted dgx = predict_allreduce("a100-nvlink-ib", 16, 8, k.bytes, "auto");
      const Predicted p4d = predict_allreduce("a100-nvlink-ib", 16, 8, k.bytes, "auto", efa);
      auto ms = [](const Predicted& p) { return static_cast<double>((p.event.end - p.event.start).count_ns()) / 1e6; };
      std::printf("  %4d %-16s %9.2f %11.2f %8.2f %-4s %8.2f %-4s\n", k.rank, k.collective.c_str(), k.bytes / 1e6,
                  k.dur_us / 1e3, ms(dgx), timeline::name(dgx.event.algorithm), ms(p4d), timeline::name(p4d.event.algorithm));
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

}  // namespace parallax::bench
