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
  auto c = test::sample_calibration();
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
  CHECK(r.allgather.latency_us == Approx(120));
  CHECK(r.allgather.bandwidth_gb_per_s == Approx(4));
  CHECK(r.allgather_cpu_share == Approx(0.6));
  CHECK(r.allgather_by_bytes.at(1048576) == Approx(380));
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
  auto c = test::sample_calibration();
  c.p2p = {};
  c.allreduce = {};
  c.allgather = {};
  c.send_call = {};
  const std::string base = plan::builtin_hardware_text("h100-nvlink-ib");
  const std::string text = plan::calibrated_copy_yaml(base, "h100-here", c, {"measured on a GPU"});
  CHECK(text.rfind("# measured on a GPU\n", 0) == 0);
  CHECK(text.find("p2p:") == std::string::npos);
  const auto hw = test::profile_from(text);
  const auto original = test::builtin_profile("h100-nvlink-ib");
  CHECK(hw.name == "h100-here");
  CHECK(hw.device.kind == plan::DeviceKind::cuda);
  CHECK(hw.collectives == schedule::Collectives::nccl);
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
  std::string text = plan::calibrated_profile_yaml(test::builtin_profile("cpu-host"), "here", test::sample_calibration(), {});
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
  hw.calibration = test::sample_calibration();
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
      test::kMlp +
      "data: {source: fashion-mnist, batch_size: 8}\nparallel: {chunks: 1}\n"
      "optimizer: {kind: sgd, momentum: 0.9}\nhardware: h100-nvlink-ib\n");
  const plan::Plan counted = plan::resolve_plan(s);
  auto c = test::sample_calibration();
  c.p2p = {};
  c.allreduce = {};
  c.allgather = {};
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
  // Micro-batch 8: the two layers' kept bytes and the loss's, in place of the count, less the last
  // layer's output (8 x 10 fp32 logits), which calibrate's measure holds and the last stage lets go.
  CHECK(measured.ranks[0].memory.activations == 40000 + 800 - 8 * 10 * 4 + 400);
  CHECK(measured.ranks[0].memory.activations != counted.ranks[0].memory.activations);
  // Everything but the activations is as counted.
  CHECK(measured.ranks[0].memory.params == counted.ranks[0].memory.params);
  CHECK(measured.ranks[0].memory.allocated() == measured.ranks[0].memory.total() - measured.ranks[0].memory.reserve);
  // Layer checkpointing keeps the inputs (counted) and recomputes one layer's measured bytes.
  auto layer = s;
  layer.parallel.activation_checkpointing = plan::Recompute::layer;
  CHECK(plan::resolve_plan(layer).ranks[0].memory.recompute == 40000);
  // An MLP ends in a block: layer recompute re-runs its last layer and the loss after it, so its
  // backward adds every layer's forward and the loss's (the executor's backward_by_layer).
  const auto none_cost = sim::stage_costs(measured)[0], layer_cost = sim::stage_costs(plan::resolve_plan(layer))[0];
  const double loss_forward = hw.calibration->loss("linear 256x10 fp32")->forward.at(8);
  double layers_forward = 0;
  for (const auto& l : measured.layers())
    layers_forward += plan::estimate_layer_cost(l, s.hardware, s.parallel, 8).forward.to_us();
  CHECK((layer_cost.backward - none_cost.backward).to_us() == Approx(layers_forward + loss_forward).margin(0.01));  // (ns rounding)

  // The scaler runs at fp16 only, over the stage's parameters.
  const double params = 784 * 256 + 256 + 256 * 10 + 10;
  const double fp32_optimizer = sim::stage_costs(measured)[0].optimizer.to_us();
  auto fp16 = s;
  fp16.parallel.precision = plan::Precision::fp16;
  fp16.hardware.calibration->layers.clear();  // (the fp16 signatures are not measured; costs come from the peaks)
  CHECK(sim::stage_costs(plan::resolve_plan(fp16))[0].optimizer.to_us() ==
        Approx(fp32_optimizer + c.loss_scaler.at(params)).epsilon(1e-3));
}

TEST_CASE("plan::Calibration: launch figures are written and read back", "[plan][launch]") {
  auto c = test::sample_calibration();
  c.layers.at("linear 784x256 relu fp32").forward_launch = {{1, 8, 64}, {40, 41, 42}};
  c.layers.at("linear 784x256 relu fp32").backward_launch = {{1, 8, 64}, {80, 81, 82}};
  c.optimizers.front().launch = {{4096, 1048576}, {30, 35}};
  const auto hw = test::profile_from(plan::calibrated_copy_yaml(plan::builtin_hardware_text("h100-nvlink-ib"), "h100-here", c, {}));
  REQUIRE(hw.calibration);
  CHECK(hw.calibration->layer("linear 784x256 relu fp32")->forward_launch.at(8) == Approx(41));
  CHECK(hw.calibration->layer("linear 784x256 relu fp32")->backward_launch.at(64) == Approx(82));
  CHECK(hw.calibration->optimizer("sgd", true)->launch.at(1048576) == Approx(35));
}
