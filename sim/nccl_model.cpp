#include "sim/nccl_model.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

namespace parallax::sim {
namespace {

using timeline::Algorithm;
using plan::NcclConfig;
using timeline::Protocol;

// Figures from NVIDIA/nccl src/graph/tuning.cc (ncclTunerConstantsDefaults) and src/graph/topo.h at
// commit 5067397c2676d5aed50042fc39e5c8ee96eb0027. Columns are protocols LL, LL128, Simple; rows of
// the per-generation tables Volta, Ampere, Hopper, Blackwell; the last index is nodes 1, 2, more than 2.
constexpr int kTree = 0, kRing = 1;
constexpr double kBaseLatencyUs[2][3] = {{6.8, 14.0, 8.4}, {6.6, 14.0, 8.4}};  // baseLatencies
enum Hw { kNvlink, kPci, kNet };
constexpr double kHwLatencyUs[3][2][3] = {  // hwLatencies
    {{0.6, 1.25, 4.0}, {0.6, 1.9, 3.4}},    // NVLink: tree, ring
    {{1.0, 1.9, 4.0}, {1.0, 2.5, 5.7}},     // PCI
    {{5.0, 8.5, 14.0}, {2.7, 4.0, 14.0}}};  // NET
constexpr double kNvlsLatencyUs = 25;       // hwLatencies NVLINK NVLS Simple (NVLS's whole latency on one node)
constexpr double kLlMaxBw[4][3] = {  // llMaxBws
    {39.0, 39.0, 20.4}, {87.7, 22.5, 19.0}, {141.0, 45.0, 35.0}, {2 * 141.0, 2 * 45.0, 2 * 35.0}};
constexpr double kPerChMaxRingLl128Bw[4][3] = {{20, 20, 20}, {20, 20, 20}, {36.7, 36.7, 36.7}, {40.0, 40.0, 40.0}};
constexpr double kPerChMaxTreeLl128Bw[4][3] = {{20, 20, 20}, {20, 20, 20}, {36.7, 36.7, 29.0}, {55.6, 31.67, 20.0}};
constexpr double kPerChMaxTreeBw[4][3] = {{26.5, 18.5, 10.0}, {24.0, 23.6, 17.8}, {38.7, 41.4, 36.0}, {70.0, 42.8, 24.0}};
constexpr double kNvlsEfficiency[4] = {0, 0, 0.85, 0.74};  // nvlsEfficiency
constexpr double kNvlinkBw[4] = {20.0, 20.0, 20.6, 40.1};  // topo.h SM70/SM80/SM90/SM100_NVLINK_BW, per link
constexpr double kPciBw = 12.0;                      // topo.h PCI_BW (PCIe Gen3 x16)
// Trees stray from the model at medium sizes; NCCL scales their bandwidth by these, for sizes
// 64 B << i (treeCorrectionFactor).
constexpr double kTreeCorrection[3][23] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9}};

int gen(const NcclConfig& c) { return static_cast<int>(c.generation); }
int proto(Protocol p) { return p == Protocol::ll ? 0 : p == Protocol::ll128 ? 1 : 2; }
int log2i(double x) { return x >= 1 ? static_cast<int>(std::floor(std::log2(x))) : -1; }

// Network post overhead per inter-node ring step (getNetOverhead: Intel 1 us, AMD 2 us; x3 for Simple).
double net_overhead_us(const NcclConfig& c, Protocol p) {
  const double base = c.cpu == NcclConfig::Cpu::amd ? 2.0 : 1.0;
  return p == Protocol::simple ? 3 * base : base;
}

double ring_latency_us(const NcclConfig& c, const Communicator& m, Collective coll, Protocol p) {
  const int n = m.ranks, nodes = m.nodes;
  const bool all_reduce = coll == Collective::all_reduce;
  const int steps = all_reduce ? 2 * (n - 1) : n - 1;
  const int inter_steps = nodes == 1 ? 0 : all_reduce ? 2 * (nodes - 1) : nodes - 1;
  const Hw intra_hw = c.nvlinks > 0 ? kNvlink : kPci;
  double intra = kHwLatencyUs[intra_hw][kRing][proto(p)];
  if (nodes > 1) intra = std::max(intra, net_overhead_us(c, p));
  // With one rank per node every step is exposed; NCCL then takes the tree's network latency.
  const double inter = kHwLatencyUs[kNet][n == nodes ? kTree : kRing][proto(p)];
  return kBaseLatencyUs[kRing][proto(p)] + (steps - inter_steps) * intra + inter_steps * inter;
}

