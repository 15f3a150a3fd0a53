// What a step spends outside its layers, as each trainer runs it: the optimizer step's memory
// traffic (torch's Adam under autocast; Megatron-LM's Float16OptimizerWithFloat16Params), and
// the data-parallel gradient reduction overlapped with the backward (torch's DDP) or after it
// (Megatron-LM's DDP without --overlap-grad-reduce, DeepSpeed's engine).
#include <map>

#include <catch2/catch.hpp>

#include "plan/cost.hpp"
#include "plan/executable.hpp"
#include "plan/memory.hpp"
#include "plan/plan.hpp"
#include "sim/cost_model.hpp"
#include "sim/metrics.hpp"
#include "sim/simulator.hpp"
#include "tests/test_util.hpp"

using namespace parallax;
using schedule::ActionKind;
using sim::Time;

namespace {

// A GPT block on A100s (2,039 GB/s; memory-bound kernels at 0.83 of it, the profile's
// memory_efficiency), two replicas of one stage.
const std::string kGpt =
    "model: {preset: transformer, layers: 4, hidden: 2048, heads: 16, seq_len: 1024, vocab: 1024}\n"
    "data: {batch_size: 4}\n"
    "parallel: {data: 2, precision: bf16, chunks: 2}\n"
    "optimizer: {kind: adam, lr: 0.0001}\n"
    "hardware: a100-nvlink-ib\n";

// The OPTIM a stage's optimizer step takes, less its one call overhead, in microseconds.
double optimizer_us(const std::vector<std::string>& sets) {
  const plan::Plan p = test::plan_from(kGpt, sets);
  return (sim::stage_costs(p).front().optimizer - Time::us(p.scenario.hardware.device.layer_overhead_us)).to_us();
}

double params(const std::vector<std::string>& sets) { return static_cast<double>(test::plan_from(kGpt, sets).stages.front().param_count); }

}  // namespace

TEST_CASE("sim: the optimizer step moves its trainer's bytes at the memory-bound rate", "[sim]") {
  const double rate = 2039e9 * 0.83 / 1e6;  // bytes a microsecond
  const double n = params({});
  // torch's Adam on fp32 parameters: read parameter, gradient and two moments, write three.
  CHECK(optimizer_us({}) == Approx(n * 28 / rate).epsilon(1e-6));
  // fp16's GradScaler unscales the gradients in place first.
  CHECK(optimizer_us({"parallel.precision=fp16"}) == Approx(n * 36 / rate).epsilon(1e-6));
  // SGD without momentum keeps no state: read parameter and gradient, write the parameter.
  CHECK(optimizer_us({"optimizer.kind=sgd"}) == Approx(n * 12 / rate).epsilon(1e-6));
  // Megatron-LM's mixed precision, bf16: fp32 gradients (no copy), the norm for --clip-grad (4),
  // Adam on the fp32 masters (28), the masters copied to bf16 (4 + 2); the gradient buffer zeroed.
  CHECK(optimizer_us({"parallel.master_weights=true"}) == Approx(n * (4 + 28 + 6 + 4) / rate).epsilon(1e-6));
  // fp16 with 16-bit gradients: copied to fp32 main gradients (2 + 4), unscaled (8).
  CHECK(optimizer_us({"parallel.master_weights=true", "parallel.precision=fp16", "parallel.grad_reduce_in_bf16=true"}) ==
        Approx(n * (6 + 8 + 4 + 28 + 6 + 2) / rate).epsilon(1e-6));
  // Apex's DistributedFusedAdam with dtype bf16 (NeMo's optim.dtype): bf16 masters and moments,
  // stepping on the bf16 gradients: norm (2), Adam (2 + 2 x 6), masters to parameters (2 + 2).
  const std::vector<std::string> bf16_state = {"parallel.master_weights=true", "parallel.grad_reduce_in_bf16=true",
                                               "optimizer.state_dtype=bf16"};
  CHECK(optimizer_us(bf16_state) == Approx(n * (2 + 14 + 4 + 2) / rate).epsilon(1e-6));
  // The distributed optimizer updates 1 / data of them; the whole buffer is still zeroed.
  // (With the parameters' all-gather beside the next forward, not after the step: below.)
  CHECK(optimizer_us({"parallel.master_weights=true", "parallel.shard=optimizer", "parallel.overlap_param_gather=true"}) ==
        Approx(n * ((4 + 28 + 6) / 2.0 + 4) / rate).epsilon(1e-6));
}

