// The simulator on a calibrated profile: a stage's measured costs, the in-run factors, posted
// receives, data parallelism's probe, and launch-bound steps.
#include <catch2/catch.hpp>
#include <map>
#include <random>

#include "plan/calibration.hpp"
#include "plan/cost.hpp"
#include "plan/hardware.hpp"
#include "sim/cost_model.hpp"
#include "sim/metrics.hpp"
#include "sim/simulator.hpp"
#include "tests/plan/sample_calibration.hpp"
#include "tests/test_util.hpp"

using namespace parallax;

TEST_CASE("sim::stage_costs: a calibrated stage adds data, loss, backward call and optimizer", "[sim]") {
  auto s = test::scenario_from(
      test::kMlp +
      "data: {source: fashion-mnist, batch_size: 8}\nparallel: {chunks: 1}\n"
      "optimizer: {kind: sgd, momentum: 0.9}\nhardware: cpu-host\n");
  auto c = test::sample_calibration();
  plan::SignatureCost out;
  out.signature = "linear 256x10 fp32";
  out.forward = {{1, 64}, {3, 9}};
  out.backward = {{1, 64}, {6, 15}};
  c.layers[out.signature] = out;
  c.in_run = {};  // factors of 1: the sum of the parts
  s.hardware.calibration = c;
  plan::Plan p = plan::resolve_plan(s);
  const auto costs = sim::stage_costs(p);
  REQUIRE(costs.size() == 1);
  const double mb = 8;
  // One rank alone: no oversubscription, no messages.
  const double forward = c.data.at("fashion-mnist linear 784x256 relu fp32 input").at(mb) + 70 + out.forward.at(mb) +
                         c.losses.at("linear 256x10 fp32").forward.at(mb);
  const double backward = c.backward_call_us + c.losses.at("linear 256x10 fp32").backward.at(mb) + out.backward.at(mb) +
                          77;  // the first layer has no input gradient
  CHECK(costs[0].forward.to_us() == Approx(forward).epsilon(1e-3));
  CHECK(costs[0].backward.to_us() == Approx(backward).epsilon(1e-3));
  const double params = 784 * 256 + 256 + 256 * 10 + 10;
  CHECK(costs[0].optimizer.to_us() == Approx(c.optimizers[0].by_params.at(params)).epsilon(1e-3));
  // The in-run factors scale each kind of compute as measured in the probe run.
  p.scenario.hardware.calibration->in_run = {.forward = 1.25, .backward = 1.5, .optimizer = 2.0, .probe = "", .bounded = ""};
  const auto in_run = sim::stage_costs(p);
  CHECK(in_run[0].forward.to_us() == Approx(1.25 * forward).epsilon(1e-3));
  CHECK(in_run[0].backward.to_us() == Approx(1.5 * backward).epsilon(1e-3));
  CHECK(in_run[0].optimizer.to_us() == Approx(2.0 * costs[0].optimizer.to_us()).epsilon(1e-3));
  // And the extras add a cost per action on top.
  p.scenario.hardware.calibration->in_run = {.forward_extra_us = 30, .backward_extra_us = -20, .probe = "", .bounded = ""};
  const auto extra = sim::stage_costs(p);
  CHECK(extra[0].forward.to_us() == Approx(forward + 30).epsilon(1e-3));
  CHECK(extra[0].backward.to_us() == Approx(backward - 20).epsilon(1e-3));
  // The proportion holds up to the longest probed action: beyond it the slowdown stays fixed.
  p.scenario.hardware.calibration->in_run = {.forward = 1.5, .forward_extra_us = 10, .forward_probed_us = forward / 4,
                                             .probe = "", .bounded = ""};
  CHECK(sim::stage_costs(p)[0].forward.to_us() == Approx(forward + 0.5 * forward / 4 + 10).epsilon(1e-3));
  p.scenario.hardware.calibration->in_run.forward_probed_us = 4 * forward;  // within the probed range
  CHECK(sim::stage_costs(p)[0].forward.to_us() == Approx(1.5 * forward + 10).epsilon(1e-3));
}

