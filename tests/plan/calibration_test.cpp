#include <catch2/catch.hpp>
#include <map>
#include <random>

#include "plan/calibration.hpp"
#include "plan/cost.hpp"
#include "plan/hardware.hpp"
#include "sim/cost_model.hpp"
#include "sim/metrics.hpp"
#include "sim/simulator.hpp"
#include "tests/test_util.hpp"

using namespace parallax;

namespace {

// The one-layer MLP (and its loss layer) that sample_calibration() measures.
const std::string kMlp = "name: t\nmodel: {preset: mlp, layers: 1, hidden: 256, input: 784, classes: 10}\n";

// A calibration with hand-picked numbers for one linear layer and its loss.
plan::Calibration sample_calibration() {
  plan::Calibration c;
  c.threads = 1;
  c.cores = 2;
  c.in_run = {.forward = 1.25, .backward = 1.5, .optimizer = 2.0, .forward_extra_us = 12, .backward_extra_us = -5,
              .backward_probed_us = 2500, .send_extra_us = 40, .delivery_extra_us = 15,
              .probe = "probe"};
  c.backward_call_us = 7;
  c.copy_gb_per_s = 20;
  c.host_probe_us = 12.5;
  c.send_call = {{1024, 65536}, {12, 30}};
  c.p2p = {60, 3};
  c.allreduce = {300, 1.5};
  plan::SignatureCost l;
  l.signature = "linear 784x256 relu fp32";
  l.forward = {{1, 8, 64}, {60, 70, 280}};
  l.forward_no_grad = {{1, 8, 64}, {55, 66, 270}};
  l.backward = {{1, 8, 64}, {100, 130, 650}};
  l.backward_no_input = {{1, 8, 64}, {45, 77, 390}};
  c.layers[l.signature] = l;
  plan::SignatureCost loss;
  loss.signature = "linear 256x10 fp32";
  loss.forward = {{1, 64}, {2, 5.5}};
  loss.backward = {{1, 64}, {0.5, 2.5}};
  c.losses[loss.signature] = loss;
  c.data["fashion-mnist linear 784x256 relu fp32 input"] = {{1, 64}, {3, 25}};
  c.optimizers.push_back({"sgd", true, {{4096, 1048576}, {12, 300}}});
  return c;
}

}  // namespace

TEST_CASE("plan::fit_linear: recovers known coefficients from synthetic timings", "[plan]") {
  std::mt19937 rng(7);
  std::normal_distribution<double> noise(0, 0.2);
  std::vector<double> mb, us;
  for (double x : {1, 2, 4, 8, 16, 32, 64}) {
    mb.push_back(x);
    us.push_back(12.0 + 3.5 * x + noise(rng));
  }
  const auto f = plan::fit_linear(mb, us);
  CHECK(f.fixed_us == Approx(12.0).margin(0.5));
  CHECK(f.per_sample_us == Approx(3.5).epsilon(0.01));
  CHECK(f.max_relative_residual < 0.05);
  // A curve that bends (cache effects) is reported as far from one line.
  const auto bent = plan::fit_linear({1, 2, 4, 8, 16, 32, 64}, {10, 10, 10, 10, 20, 60, 200});
  CHECK(bent.max_relative_residual > 0.3);
}

