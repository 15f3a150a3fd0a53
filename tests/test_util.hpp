#pragma once
// Small helpers shared by the tests.
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <vector>

#include "plan/plan.hpp"
#include "plan/scenario.hpp"
#include "plan/yaml_reader.hpp"
#include "timeline/timeline.hpp"

namespace parallax::test {

/// What running the `parallax` binary gave: exit code, stdout (stderr is dropped), wall time.
struct CommandResult {
  int code = -1;
  std::string out;
  double seconds = 0;
};

/// The exit code ctest reads as "skipped" (SKIP_RETURN_CODE in tests/CMakeLists.txt).
constexpr int kSkipExitCode = 77;

/// Whether the environment demands `what` (PARALLAX_TEST_REQUIRE=chromium,fixtures,...): CI sets
/// it for what its machine has, so that a missing piece fails there instead of skipping.
inline bool required(const std::string& what) {
  const char* list = std::getenv("PARALLAX_TEST_REQUIRE");
  return list && ("," + std::string(list) + ",").find("," + what + ",") != std::string::npos;
}

/// A test that cannot run here for want of `what` (chromium, fixtures, netns, fashion-mnist):
/// ctest reports it SKIPPED, never passed, unless `what` is required, when it fails. It ends the
/// process: ctest runs each test case in its own process (catch_discover_tests).
[[noreturn]] inline void skip(const std::string& what, const std::string& why) {
  std::cout << (required(what) ? "FAILED (required by PARALLAX_TEST_REQUIRE): " : "SKIPPED: ") << why << std::endl;
  std::_Exit(required(what) ? 1 : kSkipExitCode);
}

/// Runs `cmd` with /bin/sh: exit code, stdout, wall time.
inline CommandResult run_shell(const std::string& cmd) {
  CommandResult r;
  const auto t0 = std::chrono::steady_clock::now();
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) throw std::runtime_error("popen failed");
  std::array<char, 4096> buf{};
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

/// Runs the built `parallax` with `args` (and `env` assignments before it), as a user would.
/// With `with_stderr`, stderr is read too (after stdout's lines, interleaved as written).
inline CommandResult run_parallax(const std::string& args, const std::string& env = "", bool with_stderr = false) {
  return run_shell(env + " " + PARALLAX_BINARY + " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null"));
}

/// Adds one event to `t`, times in microseconds.
inline void add_event(timeline::Timeline& t, int rank, timeline::Lane lane, schedule::Action action, double start_us,
                      double end_us, int step = 0, int64_t bytes = 0) {
  timeline::TimelineEvent e;
  e.rank = rank;
  e.lane = lane;
  e.action = action;
  e.start = plan::Time::us(start_us);
  e.end = plan::Time::us(end_us);
  e.step = step;
  e.bytes = bytes;
  t.events.push_back(e);
}

/// Parses scenario text as if it were the file "test.yaml".
inline plan::Scenario scenario_from(const std::string& yaml, const std::vector<std::string>& sets = {}) {
  auto doc = plan::YamlDocument::from_text(yaml, "test.yaml");
  for (const auto& s : sets) doc.apply_override(s);
  return plan::parse_scenario(doc);
}

/// A path under the temporary folder of this process's own (NAME-PID, the pid before any
/// extension: x.json.gz -> x-PID.json.gz): two test runs at once (two checkouts, or a CI beside a
/// developer's run) must not share a folder one of them removes.
inline std::filesystem::path temp_path(const std::string& name) {
  const size_t dot = name.find('.');
  const std::string stem = name.substr(0, dot), extension = dot == std::string::npos ? "" : name.substr(dot);
  return std::filesystem::temp_directory_path() / (stem + "-" + std::to_string(::getpid()) + extension);
}

/// A file written for one test (in the temporary folder, under `name`), removed after.
/// A file that lives as long as the object. ctest runs test cases in processes side by side, and
/// one case may hold two at once, so the name carries the process and a count: without them a case
/// read a file that another had already removed (CI, 2026-12-06).
struct TempFile {
  std::string path;
  TempFile(const std::string& name, const std::string& text) : path(unique_path(name)) { std::ofstream(path) << text; }
  static std::string unique_path(const std::string& name) {
    static int count = 0;
    const auto unique = std::to_string(::getpid()) + "-" + std::to_string(++count) + "-" + name;
    return (std::filesystem::temp_directory_path() / unique).string();
  }
  ~TempFile() { std::filesystem::remove(path); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
};

inline plan::Plan plan_from(const std::string& yaml, const std::vector<std::string>& sets = {}) {
  return plan::resolve_plan(scenario_from(yaml, sets));
}

/// Parses a hardware profile's text (a profile file's, or a built-in one's).
inline plan::HardwareProfile profile_from(const std::string& text) {
  const auto doc = plan::YamlDocument::from_text(text, "profile.yaml");
  return plan::parse_hardware(plan::Field::root(doc));
}

/// A built-in profile (scenarios/hardware/NAME.yaml) as the binary carries it.
inline plan::HardwareProfile builtin_profile(const std::string& name) { return profile_from(plan::builtin_hardware_text(name)); }

/// The message of the InputError that parsing a profile's text raises ("" if none).
inline std::string profile_error(const std::string& text) {
  try {
    profile_from(text);
  } catch (const plan::InputError& e) {
    return e.what();
  }
  return "";
}

/// The message of the InputError that parsing `yaml` raises ("" if none).
inline std::string parse_error(const std::string& yaml, const std::vector<std::string>& sets = {}) {
  try {
    plan::resolve_plan(scenario_from(yaml, sets));
  } catch (const plan::InputError& e) {
    return e.what();
  }
  return "";
}

/// Uniform synthetic layers on free communication: the textbook pipeline.
inline std::string synthetic_scenario(int layers, int pipeline, int chunks, const std::string& schedule,
                                      int virtual_stages = 1) {
  return "model: {preset: synthetic, layers: " + std::to_string(layers) +
         ", fwd_us_per_sample: 10, params_mb: 1, activation_mb: 1}\n"
         "data: {batch_size: " + std::to_string(chunks * 2) + "}\n"
         "parallel: {pipeline: " + std::to_string(pipeline) + ", virtual: " + std::to_string(virtual_stages) +
         ", chunks: " + std::to_string(chunks) + ", schedule: " + schedule + "}\n"
         "hardware: ideal\n";
}

}  // namespace parallax::test
