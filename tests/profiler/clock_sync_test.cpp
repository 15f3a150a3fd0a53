#include <catch2/catch.hpp>
#include <random>

#include "profiler/clock_sync.hpp"

using namespace parallax::profiler;

namespace {

// A rank whose clock runs `drift_ppm` fast and `offset` behind the reference at local time 0;
// round trips with random one-way delays of 20-300 us.
struct FakeRank {
  int64_t offset;
  double drift_ppm;
  std::mt19937_64 rng{42};

  int64_t reference_at(int64_t local) const {
    return local + offset + static_cast<int64_t>(static_cast<double>(local) * drift_ppm * 1e-6);
  }
  std::vector<RoundTrip> trips(int64_t at, int n) {
    std::uniform_int_distribution<int64_t> delay(20'000, 300'000);
    std::vector<RoundTrip> out;
    for (int i = 0; i < n; ++i) {
      const int64_t send = at + i * 1'000'000;
      const int64_t there = delay(rng), back = delay(rng);
      out.push_back({send, reference_at(send + there), send + there + back});
    }
    return out;
  }
};

}  // namespace

TEST_CASE("profiler::ClockModel: recovers an injected offset within the error bound", "[profiler]") {
  for (int64_t offset : {int64_t{0}, int64_t{-5'000'000'000}, int64_t{123'456'789}}) {
    FakeRank rank{offset, 0.0};
    const OffsetEstimate e = estimate_offset(rank.trips(1'000'000'000, 16));
    INFO("offset " << offset);
    CHECK(std::abs(e.offset - offset) <= e.error_bound);
    CHECK(e.error_bound <= 300'000);  // the tightest of 16 round trips
  }
}

TEST_CASE("profiler::ClockModel: no drift is read into noise", "[profiler]") {
  FakeRank rank{1'000'000, 0.0};
  const ClockModel model(estimate_offset(rank.trips(0, 4)), estimate_offset(rank.trips(1'000'000'000, 4)));
  CHECK(model.drift_ppm() == 0.0);
  CHECK(std::abs(model.to_reference(1'000'000'000) - rank.reference_at(1'000'000'000)) <= model.error_bound());
}

TEST_CASE("profiler::ClockModel: start and end estimates correct linear drift", "[profiler]") {
  FakeRank rank{2'000'000'000, 50.0};  // 50 ppm fast
  const OffsetEstimate start = estimate_offset(rank.trips(0, 16));
  const OffsetEstimate end = estimate_offset(rank.trips(600'000'000'000, 16));  // ten minutes later
  const ClockModel model(start, end);
  CHECK(model.drift_ppm() == Approx(50.0).epsilon(0.01));
  for (int64_t local : {int64_t{0}, int64_t{300'000'000'000}, int64_t{600'000'000'000}}) {
    INFO("local " << local);
    CHECK(std::abs(model.to_reference(local) - rank.reference_at(local)) <= model.error_bound() + 1);
  }
  // Without the drift correction the end of the run would be 30 ms off.
  const ClockModel start_only(start);
  CHECK(std::abs(start_only.to_reference(600'000'000'000) - rank.reference_at(600'000'000'000)) > 29'000'000);
}