TEST_CASE("plan::fit_in_run_line: recovers a run's factor and fixed extra from a small and a large model", "[plan]") {
  // Synthetic in-run times from a known line, in_run = 1.3 x alone + 60 us.
  auto in_run = [](double alone) { return plan::InRunPoint{alone, 1.3 * alone + 60}; };
  const plan::InRunPoint small = in_run(120), large = in_run(2400);
  const plan::InRunLine line = plan::fit_in_run_line(small, &large);
  CHECK(line.factor == Approx(1.3));
  CHECK(line.extra_us == Approx(60));

  // One model cannot separate the two: a fixed extra through its point.
  const plan::InRunLine one = plan::fit_in_run_line(small, nullptr);
  CHECK(one.factor == 1);
  CHECK(one.extra_us == Approx(1.3 * 120 + 60 - 120));
  // Nor can two of nearly the same size.
  const plan::InRunPoint similar = in_run(200);
  CHECK(plan::fit_in_run_line(small, &similar).factor == 1);

  // A noisy large probe cannot make the factor absurd; the line still meets the small model.
  const plan::InRunPoint wild{2400, 30000};
  const plan::InRunLine bounded = plan::fit_in_run_line(small, &wild);
  CHECK(bounded.factor == Approx(2.5));
  CHECK(bounded.bounded);  // and says so, with what the probes gave
  CHECK(bounded.fitted == Approx((wild.in_run_us - small.in_run_us) / (wild.alone_us - small.alone_us)));
  CHECK_FALSE(line.bounded);
  CHECK(bounded.factor * small.alone_us + bounded.extra_us == Approx(small.in_run_us));
}

TEST_CASE("plan::pass_difference and lower_of: two passes over a layer, compared and merged size by size", "[plan]") {
  plan::SignatureCost first, second;
  first.forward = {{1, 2, 4}, {100, 150, 250}};
  first.backward = {{1, 2, 4}, {200, 300, 500}};
  first.forward_no_grad = {{1, 2, 4}, {90, 140, 240}};
  // The second pass stopped before size 4 (too slow that time) and measured 1 and 2 differently.
  second.forward = {{1, 2}, {120, 140}};
  second.backward = {{1, 2}, {200, 390}};
  second.forward_no_grad = {{1, 2}, {80, 150}};
  // |a - b| / min(a, b) at the common sizes: forward 20/100 and 10/140, backward 0 and 90/300;
  // the upper middle of the four is 0.2.
  CHECK(plan::pass_difference(first, second) == Approx(0.20));
  CHECK(plan::pass_difference(second, first) == Approx(0.20));
  CHECK(plan::pass_difference(first, first) == 0);
  const plan::SignatureCost low = plan::lower_of(first, second);
  CHECK(low.forward.us == std::vector<double>{100, 140, 250});  // 250: only the first pass has size 4
  CHECK(low.backward.us == std::vector<double>{200, 300, 500});
  CHECK(low.forward_no_grad.us == std::vector<double>{80, 140, 240});
  CHECK(low.forward.mb == first.forward.mb);
  // No common size: nothing to compare, and the first pass stays.
  plan::SignatureCost apart;
  apart.forward = {{8}, {1}};
  CHECK(plan::pass_difference(first, apart) == 0);
  CHECK(plan::lower_of(first, apart).forward.us == first.forward.us);
}

TEST_CASE("plan::unmeasured_signatures: each layer signature the profile lacks, once, in model order", "[plan]") {
  const plan::Scenario s = plan::load_scenario(std::string(PARALLAX_SOURCE_DIR) + "/scenarios/mlp-fashion-mnist-ddp2.yaml", {});
  REQUIRE(s.layers.size() == 3);  // 784x256 relu, 256x256 relu, 256x10
  plan::Calibration cal;
  CHECK(plan::unmeasured_signatures(cal, s.layers, plan::Precision::fp32).size() == 3);
  const std::string middle = plan::layer_signature(s.layers[1], plan::Precision::fp32);
  cal.layers[middle].signature = middle;
  const auto missing = plan::unmeasured_signatures(cal, s.layers, plan::Precision::fp32);
  CHECK(missing == std::vector<std::string>{plan::layer_signature(s.layers[0], plan::Precision::fp32),
                                            plan::layer_signature(s.layers[2], plan::Precision::fp32)});
  // The same layers at bf16 are other signatures.
  CHECK(plan::unmeasured_signatures(cal, s.layers, plan::Precision::bf16).size() == 3);
  std::vector<plan::Layer> twice = {s.layers[0], s.layers[0]};
  CHECK(plan::unmeasured_signatures(cal, twice, plan::Precision::fp32).size() == 1);
}