double tree_latency_us(const NcclConfig& c, const Communicator& m, Protocol p) {
  const int ppn = m.ranks / m.nodes;
  const Hw intra_hw = c.nvlinks > 0 ? kNvlink : kPci;
  const double intra = kHwLatencyUs[intra_hw][kTree][proto(p)];
  const double inter = kHwLatencyUs[kNet][kTree][proto(p)];
  return kBaseLatencyUs[kTree][proto(p)] + 2 * ((ppn - 1) * intra + std::max(0, log2i(m.nodes)) * inter);
}

// NCCL's bus bandwidth of an algorithm and protocol, before it becomes algorithm bandwidth.
double bus_bandwidth(const NcclConfig& c, const Communicator& m, Algorithm a, Protocol p) {
  const int g = gen(c), by_nodes = m.nodes <= 2 ? m.nodes - 1 : 2;
  const int cpu_row = c.cpu == NcclConfig::Cpu::amd ? 1 : 0;  // across nodes LL's cap goes by CPU
  const double ll_max = kLlMaxBw[m.nodes == 1 ? g : cpu_row][by_nodes];
  const double ch = c.channels;
  double bw = m.bus_gb_per_s;
  if (a == Algorithm::ring && p == Protocol::ll) bw = std::min(ll_max, bw * .5);
  if (a == Algorithm::ring && p == Protocol::ll128) bw = std::min(bw * .92, ch * kPerChMaxRingLl128Bw[g][by_nodes]);
  if (a == Algorithm::tree) {
    bw = std::min(bw * .92, ch * kPerChMaxTreeBw[g][by_nodes]);
    if (p == Protocol::ll) bw = std::min(bw / 3.8, ll_max);
    if (p == Protocol::ll128)
      bw = std::min(bw * (m.nodes == 1 ? 7.0 / 9.0 : 120.0 / 128.0), ch * kPerChMaxTreeLl128Bw[g][by_nodes]);
  }
  return bw;
}

PhaseCost unavailable(Protocol p) { return {p, 0, 0, false}; }

}  // namespace

GroupShape group_shape(const std::vector<int>& member_nodes, int nodes, const plan::HardwareProfile& hw) {
  GroupShape shape;
  shape.ranks = static_cast<int>(member_nodes.size());
  shape.nodes = shape.per_node = 0;
  std::vector<int> on_node(static_cast<size_t>(nodes), 0);  // members on each node
  for (int node : member_nodes) {
    const int n = ++on_node[static_cast<size_t>(node)];
    if (n == 1) ++shape.nodes;
    shape.per_node = std::max(shape.per_node, n);
  }
  shape.nic_gb_per_s = hw.network ? hw.network->bandwidth_gb_per_s : 0;
  shape.nics_per_node = hw.nics_per_node;
  return shape;
}

double CollectiveCost::time_us(double bytes) const {
  double t = 0;
  for (const PhaseCost& p : phases) t += p.time_us(bytes);
  return t;
}

double nccl_intra_gb_per_s(const NcclConfig& cfg) {
  return cfg.nvlinks > 0 ? cfg.nvlinks * kNvlinkBw[gen(cfg)] : kPciBw;
}

PhaseCost nccl_cost(const NcclConfig& cfg, const Communicator& m, Collective coll, Algorithm a, Protocol p,
                    double bytes) {
  const bool across = m.nodes > 1;
  if (m.ranks <= 1) return {p, 0, std::numeric_limits<double>::infinity(), across};
  // LL128 needs NVLink inside the node (tuning.cc: typeIntra <= PATH_NVB).
  if (p == Protocol::ll128 && cfg.nvlinks == 0) return unavailable(p);
  const int n = m.ranks;
  if (a == Algorithm::nvls) {
    // One node of a Hopper or Blackwell NVSwitch: each GPU sends its buffer to the switch once and receives the
    // reduced buffer once, at NCCL's NVLS efficiency, one channel short (tuning.cc's NVLS factors;
    // NCCL's own NVLS formula caps it at the ring's bandwidth, which nccl-tests issue 212 shows is
    // too low: ~480 GB/s bus bandwidth measured against ~370 for the ring).
    if (!cfg.nvls || m.nodes != 1 || coll != Collective::all_reduce || p != Protocol::simple) return unavailable(p);
    const double bw = m.bus_gb_per_s * kNvlsEfficiency[gen(cfg)] * (cfg.channels - 1) / cfg.channels;
    return {p, kNvlsLatencyUs, bw, false};
  }
  if (a == Algorithm::tree) {
    if (coll != Collective::all_reduce) return unavailable(p);
    double bw = bus_bandwidth(cfg, m, a, p) * .5;
    const int log_size = log2i(bytes / 64);
    if (log_size >= 0 && log_size < 23) bw *= kTreeCorrection[proto(p)][log_size];
    return {p, tree_latency_us(cfg, m, p), bw, across};
  }
  const int steps = coll == Collective::all_reduce ? 2 * (n - 1) : n - 1;
  const double bw = bus_bandwidth(cfg, m, Algorithm::ring, p) * n / steps;
  double lat = ring_latency_us(cfg, m, coll, p);
  // "Plateau effect of ring" across nodes once each channel's slice per rank reaches 64 bytes.
  if (p == Protocol::simple && across && coll == Collective::all_reduce && bytes / (cfg.channels * n) >= 64)
    lat *= cfg.generation == NcclConfig::Generation::volta ? 1.9 : 1.4;
  return {p, lat, bw, across};
}

