#include "cli/calibrate_command.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <thread>

#include "cli/output.hpp"
#include "exec/calibrate.hpp"
#include "exec/launcher.hpp"
#include "exec/model.hpp"
#include "plan/error.hpp"
#include "plan/hardware.hpp"

namespace parallax::cli {
namespace {

namespace fs = std::filesystem;

std::string host_name() {
  char buf[256] = {0};
  if (gethostname(buf, sizeof buf - 1) != 0 || !buf[0]) return "this-host";
  return buf;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

bool uses_cpu_host(const fs::path& file) {
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("hardware:", 0) == 0) return line.find("cpu-host") != std::string::npos;
  return false;
}

// Plans of the scenarios that the executor can run. Named scenarios that cannot run are bad
// input; in the default set they are skipped.
std::vector<plan::Plan> executable_plans(const std::vector<std::string>& files, bool named, bool say) {
  std::vector<plan::Plan> plans;
  for (const auto& f : files) {
    try {
      plan::Plan p = plan::resolve_plan(plan::load_scenario(f, {"hardware=ideal"}));
      exec::check_executable(p.scenario);
      plans.push_back(std::move(p));
    } catch (const plan::InputError& e) {
      if (named) throw;
      if (say) std::cerr << "calibrate: skipping " << f << ": " << e.what() << "\n";
    }
  }
  if (plans.empty()) throw plan::InputError(plan::Location{"SCENARIO"}, "no scenario the executor can run was given");
  return plans;
}

}  // namespace

std::vector<std::string> default_calibration_scenarios() {
  std::vector<std::string> out = {""};
  std::vector<fs::path> found;
  if (fs::is_directory("scenarios"))
    for (const auto& e : fs::directory_iterator("scenarios"))
      if (e.path().extension() == ".yaml" && uses_cpu_host(e.path())) found.push_back(e.path());
  if (fs::is_directory("scenarios/accuracy"))
    for (const auto& e : fs::directory_iterator("scenarios/accuracy"))
      if (e.path().extension() == ".yaml") found.push_back(e.path());
  std::sort(found.begin(), found.end());
  for (const auto& p : found) out.push_back(p.string());
  return out;
}

std::string default_calibration_path() { return "parallax-out/calibrated-" + host_name() + ".yaml"; }

int calibrate_command(const CalibrateArgs& args, const std::vector<std::string>& argv) {
  const bool named = !args.scenarios.empty();
  const auto files = named ? args.scenarios : default_calibration_scenarios();
  const std::string output = args.output.empty() ? default_calibration_path() : args.output;
  exec::LaunchInfo launch;
  const bool as_rank = exec::LaunchInfo::from_environment(&launch);
  // Everything that can be wrong with the input is found before the ranks start.
  const auto plans = executable_plans(files, named, !as_rank);
  const plan::HardwareProfile base = [&] {
    const auto doc = plan::YamlDocument::from_text("hardware: " + args.base, "--base");
    return plan::resolve_hardware(plan::Field::root(doc)["hardware"]);
  }();
  if (!as_rank) {
    if (args.output.empty()) fs::create_directories(fs::path(output).parent_path());  // the default folder
    require_output_folder(output);
    std::cerr << "calibrate: measuring " << plans.size() << " scenario(s) on this machine with 2 local ranks"
              << (args.quick ? " (quick)" : "") << "\n";
    return exec::launch_local(2, argv, std::chrono::seconds(1800));
  }
  launch.timeout = std::chrono::seconds(1800);
  const auto t0 = std::chrono::steady_clock::now();
  exec::CalibrateOptions options;
  options.quick = args.quick;
  options.progress = [](const std::string& line) { std::cerr << "calibrate: " << line << "\n" << std::flush; };
  const auto c = exec::calibrate_rank(plans, launch, options);
  if (!c) return 0;
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::time_t now = std::time(nullptr);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d %H:%M", std::localtime(&now));
  std::vector<std::string> header = {
      "Measured on this machine by `parallax calibrate" + std::string(args.quick ? " --quick" : "") + "` (" +
          fmt("%.0f", seconds) + " s). Use it as `hardware: FILE` or `--set hardware=FILE`.",
      std::string("date: ") + date + ", host: " + host_name(),
      "CPU: " + cpu_model() + ", " + std::to_string(std::thread::hardware_concurrency()) + " cores",
      "LibTorch " + std::string(TORCH_VERSION) + ", " + std::to_string(c->threads) +
          " thread(s) per rank, 2 local ranks, Gloo over loopback",
      "device and network copied from the base profile '" + base.name + "'"};
  std::string scenario_names;
  for (const auto& p : plans) scenario_names += (scenario_names.empty() ? "" : ", ") + p.scenario.name;
  header.push_back("scenarios measured: " + scenario_names);
  write_file_atomically(output, plan::calibrated_profile_yaml(base, base.name + "-calibrated", *c, header));
  std::cerr << "calibrate: wrote " << output << " in " << fmt("%.0f", seconds) << " s; use it with --set hardware="
            << output << "\n";
  return 0;
}

}  // namespace parallax::cli
