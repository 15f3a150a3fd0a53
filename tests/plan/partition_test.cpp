#include <catch2/catch.hpp>
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
}  // namespace

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