TEST_CASE("sim: the distributed optimizer's parameter all-gather, after the step or beside the next forward", "[sim]") {
  auto costs = [](std::vector<std::string> sets) {
    sets.insert(sets.end(), {"parallel.master_weights=true", "parallel.shard=optimizer"});
    return sim::stage_costs(test::plan_from(kGpt, sets));
  };
  // Megatron-LM's default: the all-gather of the updated bf16 parameters follows the step, exposed.
  // With --overlap-param-gather it moves to the next step's first forward. Megatron-core buckets
  // only the first pipeline stage (40M parameters a bucket here): a two-stage pipeline's second
  // stage gathers in one bucket, which the forward waits for whole.
  const std::vector<std::string> megatron = {"parallel.ddp_buckets=megatron", "parallel.pipeline=2", "parallel.chunks=2"};
  auto with = megatron;
  with.push_back("parallel.overlap_param_gather=true");
  const auto after = costs(megatron), beside = costs(with);
  const Time gather = after[1].optimizer - beside[1].optimizer;
  REQUIRE(gather > Time());
  CHECK(after[1].first_gather + after[1].first_forward_extra == Time());
  CHECK(beside[1].first_gather == gather);  // one bucket, started with the step: the forward waits for it
  CHECK(beside[1].first_forward_extra == Time());
  // The gather runs from the step's start while the second stage waits for the pipeline to fill:
  // its first forward is longer only by what is left of it when the activation arrives.
  const plan::Plan two = test::plan_from(kGpt, [&] { auto v = with; v.insert(v.end(), {"parallel.master_weights=true", "parallel.shard=optimizer"}); return v; }());
  std::vector<std::pair<Time, Time>> second;  // (start, duration) of the second stage's forwards
  for (const auto& e : sim::simulate(two).timeline.events)
    if (e.action.kind == ActionKind::F && e.action.stage == 1 && e.rank == two.scenario.parallel.data) second.push_back({e.start, e.end - e.start});
  REQUIRE(second.size() == 2);
  const Time left = std::max(Time(), beside[1].first_gather - second[0].first);
  CHECK((second[0].second - second[1].second).to_us() == Approx(left.to_us()).margin(0.01));
  // Several buckets (torch's 25 MiB caps): each gather after the first runs beside the forward of
  // the bucket before it, so less of the stage's gathers is exposed than their sum.
  const auto one_stage_after = costs({}), one_stage = costs({"parallel.overlap_param_gather=true"});
  REQUIRE(test::plan_from(kGpt, {"parallel.shard=optimizer"}).stages.front().buckets.size() > 1);
  const Time all = one_stage_after[0].optimizer - one_stage[0].optimizer;
  CHECK(one_stage[0].first_gather > Time());
  CHECK(one_stage[0].first_forward_extra > Time());
  CHECK(one_stage[0].first_gather + one_stage[0].first_forward_extra < all);
  // Every other forward is as before; the simulated step runs the first forward of rank 0, at the
  // step's start, longer by both (no interference: nothing else runs on the device then).
  CHECK(one_stage[0].forward == one_stage_after[0].forward);
  const plan::Plan p = test::plan_from(kGpt, {"parallel.master_weights=true", "parallel.shard=optimizer", "parallel.overlap_param_gather=true"});
  std::vector<Time> forwards;
  for (const auto& e : sim::simulate(p).timeline.events)
    if (e.rank == 0 && e.action.kind == ActionKind::F) forwards.push_back(e.end - e.start);
  REQUIRE(forwards.size() == 2);
  CHECK((forwards[0] - forwards[1]).to_us() ==
        Approx((one_stage[0].first_gather + one_stage[0].first_forward_extra).to_us()).epsilon(1e-3));
  // Nothing to gather without a sharded optimizer: refused there, as Megatron-LM refuses it; under
  // shard full FSDP gathers each layer itself.
  CHECK_THAT(test::parse_error(kGpt, {"parallel.overlap_param_gather=true"}), Catch::Contains("it needs parallel.shard: optimizer or more"));
  const auto fsdp = sim::stage_costs(test::plan_from(kGpt, {"parallel.shard=full", "parallel.overlap_param_gather=true"}));
  CHECK(fsdp[0].first_gather + fsdp[0].first_forward_extra == Time());
  // The executor gathers after the step: true is predict-only there.
  CHECK_THROWS_WITH(plan::check_executable(test::scenario_from(kGpt, {"parallel.shard=optimizer", "parallel.overlap_param_gather=true"})),
                    Catch::Contains("overlap_param_gather") && Catch::Contains("predict-only"));
}

