// The simulator on the split-backward and V-shaped schedules, against the closed forms of their
// papers: free communication, every layer alike, a backward twice a forward split evenly into
// input and weight gradients (F = I = W, the case the formulas are written for).
#include <catch2/catch.hpp>

#include "plan/plan.hpp"
#include "plan/scenario.hpp"
#include "sim/metrics.hpp"
#include "sim/simulator.hpp"
#include "tests/test_util.hpp"

using namespace parallax;

namespace {

// Step time over the time a rank computes (3 x chunks x its stages' forward): 1 + bubble / work.
double stretch(int p, int v, int m, const std::string& schedule) {
  const auto plan = test::plan_from(test::synthetic_scenario(p * v * 2, p, m, schedule, v));
  const sim::SimRun run = sim::simulate(plan);
  const sim::Metrics metrics = sim::compute_metrics(plan, run);
  double busy = 0;
  for (const auto& r : metrics.ranks) busy = std::max(busy, 1.0 - r.bubble_fraction);
  return 1.0 / busy;
}

}  // namespace

// The bubbles as DeepSeek's DualPipe README tabulates them (github.com/deepseek-ai/DualPipe),
// in times of one chunk (a stage's share of a rank's layers): 1F1B (p-1)(F+B), ZB1P (ZB-H1 of Qi
// et al. 2024) (p-1)(F+B-2W), DualPipe (PP/2-1)(F&B+B-3W) where DualPipeV on p ranks is DualPipe
// on PP = 2p; F&B, the overlapped pair, costs F+B here (one device computes one at a time). ZB-V
// (Qi et al. section 6) keeps ZB1P's form in chunk times: only its first forward's trip across
// the ranks is left.
TEST_CASE("sim: zero-bubble and DualPipeV bubbles match their closed forms with free communication", "[sim]") {
  for (int p : {2, 3, 4}) {
    for (int m : {4, 8, 12, 16}) {
      if (m < 2 * p || m % (m / p) != 0) continue;  // DualPipeV's and zero bubble's conditions
      INFO("p=" << p << " m=" << m);
      // One stage per rank: F = 1 unit, B = 2, W = 1; a rank computes 3m units.
      CHECK(stretch(p, 1, m, "1f1b") == Approx(1.0 + 3.0 * (p - 1) / (3.0 * m)));
      CHECK(stretch(p, 1, m, "interleaved-zero-bubble") == Approx(1.0 + (p - 1) * (1 + 2 - 2) / (3.0 * m)));
      // Two chunks per rank: a rank computes 6m chunk units.
      CHECK(stretch(p, 2, m, "zbv-zero-bubble") == Approx(1.0 + (p - 1) * (1 + 2 - 2) / (6.0 * m)));
      CHECK(stretch(p, 2, m, "dualpipev") == Approx(1.0 + (p - 1) * ((1 + 2) + 2 - 3) / (6.0 * m)));
    }
  }
}

TEST_CASE("sim: ZB-H1's step is no longer than 1F1B's where W is a third of the backward or more", "[sim]") {
  // A transformer on A100s, costed by the shape-aware model (a W of each block's weight GEMMs).
  for (const std::string preset : {"gpipe-1b-4xA100.yaml", "gpipe-transformer-2xT4.yaml"}) {
    const std::string path = std::string(PARALLAX_SOURCE_DIR) + "/scenarios/" + preset;
    INFO(preset);
    for (int m : {4, 8, 16}) {
      const std::vector<std::string> common = {"parallel.chunks=" + std::to_string(m), "data.batch_size=" + std::to_string(4 * m)};
      auto with = [&](const std::string& schedule) {
        auto sets = common;
        sets.push_back("parallel.schedule=" + schedule);
        const auto plan = plan::resolve_plan(plan::load_scenario(path, sets));
        return sim::simulate(plan).step_time;
      };
      CHECK(with("interleaved-zero-bubble") <= with("1f1b"));
    }
  }
}