TEST_CASE("plan::CostCurve: interpolates between sizes and extrapolates along the upper half", "[plan]") {
  const plan::CostCurve c{{1, 2, 4, 8}, {10, 12, 16, 24}};
  CHECK(c.at(2) == Approx(12));
  CHECK(c.at(3) == Approx(14));   // halfway between 12 and 16
  CHECK(c.at(6) == Approx(20));
  CHECK(c.at(16) == Approx(24 + 2 * 8));  // slope of (4,16)-(8,24) is 2 per sample
  CHECK(c.at(0.5) >= 0);
  CHECK(plan::CostCurve{}.at(4) == 0);
}

TEST_CASE("plan::Calibration: a calibrated profile round-trips with the same costs", "[plan]") {
  auto c = sample_calibration();
  c.optimizers[0].per_tensor_us = 7.5;
  c.in_run_data = plan::InRunFactors{.forward = 1.1, .backward = 1.2, .optimizer = 1.3, .optimizer_extra_us = 9,
                                     .allreduce = 2.5, .sync_backward_extra_us_per_mb = 210, .probe = "ddp probe",
                                     .bounded = "forward 2.50, the probes gave 4.10"};
  const std::string text = plan::calibrated_profile_yaml(test::builtin_profile("cpu-host"), "here", c, {"a comment"});
  const auto hw = test::profile_from(text);
  REQUIRE(hw.calibration);
  const auto& r = *hw.calibration;
  CHECK(hw.name == "here");
  CHECK(r.in_run.forward == Approx(1.25));
  CHECK(r.in_run.optimizer == Approx(2.0));
  CHECK(r.in_run.delivery_extra_us == Approx(15));
  CHECK(r.in_run.backward_probed_us == Approx(2500));
  REQUIRE(r.in_run_data);
  CHECK(r.in_run_data->backward == Approx(1.2));
  CHECK(r.in_run_data->allreduce == Approx(2.5));
  CHECK(r.in_run_data->optimizer_extra_us == Approx(9));
  CHECK(r.in_run_data->sync_backward_extra_us_per_mb == Approx(210));
  CHECK(r.in_run.backward_extra_us == Approx(-5));
  CHECK(r.in_run_data->probe == "ddp probe");
  CHECK(r.in_run_data->bounded == "forward 2.50, the probes gave 4.10");  // a bound stays marked as one
  CHECK(text.find("bounded: \"forward 2.50") != std::string::npos);
  CHECK(r.in_run.bounded.empty());
  CHECK(r.in_run.probe == "probe");
  CHECK(r.host_probe_us == Approx(12.5));
  CHECK(hw.interference.shared_cores == 1);  // not measured: no interference section

  // A measured shared-core slowdown goes into the profile's interference, for the simulator.
  c.shared_cores = 1.3;
  const auto shared = test::profile_from(plan::calibrated_profile_yaml(test::builtin_profile("cpu-host"), "here", c, {}));
  CHECK(shared.interference.shared_cores == Approx(1.3));
  CHECK(shared.interference.compute == 1);
  CHECK(r.send_call.at(32768) == Approx(c.send_call.at(32768)));
  CHECK(r.p2p.latency_us == Approx(60));
  // The node link carries delivery as a run sees it: the ping-pong's plus the probe's extra.
  CHECK(hw.node_link.latency_us == Approx(60 + 15));
  CHECK(r.allreduce.bandwidth_gb_per_s == Approx(1.5));
  const auto* l = r.layer("linear 784x256 relu fp32");
  REQUIRE(l);
  for (double mb : {1.0, 5.0, 8.0, 30.0, 100.0}) {
    CHECK(l->forward.at(mb) == Approx(c.layers.at(l->signature).forward.at(mb)));
    CHECK(l->backward_no_input.at(mb) == Approx(c.layers.at(l->signature).backward_no_input.at(mb)));
  }
  REQUIRE(r.optimizer("sgd", true));
  CHECK(r.optimizer("sgd", true)->by_params.at(500000) ==
        Approx(c.optimizers[0].by_params.at(500000)));
  CHECK(r.optimizer("sgd", true)->per_tensor_us == Approx(7.5));
  CHECK(r.data.at("fashion-mnist linear 784x256 relu fp32 input").at(32) ==
        Approx(c.data.at("fashion-mnist linear 784x256 relu fp32 input").at(32)));
}

