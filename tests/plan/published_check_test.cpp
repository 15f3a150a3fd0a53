// A shipped profile's `published_check:` (how its predictions held on published runs) against the
// committed raw output it cites: each entry must be a line the named bench printed into its newest
// results folder's summary.txt, so a figure `plan` and `simulate` print cannot drift from what was
// measured, nor stay behind a rerun.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "plan/hardware.hpp"
#include "tests/test_util.hpp"

using namespace parallax;

namespace {

// The line bench/published*.sh print for one profile and one group of runs.
std::string bench_line(const std::string& profile, const plan::PublishedCheck& c) {
  char figures[160];
  std::snprintf(figures, sizeof figures, "%d rows, mean error %+.1f%%, mean absolute error %.1f%%, worst %+.1f%%", c.rows,
                c.mean_error, c.mean_absolute_error, c.worst);
  return "published_check " + profile + " \"" + c.runs_of + "\": " + figures;
}

std::string file_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// A results folder's place in its bench's sequence: bench/results/NAME-cpu-DATE[-N] as (DATE, N),
// N = 1 for the day's first. The bench's newest folder is the one with the largest.
std::pair<std::string, int> run_order(const std::string& folder) {
  static const std::regex name(R"(.*-cpu-(\d{4}-\d{2}-\d{2})(?:-(\d+))?)");
  std::smatch m;
  if (!std::regex_match(folder, m, name)) return {"", 0};
  return {m[1].str(), m[2].matched ? std::stoi(m[2].str()) : 1};
}

// The newest folder under bench/results/ of the bench that wrote `folder` (the same NAME-cpu- prefix).
std::string newest_run_of(const std::filesystem::path& results, const std::string& folder) {
  const std::string prefix = folder.substr(0, folder.find("-cpu-") + 5);
  std::string newest = folder;
  for (const auto& entry : std::filesystem::directory_iterator(results)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && run_order(name) > run_order(newest)) newest = name;
  }
  return newest;
}

const std::string kEntry =
    "name: x\ndevice: {name: g, memory_gb: 80, peak_tflops: {fp32: 60}}\nnode: {devices: 1, link: {bandwidth_gb_per_s: 1, latency_us: 1}}\n"
    "published_check:\n  - {runs_of: r, bench: bench/b.sh, rows: 3, results: bench/results/f, ";

}  // namespace

TEST_CASE("plan: every GPU profile's published_check is a line of the raw output it cites", "[plan]") {
  const std::filesystem::path root = PARALLAX_SOURCE_DIR;
  // The profiles of GPUs that published runs were predicted on: each must say how they came out.
  for (const char* gpu : {"a100-nvlink-ib", "h100-nvlink-ib", "h100-hbm2e-500w-nvlink-roce", "h200-nvlink-ib", "b200-nvlink-ib"})
    CHECK_FALSE(test::builtin_profile(gpu).published_check.empty());
  int entries = 0;
  for (const std::string& name : plan::builtin_hardware_names()) {
    for (const plan::PublishedCheck& c : test::builtin_profile(name).published_check) {
      INFO(name << ": " << c.runs_of << " (" << c.results << ")");
      CHECK(std::filesystem::is_regular_file(root / c.bench));
      const std::string summary = file_text(root / c.results / "summary.txt");
      CHECK_THAT(summary, Catch::Contains(bench_line(name, c) + "\n"));
      // And it is the bench's newest run: a rerun committed since must be quoted instead.
      const std::filesystem::path folder = std::filesystem::path(c.results);
      REQUIRE(run_order(folder.filename().string()).second > 0);
      CHECK(newest_run_of(root / folder.parent_path(), folder.filename().string()) == folder.filename().string());
      ++entries;
    }
  }
  CHECK(entries >= 6);
}

TEST_CASE("plan: published_check is read whole, checked, and left out once a profile is calibrated or fitted", "[plan]") {
  const auto hw = test::profile_from(kEntry + "mean_error: -10.6, mean_absolute_error: 14.8, worst: 33.6}\n");
  REQUIRE(hw.published_check.size() == 1);
  const plan::PublishedCheck& c = hw.published_check[0];
  CHECK(c.runs_of == "r");
  CHECK(c.bench == "bench/b.sh");
  CHECK(c.rows == 3);
  CHECK(c.mean_error == -10.6);
  CHECK(c.mean_absolute_error == 14.8);
  CHECK(c.worst == 33.6);
  CHECK(c.results == "bench/results/f");
  // The one line plan, simulate, the report and the GUI print for it (they print plan::describe's).
  CHECK(plan::describe(c) == "r, 3 runs: mean error -10.6%, mean absolute 14.8%, worst +33.6%");
  CHECK(hw.published_checks().size() == 1);
  plan::HardwareProfile fitted = hw;
  fitted.fitted = plan::FittedCosts{};
  CHECK(fitted.published_checks().empty());

  // A mean error beyond the mean absolute one, or a worst inside it, cannot come from one set of runs.
  CHECK_THAT(test::profile_error(kEntry + "mean_error: -20, mean_absolute_error: 14.8, worst: 33.6}\n"),
             Catch::Contains("|mean_error| <= mean_absolute_error <= |worst|"));
  CHECK_THAT(test::profile_error(kEntry + "mean_error: -10, mean_absolute_error: 14.8, worst: 12}\n"),
             Catch::Contains("|mean_error| <= mean_absolute_error <= |worst|"));
  CHECK_THAT(test::profile_error(kEntry + "mean_error: -10, mean_absolute_error: 14.8}\n"), Catch::Contains("worst"));
  CHECK_THAT(test::profile_error(kEntry + "mean_error: -10, mean_absolute_error: 14.8, worst: 20, note: x}\n"),
             Catch::Contains("note"));
}
