#pragma once
// What the timeline view shows, apart from painting it, so it can be tested without a screen.
//
// The model lays predicted, measured and imported (PyTorch profiler) events out as bars on rows,
// one row per rank and lane, with each measured action paired to the same action predicted (joined
// on rank and action id, as `parallax compare` joins them). The times of every layer are put on one
// axis: each starts at zero at the beginning of the step shown.
//
// Tens of thousands of bars stay cheap to draw because each row keeps its bars sorted by start
// with a running maximum of their ends: the bars overlapping a window are found by binary search,
// and layout() merges bars narrower than a pixel into the pixel already drawn.
#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "timeline/timeline.hpp"
#include "timeline/trace_reader.hpp"

namespace parallax::gui {

enum class Layer : uint8_t { predicted, measured, imported };
const char* name(Layer layer);

/// What a bar is, for its colour.
enum class BarKind : uint8_t { forward, backward, send, recv, allreduce, optim, kernel, device_comm, memcpy, host };
constexpr int kBarKindCount = 10;
const char* name(BarKind kind);

struct TimelineRow {
  int rank = 0;
  std::string lane;   ///< "compute", "send", "recv", "allreduce", "gpu stream 7", ...
  std::string label;  ///< as shown: "rank 0 compute", "rank 2 (pp 1, dp 0) compute" (timeline::rank_role)
};

struct TimelineBar {
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  int32_t row = 0;
  Layer layer = Layer::predicted;
  BarKind kind = BarKind::forward;
  int32_t stage = -1;
  int32_t mb = -1;
  int32_t bucket = -1;
  int32_t name = 0;     ///< index into names(): the action id or the kernel's name
  int32_t pair = -1;    ///< the same action in the other of predicted/measured
  int32_t source = -1;  ///< index of the event in its timeline (critical paths refer to it)
  int64_t bytes = 0;
};

/// The visible time window of a view `width_px` wide: the time at its left edge and the scale.
struct TimeAxis {
  double start_ns = 0;
  double ns_per_px = 1e6;
  int width_px = 1;

  double x_of(double t_ns) const { return (t_ns - start_ns) / ns_per_px; }
  double t_of(double x) const { return start_ns + x * ns_per_px; }
  double end_ns() const { return t_of(width_px); }
  /// Zooms by `factor` (> 1 in) keeping the time under `at_x` where it is. Stops at 1 ns per 100 px.
  void zoom(double factor, double at_x);
  void pan(double dx_px) { start_ns -= dx_px * ns_per_px; }
  /// Shows [t0, t1] with a small margin each side.
  void fit(int64_t t0, int64_t t1);
};

/// One bar as drawn: its row and its horizontal extent in pixels (at least one pixel wide).
struct DrawItem {
  int32_t bar = 0;
  int32_t row = 0;
  double x0 = 0;
  double x1 = 0;
};

class TimelineModel {
 public:
  /// The predicted step (null for none); `critical_path` holds indices of its events.
  void set_predicted(const timeline::Timeline* timeline, const std::vector<int32_t>& critical_path = {});
  /// One optimizer step of a measured run (null for none).
  void set_measured(const timeline::Timeline* timeline, int step);
  void set_imported(const std::vector<timeline::LoadedTrace>& traces);

  const std::vector<TimelineRow>& rows() const { return rows_; }
  const std::vector<TimelineBar>& bars() const { return bars_; }
  const std::string& name_of(const TimelineBar& bar) const { return names_[bar.name]; }
  bool has(Layer layer) const;
  size_t count(Layer layer) const;
  /// Bars of a kind, over all layers.
  size_t count(BarKind kind) const { return kind_counts_[static_cast<int>(kind)]; }

  /// Calls f(bar index) for each bar of `row` overlapping [t0, t1], in order of start.
  template <class F>
  void for_each_in(int row, double t0, double t1, F&& f) const;
  /// The bar of `row` at time t (within `slack_ns`), preferring the shortest; -1 if none.
  int bar_at(int row, double t, double slack_ns) const;
  /// Bars of rows [first_row, last_row] visible on `axis`; bars under two pixels wide are drawn a
  /// pixel at a time (same row and layer), each pixel as one bar of the kind busiest in it.
  std::vector<DrawItem> layout(const TimeAxis& axis, int first_row, int last_row) const;

  /// First start and last end over all bars ({0, 0} when empty).
  std::pair<int64_t, int64_t> extent() const;
  /// The step shown: from the first start to the last end of the predicted and measured actions.
  std::pair<int64_t, int64_t> step_range() const;

  /// Hover text: action id, rank, start, duration, predicted against measured and the error.
  std::string describe(int bar) const;
  /// Whether `bar` belongs with `selected`: the same micro-batch (or the same bucket's all-reduce)
  /// on every rank, in both layers.
  bool related(int bar, int selected) const;
  bool on_critical_path(int bar) const;

 private:
  using LaneKey = std::pair<int, std::string>;  ///< (rank, lane)
  void rebuild();
  void add_timeline(const timeline::Timeline& t, Layer layer, int step, std::vector<LaneKey>* lanes);

  const timeline::Timeline* predicted_ = nullptr;
  const timeline::Timeline* measured_ = nullptr;
  int measured_step_ = 0;
  std::vector<timeline::LoadedTrace> imported_;
  std::set<int32_t> critical_;

  std::vector<TimelineRow> rows_;
  std::vector<TimelineBar> bars_;
  std::vector<std::string> names_;  ///< per bar: action id or kernel name
  std::vector<std::vector<int32_t>> row_bars_;   ///< per row, bar indices by start
  std::vector<std::vector<int64_t>> row_reach_;  ///< per row, running max of ends in that order
  size_t layer_counts_[3] = {};
  size_t kind_counts_[kBarKindCount] = {};
};

template <class F>
void TimelineModel::for_each_in(int row, double t0, double t1, F&& f) const {
  const auto& order = row_bars_[row];
  const auto& reach = row_reach_[row];
  // reach is non-decreasing: every bar before `i` ends before t0.
  size_t i = std::lower_bound(reach.begin(), reach.end(), t0, [](int64_t r, double t) { return r < t; }) - reach.begin();
  for (; i < order.size(); ++i) {
    const TimelineBar& b = bars_[order[i]];
    if (b.start_ns > t1) break;
    if (b.end_ns >= t0) f(order[i]);
  }
}

}  // namespace parallax::gui
