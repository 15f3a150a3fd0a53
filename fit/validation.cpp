#include "fit/validation.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>

#include "plan/error.hpp"
#include "tune/space.hpp"

namespace parallax::fit {

namespace fs = std::filesystem;

std::vector<Configuration> configurations(const std::vector<std::string>& scenarios,
                                          const std::vector<std::string>& sweeps) {
  // Each scenario and sweep is named so that no two share a name (they would be ranked as one
  // sweep): by the file's stem, or its path where stems repeat, and its place where paths do; a
  // key swept twice by the --sweep's place.
  std::map<std::string, int> stems, paths, keys;
  for (const auto& s : scenarios) ++stems[fs::path(s).stem().string()], ++paths[s];
  std::vector<std::string> sweep_keys;
  for (const auto& sweep : sweeps) {
    const auto eq = sweep.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == sweep.size())
      throw plan::InputError(plan::Location{"--sweep"}, "'" + sweep + "' is not KEY=V1,V2,...");
    sweep_keys.push_back(sweep.substr(0, eq));
    ++keys[sweep_keys.back()];
  }
  std::vector<Configuration> out;
  for (size_t i = 0; i < scenarios.size(); ++i) {
    const std::string& s = scenarios[i];
    std::string name = fs::path(s).stem().string();
    if (stems[name] > 1) name = s;
    if (paths[s] > 1) name += " #" + std::to_string(i + 1);
    if (sweeps.empty()) {
      out.push_back({s, {}, "", name});
      continue;
    }
    for (size_t k = 0; k < sweeps.size(); ++k) {
      const std::string& key = sweep_keys[k];
      const std::string sweep_name = name + " " + key + (keys[key] > 1 ? " (--sweep " + std::to_string(k + 1) + ")" : "");
      for (const auto& v : tune::split_values(sweeps[k].substr(key.size() + 1)))
        out.push_back({s, {key + "=" + v}, sweep_name, name + " " + key + "=" + v});
    }
  }
  return out;
}

namespace {

// Streams rather than std::filesystem::copy_file: a build against pip's libtorch binds
// std::filesystem to libtorch's own copy, which crashed on a GPU machine (see remove_tree).
void copy_trace(const fs::path& from, const fs::path& to) {
  std::ifstream in(from, std::ios::binary);
  std::ofstream out(to, std::ios::binary | std::ios::trunc);
  out << in.rdbuf();
  if (!in || !out) throw std::runtime_error("could not keep the trace " + from.string() + " as " + to.string());
}

}  // namespace

std::string trace_name(size_t index, int round) {
  return std::to_string(index) + ".run" + std::to_string(round) + ".json";
}

std::vector<Outcome> run_rounds(const std::vector<Configuration>& configs, const std::vector<Prepared>& prepared,
                                int repeats, const std::string& self, const RunProgress& progress,
                                const std::string& keep_traces) {
  const fs::path work = fs::temp_directory_path() / ("parallax-validate-" + std::to_string(::getpid()));
  fs::create_directories(work);
  std::vector<Outcome> outcomes(configs.size());
  try {
    for (int r = 0; r < repeats; ++r)
      for (size_t i = 0; i < configs.size(); ++i) {
        run_once(configs[i], prepared[i], self, work, &outcomes[i]);
        if (!keep_traces.empty()) copy_trace(work / "measured.json", fs::path(keep_traces) / trace_name(i, r + 1));
        if (progress) progress(r * configs.size() + i + 1, configs.size() * repeats, configs[i], outcomes[i]);
      }
    for (auto& o : outcomes) summarise(&o);
  } catch (...) {
    remove_tree(work.string());
    throw;
  }
  remove_tree(work.string());
  return outcomes;
}

ValidationSummary summarise(const std::vector<Configuration>& configs, const std::vector<Outcome>& outcomes) {
  ValidationSummary s;
  if (outcomes.empty()) return s;
  const auto n = static_cast<double>(outcomes.size());
  std::vector<double> spreads;
  for (size_t i = 0; i < outcomes.size(); ++i) {
    const Outcome& o = outcomes[i];
    s.mean_abs_error += std::abs(o.error) / n;
    s.mean_signed_error += o.error / n;
    s.median_mean_abs_error += std::abs(o.median_error) / n;
    spreads.push_back(o.spread);
    if (std::abs(o.error) >= std::abs(s.worst_error)) {
      s.worst_error = o.error;
      s.worst = i;
    }
    if (configs[i].sweep.empty()) continue;
    SweepSummary& sw = s.sweeps[configs[i].sweep];
    sw.predicted.push_back(o.predicted.to_ms());
    sw.measured.push_back(o.measured.to_ms());
    sw.low.push_back(o.low.to_ms());
    sw.high.push_back(o.high.to_ms());
  }
  s.spread_median = timeline::median(spreads);
  for (auto& [name, sw] : s.sweeps) {
    sw.tau = kendall_tau(sw.predicted, sw.measured);
    sw.resolved = kendall_tau_resolved(sw.predicted, sw.low, sw.high);
  }
  return s;
}

}  // namespace parallax::fit