PhaseCost best_protocol(const NcclConfig& cfg, const Communicator& m, Collective coll, Algorithm a, double bytes) {
  PhaseCost best = unavailable(Protocol::simple);
  double best_time = std::numeric_limits<double>::infinity();
  for (Protocol p : {Protocol::ll, Protocol::ll128, Protocol::simple}) {
    if (cfg.protocol != "auto" && cfg.protocol != (p == Protocol::ll ? "ll" : p == Protocol::ll128 ? "ll128" : "simple"))
      continue;
    const PhaseCost c = nccl_cost(cfg, m, coll, a, p, bytes);
    if (c.bandwidth_gb_per_s <= 0) continue;
    if (c.time_us(bytes) < best_time) {
      best_time = c.time_us(bytes);
      best = c;
    }
  }
  return best;
}

namespace {

// Reduce-scatter inside each node, each shard all-reduced across nodes on its rail, all-gather.
CollectiveCost hierarchical(const NcclConfig& cfg, const GroupShape& g, double bytes) {
  CollectiveCost c;
  c.algorithm = Algorithm::hierarchical;
  const double intra = nccl_intra_gb_per_s(cfg);
  const int k = g.per_node;
  const Communicator inside{k, 1, intra};
  // k rails share the node's NICs; a rail never gets more than one NIC.
  const double rail = std::min(intra, g.nic_gb_per_s * std::min(1.0, static_cast<double>(g.nics_per_node) / k));
  const Communicator across{g.nodes, g.nodes, rail};
  const double shard = bytes / k;
  PhaseCost inter;
  for (Algorithm a : {Algorithm::tree, Algorithm::ring}) {
    const PhaseCost p = best_protocol(cfg, across, Collective::all_reduce, a, shard);
    if (p.bandwidth_gb_per_s > 0 && (inter.bandwidth_gb_per_s <= 0 || p.time_us(shard) < inter.time_us(shard))) inter = p;
  }
  inter.bandwidth_gb_per_s *= k;  // every rail at once: the whole buffer moves k times as fast
  inter.across_nodes = true;
  c.phases = {best_protocol(cfg, inside, Collective::reduce_scatter, Algorithm::ring, bytes), inter,
              best_protocol(cfg, inside, Collective::all_gather, Algorithm::ring, bytes)};
  return c;
}

bool allowed(const NcclConfig& cfg, Algorithm a) { return cfg.algorithm == "auto" || cfg.algorithm == timeline::name(a); }

}  // namespace

std::vector<CollectiveCost> allreduce_candidates(const NcclConfig& cfg, const GroupShape& g, double bytes) {
  std::vector<CollectiveCost> out;
  const double intra = nccl_intra_gb_per_s(cfg);
  // A ring or tree across nodes goes through as many NICs as a node has members to drive them.
  const double inter = g.nic_gb_per_s * std::min(g.nics_per_node, g.per_node);
  const Communicator whole{g.ranks, g.nodes, g.nodes == 1 ? intra : std::min(intra, inter)};
  // NCCL's order: tree before ring, so a tie goes to the tree.
  for (Algorithm a : {Algorithm::tree, Algorithm::ring, Algorithm::nvls}) {
    if (!allowed(cfg, a)) continue;
    const PhaseCost p = best_protocol(cfg, whole, Collective::all_reduce, a, bytes);
    if (p.bandwidth_gb_per_s > 0) out.push_back({a, {p}});
  }
  if (g.nodes > 1 && g.per_node > 1 && allowed(cfg, Algorithm::hierarchical)) out.push_back(hierarchical(cfg, g, bytes));
  return out;
}

