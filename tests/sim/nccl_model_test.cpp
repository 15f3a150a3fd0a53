#include <catch2/catch.hpp>
#include <fstream>
#include <sstream>
#include <utility>

#include "sim/cost_model.hpp"
#include "sim/nccl_model.hpp"
#include "sim/simulator.hpp"
#include "tests/test_util.hpp"
#include "timeline/trace_writer.hpp"

using namespace parallax;
using timeline::Algorithm;
using timeline::Protocol;

namespace {

// DGX A100 as NCCL tunes it: Ampere, 12 NVLinks of 20 GB/s (topo.h SM80_NVLINK_BW), 24 channels.
plan::NcclConfig dgx_a100() {
  plan::NcclConfig c;
  c.generation = plan::NcclConfig::Generation::ampere;
  c.nvlinks = 12;
  c.channels = 24;
  c.cpu = plan::NcclConfig::Cpu::amd;
  return c;
}

sim::GroupShape shape(int nodes, int per_node) {
  return {nodes * per_node, nodes, per_node, 25.0, 8};
}

// The lone all-reduce of a one-bucket, one-layer plan on rank 0.
timeline::TimelineEvent lone_allreduce(const plan::Plan& p, sim::SimRun* out = nullptr) {
  sim::SimRun run = sim::simulate(p);
  for (const auto& e : run.timeline.events) {
    if (e.lane == timeline::Lane::allreduce && e.rank == 0) {
      if (out) *out = std::move(run);
      return e;
    }
  }
  FAIL("no all-reduce");
  return {};
}

std::string one_bucket(double mib, int replicas) {
  return "model: {preset: synthetic, layers: 1, fwd_us_per_sample: 1, params_mb: " + std::to_string(mib) + "}\n"
         "data: {batch_size: 1}\n"
         "parallel: {data: " + std::to_string(replicas) + ", chunks: 1, first_bucket_mb: 100000, bucket_cap_mb: 100000}\n";
}

}  // namespace

TEST_CASE("sim::nccl_model: one DGX A100 node switches ring LL -> LL128 -> Simple where NCCL's formulas cross", "[sim]") {
  // Worked by hand from src/graph/tuning.cc (8 ranks, 1 node, bus 12 x 20 = 240 GB/s, 24 channels):
  //   ring LL     latency 6.6 + 14 x 0.6 = 15.0 us,  bus min(87.7, 240 x .5) = 87.7
  //   ring LL128  latency 14 + 14 x 1.9 = 40.6 us,   bus min(240 x .92, 24 x 20) = 220.8
  //   ring Simple latency 8.4 + 14 x 3.4 = 56.0 us,  bus 240
  // algorithm bandwidth = bus x n / 2(n-1) = bus x 8/14; the tree is slower at every size here.
  const double ll = 87.7 * 8 / 14, ll128 = 220.8 * 8 / 14, simple = 240.0 * 8 / 14;
  const double to_ll128 = (40.6 - 15.0) * 1e3 / (1 / ll - 1 / ll128);       // bytes
  const double to_simple = (56.0 - 40.6) * 1e3 / (1 / ll128 - 1 / simple);  // bytes
  const plan::NcclConfig cfg = dgx_a100();
  auto chosen = [&](double bytes) { return sim::choose_allreduce(cfg, shape(1, 8), bytes); };
  for (double bytes : {1024.0, to_ll128 * 0.97}) {
    INFO(bytes << " bytes");
    CHECK(chosen(bytes).algorithm == Algorithm::ring);
    CHECK(chosen(bytes).phases.front().protocol == Protocol::ll);
  }
  CHECK(chosen(to_ll128 * 1.03).phases.front().protocol == Protocol::ll128);
  CHECK(chosen(to_simple * 0.97).phases.front().protocol == Protocol::ll128);
  CHECK(chosen(to_simple * 1.03).phases.front().protocol == Protocol::simple);
  CHECK(chosen(4.0 * (1 << 30)).time_us(4.0 * (1 << 30)) == Approx(56.0 + 4.0 * (1 << 30) / (simple * 1e3)));
}

