// The shipped GPU compute tables (scenarios/hardware/*-nvlink-ib.yaml, `device.compute`) against
// published GEMM measurements that were not used to build them: the tables come from OpenXLA's
// measured grid (bench/data/gemm_xla_*.csv); these figures from SemiAnalysis's shapes and
// S. Bekman's searched best shapes (the sources are cited in the profiles).
#include <catch2/catch.hpp>

#include "plan/compute_tables.hpp"
#include "plan/cost.hpp"
#include "plan/hardware.hpp"
#include "plan/precision.hpp"
#include "plan/profile_copy.hpp"
#include "tests/test_util.hpp"

using namespace parallax;

namespace {

// TFLOP/s the profile's table gives one GEMM of m x n x k.
double table_tflops(const plan::HardwareProfile& hw, plan::Precision p, double m, double n, double k) {
  const double peak = hw.device.peak_tflops.at(p);
  return hw.device.compute->gemm_fraction(p, m, n, k, peak) * peak;
}

struct Measured {
  double m, n, k, tflops;
};

// What loading a one-device profile with a bf16 peak of 1000 and these `device.compute` keys says
// ("" when it loads).
std::string compute_error(const std::string& keys) {
  return test::profile_error("name: x\ndevice: {name: g, memory_gb: 80, peak_tflops: {fp32: 60, bf16: 1000}, compute: {precisions: [bf16], " +
                             keys + "}}\nnode: {devices: 1, link: {bandwidth_gb_per_s: 1, latency_us: 1}}\n");
}

}  // namespace

TEST_CASE("GPU tables: H100 bf16 within 10% of GEMMs measured outside the table", "[plan][gpu-tables]") {
  const auto hw = test::builtin_profile("h100-nvlink-ib");
  // SemiAnalysis's Llama-70B training shapes on H100 80GB, bf16 (The Smol Training Playbook), and
  // Bekman's best searched shape (ml-engineering MAMF table): all beyond the grid's 4096.
  const Measured measured[] = {{16384, 8192, 1280, 714.5}, {16384, 1024, 8192, 757.7}, {16384, 8192, 7168, 752.9},
                               {16384, 3584, 8192, 733.0}, {8192, 8192, 8192, 729.4},  {2048, 2048, 13312, 794.5}};
  for (const Measured& x : measured) {
    INFO("m, n, k = " << x.m << ", " << x.n << ", " << x.k);
    CHECK(table_tflops(hw, plan::Precision::bf16, x.m, x.n, x.k) == Approx(x.tflops).epsilon(0.10));
  }
}

TEST_CASE("GPU tables: H100 fp8, derived from bf16, within 10% of Bekman's best fp8 shape", "[plan][gpu-tables]") {
  const auto hw = test::builtin_profile("h100-nvlink-ib");
  CHECK(table_tflops(hw, plan::Precision::fp8, 1024, 9216, 14336) == Approx(1402.6).epsilon(0.10));
  // The H200 shares the H100's tables; its own best fp8 shape (1453.4) checks them there.
  CHECK(table_tflops(test::builtin_profile("h200-nvlink-ib"), plan::Precision::fp8, 1280, 4096, 12032) == Approx(1453.4).epsilon(0.10));
}

TEST_CASE("GPU tables: no GEMM runs above what the GPU sustains at its power limit", "[plan][gpu-tables]") {
  // Bekman's MSMF (ml-engineering's MAMF and MSMF table): the steady rate of a GPU's best shape once
  // it runs at its power limit in a busy node. The grids were built without it, from OpenXLA's table;
  // at the MSMF shapes they give it within 10%, and beyond their largest shapes the ceiling holds.
  struct Sustained {
    const char* profile;
    double m, n, k, bf16;
  };
  for (const Sustained& x : {Sustained{"h200-nvlink-ib", 1536, 2816, 6144, 755}, Sustained{"b200-nvlink-ib", 3072, 18944, 4608, 1439}}) {
    INFO(x.profile);
    const auto hw = test::builtin_profile(x.profile);
    CHECK(table_tflops(hw, plan::Precision::bf16, x.m, x.n, x.k) == Approx(x.bf16).epsilon(0.10));
    for (plan::Precision p : {plan::Precision::bf16, plan::Precision::fp16, plan::Precision::fp8})
      CHECK(table_tflops(hw, p, 16384, 16384, 16384) <= hw.device.compute->sustained_tflops.at(p));
  }
  // The measured fp8 grid (short timings) passes the sustained fp8 rate at 2048 x 2048 x 4096: it
  // runs at it there.
  const auto h100 = test::builtin_profile("h100-nvlink-ib");
  CHECK(table_tflops(h100, plan::Precision::fp8, 2048, 2048, 4096) == Approx(1354));
  CHECK(table_tflops(h100, plan::Precision::fp8, 2048, 2048, 4096) < h100.device.compute->gemm.at(plan::Precision::fp8).at(2048, 2048, 4096));
  // A GPU held at a lower clock sustains that much less: the 500 W H100's ceiling is the 700 W one's
  // x its clock_fraction, as its grids are.
  const auto limited = test::builtin_profile("h100-hbm2e-500w-nvlink-roce");
  CHECK(limited.device.compute->sustained_tflops.at(plan::Precision::bf16) == Approx(755 * 0.879));
  CHECK(table_tflops(limited, plan::Precision::bf16, 8192, 8192, 8192) <= 755 * 0.879 + 1e-9);
}

