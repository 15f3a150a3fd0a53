// `parallax` without a command, as the README runs it: the main job on the built-in default.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "cli/calibrate_command.hpp"
#include "cli/scenario_commands.hpp"
#include "plan/calibration.hpp"
#include "tests/plan/sample_calibration.hpp"
#include "tests/test_util.hpp"

namespace fs = std::filesystem;
using namespace parallax;

namespace {

// The sample calibration with hand-picked costs for every layer of `plan` (and the loss of its
// last), so that the main job takes it for this machine's and does not calibrate (minutes here).
plan::Calibration covering(const plan::Plan& plan) {
  plan::Calibration c = test::sample_calibration();
  for (const plan::Layer& l : plan.layers()) {
    plan::SignatureCost s;
    s.signature = plan::layer_signature(l, plan.scenario.parallel.precision);
    s.forward = {{1, 16}, {2000, 30000}};
    s.forward_no_grad = {{1, 16}, {1800, 27000}};
    s.backward = {{1, 16}, {4000, 60000}};
    c.layers[s.signature] = s;
  }
  plan::SignatureCost loss;
  loss.signature = plan::layer_signature(plan.layers().back(), plan.scenario.parallel.precision);
  loss.forward = {{1, 16}, {50, 400}};
  loss.backward = {{1, 16}, {50, 400}};
  c.losses[loss.signature] = loss;
  return c;
}

}  // namespace

TEST_CASE("cli: parallax without a command predicts, runs and compares the default, and writes its six outputs",
          "[cli][exec]") {
  const fs::path dir = parallax::test::temp_path("parallax_main_job");
  fs::remove_all(dir);
  fs::create_directories(dir / "parallax-out");
  const plan::Plan p = cli::ScenarioArgs{}.resolve();
  const fs::path calibration = dir / cli::default_calibration_path();
  {
    std::ofstream out(calibration);
    out << plan::calibrated_profile_yaml(test::builtin_profile("cpu-host"), "here", covering(p), {});
  }
  const auto r = test::run_shell("cd " + dir.string() + " && " + PARALLAX_BINARY + " 2>&1");
  INFO(r.out);
  REQUIRE(r.code == 0);
  CHECK(r.out.find("using this machine's calibration") != std::string::npos);
  const fs::path job = dir / "parallax-out" / p.scenario.name;
  for (const std::string& f : {"predicted-" + p.scenario.hardware.name + ".json", std::string("predicted-here.json"),
                              std::string("measured.json"), std::string("report.txt"), std::string("report.json"),
                              std::string("report.html")})
    CHECK(fs::file_size(job / f) > 0);
  // The comparison's prediction is what `simulate` says of the same plan on the same profile.
  const auto step = nlohmann::json::parse(std::ifstream(job / "report.json"))["step_time_ms"];
  CHECK(step["steps"] == 3);  // four steps run, the first one the warm-up
  const auto sim = test::run_parallax("simulate --json --set hardware=" + calibration.string() + " --set data.steps=4");
  REQUIRE(sim.code == 0);
  CHECK(step["predicted"].get<double>() ==
        Approx(nlohmann::json::parse(sim.out)["step_time_ms"].get<double>()).epsilon(1e-6));
  CHECK(step["measured"].get<double>() > 0);
  fs::remove_all(dir);
}