TEST_CASE("sim::nccl_model: across 16 DGX A100 nodes small buffers take the tree, large ones the ring", "[sim]") {
  // Tree LL: 6.8 + 2 x (7 x 0.6 + log2(16) x 5.0) = 55.2 us against the ring's 2(n-1) = 254 steps:
  // 6.6 + 224 x 2.0 (AMD's network post overhead) + 30 x 2.7 = 535.6 us.
  const plan::NcclConfig cfg = dgx_a100();
  const auto small = sim::choose_allreduce(cfg, shape(16, 8), 64 * 1024);
  CHECK(small.algorithm == Algorithm::tree);
  CHECK(small.phases.front().latency_us == Approx(55.2));
  // 4 GiB: ring bus min(240, 8 NICs x 25) = 200 -> 200 x 128/254; tree 200 x .92 x .5 = 92.
  const double big = 4.0 * (1 << 30);
  const auto large = sim::choose_allreduce(cfg, shape(16, 8), big);
  CHECK(large.algorithm == Algorithm::ring);
  CHECK(large.phases.front().bandwidth_gb_per_s == Approx(200.0 * 128 / 254));
}

TEST_CASE("sim::nccl_model: a DGX B200 node runs on NCCL's Blackwell rows, twice Hopper's NVLink a link", "[sim]") {
  // src/graph/topo.h SM100_NVLINK_BW 40.1 GB/s a link (SM90: 20.6); tuning.cc nvlsEfficiency 0.74
  // for Blackwell (Hopper 0.85). 8 ranks, 1 node, 18 NVLinks, 32 channels; 4 GiB, Simple:
  //   ring: bus 18 x 40.1 = 721.8 GB/s, algorithm bandwidth 721.8 x 8/14
  //   NVLS: 721.8 x 0.74 x 31/32 = 517.4, the faster
  plan::NcclConfig cfg;
  cfg.generation = plan::NcclConfig::Generation::blackwell;
  cfg.nvlinks = 18;
  cfg.channels = 32;
  cfg.nvls = true;
  CHECK(sim::nccl_intra_gb_per_s(cfg) == Approx(18 * 40.1));
  const double big = 4.0 * (1 << 30);
  const auto nvls = sim::choose_allreduce(cfg, shape(1, 8), big);
  CHECK(nvls.algorithm == Algorithm::nvls);
  CHECK(nvls.phases.front().bandwidth_gb_per_s == Approx(18 * 40.1 * 0.74 * 31 / 32));
  cfg.nvls = false;
  const auto ring = sim::choose_allreduce(cfg, shape(1, 8), big);
  CHECK(ring.algorithm == Algorithm::ring);
  CHECK(ring.phases.front().bandwidth_gb_per_s == Approx(18 * 40.1 * 8 / 14));
  // The shipped profile says so: its all-reduce inside a node runs at Blackwell's rate, not Hopper's.
  CHECK(test::builtin_profile("b200-nvlink-ib").nccl->generation == plan::NcclConfig::Generation::blackwell);
  CHECK(test::builtin_profile("h100-nvlink-ib").nccl->generation == plan::NcclConfig::Generation::hopper);
}

TEST_CASE("sim: the hierarchical all-reduce takes the sum of its phases and drives every NIC", "[sim]") {
  // 2 nodes x 8 GPUs, 8 NICs of 25 GB/s, NCCL forced to the hierarchical form with Simple.
  const double mib = 64, S = mib * 1024 * 1024;
  const auto p = test::plan_from(one_bucket(mib, 16) +
                                 "hardware:\n"
                                 "  device: {memory_gb: 80, memory_bandwidth_gb_per_s: 2039, peak_tflops: {fp32: 19.5}}\n"
                                 "  node: {devices: 8, link: {name: nvlink3, bandwidth_gb_per_s: 300, latency_us: 2}}\n"
                                 "  network: {name: ib, nics_per_node: 8, bandwidth_gb_per_s: 25, latency_us: 5}\n"
                                 "  nccl: {generation: ampere, nvlinks: 12, channels: 24, cpu: amd,\n"
                                 "         algorithm: hierarchical, protocol: simple}\n");
  sim::SimRun run;
  const auto ar = lone_allreduce(p, &run);
  CHECK(ar.algorithm == Algorithm::hierarchical);
  // Reduce-scatter inside a node (ring of 8, 7 steps): 8.4 + 7 x 3.4 us, bus 240 x 8/7 per buffer byte.
  const double reduce_scatter_us = 8.4 + 7 * 3.4 + S / (240e3 * 8 / 7);
  // Each 1/8 shard across the 2 nodes on its own rail (ring of 2, one GPU per node: the network
  // tree latency 14 us per step, x 1.4 ring plateau), 25 GB/s per rail, the 8 rails at once.
  const double across_us = (8.4 + 2 * 14.0) * 1.4 + (S / 8) / 25e3;
  const double expected_us = reduce_scatter_us + across_us + reduce_scatter_us;  // all-gather = reduce-scatter
  CHECK(static_cast<double>((ar.end - ar.start).count_ns()) == Approx(expected_us * 1e3).margin(5));
  int nics = 0;
  for (const auto& l : run.links) {
    if (l.name.find("/nic") == std::string::npos) continue;
    ++nics;
    INFO(l.name);
    CHECK(l.bytes > 0);
  }
  CHECK(nics == 2 * 8 * 2);  // every NIC of both nodes, up and down
}