CollectiveCost choose_allreduce(const NcclConfig& cfg, const GroupShape& g, double bytes) {
  const std::vector<CollectiveCost> all = allreduce_candidates(cfg, g, bytes);
  if (all.empty()) {
    // A forced algorithm this group cannot run (nvls across nodes, hierarchical inside one): ring,
    // as NCCL falls back when its NCCL_ALGO choice is unavailable.
    plan::NcclConfig ring = cfg;
    ring.algorithm = "ring";
    ring.protocol = "auto";
    return allreduce_candidates(ring, g, bytes).front();
  }
  return *std::min_element(all.begin(), all.end(),
                           [&](const CollectiveCost& a, const CollectiveCost& b) { return a.time_us(bytes) < b.time_us(bytes); });
}

namespace {

// All-gather and reduce-scatter: NCCL runs them only as rings over the whole group.
PhaseCost ring_only(const NcclConfig& cfg, const GroupShape& g, Collective coll, double bytes) {
  const double intra = nccl_intra_gb_per_s(cfg);
  const double inter = g.nic_gb_per_s * std::min(g.nics_per_node, g.per_node);
  const Communicator whole{g.ranks, g.nodes, g.nodes == 1 ? intra : std::min(intra, inter)};
  PhaseCost p = best_protocol(cfg, whole, coll, Algorithm::ring, bytes);
  p.across_nodes = g.nodes > 1;
  return p;
}

}  // namespace

CollectiveCost choose_reduce_scatter(const NcclConfig& cfg, const GroupShape& g, double bytes) {
  return {Algorithm::ring, {ring_only(cfg, g, Collective::reduce_scatter, bytes)}};
}

namespace {

// collective_time_us, with the all-reduce's choice from `all_reduce()`.
template <typename AllReduce>
double alone_time_us(const NcclConfig& cfg, const GroupShape& g, Collective coll, double bytes, AllReduce&& all_reduce) {
  if (g.ranks <= 1 || bytes <= 0) return 0;
  const double us = coll == Collective::all_reduce ? all_reduce().time_us(bytes) : ring_only(cfg, g, coll, bytes).time_us(bytes);
  return us * cfg.stretch(bytes);
}

}  // namespace

double collective_time_us(const NcclConfig& cfg, const GroupShape& g, Collective coll, double bytes) {
  return alone_time_us(cfg, g, coll, bytes, [&] { return choose_allreduce(cfg, g, bytes); });
}

double allreduce_bus_gb_per_s(double bytes, double time_us, int ranks) {
  return bytes / (time_us * 1e3) * 2.0 * (ranks - 1) / ranks;
}

size_t NcclChoices::KeyHash::operator()(const Key& k) const {
  size_t h = std::hash<double>{}(k.bytes);
  for (size_t v : {static_cast<size_t>(k.group.ranks), static_cast<size_t>(k.group.nodes), static_cast<size_t>(k.group.per_node),
                   std::hash<double>{}(k.group.nic_gb_per_s), static_cast<size_t>(k.group.nics_per_node), static_cast<size_t>(k.coll)})
    h ^= v + 0x9e3779b97f4a7c15 + (h << 6) + (h >> 2);  // boost::hash_combine's mix
  return h;
}

const CollectiveCost& NcclChoices::choice(const Key& key) {
  // A search that runs for minutes meets a few thousand shapes and sizes; should one meet far more,
  // start again rather than grow without end.
  if (kept_.size() > (size_t{1} << 20)) kept_.clear();
  auto [it, added] = kept_.try_emplace(key);
  if (added)
    it->second = key.coll == Collective::all_reduce ? choose_allreduce(cfg_, key.group, key.bytes)
                                                    : choose_reduce_scatter(cfg_, key.group, key.bytes);
  return it->second;
}

const CollectiveCost& NcclChoices::all_reduce(const GroupShape& g, double bytes) {
  return choice({g, Collective::all_reduce, bytes});
}

const CollectiveCost& NcclChoices::reduce_scatter(const GroupShape& g, double bytes) {
  return choice({g, Collective::reduce_scatter, bytes});
}

double NcclChoices::time_us(const GroupShape& g, Collective coll, double bytes) {
  return alone_time_us(cfg_, g, coll, bytes, [&]() -> const CollectiveCost& { return all_reduce(g, bytes); });
}

}  // namespace parallax::sim