TEST_CASE("plan::calibrated_copy_yaml: a GPU calibration keeps its base profile whole, without Gloo links", "[plan]") {
  // What calibrate writes on a GPU: no Gloo figures were measured (a profile with p2p at 0 was
  // refused by the parser, as the first GPU run found).
  auto c = sample_calibration();
  c.p2p = {};
  c.allreduce = {};
  c.send_call = {};
  const std::string base = plan::builtin_hardware_text("h100-nvlink-ib");
  const std::string text = plan::calibrated_copy_yaml(base, "h100-here", c, {"measured on a GPU"});
  CHECK(text.rfind("# measured on a GPU\n", 0) == 0);
  CHECK(text.find("p2p:") == std::string::npos);
  const auto hw = test::profile_from(text);
  const auto original = test::builtin_profile("h100-nvlink-ib");
  CHECK(hw.name == "h100-here");
  CHECK(hw.device.kind == plan::DeviceKind::cuda);
  CHECK(hw.collectives == plan::Collectives::nccl);
  REQUIRE(hw.nccl);
  CHECK(hw.nccl->nvlinks == original.nccl->nvlinks);
  CHECK(hw.node_link.bandwidth_gb_per_s == original.node_link.bandwidth_gb_per_s);
  REQUIRE(hw.calibration);
  CHECK(hw.calibration->p2p.bandwidth_gb_per_s == 0);
  const auto* l = hw.calibration->layer("linear 784x256 relu fp32");
  REQUIRE(l);
  CHECK(l->forward.at(8) == Approx(c.layers.at(l->signature).forward.at(8)));
  // A calibrated base is refused: the new section would come twice.
  CHECK_THROWS_AS(plan::calibrated_copy_yaml(text, "again", c, {}), std::logic_error);
}

TEST_CASE("plan::Calibration: a profile from before receives were posted at the step's start still reads", "[plan]") {
  std::string text = plan::calibrated_profile_yaml(test::builtin_profile("cpu-host"), "here", sample_calibration(), {});
  const std::string key = "delivery_extra_us: 15";
  const auto at = text.find(key);
  REQUIRE(at != std::string::npos);
  CHECK(text.find("late_receive_us") == std::string::npos);  // no longer written
  text.insert(at + key.size(), ", send_unposted_us: 20, late_receive_us: 150");
  const auto hw = test::profile_from(text);
  REQUIRE(hw.calibration);
  CHECK(hw.calibration->in_run.send_extra_us == Approx(40));
}

