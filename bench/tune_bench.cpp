// Tuner speed and picks (issue 11's figures). Prints:
//  1. a 1,024-rank job (the 1.1B transformer at data 128 x pipeline 8 on a100-nvlink-ib): the
//     default space less four knobs searched exhaustively (every configuration simulated) and with
//     pruning, then the whole default space with pruning;
//  2. every shipped scenario: its full default space, the wall time, and the pick's predicted step
//     time against the scenario as given and against PyTorch's defaults;
//  3. with --phases [SCENARIO] only: the search's three phases on fixed work, one thread, so that a
//     change to one of them can be timed against the last (the 3,072-GPU Llama 3.1 405B job by
//     default, issue 55's scale goal): the enumeration of its default space, planning 2,000 of its
//     configurations (a fixed random sample) and simulating 200 of those that fit.
// The measured check of the picks on this machine is bench/tune_bench.sh.
//
//   parallax_tune_bench [--big] [--scenarios] [--threads N]      (both parts by default)
//   parallax_tune_bench --phases [SCENARIO]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <algorithm>
#include <random>
#include <string>
#include <thread>

#include "plan/scenario.hpp"
#include "tune/search.hpp"

using namespace parallax;

namespace {

void print_result(const char* what, const tune::SearchResult& r) {
  std::printf("  %-11s %7zu configurations, %7zu simulated, %7zu pruned, %5zu over memory in %6.2f s  (%.0f simulated/s)%s\n",
              what, r.combinations, r.evaluated, r.pruned, r.over_memory, r.wall_s,
              static_cast<double>(r.evaluated) / r.wall_s, r.stopped.empty() ? "" : (" stopped: " + r.stopped).c_str());
}

std::string pick_text(const tune::SearchResult& r, const plan::Settings& base) {
  if (r.ranked.empty()) return "no configuration fits";
  return plan::describe(plan::overrides(base, r.ranked.front().config));
}

void print_best(const tune::SearchResult& r, const plan::Scenario& s) {
  if (!r.ranked.empty())
    std::printf("  %-11s best %.1f ms (%s); as given %.1f ms\n", "", r.ranked.front().step.to_ms(),
                pick_text(r, plan::settings_of(s)).c_str(), r.baseline.step.to_ms());
}

// Exhaustive against pruned on a space small enough to simulate whole (tensor parallelism,
// precision and recompute fixed as the scenario gives them: 3.6 million configurations otherwise),
// then the pruned search of the whole default space, as `parallax tune` runs it.
void bench_big(int threads) {
  const std::string path = std::string(PARALLAX_SOURCE_DIR) + "/scenarios/gpipe-1b-4xA100.yaml";
  const plan::Scenario s = plan::load_scenario(path, {"parallel.data=128", "parallel.pipeline=8", "parallel.schedule=1f1b"});
  tune::Evaluator ev(s);
  const tune::Space full = tune::default_space(s);
  tune::Space small = full;
  for (const char* key : {"parallel.tensor", "parallel.sequence_parallel", "parallel.precision", "parallel.activation_checkpointing"})
    tune::fix(&small, plan::settings_of(s), key);
  std::printf("1,024-rank job: %s with data 128 x pipeline 8 (1f1b), %zu layers, on %s, %d thread(s)\n", path.c_str(),
              s.layers.size(), s.hardware.name.c_str(), threads);
  std::printf("  the default space with tensor, sequence_parallel, precision and activation_checkpointing fixed:\n");
  for (bool prune : {false, true}) {
    tune::SearchOptions o;
    o.prune = prune;
    o.threads = threads;
    const auto r = tune::search(ev, small, o);
    print_result(prune ? "pruned" : "exhaustive", r);
    print_best(r, s);
  }
  std::printf("  the whole default space (what `parallax tune` searches):\n");
  tune::SearchOptions o;
  o.threads = threads;
  const auto r = tune::search(ev, full, o);
  print_result("pruned", r);
  print_best(r, s);
}

void bench_scenarios(int threads) {
  std::printf("\nshipped scenarios, full default space, pruned search, %d thread(s), at most 60 s each\n", threads);
  std::printf("%-44s %8s %8s %7s %9s %9s %9s %8s %8s  %s\n", "scenario", "configs", "simul.", "wall s", "given ms",
              "PyTorch", "pick ms", "vs given", "vs PyT", "pick");
  double total = 0;
  std::vector<std::filesystem::path> files;
  for (const char* dir : {"/scenarios", "/scenarios/accuracy"})
    for (const auto& f : std::filesystem::directory_iterator(std::string(PARALLAX_SOURCE_DIR) + dir))
      if (f.path().extension() == ".yaml") files.push_back(f.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    const plan::Scenario s = plan::load_scenario(f.string(), {});
    if (s.parallel.schedule == schedule::ScheduleKind::csv) {
      std::printf("%-44s (an imported CSV schedule: not tuned)\n", f.filename().c_str());
      continue;
    }
    tune::Evaluator ev(s);
    tune::SearchOptions o;
    o.threads = threads;
    o.time_limit_s = 60;  // the 3,072-GPU Llama 3.1 405B space cannot finish: its figure is the goal's (issue 55)
    const auto r = tune::search(ev, tune::default_space(s), o);
    total += r.wall_s;
    if (!r.stopped.empty()) std::printf("%-44s stopped: %s (%zu pruned)\n", f.filename().c_str(), r.stopped.c_str(), r.pruned);
    const double pick = r.ranked.empty() ? std::nan("") : r.ranked.front().step.to_ms();
    std::printf("%-44s %8zu %8zu %7.2f %9.3f %9.3f %9.3f %7.2fx %7.2fx  %s\n", f.filename().c_str(), r.combinations,
                r.evaluated, r.wall_s, r.baseline.step.to_ms(), r.defaults.step.to_ms(), pick, r.baseline.step.to_ms() / pick,
                r.defaults.step.to_ms() / pick, pick_text(r, plan::settings_of(s)).c_str());
  }
  std::printf("total %.2f s\n", total);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void bench_phases(const std::string& path) {
  const plan::Scenario s = plan::load_scenario(path, {});
  tune::Evaluator ev(s);
  const tune::Space space = tune::default_space(s);
  std::printf("phases of the search on %s, one thread\n", path.c_str());
  auto t0 = std::chrono::steady_clock::now();
  size_t invalid = 0, over_memory = 0;
  std::string example;
  tune::Sample sample{tune::kEnumerationCap, 1, {}};
  std::vector<plan::Settings> configs = tune::enumerate(ev, space, &invalid, &example, &over_memory, false, &sample);
  std::printf("  enumerate   %9zu listed, %9zu invalid, %9zu over memory (one in %zu sampled) in %6.2f s\n", configs.size(),
              invalid, over_memory, sample.one_in, seconds_since(t0));
  std::shuffle(configs.begin(), configs.end(), std::mt19937(55));
  configs.resize(std::min<size_t>(configs.size(), 2000));
  t0 = std::chrono::steady_clock::now();
  std::vector<plan::Settings> fit;
  for (const auto& c : configs) {
    try {
      if (ev.bound(c).fits) fit.push_back(c);
    } catch (const plan::InputError&) {
    }
  }
  const double plan_s = seconds_since(t0);
  std::printf("  plan        %9zu configurations (%zu fit) in %6.2f s  (%.0f a second)\n", configs.size(), fit.size(), plan_s,
              configs.size() / plan_s);
  fit.resize(std::min<size_t>(fit.size(), 200));
  t0 = std::chrono::steady_clock::now();
  double steps = 0;
  for (const auto& c : fit) steps += ev.evaluate(c).step.to_ms();
  const double sim_s = seconds_since(t0);
  std::printf("  simulate    %9zu configurations in %6.2f s  (%.0f a second; their step times add to %.3f s)\n", fit.size(),
              sim_s, fit.size() / sim_s, steps / 1e3);
}

}  // namespace

int main(int argc, char** argv) {
  bool big = false, scenarios = false;
  int threads = 0;
  if (argc >= 2 && !std::strcmp(argv[1], "--phases")) {
    bench_phases(argc >= 3 ? argv[2] : std::string(PARALLAX_SOURCE_DIR) + "/scenarios/llama-3.1-405b-3072xH100.yaml");
    return 0;
  }
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--big")) big = true;
    else if (!std::strcmp(argv[i], "--scenarios")) scenarios = true;
    else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) threads = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr, "usage: %s [--big] [--scenarios] [--threads N] | --phases [SCENARIO]\n", argv[0]);
      return 2;
    }
  }
  if (!big && !scenarios) big = scenarios = true;
  if (threads <= 0) threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (big) bench_big(threads);
  if (scenarios) bench_scenarios(threads);
  return 0;
}
