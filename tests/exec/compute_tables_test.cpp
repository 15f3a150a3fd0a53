// calibrate --tables's measurements (exec/compute_tables.hpp), run on the CPU with small shapes: the
// same code a GPU runs, the device's timer aside. What the figures must be follows from the
// definitions: a rate is FLOPs over time, the attention fractions are relative to the longest
// unmasked sequence, and the result reads back as a profile.
#include <catch2/catch.hpp>

#include "exec/compute_tables.hpp"
#include "plan/compute_tables.hpp"
#include "tests/test_util.hpp"

using namespace parallax;

namespace {

exec::TablesOptions small_tables() {
  exec::TablesOptions o;
  o.sizes = {32, 128};
  o.precisions = {plan::Precision::fp32};
  o.sequences = {64, 256};
  o.attention_tokens = 512;
  o.heads = 2;
  o.head_dim = 16;
  o.memory_elements = int64_t{1} << 18;
  o.seconds_per_figure = 0.005;
  return o;
}

plan::Device roomy_device() {
  plan::Device d;
  d.name = "test";
  d.peak_tflops = {{plan::Precision::fp32, 1e6}};  // no figure is held at the peak
  d.memory_bandwidth_gb_per_s = 1e6;
  return d;
}

}  // namespace

TEST_CASE("compute tables: measured on the CPU, each figure by its definition", "[exec][tables]") {
  const auto o = small_tables();
  const exec::MeasuredTables t = exec::measure_compute_tables(o, roomy_device());
  const plan::ComputeModel& c = t.compute;
  REQUIRE((c.precisions == std::vector<plan::Precision>{plan::Precision::fp32}));
  const plan::GemmGrid& g = c.gemm.at(plan::Precision::fp32);
  CHECK(g.m == std::vector<double>{32, 128});
  REQUIRE(g.tflops.size() == 8);
  for (double v : g.tflops) CHECK(v > 0);
  // How fast the CPU ran them is not checked here: ctest runs tests two at a time on a 2-core
  // machine, where the same 128^3 GEMM timed 65-93x apart from one moment to the next (speed
  // belongs in bench/). What is checked: every figure is there, positive, and where it is a
  // fraction, a fraction of its definition's reference.
  CHECK(c.memory_efficiency > 0);
  CHECK(c.flash_forward_efficiency > 0);
  CHECK(c.flash_backward_efficiency > 0);
  // The longest unmasked sequence is the reference: its fraction is 1 by definition.
  REQUIRE(c.flash_by_sequence.full.size() == 2);
  REQUIRE(c.flash_by_sequence.causal.size() == 2);
  CHECK(c.flash_by_sequence.full.back() == std::pair<double, double>{256, 1.0});
  CHECK(c.flash_by_sequence.causal.front().first == 64);
  for (const auto& [tokens, fraction] : c.flash_by_sequence.causal) CHECK((fraction > 0 && fraction <= 1));
  CHECK(!c.flash2_forward_efficiency);  // FlashAttention-2 alone is a GPU kernel
  CHECK(t.notes.size() == 3);           // the grid, the memory kernels, attention
}

TEST_CASE("compute tables: what is measured reads back as the profile's device.compute", "[exec][tables]") {
  const exec::MeasuredTables t = exec::measure_compute_tables(small_tables(), roomy_device());
  // A profile's device map in flow style has no block to put the keys in.
  CHECK_THROWS_AS(plan::with_compute_block("name: x\ndevice: {name: g}\n", "  compute:\n"), std::logic_error);
  const std::string block_style =
      "name: x\ndevice:\n  name: g\n  memory_gb: 80\n  memory_bandwidth_gb_per_s: 1000000\n  peak_tflops: {fp32: 1000000}\n"
      "node: {devices: 1, link: {bandwidth_gb_per_s: 1, latency_us: 1}}\n";
  const auto hw = test::profile_from(plan::with_compute_block(block_style, plan::compute_yaml(t.compute, t.notes)));
  REQUIRE(hw.device.compute);
  CHECK(hw.device.compute->gemm.at(plan::Precision::fp32).tflops.size() == 8);
  CHECK(hw.device.compute->flash_by_sequence.full.back().second == 1.0);
}

TEST_CASE("compute tables: a precision without a peak in the base profile is refused", "[exec][tables]") {
  auto o = small_tables();
  o.precisions = {plan::Precision::bf16};
  CHECK_THROWS_WITH(exec::measure_compute_tables(o, roomy_device()), Catch::Contains("device.peak_tflops.bf16"));
}