TEST_CASE("plan::layer_signature: same shapes match whatever the layer's name", "[plan]") {
  const auto a = plan::make_linear("fc0", 784, 256, true);
  const auto b = plan::make_linear("encoder.first", 784, 256, true);
  const auto c = plan::make_linear("fc0", 784, 256, false);
  CHECK(plan::layer_signature(a, plan::Precision::fp32) == "linear 784x256 relu fp32");
  CHECK(plan::layer_signature(a, plan::Precision::fp32) == plan::layer_signature(b, plan::Precision::fp32));
  CHECK(plan::layer_signature(a, plan::Precision::fp32) != plan::layer_signature(c, plan::Precision::fp32));
  CHECK(plan::layer_signature(a, plan::Precision::fp32) != plan::layer_signature(a, plan::Precision::bf16));
  CHECK(plan::layer_signature(plan::make_encoder("layers.3", 512, 8, 2048, 128), plan::Precision::bf16) ==
        "encoder h512 heads8 ffn2048 seq128 bf16");

  auto hw = test::builtin_profile("cpu-host");
  hw.calibration = sample_calibration();
  // A matched signature takes the measured cost: with the input gradient, and without it.
  const auto m = plan::estimate_layer_cost(b, hw, plan::Precision::fp32, 8, true);
  CHECK(m.measured);
  CHECK(m.forward.to_us() == Approx(70));
  CHECK(m.backward.to_us() == Approx(130));
  CHECK(plan::estimate_layer_cost(b, hw, plan::Precision::fp32, 8, false).backward.to_us() == Approx(77));
  // An unmatched one falls back to the roofline: the larger of the FLOP and memory times.
  const auto r = plan::estimate_layer_cost(c, hw, plan::Precision::fp32, 8, true);
  CHECK_FALSE(r.measured);
  const double flop_us = c.flops_per_sample * 8 / (hw.device.peak_tflops.at(plan::Precision::fp32) *
                                                   hw.device.efficiency * 1e6);
  CHECK(r.forward.to_us() >= Approx(hw.device.layer_overhead_us + flop_us));
  CHECK(r.backward.to_us() >= Approx(hw.device.layer_overhead_us + 2 * flop_us));
}

TEST_CASE("plan::Roofline: memory-bound layers are costed by their bytes", "[plan]") {
  auto hw = test::builtin_profile("cpu-host");
  hw.device.layer_overhead_us = 0;
  // An embedding has no FLOPs worth counting but moves its output: bytes decide.
  const auto e = plan::make_embedding("embed", 1000, 64, 16);
  const auto cost = plan::estimate_layer_cost(e, hw, plan::Precision::fp32, 4, false);
  const double out_bytes = e.output_elems_per_sample * 4 * 4;
  CHECK(cost.forward.to_us() >= out_bytes / (hw.device.memory_bandwidth_gb_per_s * 1e3) * 0.999);
}

TEST_CASE("plan::Calibration: bad profiles name the place", "[plan]") {
  const std::string head =
      "name: x\ndevice: {name: d, memory_gb: 1, peak_tflops: {fp32: 1}}\nnode: {devices: 2, link: {bandwidth_gb_per_s: 1, "
      "latency_us: 1}}\n";
  const std::string negative = test::profile_error(head +
                                        "calibration:\n"
                                        "  layers:\n"
                                        "    - {signature: \"linear 4x4 fp32\", mb: [1, 2], fwd_us: [3, -1]}\n");
  CHECK_THAT(negative, Catch::Contains("profile.yaml:6:"));
  CHECK_THAT(negative, Catch::Contains("fwd_us"));
  const std::string unknown = test::profile_error(head + "calibration:\n  interferance: 1.2\n");
  CHECK_THAT(unknown, Catch::Contains("profile.yaml:5:"));
  CHECK_THAT(unknown, Catch::Contains("interferance"));
  CHECK_THAT(test::profile_error(head + "calibration:\n  layers:\n    - {signature: s, mb: [1, 2], fwd_us: [3]}\n"),
             Catch::Contains("has 1 values for 2 sizes"));
  // A profile from before the in-run probe says to calibrate again.
  CHECK_THAT(test::profile_error(head + "calibration:\n  interference: 1.1\n"), Catch::Contains("calibrate"));
  CHECK_THAT(test::profile_error(head + "calibration:\n  layers:\n    - {signature: s, mb: [2, 1], fwd_us: [3, 4]}\n"),
             Catch::Contains("ascending"));
}