TEST_CASE("sim: without overlap_grad_reduce a stage's gradients are reduced in one go after its last backward", "[sim]") {
  const plan::Plan overlapped = test::plan_from(kGpt);
  const plan::Plan after = test::plan_from(kGpt, {"parallel.overlap_grad_reduce=false"});
  REQUIRE(overlapped.stages.front().buckets.size() > 1);
  REQUIRE(after.stages.front().buckets.size() == 1);  // Megatron-LM's bucket_size None
  int64_t all = 0;
  for (const auto& b : overlapped.stages.front().buckets) all += b.bytes;
  CHECK(after.stages.front().buckets.front().bytes == all);

  const sim::SimRun run = sim::simulate(after);
  Time last_backward, reduce_start = Time::seconds(1e6), reduce_end;
  for (const auto& e : run.timeline.events) {
    if (e.rank != 0) continue;
    if (e.action.kind == ActionKind::B) last_backward = std::max(last_backward, e.end);
    if (e.action.kind == ActionKind::ALLREDUCE) reduce_start = std::min(reduce_start, e.start), reduce_end = e.end;
  }
  CHECK(reduce_start >= last_backward);
  // Nothing hides it: the optimizer step waits for it, and the step is longer than with the
  // buckets reduced during the last backward.
  for (const auto& e : run.timeline.events)
    if (e.rank == 0 && e.action.kind == ActionKind::OPTIM) CHECK(e.start >= reduce_end);
  const Time overlapped_step = sim::compute_metrics(overlapped, sim::simulate(overlapped)).step_time;
  CHECK(sim::compute_metrics(after, run).step_time > overlapped_step);
  // The executor runs torch's DDP, which overlaps: false is predict-only there.
  CHECK_THROWS_WITH(plan::check_executable(after.scenario), Catch::Contains("overlap_grad_reduce") && Catch::Contains("predict-only"));
}

TEST_CASE("plan: a bf16 optimizer state holds 6 bytes a parameter with Adam, and needs master weights", "[plan]") {
  const plan::BytesPerParameter fp32 = plan::bytes_per_parameter(test::scenario_from(kGpt, {"parallel.master_weights=true"}));
  const plan::BytesPerParameter bf16 =
      plan::bytes_per_parameter(test::scenario_from(kGpt, {"parallel.master_weights=true", "optimizer.state_dtype=bf16"}));
  CHECK(fp32.optimizer == 12);  // fp32 master, two fp32 moments
  CHECK(bf16.optimizer == 6);
  CHECK_THAT(test::parse_error(kGpt, {"optimizer.state_dtype=bf16"}), Catch::Contains("needs master_weights: true"));
  CHECK_THAT(test::parse_error(kGpt, {"optimizer.state_dtype=fp8"}), Catch::Contains("state_dtype"));
}

TEST_CASE("plan: Megatron-LM and DeepSpeed reduce gradients after the backward unless told otherwise", "[plan]") {
  CHECK_FALSE(test::scenario_from(kGpt + "framework: megatron\n").parallel.overlap_grad_reduce);
  CHECK_FALSE(test::scenario_from(kGpt + "framework: deepspeed\n").parallel.overlap_grad_reduce);
  CHECK(test::scenario_from(kGpt + "framework: torchtitan\n").parallel.overlap_grad_reduce);
  CHECK(test::scenario_from(kGpt + "framework: megatron\n", {"parallel.overlap_grad_reduce=true"}).parallel.overlap_grad_reduce);
}

