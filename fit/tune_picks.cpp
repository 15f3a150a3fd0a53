#include "fit/tune_picks.hpp"

#include <algorithm>

#include "plan/executable.hpp"
#include "plan/yaml_reader.hpp"

namespace parallax::fit {

std::vector<const tune::Evaluation*> validation_candidates(const tune::SearchResult& r, const plan::Scenario& base,
                                                           size_t k) {
  std::vector<const tune::Evaluation*> out;
  auto add = [&](const tune::Evaluation& e) {
    if (out.size() >= k || !plan::executable(base, e.config)) return;
    if (std::none_of(out.begin(), out.end(), [&](const tune::Evaluation* o) { return o->config == e.config; }))
      out.push_back(&e);
  };
  if (!r.ranked.empty()) add(r.ranked.front());
  for (const auto& e : r.layout_best) add(e);
  for (const auto& e : r.ranked) add(e);
  return out;
}

std::vector<std::string> keep_executable(tune::Space* space, const plan::Scenario& base) {
  std::vector<std::string> notes;
  if (!plan::executable(base)) return notes;
  const plan::Settings given = plan::settings_of(base);
  for (auto& [key, values] : space->values) {
    const plan::Knob& k = plan::knob(key);
    std::vector<plan::KnobValue> kept;
    std::vector<std::string> dropped;
    for (const auto& v : values) {
      plan::Settings s = given;
      k.set(s, v);
      if (plan::executable(base, s)) kept.push_back(v);
      else dropped.push_back(k.format(v));
    }
    if (dropped.empty()) continue;
    notes.push_back(key + " " + plan::join(dropped, ", "));
    values = kept;
  }
  return notes;
}

std::vector<ValidatedPick> run_picks(const std::vector<const tune::Evaluation*>& candidates, const PickRuns& runs) {
  std::vector<ValidatedPick> out;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (runs.cancel && runs.cancel->load()) break;
    const tune::Evaluation& e = *candidates[i];
    if (runs.starting) runs.starting(i, candidates.size(), e.changes);
    std::vector<std::string> sets = runs.sets;
    for (const auto& s : plan::set_flags(e.changes)) sets.push_back(s);
    try {
      const Measurement m = measure(runs.self, runs.scenario, sets, runs.steps, runs.cancel);
      out.push_back({&e, e.step, m.step});
      if (runs.measured) runs.measured(out.back());
    } catch (const Cancelled&) {
      break;
    }
  }
  return out;
}

int fastest_index(const std::vector<plan::Time>& measured_steps) {
  int best = -1;
  for (int i = 0; i < static_cast<int>(measured_steps.size()); ++i)
    if (measured_steps[i] > plan::Time() && (best < 0 || measured_steps[i] < measured_steps[best])) best = i;
  return best;
}

const ValidatedPick* fastest(const std::vector<ValidatedPick>& picks) {
  std::vector<plan::Time> steps;
  for (const ValidatedPick& p : picks) steps.push_back(p.measured.undisturbed);
  const int best = fastest_index(steps);
  return best < 0 ? nullptr : &picks[best];
}

}  // namespace parallax::fit