TEST_CASE("sim::stage_costs: a calibrated stage adds data, loss, backward call and optimizer", "[sim]") {
  auto s = test::scenario_from(
      kMlp +
      "data: {source: fashion-mnist, batch_size: 8}\nparallel: {chunks: 1}\n"
      "optimizer: {kind: sgd, momentum: 0.9}\nhardware: cpu-host\n");
  auto c = sample_calibration();
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
  p.scenario.hardware.calibration->in_run = {.forward = 1.25, .backward = 1.5, .optimizer = 2.0, .probe = ""};
  const auto in_run = sim::stage_costs(p);
  CHECK(in_run[0].forward.to_us() == Approx(1.25 * forward).epsilon(1e-3));
  CHECK(in_run[0].backward.to_us() == Approx(1.5 * backward).epsilon(1e-3));
  CHECK(in_run[0].optimizer.to_us() == Approx(2.0 * costs[0].optimizer.to_us()).epsilon(1e-3));
  // And the extras add a cost per action on top.
  p.scenario.hardware.calibration->in_run = {.forward_extra_us = 30, .backward_extra_us = -20, .probe = ""};
  const auto extra = sim::stage_costs(p);
  CHECK(extra[0].forward.to_us() == Approx(forward + 30).epsilon(1e-3));
  CHECK(extra[0].backward.to_us() == Approx(backward - 20).epsilon(1e-3));
  // The proportion holds up to the longest probed action: beyond it the slowdown stays fixed.
  p.scenario.hardware.calibration->in_run = {.forward = 1.5, .forward_extra_us = 10, .forward_probed_us = forward / 4,
                                             .probe = ""};
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
  auto c = sample_calibration();
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
      kMlp +
      "data: {source: fashion-mnist, batch_size: 16}\n"
      "parallel: {pipeline: 2, partition_len: [1, 1], chunks: 2, schedule: gpipe}\n"
      "optimizer: {kind: sgd, momentum: 0.9}\nhardware: cpu-host\n");
  auto c = sample_calibration();
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
    return plan::TimelineEvent{};
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
    if (e.rank == 1 && e.lane != plan::Lane::send && e.start >= send_b1.start) after_send_b1 = std::min(after_send_b1, e.start);
  CHECK(after_send_b1.to_us() == Approx(send_b1.start.to_us() + c.send_call.at(bytes)).epsilon(1e-3));
}

TEST_CASE("sim::simulate: a data-parallel plan takes the data-parallel probe's factors, all-reduce included", "[sim]") {
  auto s = test::scenario_from(
      kMlp +
      "data: {source: fashion-mnist, batch_size: 16}\nparallel: {data: 2, chunks: 1, bucket_cap_mb: 100}\n"
      "optimizer: {kind: sgd, momentum: 0.9}\nhardware: cpu-host\n");
  auto c = sample_calibration();
  c.in_run = {};
  s.hardware.calibration = c;
  const plan::Plan alone = plan::resolve_plan(s);
  c.in_run_data = plan::InRunFactors{.forward = 1.5, .backward = 2.0, .allreduce = 3.0, .probe = ""};
  s.hardware.calibration = c;
  const plan::Plan in_run = plan::resolve_plan(s);
  auto span = [](const sim::SimRun& run, plan::ActionKind kind) {
    for (const auto& e : run.timeline.events)
      if (e.rank == 0 && e.action.kind == kind) return (e.end - e.start).to_us();
    FAIL("no such action");
    return 0.0;
  };
  const auto a = sim::simulate(alone), b = sim::simulate(in_run);
  CHECK(span(b, plan::ActionKind::F) == Approx(1.5 * span(a, plan::ActionKind::F)).epsilon(1e-3));
  // One bucket: alone it takes the measured 2-rank all-reduce, latency + bytes / bandwidth.
  const double bytes = (784 * 256 + 256 + 256 * 10 + 10) * 4.0;
  CHECK(span(a, plan::ActionKind::ALLREDUCE) == Approx(300 + bytes / 1.5e3).epsilon(1e-3));
  CHECK(span(b, plan::ActionKind::ALLREDUCE) == Approx(3.0 * span(a, plan::ActionKind::ALLREDUCE)).epsilon(1e-3));
  // A pipeline-only plan keeps the pipeline probe's factors (here 1).
  CHECK(&sim::in_run_factors(alone, c) == &*c.in_run_data);
  auto p = s;
  p.parallel.data = 1;
  CHECK(&sim::in_run_factors(plan::resolve_plan(p), c) == &c.in_run);
}

