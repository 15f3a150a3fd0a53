#include "tune/space.hpp"

#include <algorithm>

namespace parallax::tune {
namespace {

[[noreturn]] void fail(const std::string& flag, const std::string& message) {
  throw plan::InputError(plan::Location{flag}, message);
}

// data, context, pipeline and tensor multiply to the world: each value must divide it. The
// enumeration takes the layouts whose product is the world.
void check_layout(const Space& sp, const plan::Knob& knob, const std::string& flag) {
  if (knob.coupling != plan::Coupling::layout) return;
  for (int n : sp.ints(knob.key))
    if (sp.world % n != 0)
      fail(flag, knob.name() + " " + std::to_string(n) + " does not divide the world of " + std::to_string(sp.world) +
                     " ranks (set it with --world)");
}

}  // namespace

const std::vector<plan::KnobValue>& Space::of(const std::string& key) const {
  static const std::vector<plan::KnobValue> none;
  const auto it = values.find(key);
  return it == values.end() ? none : it->second;
}

std::vector<int> Space::ints(const std::string& key) const {
  std::vector<int> out;
  for (const auto& v : of(key)) out.push_back(std::get<int>(v));
  return out;
}

std::vector<std::pair<double, double>> Space::bucket_grid() const {
  std::vector<std::pair<double, double>> out;
  for (const auto& cap : of("parallel.bucket_cap_mb"))
    for (const auto& first : of("parallel.first_bucket_mb")) out.emplace_back(std::get<double>(cap), std::get<double>(first));
  return out;
}

std::vector<std::string> search_keys() {
  std::vector<std::string> keys;
  for (const plan::Knob& k : plan::knobs())
    if (k.tuned()) keys.push_back(k.key);
  return keys;
}

std::vector<std::string> split_values(const std::string& text) {
  std::vector<std::string> out(1);
  int depth = 0;
  for (char ch : text) {
    if (ch == ',' && depth == 0) {
      out.emplace_back();
      continue;
    }
    depth += ch == '[' ? 1 : ch == ']' ? -1 : 0;
    if (ch != ' ' || depth > 0) out.back() += ch;
  }
  return out;
}

Space default_space(const plan::Scenario& s, int world) {
  Space sp;
  sp.world = world > 0 ? world : s.parallel.world_size();
  sp.trainer = s.framework;
  for (const plan::Knob& k : plan::knobs())
    if (k.tuned()) sp.values[k.key] = k.search_default(s, sp.world);
  return sp;
}

void search(Space* sp, const std::string& assignment) {
  const std::string flag = "--search " + assignment;
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == assignment.size())
    fail(flag, "expected KEY=V1,V2,... (e.g. --search parallel.chunks=4,8,16)");
  const std::string key = assignment.substr(0, eq);
  const plan::Knob* knob = plan::find_knob(key);
  if (!knob || !knob->tuned()) fail(flag, "'" + key + "' is not a key the tuner searches; it searches " + plan::join(search_keys()));
  std::vector<plan::KnobValue> values;
  for (const auto& v : split_values(assignment.substr(eq + 1))) {
    if (v.empty()) fail(flag, "an empty value in the list");
    values.push_back(knob->parse(v, plan::Location{flag}));
    if (key == "parallel.schedule" && std::get<std::string>(values.back()).ends_with(".csv"))
      fail(flag, "an imported CSV schedule cannot be tuned; search the generated ones (parallax keys lists them)");
  }
  // Duplicates would be simulated twice; the first of each stays.
  std::vector<plan::KnobValue> unique;
  for (const auto& v : values)
    if (std::find(unique.begin(), unique.end(), v) == unique.end()) unique.push_back(v);
  sp->values[key] = unique;
  check_layout(*sp, *knob, flag);
}

void fix(Space* sp, const plan::Settings& given, const std::string& key) {
  const plan::Knob* knob = plan::find_knob(key);
  if (!knob || !knob->tuned())
    fail("--fix " + key, "'" + key + "' is not a key the tuner searches; it searches " + plan::join(search_keys()));
  if (knob->coupling == plan::Coupling::layout && sp->world % std::get<int>(knob->get(given)) != 0)
    fail("--fix " + key, "the scenario's " + knob->name() + " " + knob->format(knob->get(given)) +
                             " does not divide the --world of " + std::to_string(sp->world) + " ranks");
  if (key == "parallel.schedule" && given.schedule == schedule::ScheduleKind::csv)
    fail("--fix " + key, "an imported CSV schedule cannot be tuned");
  plan::Settings listed = given;
  listed.partition_len = plan::listed(given.partition_len, given.stages());
  sp->values[key] = {knob->get(listed)};
}

}  // namespace parallax::tune