TEST_CASE("GPU tables: a sustained rate above the peak, or for a precision without one, is refused", "[plan][gpu-tables]") {
  auto error = [](const std::string& caps) {
    return compute_error("gemm: {bf16: {m: [1024], n: [1024], k: [1024], tflops: [800]}}, sustained_tflops: " + caps);
  };
  CHECK_THAT(error("{bf16: 1200}"), Catch::Contains("sustained_tflops.bf16' must be > 0 and at most the device's dense peak"));
  CHECK_THAT(error("{fp8: 100}"), Catch::Contains("sustained_tflops.fp8' has no peak"));
  CHECK_THAT(error("{tf32: 100}"), Catch::Contains("tf32"));
  CHECK_THAT(error("{bf16: 700}"), Catch::Equals(""));
}

TEST_CASE("GPU tables: small GEMMs reach a small fraction of the peak, large ones most of it", "[plan][gpu-tables]") {
  for (const char* name : {"h100-nvlink-ib", "h200-nvlink-ib", "b200-nvlink-ib"}) {
    INFO(name);
    const auto hw = test::builtin_profile(name);
    const double peak = hw.device.peak_tflops.at(plan::Precision::bf16);
    CHECK(table_tflops(hw, plan::Precision::bf16, 256, 256, 256) < 0.02 * peak);  // launch-bound
    CHECK(table_tflops(hw, plan::Precision::bf16, 4096, 4096, 4096) > 0.6 * peak);
    // Every precision a profile covers has a grid, and fp8 runs faster than bf16 at a large shape.
    for (plan::Precision p : hw.device.compute->precisions) CHECK(hw.device.compute->gemm.count(p) == 1);
    CHECK(table_tflops(hw, plan::Precision::fp8, 4096, 4096, 4096) > table_tflops(hw, plan::Precision::bf16, 4096, 4096, 4096));
  }
}

TEST_CASE("GPU tables: a grid above the device's peak, or of the wrong size, is refused where it is", "[plan][gpu-tables]") {
  const std::string base =
      "name: x\ndevice: {name: g, memory_gb: 80, peak_tflops: {fp32: 60, bf16: 1000}, compute: {precisions: [bf16], gemm: {bf16: ";
  auto error = [&](const std::string& grid) {
    return test::profile_error(base + grid + "}}}\nnode: {devices: 1, link: {bandwidth_gb_per_s: 1, latency_us: 1}}\n");
  };
  CHECK_THAT(error("{m: [1024], n: [1024], k: [1024], tflops: [1200]}"), Catch::Contains("above the device's dense peak"));
  CHECK_THAT(error("{m: [1024, 2048], n: [1024], k: [1024], tflops: [100]}"), Catch::Contains("must list 2 TFLOP/s figures"));
  CHECK_THAT(error("{m: [2048, 1024], n: [1024], k: [1024], tflops: [1, 2]}"), Catch::Contains("larger than the size before it"));
  CHECK_THAT(error("{m: [1024], n: [1024], k: [1024], tflops: [500]}"), Catch::Equals(""));
}