TEST_CASE("sim::simulate: under DDP only the step's last backward takes the all-reduces' extra, per MB", "[sim]") {
  auto s = test::scenario_from(
      kMlp +
      "data: {source: fashion-mnist, batch_size: 32}\nparallel: {data: 2, chunks: 4, bucket_cap_mb: 100}\n"
      "optimizer: {kind: sgd, momentum: 0.9}\nhardware: cpu-host\n");
  auto c = sample_calibration();
  c.in_run_data = plan::InRunFactors{.backward_extra_us = 40, .sync_backward_extra_us_per_mb = 500, .probe = ""};
  s.hardware.calibration = c;
  const auto run = sim::simulate(plan::resolve_plan(s));
  std::map<int, double> backward_us;  // by micro-batch, rank 0
  for (const auto& e : run.timeline.events)
    if (e.rank == 0 && e.action.kind == plan::ActionKind::B) backward_us[e.action.mb] = (e.end - e.start).to_us();
  REQUIRE(backward_us.size() == 4);
  CHECK(backward_us[1] == Approx(backward_us[0]));
  CHECK(backward_us[2] == Approx(backward_us[0]));
  // The last one adds the bucket copy-in (bytes at the measured copy rate) and 500 us per MB.
  const double bytes = (784 * 256 + 256 + 256 * 10 + 10) * 4.0;
  const double copy_us = bytes / (c.copy_gb_per_s * 1e3);
  CHECK(backward_us[3] == Approx(backward_us[0] + copy_us + 500 * bytes / 1e6).epsilon(1e-3));
}

TEST_CASE("plan::host_at_speed: within the tolerance of the reference, or no reference", "[plan]") {
  CHECK(plan::host_at_speed(12.0, 12.5));                                 // faster than calibrated
  CHECK(plan::host_at_speed(12.5 * plan::kHostSpeedTolerance, 12.5));     // at the edge
  CHECK_FALSE(plan::host_at_speed(12.5 * plan::kHostSpeedTolerance * 1.01, 12.5));
  CHECK_FALSE(plan::host_at_speed(16.0, 12.5));                           // this VM's slow state
  CHECK(plan::host_at_speed(1e6, 0));                                     // a profile without a probe
}

