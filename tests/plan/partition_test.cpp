#include <catch2/catch.hpp>
#include <array>
#include <functional>
#include <random>

#include "plan/partition.hpp"
#include "tests/test_util.hpp"

using namespace parallax;

namespace {
// Tries every way to cut n layers into k non-empty contiguous parts.
int64_t brute_force_best(const std::vector<int64_t>& costs, int stages) {
  int64_t best = INT64_MAX;
  std::vector<int> lens;
  std::function<void(int, int)> go = [&](int start, int left) {
    const int n = static_cast<int>(costs.size());
    if (left == 1) {
      lens.push_back(n - start);
      best = std::min(best, plan::bottleneck(costs, lens));
      lens.pop_back();
      return;
    }
    for (int len = 1; start + len <= n - (left - 1); ++len) {
      lens.push_back(len);
      go(start + len, left - 1);
      lens.pop_back();
    }
  };
  go(0, stages);
  return best;
}

// The plain dynamic programme over every start of every stage, O(stages * n^2): the first start
// that reaches each minimum, as balanced_partition promises (its bisection must cut the same).
std::vector<int> every_start_partition(const std::vector<int64_t>& costs, int stages) {
  const int n = static_cast<int>(costs.size());
  std::vector<int64_t> prefix(n + 1, 0);
  for (int i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + costs[i];
  const int64_t inf = INT64_MAX;
  std::vector<std::vector<int64_t>> best(stages + 1, std::vector<int64_t>(n + 1, inf));
  std::vector<std::vector<int>> cut(stages + 1, std::vector<int>(n + 1, 0));
  best[0][0] = 0;
  for (int k = 1; k <= stages; ++k)
    for (int j = k; j <= n - (stages - k); ++j)
      for (int i = k - 1; i < j; ++i) {
        if (best[k - 1][i] == inf) continue;
        const int64_t v = std::max(best[k - 1][i], prefix[j] - prefix[i]);
        if (v < best[k][j]) best[k][j] = v, cut[k][j] = i;
      }
  std::vector<int> lens(stages);
  for (int k = stages, j = n; k >= 1; --k) lens[k - 1] = j - cut[k][j], j = cut[k][j];
  return lens;
}
}  // namespace

TEST_CASE("plan::balanced_partition: the same split as trying every start, ties included", "[plan]") {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 2000; ++trial) {
    // Few distinct costs (and zeros) make ties common; a model's blocks are equal but for the ends.
    const int n = 1 + static_cast<int>(rng() % (trial < 1500 ? 24 : 140));
    const int k = 1 + static_cast<int>(rng() % n);
    const int64_t spread = std::array<int64_t, 4>{1, 3, 100, 1'000'000'000}[rng() % 4];
    std::vector<int64_t> costs(n);
    for (auto& c : costs) c = static_cast<int64_t>(rng() % (spread + 1));
    if (trial % 3 == 0)
      for (int i = 1; i + 1 < n; ++i) costs[i] = costs[0];  // a transformer: equal blocks between the ends
    INFO("trial " << trial << " n=" << n << " k=" << k);
    REQUIRE(plan::balanced_partition(costs, k) == every_start_partition(costs, k));
  }
}

TEST_CASE("plan::balanced_partition: matches brute force on small cases", "[plan]") {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int64_t> cost(1, 100);
  for (int trial = 0; trial < 300; ++trial) {
    const int n = 1 + static_cast<int>(rng() % 10);
    const int k = 1 + static_cast<int>(rng() % n);
    std::vector<int64_t> costs(n);
    for (auto& c : costs) c = cost(rng);
    const auto lens = plan::balanced_partition(costs, k);
    INFO("n=" << n << " k=" << k);
    REQUIRE(static_cast<int>(lens.size()) == k);
    int sum = 0;
    for (int l : lens) {
      CHECK(l >= 1);
      sum += l;
    }
    CHECK(sum == n);
    CHECK(plan::bottleneck(costs, lens) == brute_force_best(costs, k));
  }
}

TEST_CASE("plan::balanced_partition: a heavy layer gets a stage of its own", "[plan]") {
  CHECK(plan::balanced_partition({1, 1, 1, 10, 1, 1, 1}, 3) == std::vector<int>{3, 1, 3});
}

TEST_CASE("plan::Plan: \"balanced\" spreads uniform layers evenly", "[plan]") {
  const auto p = test::plan_from(test::synthetic_scenario(12, 4, 4, "1f1b"));
  CHECK(p.partition == std::vector<int>{3, 3, 3, 3});
}