TEST_CASE("GPU tables: H100 FlashAttention-2 within 15% of torch's measured scaled_dot_product_attention", "[plan][gpu-tables]") {
  // pytorch/pytorch#142132 (2.6 nightly, H100): the default SDPA kernel (FlashAttention-2) at batch 1,
  // 24 heads of 128, sequence 4608 ran 329 TFLOP/s; cuDNN's 631. The table's figures are the
  // FlashAttention-3 paper's, at sequence 16k.
  const auto hw = test::builtin_profile("h100-nvlink-ib");
  auto attention_tflops = [&](const std::string& kernel) {
    const auto s = test::scenario_from("model: {preset: transformer, layers: 1, hidden: 3072, heads: 24, seq_len: 4608, vocab: 10, attention: " +
                                       kernel + "}\nparallel: {precision: bf16}\nhardware: h100-nvlink-ib\n");
    const plan::LayerCost c = plan::estimate_layer_cost(s.layers[1], hw, s.parallel, 1);
    return 4.0 * 4608 * 4608 * 3072 / (c.attention_forward.to_us() * 1e6);
  };
  CHECK(attention_tflops("flash2") == Approx(329).epsilon(0.15));
  CHECK(attention_tflops("flash") == Approx(631).epsilon(0.15));  // Transformer Engine's cuDNN kernel
}

TEST_CASE("GPU tables: H100 FlashAttention-2 by sequence and mask within 10% of its forward + backward benchmark from 2k tokens", "[plan][gpu-tables]") {
  // The profile's figures were measured on an H200 (calibrate --tables: torch 2.11's FlashAttention-2
  // backend, forward + backward, 16k tokens, 16 heads of 128); they are checked against
  // FlashAttention-2's own H100 benchmark (head dimension 128, TFLOP/s of forward + backward,
  // counting a causal pass as half the FLOPs). From 16k tokens they agree within 10%; at 2k and
  // below the measured kernel ran 11-22% under the published benchmark, which is recorded here
  // rather than hidden by a wider tolerance (docs/gpu.md).
  const auto hw = test::builtin_profile("h100-nvlink-ib");
  auto fwd_bwd_tflops = [&](int seq, bool causal) {
    const std::string form = causal ? ", positions: rope" : "";  // a decoder block (causal) or LibTorch's encoder layer
    const auto s = test::scenario_from("model: {preset: transformer, layers: 1, hidden: 2048, heads: 16, seq_len: " + std::to_string(seq) +
                                       ", vocab: 10, attention: flash2" + form + "}\nparallel: {precision: bf16}\nhardware: h100-nvlink-ib\n");
    const plan::LayerCost c = plan::estimate_layer_cost(s.layers[1], hw, s.parallel, 1);
    const double forward_flops = 4.0 * seq * seq * 2048 * (causal ? 0.5 : 1.0);
    return 3.5 * forward_flops / ((c.attention_forward + c.attention_backward).to_us() * 1e6);
  };
  const struct {
    int seq;
    bool causal;
    double tflops;
  } published[] = {{512, false, 248}, {2048, false, 320}, {16384, false, 338}, {512, true, 163}, {2048, true, 265}, {16384, true, 328}};
  for (const auto& x : published) {
    INFO("sequence " << x.seq << (x.causal ? ", causal" : ", full"));
    if (x.seq >= 16384) {
      CHECK(fwd_bwd_tflops(x.seq, x.causal) == Approx(x.tflops).epsilon(0.10));
    } else {
      CHECK(fwd_bwd_tflops(x.seq, x.causal) < 0.90 * x.tflops);
      CHECK(fwd_bwd_tflops(x.seq, x.causal) > 0.75 * x.tflops);
    }
  }
  // Without the fractions, the short causal sequence would be costed at the long full one's rate.
  CHECK(fwd_bwd_tflops(512, true) < 0.6 * fwd_bwd_tflops(16384, false));
}

TEST_CASE("GPU tables: flash attention by sequence refuses what is not a curve of fractions, where it is", "[plan][gpu-tables]") {
  auto error = [](const std::string& curves) { return compute_error("gemm_efficiency: [[1, 0.5]], flash_by_sequence: " + curves); };
  CHECK_THAT(error("{causal: [[2048, 1.2]]}"), Catch::Contains("flash_by_sequence.causal"));
  CHECK_THAT(error("{full: [[2048, 0.9], [1024, 0.8]]}"), Catch::Contains("larger than the size before it"));
  CHECK_THAT(error("{masked: [[2048, 0.9]]}"), Catch::Contains("masked"));
  CHECK_THAT(error("{full: [[2048, 0.9]], causal: [[512, 0.5], [8192, 0.9]]}"), Catch::Equals(""));
  // The A100's causal fractions, from FlashAttention-2's forward + backward figure: a 2k causal call
  // reaches 0.764 of the long unmasked rate, a 16k one 0.931, and between them log2-interpolated.
  const plan::ComputeModel& a100 = *test::builtin_profile("a100-nvlink-ib").device.compute;
  CHECK(a100.flash_sequence_fraction(false, true, 2048) == Approx(0.764));
  CHECK(a100.flash_sequence_fraction(false, true, 1u << 15) == Approx(0.931));
  CHECK(a100.flash_sequence_fraction(false, true, 2896.3) == Approx((0.764 + 0.852) / 2).epsilon(0.001));
}