TEST_CASE("sim: an interleaved schedule gathers each model chunk's parameters whole, a chunk ahead", "[sim]") {
  // Megatron-core's interleaved 1F1B (and NeMo's, on Apex's distributed optimizer) starts a model
  // chunk's all-gather through param_sync_func: chunks 0 and 1 with the step, chunk c + 1 at the
  // rank's forward number c x pipeline - pipeline_rank; one comm stream takes them in turn. Two
  // stages of three chunks each, torch's 25 MiB buckets (several a chunk), two replicas.
  const plan::Plan p = test::plan_from(kGpt, {"parallel.master_weights=true", "parallel.shard=optimizer", "parallel.overlap_param_gather=true",
                                              "parallel.pipeline=2", "parallel.virtual=3", "parallel.schedule=interleaved-1f1b",
                                              "parallel.chunks=4", "model.layers=10", "parallel.partition_len=[2, 2, 2, 2, 2, 2]"});
  const auto costs = sim::stage_costs(p);
  REQUIRE(p.stages[2].buckets.size() > 1);
  // A chunk's gather is one collective of all its buckets' bytes: less than their gathers one by one.
  for (int s = 0; s < 6; ++s) CHECK(costs[s].chunk_gather > Time());
  const auto bare = sim::stage_costs(test::plan_from(kGpt, {"parallel.master_weights=true", "parallel.shard=optimizer", "parallel.pipeline=2",
                                                            "parallel.virtual=3", "parallel.schedule=interleaved-1f1b", "parallel.chunks=4",
                                                            "model.layers=10", "parallel.partition_len=[2, 2, 2, 2, 2, 2]"}));
  CHECK(costs[2].chunk_gather <= bare[2].optimizer - costs[2].optimizer);  // the whole stage's gather after the step
  // Rank 0 (replica 0, pipeline rank 0) runs chunk 0 (stage 0), chunk 1 (stage 2), chunk 2 (stage 4).
  std::map<int, std::pair<Time, Time>> first;  // stage -> (start, duration) of rank 0's first forward there
  std::map<int, Time> later;                   // stage -> a later forward's duration there
  for (const auto& e : sim::simulate(p).timeline.events) {
    if (e.rank != 0 || e.action.kind != ActionKind::F) continue;
    if (!first.count(e.action.stage)) first[e.action.stage] = {e.start, e.end - e.start};
    else later[e.action.stage] = e.end - e.start;
  }
  REQUIRE(first.size() == 3);
  // What the first forward took beyond a later one there (which a p2p transfer beside it may
  // stretch by a few microseconds: hence the margins).
  auto waited = [&](int stage) { return (first[stage].second - later[stage]).to_us(); };
  // Chunk 0's forward starts the step and waits for its whole gather; chunk 1's gather follows it.
  const Time done0 = costs[0].chunk_gather, done1 = done0 + costs[2].chunk_gather;
  CHECK(waited(0) == Approx(done0.to_us()).margin(5));
  CHECK(waited(2) == Approx(std::max(0.0, (done1 - first[2].first).to_us())).margin(5));
  // Chunk 2's starts with rank 0's forward number 2, its first of chunk 1, after chunk 1's.
  const Time done2 = std::max(first[2].first, done1) + costs[4].chunk_gather;
  CHECK(waited(4) == Approx(std::max(0.0, (done2 - first[4].first).to_us())).margin(5));
  // No bucket-by-bucket wait is added on top (StageCost::first_forward_extra is the chain's).
  INFO("chunk 1 waited " << waited(2) << " us, chunk 2 " << waited(4) << " us; the chain would add " << costs[2].first_forward_extra.to_us());
  CHECK(costs[2].first_forward_extra > Time::us(20));
  CHECK(waited(2) < costs[2].first_forward_extra.to_us() + std::max(0.0, (done1 - first[2].first).to_us()));
}

TEST_CASE("sim: Megatron-LM's point-to-point sends a forward's output as it waits for the next input", "[sim]") {
  // Megatron-LM's send_forward_recv_forward (and its 1F1B pairs) batch the send of a forward's output
  // with the receive of the next action's input: the data leaves when the forward ends, not after
  // the rank's next receive arrives. torch's lowered lists put the receive first; PyTorch's own
  // point-to-point on NCCL keeps that order, the send held behind the receive.
  auto sends_after_forward = [](const std::string& p2p) {
    const plan::Plan p = test::plan_from(kGpt, {"parallel.pipeline=2", "parallel.data=1", "parallel.chunks=4", "parallel.schedule=1f1b",
                                                "parallel.p2p=" + p2p, "hardware=h100-nvlink-ib"});
    std::map<int, Time> forward_end;  // rank 0's F end, by micro-batch
    int on_time = 0, sends = 0;
    for (const auto& e : sim::simulate(p).timeline.events)
      if (e.rank == 0 && e.action.kind == ActionKind::F) forward_end[e.action.mb] = e.end;
    for (const auto& e : sim::simulate(p).timeline.events)
      if (e.rank == 0 && e.action.kind == ActionKind::SEND_F) {
        ++sends;
        on_time += (e.start - forward_end.at(e.action.mb)).to_us() < 1.0;
      }
    return std::pair(on_time, sends);
  };
  const auto [megatron_on_time, megatron_sends] = sends_after_forward("megatron");
  CHECK(megatron_sends == 4);
  CHECK(megatron_on_time == 4);
  // PyTorch's order: in 1F1B's steady state the send waits behind the backward's receive.
  const auto [torch_on_time, torch_sends] = sends_after_forward("pytorch");
  CHECK(torch_sends == 4);
  CHECK(torch_on_time < 4);
}