TEST_CASE("plan: a GPU calibration's kept bytes set the activations, and fp16's loss scaler adds to the optimizer",
          "[plan][sim]") {
  // A one-layer linear model on the H100 profile, calibrated with hand-picked figures.
  auto s = test::scenario_from(
      kMlp +
      "data: {source: fashion-mnist, batch_size: 8}\nparallel: {chunks: 1}\n"
      "optimizer: {kind: sgd, momentum: 0.9}\nhardware: h100-nvlink-ib\n");
  const plan::Plan counted = plan::resolve_plan(s);
  auto c = sample_calibration();
  c.p2p = {};
  c.allreduce = {};
  c.send_call = {};
  c.in_run = {};  // factors of 1: the sum of the parts
  c.layers.at("linear 784x256 relu fp32").kept_bytes = {{1, 8, 64}, {5000, 40000, 320000}};
  plan::SignatureCost out;
  out.signature = "linear 256x10 fp32";
  out.forward = {{1, 64}, {3, 9}};
  out.backward = {{1, 64}, {6, 15}};
  out.kept_bytes = {{1, 64}, {100, 6400}};
  c.layers[out.signature] = out;
  c.losses.at("linear 256x10 fp32").kept_bytes = {{1, 64}, {50, 3200}};
  c.loss_scaler = {{4096, 1048576}, {40, 900}};

  // Written and read back, as calibrate writes a GPU's profile.
  const auto hw = test::profile_from(plan::calibrated_copy_yaml(plan::builtin_hardware_text("h100-nvlink-ib"), "h100-here", c, {}));
  REQUIRE(hw.calibration);
  CHECK(hw.calibration->layer("linear 784x256 relu fp32")->kept_bytes.at(8) == Approx(40000));
  CHECK(hw.calibration->loss("linear 256x10 fp32")->kept_bytes.at(64) == Approx(3200));
  CHECK(hw.calibration->loss_scaler.at(4096) == Approx(40));

  s.hardware = hw;
  const plan::Plan measured = plan::resolve_plan(s);
  // Micro-batch 8: the two layers' kept bytes and the loss's, in place of the count.
  CHECK(measured.ranks[0].memory.activations == 40000 + 800 + 400);
  CHECK(measured.ranks[0].memory.activations != counted.ranks[0].memory.activations);
  // Everything but the activations is as counted.
  CHECK(measured.ranks[0].memory.params == counted.ranks[0].memory.params);
  CHECK(measured.ranks[0].memory.allocated() == measured.ranks[0].memory.total() - measured.ranks[0].memory.reserve);
  // Layer checkpointing keeps the inputs (counted) and recomputes one layer's measured bytes.
  auto layer = s;
  layer.parallel.activation_checkpointing = plan::Recompute::layer;
  CHECK(plan::resolve_plan(layer).ranks[0].memory.recompute == 40000);

  // The scaler runs at fp16 only, over the stage's parameters.
  const double params = 784 * 256 + 256 + 256 * 10 + 10;
  const double fp32_optimizer = sim::stage_costs(measured)[0].optimizer.to_us();
  auto fp16 = s;
  fp16.parallel.precision = plan::Precision::fp16;
  fp16.hardware.calibration->layers.clear();  // (the fp16 signatures are not measured; costs come from the peaks)
  CHECK(sim::stage_costs(plan::resolve_plan(fp16))[0].optimizer.to_us() ==
        Approx(fp32_optimizer + c.loss_scaler.at(params)).epsilon(1e-3));
}

TEST_CASE("sim::simulate: with launch figures an action ends no sooner than its last launch, and the host runs ahead",
          "[sim][launch]") {
  auto s = test::scenario_from(
      kMlp +
      "data: {source: fashion-mnist, batch_size: 16}\n"
      "parallel: {chunks: 1}\noptimizer: {kind: sgd, momentum: 0.9}\nhardware: h100-nvlink-ib\n");
  auto c = sample_calibration();
  c.in_run = {};
  auto& layer = c.layers.at("linear 784x256 relu fp32");
  auto events = [&](const plan::Calibration& cal) {
    auto with = s;
    with.hardware.calibration = cal;
    const plan::Plan p = plan::resolve_plan(with);
    std::map<std::string, plan::TimelineEvent> out;
    for (const auto& e : sim::simulate(p).timeline.events)
      if (e.rank == 0 && e.lane == plan::Lane::compute) out[e.action.id()] = e;
    return std::make_pair(out, sim::stage_costs(p)[0]);
  };
  auto us = [](const plan::TimelineEvent& e) { return (e.end - e.start).to_us(); };

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

TEST_CASE("plan::Calibration: launch figures are written and read back", "[plan][launch]") {
  auto c = sample_calibration();
  c.layers.at("linear 784x256 relu fp32").forward_launch = {{1, 8, 64}, {40, 41, 42}};
  c.layers.at("linear 784x256 relu fp32").backward_launch = {{1, 8, 64}, {80, 81, 82}};
  c.optimizers.front().launch = {{4096, 1048576}, {30, 35}};
  const auto hw = test::profile_from(plan::calibrated_copy_yaml(plan::builtin_hardware_text("h100-nvlink-ib"), "h100-here", c, {}));
  REQUIRE(hw.calibration);
  CHECK(hw.calibration->layer("linear 784x256 relu fp32")->forward_launch.at(8) == Approx(41));
  CHECK(hw.calibration->layer("linear 784x256 relu fp32")->backward_launch.at(64) == Approx(82));
  CHECK(hw.calibration->optimizer("sgd", true)->launch.at(1048576) == Approx(35));
}
