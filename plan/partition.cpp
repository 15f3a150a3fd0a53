#include "plan/partition.hpp"

#include <algorithm>
#include <cassert>
#include <limits>

namespace parallax::plan {

std::vector<int> balanced_partition(const std::vector<int64_t>& costs, int stages) {
  const int n = static_cast<int>(costs.size());
  assert(stages >= 1 && stages <= n);
  std::vector<int64_t> prefix(n + 1, 0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + costs[i];
  constexpr int64_t kInf = std::numeric_limits<int64_t>::max();
  // best[k][j]: smallest bottleneck covering the first j layers with k stages; cut[k][j]: where
  // the k-th stage starts in that optimum, the first such start. Row k is found from row k - 1 as
  // the minimum over starts i of max(best[k-1][i], prefix[j] - prefix[i]): the first term never
  // falls as i grows (more layers on as many stages), the second never rises (costs are not
  // negative), so the minimum sits where they cross, found by bisection. O(stages * n * log n):
  // the tuner splits every layout of a 126-block model it lists, where the O(stages * n^2) scan
  // of every start was a quarter of the listing's time.
  const size_t width = static_cast<size_t>(n) + 1;
  std::vector<int64_t> best(static_cast<size_t>(stages + 1) * width, kInf);
  std::vector<int> cut(static_cast<size_t>(stages + 1) * width, 0);
  best[0] = 0;
  for (int k = 1; k <= stages; ++k) {
    const int64_t* before = &best[(k - 1) * width];
    int64_t* row = &best[k * width];
    for (int j = k; j <= n - (stages - k); ++j) {
      auto stage = [&](int i) { return prefix[j] - prefix[i]; };  // the k-th stage's sum when it starts at i
      // The first start where the stages before cost at least the k-th: beyond it the bottleneck
      // is theirs, before it the k-th stage's.
      int lo = k - 1, hi = j;
      while (lo < hi) {
        const int mid = lo + (hi - lo) / 2;
        if (before[mid] >= stage(mid)) hi = mid;
        else lo = mid + 1;
      }
      const int cross = lo;
      int64_t v = cross < j ? before[cross] : kInf;
      int at = cross;
      if (cross > k - 1 && stage(cross - 1) <= v) {
        // Before the crossing the bottleneck is the k-th stage's own sum, falling towards it: the
        // first start that reaches the smallest of those.
        v = stage(cross - 1);
        int a = k - 1, b = cross - 1;
        while (a < b) {
          const int mid = a + (b - a) / 2;
          if (stage(mid) <= v) b = mid;
          else a = mid + 1;
        }
        at = a;
      }
      if (v == kInf) continue;
      row[j] = v;
      cut[k * width + j] = at;
    }
  }
  std::vector<int> lens(stages);
  for (int k = stages, j = n; k >= 1; --k) {
    const int start = cut[k * width + j];
    lens[k - 1] = j - start;
    j = start;
  }
  return lens;
}

int64_t bottleneck(const std::vector<int64_t>& costs, const std::vector<int>& lens) {
  int64_t worst = 0;
  size_t at = 0;
  for (int len : lens) {
    int64_t sum = 0;
    for (int i = 0; i < len; ++i) sum += costs[at++];
    worst = std::max(worst, sum);
  }
  return worst;
}

PartitionLen partition_of(const std::vector<int>& lens) {
  PartitionLen p;
  if (!lens.empty()) {
    p.mode = PartitionLen::Mode::list;
    p.lens = lens;
  }
  return p;
}

// A stage's layers: at most a model's (plan/model_yaml.cpp's kMaxLayers is smaller).
constexpr int64_t kMaxLayersPerStage = 1 << 24;

PartitionLen read_partition(const Field& f) {
  PartitionLen p;
  if (f.is_sequence()) {
    p.mode = PartitionLen::Mode::list;
    for (const Field& e : f.elements()) p.lens.push_back(static_cast<int>(to_int(e, 1, kMaxLayersPerStage)));
    if (!p.lens.empty()) return p;
  }
  if (f.is_scalar() && f.node().Scalar() == "balanced") return p;
  if (f.is_scalar()) {
    try {
      p.per_stage = f.node().as<int>();
      p.mode = PartitionLen::Mode::per_stage;
    } catch (const YAML::Exception&) {
      p.per_stage = 0;
    }
  }
  if (p.mode != PartitionLen::Mode::per_stage || p.per_stage < 1)
    f.fail("'" + f.path() + "' must be a positive integer (layers per stage), a list of them, or \"balanced\"");
  return p;
}

std::string partition_text(const PartitionLen& p) {
  switch (p.mode) {
    case PartitionLen::Mode::balanced: return "balanced";
    case PartitionLen::Mode::per_stage: return std::to_string(p.per_stage);
    case PartitionLen::Mode::list: {
      std::string s = "[";
      for (size_t i = 0; i < p.lens.size(); ++i) s += (i ? ", " : "") + std::to_string(p.lens[i]);
      return s + "]";
    }
  }
  return "balanced";
}

PartitionLen listed(const PartitionLen& p, int stages) {
  if (p.mode != PartitionLen::Mode::per_stage) return p;
  return partition_of(std::vector<int>(static_cast<size_t>(stages), p.per_stage));
}

}  // namespace parallax::plan
