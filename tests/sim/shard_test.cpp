// Sharded data parallelism in the simulator: shard full's parameter all-gathers with FSDP2's
// prefetch, worked from NCCL's model by hand, and HSDP's reduce-scatter then all-reduce.
#include <algorithm>

#include <catch2/catch.hpp>

#include "plan/calibration.hpp"
#include "plan/plan.hpp"
#include "sim/cost_model.hpp"
#include "sim/nccl_model.hpp"
#include "sim/simulator.hpp"
#include "tests/test_util.hpp"

using namespace parallax;
using sim::Time;

namespace {

// Eight replicas in one DGX A100 node, four uniform layers of `params_mb` each, one micro-batch
// of one sample: a layer's forward is `fwd_us`, its backward twice that.
std::string uniform(double fwd_us, double params_mb) {
  return "model: {preset: synthetic, layers: 4, fwd_us_per_sample: " + std::to_string(fwd_us) +
         ", params_mb: " + std::to_string(params_mb) + "}\n"
         "data: {batch_size: 1}\nparallel: {data: 8, chunks: 1}\nhardware: a100-nvlink-ib\n";
}

// The same layers as two replicas on cpu-host, whose collectives are Gloo's.
std::string on_cpu_host(double fwd_us, double params_mb) {
  std::string yaml = uniform(fwd_us, params_mb);
  yaml.replace(yaml.find("a100-nvlink-ib"), std::string("a100-nvlink-ib").size(), "cpu-host");
  yaml.replace(yaml.find("data: 8"), std::string("data: 8").size(), "data: 2");
  return yaml;
}

// NCCL's ring all-gather of one layer's fp32 parameters over the 8 GPUs of the node.
double gather_us(const plan::Plan& p) {
  const auto& hw = p.scenario.hardware;
  const double bytes = 4.0 * static_cast<double>(p.scenario.layers[0].param_count(1));
  const sim::GroupShape node{8, 1, 8, hw.network->bandwidth_gb_per_s, hw.nics_per_node};
  return sim::collective_time_us(*hw.nccl, node, sim::Collective::all_gather, bytes);
}

// What prefetched gathers add to a pass over 4 layers of `compute_us` each: the first gather
// whole, each later one beyond the layer it runs beside, and the hidden part's slowdown.
double prefetched_us(double gather, double compute_us, double interference) {
  const double hidden = std::min(gather, compute_us);
  return gather + 3 * (gather - hidden + hidden * (interference - 1));
}

}  // namespace

TEST_CASE("sim: shard full gathers each layer before its forward and backward, the next one's beside the compute", "[sim][shard]") {
  for (const auto& [fwd_us, params_mb] : {std::pair{5.0, 256.0}, std::pair{20000.0, 64.0}}) {
    INFO("forward " << fwd_us << " us, " << params_mb << " MB a layer");
    const plan::Plan ddp = test::plan_from(uniform(fwd_us, params_mb));
    const plan::Plan fsdp = test::plan_from(uniform(fwd_us, params_mb), {"parallel.shard=full"});
    const double g = gather_us(fsdp), ic = fsdp.scenario.hardware.interference.compute;
    // The two cases: gathers longer than the compute beside them, and hidden behind it.
    CHECK((fwd_us < g) == (fwd_us == 5.0));
    const sim::StageCost a = sim::stage_costs(ddp).front(), b = sim::stage_costs(fsdp).front();
    CHECK((b.forward - a.forward).to_us() == Approx(prefetched_us(g, fwd_us, ic)).epsilon(1e-3));
    CHECK((b.backward - a.backward).to_us() == Approx(prefetched_us(g, 2 * fwd_us, ic)).epsilon(1e-3));
    // Kept gathered from forward to backward: the backward gathers nothing.
    const plan::Plan kept = test::plan_from(uniform(fwd_us, params_mb), {"parallel.shard=full", "parallel.reshard_after_forward=false"});
    CHECK(sim::stage_costs(kept).front().backward == a.backward);
  }
  // ZeRO-2 keeps the parameters whole: nothing to gather.
  const plan::Plan z2 = test::plan_from(uniform(5, 256), {"parallel.shard=gradients"});
  CHECK(sim::stage_costs(z2).front().forward == sim::stage_costs(test::plan_from(uniform(5, 256))).front().forward);
}