TEST_CASE("sim: the trace names NCCL's algorithm and protocol of each all-reduce", "[sim]") {
  const auto p = test::plan_from(one_bucket(1, 8) + "hardware: a100-nvlink-ib\n");
  const auto ar = lone_allreduce(p);
  CHECK(ar.algorithm == Algorithm::ring);
  CHECK(ar.protocol == Protocol::ll);
  timeline::Timeline t;
  t.events.push_back(ar);
  std::ostringstream out;
  timeline::write_chrome_trace(t, out);
  CHECK_THAT(out.str(), Catch::Contains("\"algorithm\":\"ring\"") && Catch::Contains("\"protocol\":\"LL\""));
}

TEST_CASE("sim: large all-reduces are within 15% of published nccl-tests bus bandwidths", "[sim]") {
  std::ifstream in(std::string(PARALLAX_SOURCE_DIR) + "/bench/data/nccl_allreduce_published.csv");
  REQUIRE(in);
  std::string line;
  int rows = 0;
  bool header = true;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (std::exchange(header, false)) continue;
    std::stringstream ss(line);
    std::string profile, nodes, per_node, bytes, algorithm, busbw;
    for (std::string* f : {&profile, &nodes, &per_node, &bytes, &algorithm, &busbw}) std::getline(ss, *f, ',');
    const double size = std::stod(bytes);
    if (size < (1 << 30)) continue;  // the latency-bound region is checked for its shape, not its figures
    const int ranks = std::stoi(nodes) * std::stoi(per_node);
    plan::Scenario s = test::scenario_from(one_bucket(size / 1048576, ranks) + "hardware: {profile: " + profile +
                                           ", nodes: " + nodes + "}\n");
    s.hardware.nccl->algorithm = algorithm;
    const auto ar = lone_allreduce(plan::resolve_plan(s));
    const double predicted =
        sim::allreduce_bus_gb_per_s(size, static_cast<double>((ar.end - ar.start).count_ns()) / 1e3, ranks);
    INFO(line << "\npredicted " << predicted << " GB/s");
    CHECK(predicted == Approx(std::stod(busbw)).epsilon(0.15));
    ++rows;
  }
  CHECK(rows >= 4);
}

TEST_CASE("sim: predicted bus bandwidth rises with the message size from the latency-bound region", "[sim]") {
  // nccl-tests' curves (e.g. nccl-tests issue 175's sweep) climb from a few GB/s at kilobytes to
  // the plateau at gigabytes; a model stuck at one protocol's latency would not.
  for (int nodes : {1, 4}) {
    double last = 0;
    for (double mib : {0.0625, 1.0, 16.0, 256.0, 4096.0}) {
      plan::Scenario s = test::scenario_from(one_bucket(mib, nodes * 8) + "hardware: {profile: h100-nvlink-ib, nodes: " +
                                             std::to_string(nodes) + "}\n");
      const auto ar = lone_allreduce(plan::resolve_plan(s));
      const double bw = sim::allreduce_bus_gb_per_s(mib * 1048576, (ar.end - ar.start).count_ns() / 1e3, nodes * 8);
      INFO(nodes << " nodes, " << mib << " MiB: " << bw << " GB/s");
      CHECK(bw > last);
      last = bw;
    }
    CHECK(last > 300);
  }
}

TEST_CASE("plan: a profile's nccl section is checked like every other key", "[sim]") {
  const std::string head = one_bucket(1, 2) +
                           "hardware:\n"
                           "  device: {memory_gb: 80, peak_tflops: {fp32: 19.5}}\n"
                           "  node: {devices: 8, link: {bandwidth_gb_per_s: 300, latency_us: 2}}\n";
  CHECK_THAT(test::parse_error(head + "  nccl: {generation: pascal, nvlinks: 4, channels: 8}\n"),
             Catch::StartsWith("test.yaml:7:") && Catch::Contains("generation"));
  CHECK_THAT(test::parse_error(head + "  nccl: {generation: ampere, nvlinks: 12, channels: 8, nvls: true}\n"),
             Catch::StartsWith("test.yaml:7:") && Catch::Contains("hopper"));
  CHECK_THAT(test::parse_error(head + "  nccl: {generation: ampere, nvlinks: 12, channels: 0}\n"),
             Catch::StartsWith("test.yaml:7:"));
  CHECK_THAT(test::parse_error(head + "  nccl: {generation: ampere, nvlinks: 12, channels: 8, chanels: 2}\n"),
             Catch::StartsWith("test.yaml:7:") && Catch::Contains("chanels"));
  CHECK(test::parse_error(head + "  nccl: {generation: ampere, nvlinks: 12, channels: 8}\n").empty());
  CHECK(test::parse_error(head + "  nccl: {generation: blackwell, nvlinks: 18, channels: 32, nvls: true}\n").empty());
}

