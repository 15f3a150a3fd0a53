#include "gui/sweep.hpp"

#include <algorithm>
#include <set>

#include "plan/knobs.hpp"

namespace parallax::gui {
namespace {

// Every divisor of the batch, or, where there are more than 12, the 12 nearest the current chunks
// in divisor order (a large batch's smallest divisors are often below the pipeline's stages).
std::vector<std::string> chunk_values(int batch_size, int current) {
  constexpr size_t kMost = 12;
  std::vector<int> divisors;
  for (int c = 1; c <= batch_size; ++c)
    if (batch_size % c == 0) divisors.push_back(c);
  const auto at = std::lower_bound(divisors.begin(), divisors.end(), current) - divisors.begin();
  const auto first = std::clamp<ptrdiff_t>(at - static_cast<ptrdiff_t>(kMost / 2), 0,
                                          std::max<ptrdiff_t>(0, static_cast<ptrdiff_t>(divisors.size() - kMost)));
  std::vector<std::string> out;
  for (size_t i = static_cast<size_t>(first); i < divisors.size() && out.size() < kMost; ++i) out.push_back(std::to_string(divisors[i]));
  return out;
}

// Where `split` differs from `current` by one layer moved between two stages: "s3→s4".
std::string moved_label(const std::vector<int>& current, const std::vector<int>& split) {
  int from = -1, to = -1;
  for (size_t i = 0; i < split.size(); ++i) {
    if (split[i] < current[i]) from = static_cast<int>(i);
    if (split[i] > current[i]) to = static_cast<int>(i);
  }
  if (from < 0) return "current";
  std::string label = "s";  // built by appending: g++ 12 warns (-Wrestrict) of "s" + std::to_string(...)
  label += std::to_string(from);
  label += "→s";
  label += std::to_string(to);
  return label;
}

// The current split and every split one layer away from it at one boundary (with two stages, every
// split), at most 16, the current one always among them; `current_index` gets its column.
SweepAxis partition_axis(const plan::Plan& plan) {
  constexpr size_t kMost = 16;
  const std::vector<int>& current = plan.partition;
  const int layers = static_cast<int>(plan.layers().size());
  std::vector<std::vector<int>> splits;
  if (current.size() == 2) {
    // The 16 splits nearest the current one.
    const int first = std::clamp(current[0] - static_cast<int>(kMost / 2), 1, std::max(1, layers - static_cast<int>(kMost)));
    for (int f = first; f < layers && splits.size() < kMost; ++f) splits.push_back({f, layers - f});
  } else {
    for (size_t b = 0; b + 1 < current.size(); ++b) {
      for (int dir : {-1, +1}) {
        std::vector<int> s = current;
        s[b] += dir;
        s[b + 1] -= dir;
        if (s[b] >= 1 && s[b + 1] >= 1) splits.push_back(s);
      }
    }
    std::sort(splits.begin(), splits.end(), std::greater<>());
    if (splits.size() > kMost - 1) splits.resize(kMost - 1);
    splits.push_back(current);
    std::sort(splits.begin(), splits.end(), std::greater<>());
  }
  SweepAxis axis;
  axis.key = "parallel.partition_len";
  for (const auto& s : splits) {
    axis.values.push_back(plan::partition_text(plan::partition_of(s)));
    if (current.size() > 2) axis.labels.push_back(moved_label(current, s));
    if (s == current) axis.current = static_cast<int>(axis.values.size() - 1);
  }
  return axis;
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
    if (cells[i].valid() && cells[i].fits && (best < 0 || cells[i].step < cells[best].step))
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
  const std::string value = axis_value(x, k.settings);
  const auto col = std::find(x.values.begin(), x.values.end(), value);
  // A policy (balanced) stands on the split the plan resolved it to; a list off the grid on none.
  const int column = col != x.values.end() ? static_cast<int>(col - x.values.begin()) : value.starts_with('[') ? -1 : x.current;
  if (row == y.values.end() || column < 0) return -1;
  return static_cast<int>(row - y.values.begin()) * columns() + column;
}

SweepGrid make_sweep(SweepKind kind, const plan::Plan& plan, const KnobValues& knobs) {
  SweepGrid g;
  g.kind = kind;
  g.y.key = "parallel.chunks";
  g.y.values = chunk_values(plan.scenario.data.batch_size, plan.scenario.parallel.chunks);
  if (kind == SweepKind::chunks_by_bucket_cap) {
    std::set<double> caps = {1, 2, 5, 10, 25, 50, 100, 250};
    caps.insert(knobs.settings.bucket_cap_mb);
    g.x.key = "parallel.bucket_cap_mb";
    for (double c : caps) g.x.values.push_back(plan::number_text(c));
  } else {
    g.x = partition_axis(plan);
  }
  g.cells.assign(static_cast<size_t>(g.rows() * g.columns()), SweepCell{});
  return g;
}

SweepCell evaluate_cell(tune::Evaluator& evaluator, const plan::Settings& config) {
  SweepCell c;
  c.done = true;
  try {
    const tune::Evaluation e = evaluator.evaluate(config);
    c.step = e.step;
    c.fits = e.fits;
    c.peak_memory = e.peak_memory;
  } catch (const plan::InputError& e) {
    c.error = e.message();
  } catch (const std::exception& e) {
    c.error = e.what();
  }
  return c;
}

}  // namespace parallax::gui