TEST_CASE("sim: on Gloo (a CPU host) a prefetched gather takes the rank's cores: no compute hides it", "[sim][shard]") {
  // Two replicas on cpu-host, whose collectives are Gloo's: the same four layers, the gathers
  // longer than the compute beside them (5 us) and far shorter (20 ms). Either way each of the
  // four gathers of a pass adds its whole time (the cores do the gather and the compute one after
  // the other), where an NCCL profile hides all but the first behind 20 ms of compute.
  for (const auto& [fwd_us, params_mb] : {std::pair{5.0, 4.0}, std::pair{20000.0, 4.0}}) {
    INFO("forward " << fwd_us << " us, " << params_mb << " MB a layer");
    const std::string yaml = on_cpu_host(fwd_us, params_mb);
    const plan::Plan ddp = test::plan_from(yaml), fsdp = test::plan_from(yaml, {"parallel.shard=full"});
    REQUIRE(fsdp.schedule.collectives == schedule::Collectives::gloo);
    // The host's link (no calibration): a ring all-gather over 2 ranks, one step of half the bytes.
    const plan::Link& link = fsdp.scenario.hardware.node_link;
    const double bytes = 4.0 * static_cast<double>(fsdp.scenario.layers[0].param_count(1));
    const double g = link.latency_us + bytes / 2 / (link.bandwidth_gb_per_s * 1e3);
    CHECK((fwd_us < g) == (fwd_us == 5.0));
    const sim::StageCost a = sim::stage_costs(ddp).front(), b = sim::stage_costs(fsdp).front();
    CHECK((b.forward - a.forward).to_us() == Approx(4 * g).epsilon(1e-3));
    CHECK((b.backward - a.backward).to_us() == Approx(4 * g).epsilon(1e-3));
  }
}

TEST_CASE("sim: on a calibrated host a shard's gather takes the measured Gloo all-gather, not half the all-reduce", "[sim][shard]") {
  const std::string yaml = on_cpu_host(5, 4);
  plan::Scenario ddp = test::scenario_from(yaml), fsdp = test::scenario_from(yaml);
  fsdp.parallel.shard = plan::Shard::full;
  plan::Calibration c;
  c.cores = 2;               // a core a rank: nothing oversubscribed
  c.allreduce = {300, 1.5};  // 2 ranks: latency_us + bytes / GB/s
  c.allgather = {120, 4};
  ddp.hardware.calibration = fsdp.hardware.calibration = c;
  const plan::Plan pd = plan::resolve_plan(ddp), pf = plan::resolve_plan(fsdp);
  const double bytes = 4.0 * static_cast<double>(pf.scenario.layers[0].param_count(1));
  const double gather = 120 + bytes / (4 * 1e3);  // the whole layer's bytes at 2 ranks, as measured
  // Each of a pass's four gathers whole (Gloo: beside_compute), the synthetic layers' compute alike.
  const sim::StageCost a = sim::stage_costs(pd).front(), b = sim::stage_costs(pf).front();
  CHECK((b.forward - a.forward).to_us() == Approx(4 * gather).epsilon(1e-3));
  // The measured curve by size, where the profile has one: read at the layer's bytes, not the line.
  fsdp.hardware.calibration->allgather_by_bytes = {{1e3, 1e7, 1e8}, {100, 900, 40000}};
  const sim::StageCost curve = sim::stage_costs(plan::resolve_plan(fsdp)).front();
  const double on_curve = 100 + (bytes - 1e3) / (1e7 - 1e3) * 800;
  REQUIRE(bytes < 1e7);
  CHECK((curve.forward - a.forward).to_us() == Approx(4 * on_curve).epsilon(1e-3));
  // Without a measured all-gather (a profile from before it was measured): half the all-reduce.
  fsdp.hardware.calibration->allgather = {};
  fsdp.hardware.calibration->allgather_by_bytes = {};
  const sim::StageCost half = sim::stage_costs(plan::resolve_plan(fsdp)).front();
  CHECK((half.forward - a.forward).to_us() == Approx(4 * 0.5 * (300 + bytes / (1.5 * 1e3))).epsilon(1e-3));
}

TEST_CASE("sim: on Gloo compute beside a gather loses the gather's measured CPU share of it, not all of it", "[sim][shard]") {
  // 20 ms of compute a layer: every gather but the first is hidden behind the layer before it.
  const std::string yaml = on_cpu_host(20000, 4);
  plan::Scenario ddp = test::scenario_from(yaml), fsdp = test::scenario_from(yaml);
  fsdp.parallel.shard = plan::Shard::full;
  plan::Calibration c;
  c.cores = 2;
  c.allreduce = {300, 1.5};
  c.allgather = {120, 4};
  c.allgather_cpu_share = 0.25;  // a quarter of a gather's time is Gloo's copies on the rank's core
  ddp.hardware.calibration = fsdp.hardware.calibration = c;
  const plan::Plan pd = plan::resolve_plan(ddp), pf = plan::resolve_plan(fsdp);
  const double bytes = 4.0 * static_cast<double>(pf.scenario.layers[0].param_count(1));
  const double gather = 120 + bytes / (4 * 1e3);
  REQUIRE(gather < 20000);
  const sim::StageCost a = sim::stage_costs(pd).front(), b = sim::stage_costs(pf).front();
  // The first gather whole (nothing to run beside), the three prefetched ones a quarter each.
  CHECK((b.forward - a.forward).to_us() == Approx(gather + 3 * 0.25 * gather).epsilon(1e-3));
  CHECK((b.backward - a.backward).to_us() == Approx(gather + 3 * 0.25 * gather).epsilon(1e-3));
  // Unmeasured (a profile from before): the whole gather, as if it were all CPU work.
  fsdp.hardware.calibration->allgather_cpu_share = 0;
  const sim::StageCost whole = sim::stage_costs(plan::resolve_plan(fsdp)).front();
  CHECK((whole.forward - a.forward).to_us() == Approx(4 * gather).epsilon(1e-3));
}