TEST_CASE("sim::stage_costs: a calibrated optimizer step pays for each tensor beyond the curve's four", "[sim]") {
  // Stage 0 holds the token and position embeddings and one encoder block: 2 + 12 tensors (PyTorch's
  // nn.TransformerEncoderLayer registers 12: in_proj weight and bias, out_proj, linear1, linear2,
  // norm1 and norm2, each a weight and a bias).
  auto s = test::scenario_from(
      "name: t\nmodel: {preset: transformer, layers: 2, hidden: 64, heads: 4, ffn: 256, seq_len: 32, vocab: 1000}\n"
      "data: {source: synthetic, batch_size: 8}\nparallel: {pipeline: 2, partition_len: [2, 2], chunks: 1}\n"
      "optimizer: {kind: sgd, momentum: 0.9}\nhardware: cpu-host\n");
  auto c = test::sample_calibration();
  c.in_run = {};
  s.hardware.calibration = c;
  plan::Plan p = plan::resolve_plan(s);
  const plan::Time curve_only = sim::stage_costs(p)[0].optimizer;
  CHECK(curve_only.to_us() == Approx(c.optimizers[0].by_params.at(static_cast<double>(p.stages[0].param_bytes) / 4)));
  p.scenario.hardware.calibration->optimizers[0].per_tensor_us = 10;
  CHECK((sim::stage_costs(p)[0].optimizer - curve_only).to_us() == Approx(10 * (14 - 4)));
}

TEST_CASE("sim::simulate: on a calibrated Gloo host every receive is posted at the step's start, as the executor does",
          "[sim]") {
  auto s = test::scenario_from(
      test::kMlp +
      "data: {source: fashion-mnist, batch_size: 16}\n"
      "parallel: {pipeline: 2, partition_len: [1, 1], chunks: 2, schedule: gpipe}\n"
      "optimizer: {kind: sgd, momentum: 0.9}\nhardware: cpu-host\n");
  auto c = test::sample_calibration();
  c.in_run = {};
  c.layers.at("linear 784x256 relu fp32").backward_no_input = {{1, 64}, {1000, 1000}};  // a heavy stage 0 B
  s.hardware.calibration = c;
  s.hardware.node_link = {"measured", 3, 60};  // GB/s, us: what the calibrated profile carries
  const plan::Plan p = plan::resolve_plan(s);
  const auto costs = sim::stage_costs(p);
  const auto run = sim::simulate(p);
  auto find = [&](int rank, const std::string& id) {
    for (const auto& e : run.timeline.events)
      if (e.rank == rank && e.action.id() == id) return e;
    FAIL("no " << id << " on rank " << rank);
    return timeline::TimelineEvent{};
  };
  // Rank 1 waits from the start: stage 0's output for 8 samples of 256 floats is written in the
  // send call and arrives after the link's latency and bytes. Rank 1's first forward starts
  // then; rank 0's second forward waits for the call.
  const double bytes = 8 * 256 * 4;
  const double call = c.send_call.at(bytes);
  REQUIRE(costs[0].send_forward_call.to_us() == Approx(call));
  const auto f0 = find(0, "0F0");
  CHECK(find(1, "1F0").start.to_us() == Approx(f0.end.to_us() + call + 60 + bytes / 3e3).epsilon(1e-3));
  CHECK(find(0, "0F1").start.to_us() == Approx(f0.end.to_us() + call).epsilon(1e-3));
  // Stage 1 (one small layer) sends B1's gradient long before rank 0, busy with the heavy B0,
  // gets to its RECV. The receive was posted at the step's start, so the call writes the data,
  // it arrives while rank 0 computes, and rank 0 takes it at once.
  const auto b0 = find(0, "0B0"), recv_b1 = find(0, "0RECV_B1"), send_b1 = find(1, "1SEND_B1");
  REQUIRE(send_b1.end < b0.end);
  CHECK(send_b1.end.to_us() == Approx(send_b1.start.to_us() + call + 60 + bytes / 3e3).epsilon(1e-3));
  CHECK(recv_b1.start == b0.end);
  CHECK(recv_b1.end == b0.end);
  CHECK(find(0, "0B1").start == b0.end);
  // What held rank 0 up at the end was its own B0, not stage 1's message: the critical path ends
  // on rank 0 through 0B0 and not through 1SEND_B1.
  const auto path = sim::critical_path(run.timeline, run.waited_for);
  std::string ids;
  for (int32_t e : path) ids += run.timeline.events[e].action.id() + " ";
  INFO("critical path: " << ids);
  CHECK(ids.find("1SEND_B1") == std::string::npos);
  CHECK(ids.find("0B0 ") != std::string::npos);
  plan::Time after_send_b1 = plan::Time::ns(INT64_MAX);
  for (const auto& e : run.timeline.events)
    if (e.rank == 1 && e.lane != timeline::Lane::send && e.start >= send_b1.start) after_send_b1 = std::min(after_send_b1, e.start);
  CHECK(after_send_b1.to_us() == Approx(send_b1.start.to_us() + c.send_call.at(bytes)).epsilon(1e-3));
}