TEST_CASE("sim: the CPU host and the ideal machine keep the plain all-reduce model", "[sim]") {
  for (const char* name : {"cpu-host", "ideal"}) {
    INFO(name);
    const auto p = test::plan_from(one_bucket(1, 2) + "hardware: " + name + "\n");
    CHECK_FALSE(p.scenario.hardware.nccl);
    CHECK(lone_allreduce(p).protocol == Protocol::none);
  }
}

TEST_CASE("plan: nccl.stretch_by_size is checked: [MiB, factor] pairs, sizes rising, factors 1-10", "[sim]") {
  const std::string head = one_bucket(1, 2) +
                           "hardware:\n"
                           "  device: {memory_gb: 80, peak_tflops: {fp32: 19.5}}\n"
                           "  node: {devices: 8, link: {bandwidth_gb_per_s: 300, latency_us: 2}}\n"
                           "  nccl: {generation: ampere, nvlinks: 12, channels: 8, stretch_by_size: ";
  CHECK_THAT(test::parse_error(head + "[[4, 1.5], [2, 1.2]]}\n"), Catch::StartsWith("test.yaml:7:") && Catch::Contains("larger"));
  CHECK_THAT(test::parse_error(head + "[[1, 0.5]]}\n"), Catch::StartsWith("test.yaml:7:") && Catch::Contains("[1, 10]"));
  CHECK_THAT(test::parse_error(head + "[[1, 1.5, 2]]}\n"), Catch::StartsWith("test.yaml:7:") && Catch::Contains("pair"));
  CHECK_THAT(test::parse_error(head + "1.5}\n"), Catch::StartsWith("test.yaml:7:") && Catch::Contains("list"));
  CHECK(test::parse_error(head + "[[1, 1.5], [4, 1.1]]}\n").empty());
}

TEST_CASE("plan: the stretch is interpolated on log2(size) and held flat past the ends", "[sim]") {
  plan::NcclConfig c = dgx_a100();
  CHECK(c.stretch(12345.0) == 1.0);  // no table: NCCL's model as it is
  c.stretch_by_size = {{1, 1.6}, {4, 1.2}};
  const double mib = 1048576;
  CHECK(c.stretch(0.25 * mib) == Approx(1.6));
  CHECK(c.stretch(1 * mib) == Approx(1.6));
  CHECK(c.stretch(2 * mib) == Approx(1.4));  // halfway between 1 and 4 MiB in log2
  CHECK(c.stretch(4 * mib) == Approx(1.2));
  CHECK(c.stretch(64 * mib) == Approx(1.2));
}

TEST_CASE("sim: a stretch of f makes a lone all-reduce take f times NCCL's predicted time", "[sim]") {
  // One node of 8, 64 MiB, forced to ring/Simple: NCCL's model gives 8.4 + 14 x 3.4 us of latency
  // and the ring's bus bandwidth 240 x 8/14 per buffer byte (the hierarchical test's figures).
  const double mib = 64, S = mib * 1024 * 1024;
  const std::string hw = "hardware:\n"
                         "  device: {memory_gb: 80, peak_tflops: {fp32: 19.5}}\n"
                         "  node: {devices: 8, link: {name: nvlink3, bandwidth_gb_per_s: 300, latency_us: 2}}\n"
                         "  nccl: {generation: ampere, nvlinks: 12, channels: 24, algorithm: ring, protocol: simple";
  const double model_us = 8.4 + 14 * 3.4 + S / (240e3 * 8 / 14);
  for (double f : {1.0, 1.5}) {
    INFO("stretch " << f);
    const std::string stretch = f == 1.0 ? "}\n" : ", stretch_by_size: [[16, 1.5], [256, 1.5]]}\n";
    const auto ar = lone_allreduce(test::plan_from(one_bucket(mib, 8) + hw + stretch));
    CHECK(static_cast<double>((ar.end - ar.start).count_ns()) == Approx(f * model_us * 1e3).margin(5));
  }
}