TEST_CASE("sim: gradients reduce-scattered every micro-batch expose what the next layer's backward does not hide", "[sim][shard]") {
  // ZeRO-2 over the node, two micro-batches a step: the first backward reduce-scatters each layer
  // beside the next one's backward, the stage's first layer's after it; the second's are the
  // buckets, as before.
  for (const auto& [fwd_us, params_mb] : {std::pair{5.0, 256.0}, std::pair{20000.0, 64.0}}) {
    INFO("forward " << fwd_us << " us, " << params_mb << " MB a layer");
    const std::vector<std::string> zero2 = {"parallel.shard=gradients", "parallel.chunks=2", "data.batch_size=2"};
    std::vector<std::string> every = zero2;
    every.push_back("parallel.reduce_scatter_every_microbatch=true");
    const plan::Plan once = test::plan_from(uniform(fwd_us, params_mb), zero2);
    const plan::Plan each = test::plan_from(uniform(fwd_us, params_mb), every);
    REQUIRE(each.stages[0].buckets.size() == 4);
    const auto& hw = each.scenario.hardware;
    const double bytes = static_cast<double>(each.stages[0].buckets[0].bytes);
    const sim::GroupShape node{8, 1, 8, hw.network->bandwidth_gb_per_s, hw.nics_per_node};
    const double rs = sim::collective_time_us(*hw.nccl, node, sim::Collective::reduce_scatter, bytes);
    const double backward = 2 * fwd_us, ic = hw.interference.compute;  // a layer's, for a micro-batch of one sample
    const double hidden = std::min(rs, backward);
    const double expected = rs + 3 * (rs - hidden + hidden * (ic - 1));
    CHECK(sim::stage_costs(once).front().reduce_scatter_between == Time());
    CHECK(sim::stage_costs(each).front().reduce_scatter_between.to_us() == Approx(expected).epsilon(1e-3));
    // One stage: the step is longer by exactly that, once (the first of its two backwards).
    const double longer = (sim::simulate(each).step_time - sim::simulate(once).step_time).to_us();
    CHECK(longer == Approx(expected).epsilon(1e-3));
  }
}

TEST_CASE("sim: HSDP reduce-scatters inside each shard, then all-reduces the shard over its copies", "[sim][shard]") {
  // 16 replicas on two DGX A100 nodes, one layer of 512 MiB: one bucket.
  const std::string yaml =
      "model: {preset: synthetic, layers: 1, fwd_us_per_sample: 1, params_mb: 512}\n"
      "data: {batch_size: 1}\nparallel: {data: 16, chunks: 1, shard: gradients, shard_group: 8}\nhardware: a100-nvlink-ib\n";
  const plan::Plan p = test::plan_from(yaml);
  REQUIRE(p.stages[0].buckets.size() == 1);
  const double bytes = static_cast<double>(p.stages[0].buckets[0].bytes);
  const auto& hw = p.scenario.hardware;
  const double nic = hw.network->bandwidth_gb_per_s;
  const sim::GroupShape node{8, 1, 8, nic, hw.nics_per_node}, copies{2, 2, 1, nic, hw.nics_per_node};
  // The reduce-scatter over a node, then each rank's 1/8 all-reduced with its copy on the other node.
  const double expected_us = sim::choose_reduce_scatter(*hw.nccl, node, bytes).time_us(bytes) +
                             sim::choose_allreduce(*hw.nccl, copies, bytes / 8).time_us(bytes / 8);
  const sim::SimRun run = sim::simulate(p);
  const auto it = std::find_if(run.timeline.events.begin(), run.timeline.events.end(),
                               [](const auto& e) { return e.lane == timeline::Lane::allreduce && e.rank == 0; });
  REQUIRE(it != run.timeline.events.end());
  CHECK((it->end - it->start).to_us() == Approx(expected_us * hw.nccl->stretch(bytes)).epsilon(0.01));
  // Sharded over all 16 instead: one reduce-scatter across both nodes, as NCCL's ring runs it.
  const plan::Plan whole = test::plan_from(yaml, {"parallel.shard_group=data"});
  const sim::SimRun one = sim::simulate(whole);
  const auto rs = std::find_if(one.timeline.events.begin(), one.timeline.events.end(),
                               [](const auto& e) { return e.lane == timeline::Lane::allreduce && e.rank == 0; });
  REQUIRE(rs != one.timeline.events.end());
  const double ring_us = sim::choose_reduce_scatter(*hw.nccl, {16, 2, 8, nic, hw.nics_per_node}, bytes).time_us(bytes);
  CHECK((rs->end - rs->start).to_us() == Approx(ring_us * hw.nccl->stretch(bytes)).epsilon(0.01));
}