TEST_CASE("sim::simulate: a data-parallel plan takes the data-parallel probe's factors, all-reduce included", "[sim]") {
  auto s = test::scenario_from(
      test::kMlp +
      "data: {source: fashion-mnist, batch_size: 16}\nparallel: {data: 2, chunks: 1, bucket_cap_mb: 100}\n"
      "optimizer: {kind: sgd, momentum: 0.9}\nhardware: cpu-host\n");
  auto c = test::sample_calibration();
  c.in_run = {};
  s.hardware.calibration = c;
  const plan::Plan alone = plan::resolve_plan(s);
  c.in_run_data = plan::InRunFactors{.forward = 1.5, .backward = 2.0, .allreduce = 3.0, .probe = "", .bounded = ""};
  s.hardware.calibration = c;
  const plan::Plan in_run = plan::resolve_plan(s);
  auto span = [](const sim::SimRun& run, schedule::ActionKind kind) {
    for (const auto& e : run.timeline.events)
      if (e.rank == 0 && e.action.kind == kind) return (e.end - e.start).to_us();
    FAIL("no such action");
    return 0.0;
  };
  const auto a = sim::simulate(alone), b = sim::simulate(in_run);
  CHECK(span(b, schedule::ActionKind::F) == Approx(1.5 * span(a, schedule::ActionKind::F)).epsilon(1e-3));
  // One bucket: alone it takes the measured 2-rank all-reduce, latency + bytes / bandwidth.
  const double bytes = (784 * 256 + 256 + 256 * 10 + 10) * 4.0;
  CHECK(span(a, schedule::ActionKind::ALLREDUCE) == Approx(300 + bytes / 1.5e3).epsilon(1e-3));
  CHECK(span(b, schedule::ActionKind::ALLREDUCE) == Approx(3.0 * span(a, schedule::ActionKind::ALLREDUCE)).epsilon(1e-3));
  // A pipeline-only plan keeps the pipeline probe's factors (here 1).
  CHECK(&sim::in_run_factors(alone, c) == &*c.in_run_data);
  auto p = s;
  p.parallel.data = 1;
  CHECK(&sim::in_run_factors(plan::resolve_plan(p), c) == &c.in_run);
}

TEST_CASE("sim::simulate: under DDP only the step's last backward takes the all-reduces' extra, per MB", "[sim]") {
  auto s = test::scenario_from(
      test::kMlp +
      "data: {source: fashion-mnist, batch_size: 32}\nparallel: {data: 2, chunks: 4, bucket_cap_mb: 100}\n"
      "optimizer: {kind: sgd, momentum: 0.9}\nhardware: cpu-host\n");
  auto c = test::sample_calibration();
  c.in_run_data = plan::InRunFactors{.backward_extra_us = 40, .sync_backward_extra_us_per_mb = 500, .probe = "", .bounded = ""};
  s.hardware.calibration = c;
  const auto run = sim::simulate(plan::resolve_plan(s));
  std::map<int, double> backward_us;  // by micro-batch, rank 0
  for (const auto& e : run.timeline.events)
    if (e.rank == 0 && e.action.kind == schedule::ActionKind::B) backward_us[e.action.mb] = (e.end - e.start).to_us();
  REQUIRE(backward_us.size() == 4);
  CHECK(backward_us[1] == Approx(backward_us[0]));
  CHECK(backward_us[2] == Approx(backward_us[0]));
  // The last one adds the bucket copy-in (bytes at the measured copy rate) and 500 us per MB.
  const double bytes = (784 * 256 + 256 + 256 * 10 + 10) * 4.0;
  const double copy_us = bytes / (c.copy_gb_per_s * 1e3);
  CHECK(backward_us[3] == Approx(backward_us[0] + copy_us + 500 * bytes / 1e6).epsilon(1e-3));
}

