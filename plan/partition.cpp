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
  // the k-th stage starts in that optimum. O(stages * n^2), instant for real layer counts.
  std::vector<std::vector<int64_t>> best(stages + 1, std::vector<int64_t>(n + 1, kInf));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(n + 1, 0));
  best[0][0] = 0;
  for (int k = 1; k <= stages; ++k) {
    for (int j = k; j <= n - (stages - k); ++j) {
      for (int i = k - 1; i < j; ++i) {
        if (best[k - 1][i] == kInf) continue;
        const int64_t v = std::max(best[k - 1][i], prefix[j] - prefix[i]);
        if (v < best[k][j]) {
          best[k][j] = v;
          cut[k][j] = i;
        }
      }
    }
  }
  std::vector<int> lens(stages);
  for (int k = stages, j = n; k >= 1; --k) {
    lens[k - 1] = j - cut[k][j];
    j = cut[k][j];
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