TEST_CASE("sim: the distributed optimizer reduce-scatters its buckets: half a ring all-reduce's bytes", "[sim]") {
  // NCCL's ring moves 2(n-1)/n of the buffer per rank for an all-reduce and (n-1)/n for a
  // reduce-scatter: at a large size, where latency is nothing, the time halves.
  plan::NcclConfig c = dgx_a100();
  c.algorithm = "ring";
  c.protocol = "simple";
  const double bytes = 4.0 * (1 << 30);
  for (const auto& g : {shape(1, 8), shape(4, 8)}) {
    const double ring = sim::choose_allreduce(c, g, bytes).time_us(bytes);
    const double rs = sim::choose_reduce_scatter(c, g, bytes).time_us(bytes);
    CHECK(rs == Approx(ring / 2).epsilon(0.02));
  }
  // In a plan: a one-bucket DDP over 8 GPUs of a node, with and without the distributed optimizer
  // (the gradients' bytes are the same; master weights keep them fp32 either way).
  const std::string yaml = one_bucket(1024, 8) + "hardware: a100-nvlink-ib\n";
  const auto whole = lone_allreduce(test::plan_from(yaml, {"parallel.precision=bf16", "parallel.master_weights=true"}));
  const auto shard = lone_allreduce(test::plan_from(yaml, {"parallel.precision=bf16", "parallel.master_weights=true",
                                                           "parallel.shard=optimizer"}));
  CHECK(shard.bytes == whole.bytes);
  CHECK((shard.end - shard.start).to_us() < 0.75 * (whole.end - whole.start).to_us());
}

TEST_CASE("sim::NcclChoices: kept choices are NCCL's model's, asked in any order and again", "[sim]") {
  plan::NcclConfig stretched = dgx_a100();
  stretched.stretch_by_size = {{16, 1.2}, {256, 1.5}};
  for (const plan::NcclConfig& cfg : {dgx_a100(), stretched}) {
    sim::NcclChoices kept(cfg);
    for (int round = 0; round < 2; ++round)  // the second round answers from what the first kept
      for (int nodes : {1, 2, 16})
        for (int per_node : {1, 4, 8})
          for (double bytes : {0.0, 1e3, 64e3, 1e6, 25e6, 4e9}) {
            const sim::GroupShape g = shape(nodes, per_node);
            INFO("round " << round << ", " << nodes << " x " << per_node << ", " << bytes << " bytes");
            const sim::CollectiveCost want = sim::choose_allreduce(cfg, g, bytes);
            const sim::CollectiveCost& got = kept.all_reduce(g, bytes);
            CHECK(got.algorithm == want.algorithm);
            REQUIRE(got.phases.size() == want.phases.size());
            for (size_t i = 0; i < want.phases.size(); ++i) {
              CHECK(got.phases[i].protocol == want.phases[i].protocol);
              CHECK(got.phases[i].latency_us == want.phases[i].latency_us);
              CHECK(got.phases[i].bandwidth_gb_per_s == want.phases[i].bandwidth_gb_per_s);
            }
            CHECK(kept.reduce_scatter(g, bytes).time_us(bytes) == sim::choose_reduce_scatter(cfg, g, bytes).time_us(bytes));
            for (sim::Collective c : {sim::Collective::all_reduce, sim::Collective::reduce_scatter, sim::Collective::all_gather})
              CHECK(kept.time_us(g, c, bytes) == sim::collective_time_us(cfg, g, c, bytes));
          }
  }
}

TEST_CASE("sim: a simulation given another profile's NCCL choices makes its own", "[sim]") {
  const plan::Plan p = test::plan_from(one_bucket(64, 16) + "hardware: a100-nvlink-ib\n");
  plan::NcclConfig other = *p.scenario.hardware.nccl;
  other.algorithm = "tree";  // choices kept for another NCCL would time the bucket as a tree
  sim::NcclChoices foreign(other), same(*p.scenario.hardware.nccl);
  const double bytes = static_cast<double>(p.stages[0].buckets[0].bytes);
  sim::GroupShape g{16, 2, 8, p.scenario.hardware.network->bandwidth_gb_per_s, p.scenario.hardware.nics_per_node};
  REQUIRE(foreign.time_us(g, sim::Collective::all_reduce, bytes) != same.time_us(g, sim::Collective::all_reduce, bytes));
  const plan::Time plain = sim::simulate(p).step_time;
  for (sim::NcclChoices* choices : {&foreign, &same}) {
    sim::SimOptions options;
    options.nccl_choices = choices;
    CHECK(sim::simulate(p, options).step_time == plain);
    CHECK(sim::reduction_floor(p, sim::stage_costs(p), choices) == sim::reduction_floor(p, sim::stage_costs(p)));
  }
}