TEST_CASE("sim::simulate: sharded gradients have no DDP copy-back, and the first layer's reduce-scatter starts as the backward ends",
          "[sim][shard]") {
  auto s = test::scenario_from(
      test::kMlp +
      "data: {source: fashion-mnist, batch_size: 32}\nparallel: {data: 2, chunks: 1}\n"
      "optimizer: {kind: sgd, momentum: 0.9}\nhardware: cpu-host\n");
  auto c = test::sample_calibration();
  c.in_run_data = plan::InRunFactors{.sync_backward_extra_us_per_mb = 500, .probe = "", .bounded = ""};
  s.hardware.calibration = c;
  const double bytes = (784 * 256 + 256 + 256 * 10 + 10) * 4.0;
  const double copy_us = bytes / (c.copy_gb_per_s * 1e3);
  auto costs = [&](plan::Shard shard) {
    auto with = s;
    with.parallel.shard = shard;
    return sim::stage_costs(plan::resolve_plan(with))[0];
  };
  const sim::StageCost ddp = costs(plan::Shard::none), zero1 = costs(plan::Shard::optimizer),
                       zero2 = costs(plan::Shard::gradients);
  // ZeRO-1 and -2 step the same half of the parameters and gather them after; ZeRO-1's DDP buckets
  // are divided and copied back before it (two passes), ZeRO-2 has none (exec/fsdp.cpp leaves each
  // shard divided as its reduce-scatter lands).
  CHECK((zero1.optimizer - zero2.optimizer).to_us() == Approx(2 * copy_us).epsilon(1e-3));
  // Both end the step's last backward with the hooks' copies and the reductions' core sharing...
  const sim::Time extra = zero2.bucket_copy_in + zero2.sync_backward_extra;
  CHECK(extra.to_us() == Approx(copy_us + 500 * bytes / 1e6).epsilon(1e-3));
  // ...which DDP's reducer pays at its end, after handing its buckets over; the executor's FSDP hooks
  // pay them as each layer's gradients arrive, so its layers' reduce-scatters start later with
  // them, the first layer's (the last in the backward) as the backward ends.
  REQUIRE(zero2.bucket_ready.size() == 2);
  CHECK(zero2.bucket_ready.back() == zero2.backward + extra);
  CHECK(ddp.bucket_ready.back() <= ddp.backward);
}

TEST_CASE("sim::simulate: with launch figures an action ends no sooner than its last launch, and the host runs ahead",
          "[sim][launch]") {
  auto s = test::scenario_from(
      test::kMlp +
      "data: {source: fashion-mnist, batch_size: 16}\n"
      "parallel: {chunks: 1}\noptimizer: {kind: sgd, momentum: 0.9}\nhardware: h100-nvlink-ib\n");
  auto c = test::sample_calibration();
  c.in_run = {};
  auto& layer = c.layers.at("linear 784x256 relu fp32");
  auto events = [&](const plan::Calibration& cal) {
    auto with = s;
    with.hardware.calibration = cal;
    const plan::Plan p = plan::resolve_plan(with);
    std::map<std::string, timeline::TimelineEvent> out;
    for (const auto& e : sim::simulate(p).timeline.events)
      if (e.rank == 0 && e.lane == timeline::Lane::compute) out[e.action.id()] = e;
    return std::make_pair(out, sim::stage_costs(p)[0]);
  };
  auto us = [](const timeline::TimelineEvent& e) { return (e.end - e.start).to_us(); };

  // Launch-bound: the forward's kernels take 5 ms to launch and far less to run, so F lasts 5 ms;
  // the optimizer's launches start after the backward's (none) and end at 5 + 3 ms.
  layer.forward_launch = {{1, 64}, {5000, 5000}};
  c.optimizers.front().launch = {{4096, 1048576}, {3000, 3000}};
  {
    const auto [e, cost] = events(c);
    REQUIRE(cost.forward_launch.to_us() == Approx(5000));
    CHECK(us(e.at("0F0")) == Approx(5000).epsilon(1e-6));
    CHECK(us(e.at("0B0")) == Approx(cost.backward.to_us()).epsilon(1e-6));  // its own launches: none
    CHECK(e.at("0OPTIM").end.to_us() == Approx(std::max(8000.0, e.at("0B0").end.to_us() + cost.optimizer.to_us())).epsilon(1e-6));
  }
  // Device-bound: a 20 ms backward on the device lets the host launch the optimizer's kernels
  // meanwhile; OPTIM then takes only its device time.
  layer.forward_launch = {{1, 64}, {10, 10}};
  layer.backward_no_input = {{1, 8, 64}, {20000, 20000, 20000}};  // the model's first layer: no input gradient
  {
    const auto [e, cost] = events(c);
    REQUIRE(e.at("0B0").end.to_us() > 3010);  // after the host's last launch (10 + 3000 us)
    CHECK(us(e.at("0OPTIM")) == Approx(cost.optimizer.to_us()).epsilon(1e-6));
    CHECK(cost.optimizer.to_us() < 3000);
  }
  // Without launch figures, nothing changes: the times hold the launches.
  layer.forward_launch = {};
  c.optimizers.front().launch = {};
  {
    const auto [e, cost] = events(c);
    CHECK(us(e.at("0F0")) == Approx(cost.forward.to_us()).epsilon(1e-6));
    CHECK(cost.forward_launch == plan::Time());
  }
}
