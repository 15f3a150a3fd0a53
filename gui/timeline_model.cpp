#include "gui/timeline_model.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <sstream>

namespace parallax::gui {
namespace {

BarKind kind_of(schedule::ActionKind k) {
  switch (k) {
    case schedule::ActionKind::F: return BarKind::forward;
    case schedule::ActionKind::B:
    case schedule::ActionKind::I:
    case schedule::ActionKind::W: return BarKind::backward;  // told apart by their labels (1I2, 1W2)
    case schedule::ActionKind::OVERLAP_F_B: return BarKind::forward;
    case schedule::ActionKind::SEND_F:
    case schedule::ActionKind::SEND_B: return BarKind::send;
    case schedule::ActionKind::RECV_F:
    case schedule::ActionKind::RECV_B: return BarKind::recv;
    case schedule::ActionKind::ALLREDUCE:
    case schedule::ActionKind::ALL_TO_ALL:
    case schedule::ActionKind::ALL_GATHER: return BarKind::allreduce;  // a collective's colour
    case schedule::ActionKind::OPTIM: return BarKind::optim;
  }
  return BarKind::host;
}

BarKind kind_of_device(const std::string& lane, const std::string& name, bool communication) {
  if (communication || name.find("nccl") != std::string::npos || lane.find("nccl") != std::string::npos)
    return BarKind::device_comm;
  if (lane.find("memcpy") != std::string::npos || lane.find("memset") != std::string::npos) return BarKind::memcpy;
  if (lane.find("gpu") != std::string::npos || lane.find("stream") != std::string::npos) return BarKind::kernel;
  return BarKind::host;
}

// Action lanes first, in the order of docs/architecture.md (Vocabulary: Timeline), then device and imported lanes by name.
int lane_rank(const std::string& lane) {
  static const char* const kOrder[] = {"compute", "send", "recv", "allreduce", "all_to_all", "all_gather"};
  constexpr int n = sizeof kOrder / sizeof kOrder[0];
  for (int i = 0; i < n; ++i)
    if (lane == kOrder[i]) return i;
  return n;
}

std::string ms(int64_t ns) { return plan::duration_text(plan::Time::ns(ns)); }

}  // namespace

const char* name(Layer layer) {
  switch (layer) {
    case Layer::predicted: return "predicted";
    case Layer::measured: return "measured";
    case Layer::imported: return "imported";
  }
  return "?";
}

const char* name(BarKind kind) {
  static const char* const kNames[] = {"forward", "backward", "send",   "recv",   "all-reduce",
                                       "optimizer", "GPU kernel", "GPU communication", "memcpy/memset", "host"};
  return kNames[static_cast<int>(kind)];
}

void TimeAxis::zoom(double factor, double at_x) {
  const double t = t_of(at_x);
  ns_per_px = std::max(ns_per_px / factor, 0.01);
  start_ns = t - at_x * ns_per_px;
}

void TimeAxis::fit(int64_t t0, int64_t t1) {
  const double span = std::max<double>(static_cast<double>(t1 - t0), 1000.0);
  const double margin = span * 0.02;
  ns_per_px = (span + 2 * margin) / std::max(width_px, 1);
  start_ns = static_cast<double>(t0) - margin;
}

void TimelineModel::set_predicted(const timeline::Timeline* timeline, const std::vector<int32_t>& critical_path) {
  predicted_ = timeline;
  critical_ = std::set<int32_t>(critical_path.begin(), critical_path.end());
  rebuild();
}

void TimelineModel::set_measured(const timeline::Timeline* timeline, int step) {
  measured_ = timeline;
  measured_step_ = step;
  rebuild();
}

void TimelineModel::set_imported(const std::vector<timeline::LoadedTrace>& traces) {
  imported_ = traces;
  rebuild();
}

bool TimelineModel::has(Layer layer) const { return count(layer) > 0; }

size_t TimelineModel::count(Layer layer) const { return layer_counts_[static_cast<int>(layer)]; }

void TimelineModel::add_timeline(const timeline::Timeline& t, Layer layer, int step, std::vector<LaneKey>* lanes) {
  // The step starts at zero on the common axis.
  int64_t origin = std::numeric_limits<int64_t>::max();
  for (const auto& e : t.events)
    if (e.step == step) origin = std::min(origin, e.start.count_ns());
  if (origin == std::numeric_limits<int64_t>::max()) return;
  for (size_t i = 0; i < t.events.size(); ++i) {
    const timeline::TimelineEvent& e = t.events[i];
    if (e.step != step) continue;
    TimelineBar b;
    b.start_ns = e.start.count_ns() - origin;
    b.end_ns = e.end.count_ns() - origin;
    b.layer = layer;
    b.kind = kind_of(e.action.kind);
    b.stage = e.action.stage;
    b.mb = e.action.mb;
    b.bucket = e.action.bucket;
    b.bytes = e.bytes;
    b.source = static_cast<int32_t>(i);
    b.name = static_cast<int32_t>(names_.size());
    names_.push_back(e.action.id());
    bars_.push_back(b);
    lanes->push_back({e.rank, timeline::name(e.lane)});
  }
  for (const auto& d : t.device) {
    if (d.step != step) continue;
    TimelineBar b;
    b.start_ns = d.start.count_ns() - origin;
    b.end_ns = d.end.count_ns() - origin;
    b.layer = layer;
    b.kind = kind_of_device(d.lane, d.name, false);
    if (d.attributed) b.stage = d.action.stage, b.mb = d.action.mb, b.bucket = d.action.bucket;
    b.bytes = d.bytes;
    b.name = static_cast<int32_t>(names_.size());
    names_.push_back(d.name);
    bars_.push_back(b);
    lanes->push_back({d.rank, d.lane});
  }
}

void TimelineModel::rebuild() {
  bars_.clear();
  names_.clear();
  rows_.clear();
  std::vector<LaneKey> lanes;  // the (rank, lane) of each bar, until rows are known
  if (predicted_) add_timeline(*predicted_, Layer::predicted, 0, &lanes);
  if (measured_) add_timeline(*measured_, Layer::measured, measured_step_, &lanes);
  // Imported traces start at zero together (their ranks share one clock in a merged job).
  int64_t origin = std::numeric_limits<int64_t>::max();
  for (const auto& t : imported_)
    for (const auto& e : t.events) origin = std::min(origin, e.start_ns);
  for (const auto& t : imported_) {
    for (const auto& e : t.events) {
      TimelineBar b;
      b.start_ns = e.start_ns - origin;
      b.end_ns = std::max(e.end_ns, e.start_ns) - origin;
      b.layer = Layer::imported;
      b.kind = kind_of_device(e.lane, e.name, e.communication);
      b.name = static_cast<int32_t>(names_.size());
      names_.push_back(e.name);
      bars_.push_back(b);
      lanes.push_back({e.rank, std::string("trace: ").append(e.lane)});
    }
  }

  // Rows: (rank, lane) sorted by rank, then action lanes in that order, then the others by name.
  // A plan's rank says where it sits (pp, dp, cp); an imported trace's ranks are its own.
  const timeline::Timeline* planned = predicted_ && predicted_->plan ? predicted_ : measured_ && measured_->plan ? measured_ : nullptr;
  std::map<std::tuple<int, int, std::string>, int> row_index;
  for (const auto& [rank, lane] : lanes) row_index[{rank, lane_rank(lane), lane}] = 0;
  for (auto& [key, index] : row_index) {
    index = static_cast<int>(rows_.size());
    const auto& [rank, order, lane] = key;
    std::string label = "rank " + std::to_string(rank);
    if (planned && lane.rfind("trace: ", 0) != 0)
      if (const std::string role = timeline::rank_role(*planned->plan, rank, planned->world_size); !role.empty())
        label += " (" + role + ")";
    rows_.push_back(TimelineRow{rank, lane, label + " " + lane});
  }
  for (size_t i = 0; i < bars_.size(); ++i) {
    const auto& [rank, lane] = lanes[i];
    bars_[i].row = row_index[{rank, lane_rank(lane), lane}];
  }

  // Measured actions are paired with the same action predicted on the same rank.
  std::map<std::pair<int, std::string>, int32_t> predicted_at;
  for (size_t i = 0; i < bars_.size(); ++i)
    if (bars_[i].layer == Layer::predicted && bars_[i].source >= 0)
      predicted_at[{rows_[bars_[i].row].rank, names_[bars_[i].name]}] = static_cast<int32_t>(i);
  for (size_t i = 0; i < bars_.size(); ++i) {
    TimelineBar& b = bars_[i];
    if (b.layer != Layer::measured || b.source < 0) continue;
    auto it = predicted_at.find({rows_[b.row].rank, names_[b.name]});
    if (it == predicted_at.end()) continue;
    b.pair = it->second;
    bars_[it->second].pair = static_cast<int32_t>(i);
  }

  for (auto& c : layer_counts_) c = 0;
  for (auto& c : kind_counts_) c = 0;
  for (const auto& b : bars_) ++layer_counts_[static_cast<int>(b.layer)], ++kind_counts_[static_cast<int>(b.kind)];
  row_bars_.assign(rows_.size(), {});
  row_reach_.assign(rows_.size(), {});
  for (size_t i = 0; i < bars_.size(); ++i) row_bars_[bars_[i].row].push_back(static_cast<int32_t>(i));
  for (size_t r = 0; r < rows_.size(); ++r) {
    auto& order = row_bars_[r];
    std::stable_sort(order.begin(), order.end(),
                     [&](int32_t a, int32_t b) { return bars_[a].start_ns < bars_[b].start_ns; });
    int64_t reach = std::numeric_limits<int64_t>::min();
    for (int32_t i : order) row_reach_[r].push_back(reach = std::max(reach, bars_[i].end_ns));
  }
}

int TimelineModel::bar_at(int row, double t, double slack_ns) const {
  if (row < 0 || row >= static_cast<int>(rows_.size())) return -1;
  int best = -1;
  double best_score = std::numeric_limits<double>::infinity();
  for_each_in(row, t - slack_ns, t + slack_ns, [&](int32_t i) {
    const TimelineBar& b = bars_[i];
    const double outside = std::max({0.0, b.start_ns - t, t - b.end_ns});
    // A bar under the cursor beats a near one; among those the shortest, measured before predicted.
    const double score = outside * 1e12 + static_cast<double>(b.end_ns - b.start_ns) * 2 +
                         (b.layer == Layer::measured ? 0 : 1);
    if (score < best_score) best_score = score, best = i;
  });
  return best;
}

std::vector<DrawItem> TimelineModel::layout(const TimeAxis& axis, int first_row, int last_row) const {
  std::vector<DrawItem> items;
  first_row = std::max(first_row, 0);
  last_row = std::min(last_row, static_cast<int>(rows_.size()) - 1);
  // Bars narrower than two pixels are drawn a pixel at a time, in the kind that keeps the pixel
  // busy longest (its bar of that kind stands for it): the first bar into a pixel had taken it,
  // so a long step's mix of F and B changed with the window's width.
  struct Pixel {
    double x = -1e300;                          // its left edge; -1e300: none pending
    std::array<double, kBarKindCount> busy{};   // ns of each kind inside it
    std::array<int32_t, kBarKindCount> bar{};   // a bar of each kind, to draw it with
  };
  for (int row = first_row; row <= last_row; ++row) {
    Pixel pending[3];  // per layer
    const auto flush = [&](int layer) {
      Pixel& px = pending[layer];
      if (px.x == -1e300) return;
      const auto most = std::max_element(px.busy.begin(), px.busy.end()) - px.busy.begin();
      items.push_back(DrawItem{px.bar[most], row, px.x, px.x + 1});
      px = Pixel{};
    };
    for_each_in(row, axis.start_ns, axis.end_ns(), [&](int32_t i) {
      const TimelineBar& b = bars_[i];
      const int layer = static_cast<int>(b.layer);
      const double x0 = axis.x_of(static_cast<double>(b.start_ns)), end = axis.x_of(static_cast<double>(b.end_ns));
      if (end - x0 < 2) {
        const double left = std::floor(x0);
        if (pending[layer].x != left) flush(layer);
        Pixel& px = pending[layer];
        px.x = left;
        const int k = static_cast<int>(b.kind);
        if (px.busy[k] == 0) px.bar[k] = i;
        px.busy[k] += static_cast<double>(b.end_ns - b.start_ns) + 1;  // +1: a zero-length bar still counts
        return;
      }
      flush(layer);
      items.push_back(DrawItem{i, row, std::max(x0, -2.0), std::min(end, axis.width_px + 2.0)});
    });
    for (int layer = 0; layer < 3; ++layer) flush(layer);
  }
  return items;
}

std::pair<int64_t, int64_t> TimelineModel::extent() const {
  if (bars_.empty()) return {0, 0};
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
  for (const auto& b : bars_) lo = std::min(lo, b.start_ns), hi = std::max(hi, b.end_ns);
  return {lo, hi};
}

std::pair<int64_t, int64_t> TimelineModel::step_range() const {
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = std::numeric_limits<int64_t>::min();
  for (const auto& b : bars_)
    if (b.layer != Layer::imported && b.source >= 0) lo = std::min(lo, b.start_ns), hi = std::max(hi, b.end_ns);
  return lo <= hi ? std::make_pair(lo, hi) : extent();
}

std::string TimelineModel::describe(int index) const {
  const TimelineBar& b = bars_[index];
  const TimelineRow& row = rows_[b.row];
  std::ostringstream s;  // (not string +: GCC 12 warns falsely about it, -Wrestrict)
  s << names_[b.name] << "   rank " << row.rank << ", " << row.lane;
  if (b.source >= 0 && b.mb >= 0) s << "\nstage " << b.stage << ", micro-batch " << b.mb;
  if (b.bucket >= 0) s << "\nstage " << b.stage << ", bucket " << b.bucket;
  if (b.bytes > 0) s << "\n" << b.bytes << " bytes";
  auto line = [&](const TimelineBar& x) {
    s << "\n" << name(x.layer) << ": start " << ms(x.start_ns) << ", duration "
      << ms(x.end_ns - x.start_ns);
  };
  if (b.layer == Layer::imported) {
    line(b);
    return s.str();
  }
  const TimelineBar* predicted = b.layer == Layer::predicted ? &b : (b.pair >= 0 ? &bars_[b.pair] : nullptr);
  const TimelineBar* measured = b.layer == Layer::measured ? &b : (b.pair >= 0 ? &bars_[b.pair] : nullptr);
  if (predicted) line(*predicted);
  if (measured) line(*measured);
  if (predicted && measured && measured->end_ns > measured->start_ns) {
    const double p = static_cast<double>(predicted->end_ns - predicted->start_ns);
    const double m = static_cast<double>(measured->end_ns - measured->start_ns);
    char buf[96];
    std::snprintf(buf, sizeof buf, "\nerror: %+.1f%% of the measured duration; start off by %s", 100.0 * (p - m) / m,
                  ms(predicted->start_ns - measured->start_ns).c_str());
    s << buf;
  } else if (b.source >= 0 && has(Layer::predicted) && has(Layer::measured)) {
    s << "\nnot in the " << (b.layer == Layer::predicted ? "measured" : "predicted") << " step";
  }
  return s.str();
}

bool TimelineModel::related(int index, int selected) const {
  if (selected < 0) return false;
  const TimelineBar& a = bars_[index];
  const TimelineBar& s = bars_[selected];
  if (s.mb >= 0) return a.mb == s.mb;
  if (s.bucket >= 0) return a.stage == s.stage && a.bucket == s.bucket;
  return index == selected || index == s.pair;
}

bool TimelineModel::on_critical_path(int index) const {
  const TimelineBar& b = bars_[index];
  return b.layer == Layer::predicted && b.source >= 0 && critical_.count(b.source) > 0;
}

}  // namespace parallax::gui
