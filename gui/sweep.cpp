#include "gui/sweep.hpp"

#include <algorithm>
#include <set>

#include "plan/knobs.hpp"

namespace parallax::gui {
namespace {

std::vector<std::string> chunk_values(int batch_size) {
  std::vector<std::string> out;
  for (int c = 1; c <= batch_size && out.size() < 12; ++c)
    if (batch_size % c == 0) out.push_back(std::to_string(c));
  return out;
}

// The current split and every split one layer away from it at one boundary; with two stages,
// every split.
std::vector<std::string> partition_values(const plan::Plan& plan) {
  const std::vector<int>& current = plan.partition;
  const int layers = static_cast<int>(plan.layers().size());
  std::vector<std::vector<int>> splits;
  if (current.size() == 2) {
    for (int first = 1; first < layers && splits.size() < 16; ++first) splits.push_back({first, layers - first});
  } else {
    splits.push_back(current);
    for (size_t b = 0; b + 1 < current.size(); ++b) {
      for (int dir : {-1, +1}) {
        std::vector<int> s = current;
        s[b] += dir;
        s[b + 1] -= dir;
        if (s[b] >= 1 && s[b + 1] >= 1) splits.push_back(s);
      }
    }
    std::sort(splits.begin(), splits.end(), std::greater<>());
    if (splits.size() > 16) splits.resize(16);
  }
  std::vector<std::string> out;
  for (const auto& s : splits) out.push_back(plan::partition_text(plan::partition_of(s)));
  return out;
}

// The axis' value of the cell's column (or row) set on `settings`, read as the knob table reads it.
void set_axis(const SweepAxis& axis, int index, plan::Settings* settings) {
  const plan::Knob& knob = plan::knob(axis.key);
  knob.set(*settings, knob.parse(axis.values.at(index), plan::Location{axis.key}));
}

std::string axis_value(const SweepAxis& axis, const plan::Settings& settings) {
  const plan::Knob& knob = plan::knob(axis.key);
  return knob.format(knob.get(settings));
}

}  // namespace

int SweepGrid::best() const {
  int best = -1;
  for (size_t i = 0; i < cells.size(); ++i)
    if (cells[i].valid() && (best < 0 || cells[i].step < cells[best].step))
      best = static_cast<int>(i);
  return best;
}

KnobValues SweepGrid::knobs_of(int cell, const KnobValues& base) const {
  KnobValues k = base;
  k.settings = config_of(cell, base.settings);
  return k;
}

plan::Settings SweepGrid::config_of(int cell, const plan::Settings& base) const {
  plan::Settings c = base;
  set_axis(y, cell / columns(), &c);
  set_axis(x, cell % columns(), &c);
  return c;
}

int SweepGrid::cell_of(const KnobValues& k) const {
  const auto row = std::find(y.values.begin(), y.values.end(), axis_value(y, k.settings));
  const auto col = std::find(x.values.begin(), x.values.end(), axis_value(x, k.settings));
  if (row == y.values.end() || col == x.values.end()) return -1;
  return static_cast<int>((row - y.values.begin()) * columns() + (col - x.values.begin()));
}

SweepGrid make_sweep(SweepKind kind, const plan::Plan& plan, const KnobValues& knobs) {
  SweepGrid g;
  g.kind = kind;
  g.y = {"parallel.chunks", chunk_values(plan.scenario.data.batch_size)};
  if (kind == SweepKind::chunks_by_bucket_cap) {
    std::set<double> caps = {1, 2, 5, 10, 25, 50, 100, 250};
    caps.insert(knobs.settings.bucket_cap_mb);
    g.x.key = "parallel.bucket_cap_mb";
    for (double c : caps) g.x.values.push_back(plan::number_text(c));
  } else {
    g.x = {"parallel.partition_len", partition_values(plan)};
  }
  g.cells.assign(static_cast<size_t>(g.rows() * g.columns()), SweepCell{});
  return g;
}

SweepCell evaluate_cell(tune::Evaluator& evaluator, const plan::Settings& config) {
  SweepCell c;
  c.done = true;
  try {
    c.step = evaluator.evaluate(config).step;
  } catch (const plan::InputError& e) {
    c.error = e.message();
  } catch (const std::exception& e) {
    c.error = e.what();
  }
  return c;
}

}  // namespace parallax::gui