TEST_CASE("GPU tables: a profile takes another's by name, its own keys over them", "[plan][gpu-tables]") {
  const auto h100 = test::builtin_profile("h100-nvlink-ib"), h200 = test::builtin_profile("h200-nvlink-ib");
  const plan::ComputeModel &a = *h100.device.compute, &b = *h200.device.compute;
  CHECK(b.precisions == a.precisions);
  for (plan::Precision p : a.precisions) CHECK(b.gemm.at(p).tflops == a.gemm.at(p).tflops);
  // The H100 takes the H200's measured tables but its own memory figure (HBM3, not HBM3e).
  CHECK(b.memory_efficiency == 0.627);
  CHECK(a.memory_efficiency == 0.896);
  CHECK(b.flash_forward_efficiency == a.flash_forward_efficiency);
  CHECK(*b.flash2_backward_efficiency == *a.flash2_backward_efficiency);

  const std::string base = "name: x\ndevice: {name: g, memory_gb: 80, peak_tflops: {fp32: 67, bf16: 989, fp16: 989, fp8: 1979}, compute: {";
  const std::string tail = "}}\nnode: {devices: 1, link: {bandwidth_gb_per_s: 1, latency_us: 1}}\n";
  const auto own = test::profile_from(base + "same_as: h200-nvlink-ib, memory_efficiency: 0.5" + tail);
  CHECK(own.device.compute->memory_efficiency == 0.5);
  CHECK(own.device.compute->gemm.at(plan::Precision::fp8).tflops == a.gemm.at(plan::Precision::fp8).tflops);
  CHECK_THAT(test::profile_error(base + "same_as: h900-nvlink-ib" + tail), Catch::Contains("names no built-in profile"));
  CHECK_THAT(test::profile_error(base + "same_as: cpu-host" + tail), Catch::Contains("has no device.compute"));
  // The tables must fit this device's peaks: an A100's bf16 peak is below the H100's rates.
  CHECK_THAT(test::profile_error("name: x\ndevice: {name: g, memory_gb: 80, peak_tflops: {fp32: 19.5, bf16: 312, fp16: 312, fp8: 1979}, "
                                 "compute: {same_as: h200-nvlink-ib" + tail),
             Catch::Contains("its bf16 table passes this device's dense peak"));
  // A profile whose tables are themselves taken or scaled is not a source.
  CHECK_THAT(test::profile_error(base + "same_as: h100-nvlink-ib" + tail), Catch::Contains("takes or scales another's tables"));
  CHECK_THAT(test::profile_error(base + "same_as: h100-hbm2e-500w-nvlink-roce" + tail), Catch::Contains("takes or scales another's tables"));
}

// calibrate --tables writes measured tables in the shipped profiles' own keys (plan/compute_tables.hpp):
// written back, the shipped tables must read as they were, into another profile's text too.
TEST_CASE("GPU tables: a compute model written as YAML reads back figure for figure", "[plan][gpu-tables]") {
  const auto h100 = test::builtin_profile("h100-nvlink-ib");
  const plan::ComputeModel& shipped = *h100.device.compute;
  const std::string block = plan::compute_yaml(shipped, {"written by a test"});
  for (const char* into : {"h100-nvlink-ib", "h200-nvlink-ib", "b200-nvlink-ib"}) {  // its own, a same_as one, another's
    INFO("into " << into);
    const std::string text = plan::with_compute_block(plan::builtin_hardware_text(into), block);
    const auto back = test::profile_from(text);
    REQUIRE(back.device.compute);
    const plan::ComputeModel& c = *back.device.compute;
    CHECK(c.precisions == shipped.precisions);
    for (const auto& [p, grid] : shipped.gemm) {
      REQUIRE(c.gemm.count(p));
      CHECK(c.gemm.at(p).m == grid.m);
      REQUIRE(c.gemm.at(p).tflops.size() == grid.tflops.size());
      for (size_t i = 0; i < grid.tflops.size(); ++i) CHECK(c.gemm.at(p).tflops[i] == Approx(grid.tflops[i]).margin(0.05));
    }
    CHECK(c.sustained_tflops == shipped.sustained_tflops);
    CHECK(c.memory_efficiency == Approx(shipped.memory_efficiency).margin(5e-4));
    CHECK(c.flash_backward_efficiency == Approx(shipped.flash_backward_efficiency).margin(5e-4));
    CHECK(*c.flash2_forward_efficiency == Approx(*shipped.flash2_forward_efficiency).margin(5e-4));
    CHECK(c.flash_by_sequence.causal == shipped.flash_by_sequence.causal);
    CHECK(c.flash2_by_sequence.full == shipped.flash2_by_sequence.full);
    // The rest of the profile is the one written into.
    CHECK(back.name == test::builtin_profile(into).name);
    CHECK(back.device.memory_gb == test::builtin_profile(into).device.memory_gb);
    CHECK(back.devices_per_node == test::builtin_profile(into).devices_per_node);
  }
}

TEST_CASE("GPU tables: measured against shipped, figure by figure", "[plan][gpu-tables]") {
  const plan::ComputeModel shipped = *test::builtin_profile("h100-nvlink-ib").device.compute;
  plan::ComputeModel measured = shipped;
  auto& bf16 = measured.gemm.at(plan::Precision::bf16).tflops;
  for (double& t : bf16) t *= 0.9;
  bf16.front() *= 0.8 / 0.9;                                              // 256^3 at 0.8
  bf16.back() = shipped.gemm.at(plan::Precision::bf16).tflops.back();  // 4096^3 as shipped
  measured.flash_forward_efficiency = 0.5;
  const auto lines = plan::compare_compute(measured, shipped);
  auto line_of = [&](const std::string& start) {
    for (const auto& l : lines)
      if (l.rfind(start, 0) == 0) return l;
    return std::string("none");
  };
  INFO(line_of("gemm bf16"));
  CHECK(line_of("gemm bf16").find("over 125 shapes: geometric mean 0.900, 0.800 at 256x256x256 to 1.000 at 4096x4096x4096") !=
        std::string::npos);
  CHECK(line_of("gemm fp8").find("geometric mean 1.000") != std::string::npos);
  CHECK(line_of("flash_forward_efficiency") == "flash_forward_efficiency: measured 0.500, shipped 0.689 (-27.4%)");
  CHECK(line_of("flash_by_sequence.causal").find("512: 0.338 / 0.338") != std::string::npos);
}

TEST_CASE("GPU tables: a measured profile drops the shipped one's published errors", "[plan][gpu-tables]") {
  const std::string text = plan::without_published_check(plan::builtin_hardware_text("h100-nvlink-ib"));
  CHECK(text.find("published_check") == std::string::npos);
  CHECK(text.find("How this profile's predictions came out") == std::string::npos);  // its comment went with it
  const auto back = test::profile_from(text);
  CHECK(back.published_check.empty());
  CHECK(back.device.compute);
  CHECK(!test::builtin_profile("h100-nvlink-ib").published_check.empty());  // there was one to drop
}

TEST_CASE("GPU tables: the chip a device's name names, as profiles and CUDA spell them", "[plan][gpu-tables]") {
  using parallax::plan::gpu_chip;
  CHECK(gpu_chip("NVIDIA H100 80GB SXM5") == "H100");   // the h100-nvlink-ib profile's name
  CHECK(gpu_chip("NVIDIA H100 80GB HBM3") == "H100");   // torch.cuda.get_device_name on a DGX H100
  CHECK(gpu_chip("NVIDIA H200") == "H200");
  CHECK(gpu_chip("NVIDIA A100-SXM4-80GB") == "A100");
  CHECK(gpu_chip("NVIDIA GH200 480GB") == "GH200");
  CHECK(gpu_chip("NVIDIA L40S") == "L40S");
  CHECK(gpu_chip("Tesla T4") == "T4");
  CHECK(gpu_chip("NVIDIA B200") == "B200");
  CHECK(gpu_chip("AMD EPYC") == "");
  CHECK(gpu_chip("") == "");
  // What calibrate --tables warns on: every shipped GPU profile's name names a chip.
  int gpus = 0;
  for (const auto& name : plan::builtin_hardware_names()) {
    const auto doc = plan::YamlDocument::from_text("hardware: " + name, "test");
    const auto hw = plan::resolve_hardware(plan::Field::root(doc)["hardware"]);
    if (hw.device.kind != plan::DeviceKind::cuda) continue;
    INFO(name << ": " << hw.device.name);
    CHECK_FALSE(gpu_chip(hw.device.name).empty());
    ++gpus;
  }
  CHECK(gpus >= 6);
}
