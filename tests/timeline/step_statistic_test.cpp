#include <catch2/catch.hpp>

#include <random>

#include "timeline/step_statistic.hpp"

using namespace parallax;

TEST_CASE("timeline::quantile: linear between order statistics, as numpy's default", "[timeline]") {
  // numpy.quantile([4, 1, 3, 2], q) for q = 0, 0.2, 0.5, 1: 1.0, 1.6, 2.5, 4.0.
  const std::vector<double> v{4, 1, 3, 2};
  CHECK(timeline::quantile(v, 0) == Approx(1));
  CHECK(timeline::quantile(v, 0.2) == Approx(1.6));
  CHECK(timeline::quantile(v, 0.5) == Approx(2.5));
  CHECK(timeline::quantile(v, 1) == Approx(4));
  CHECK(timeline::median(std::vector<double>{5, 1, 3}) == Approx(3));
  CHECK(timeline::quantile(std::vector<double>{}, 0.2) == 0);
  CHECK(timeline::undisturbed(std::vector<double>{7}) == Approx(7));
  // Of durations, the same to the nanosecond.
  const std::vector<plan::Time> t = {plan::Time::ns(4), plan::Time::ns(1), plan::Time::ns(3), plan::Time::ns(2)};
  CHECK(timeline::quantile(t, 0.2) == plan::Time::ns(2));  // 1.6 rounds to 2
  CHECK(timeline::median(t) == plan::Time::ns(3));         // 2.5 rounds away from 0
}

TEST_CASE("timeline::step_statistic: one-sided bursts leave the undisturbed level where it was", "[timeline]") {
  // A run at a steady 10 ms (+-2% jitter) with slow bursts: runs of steps 30-120% slower, taking
  // from none to 60% of the run, as this project's CPU machines show. The median follows the
  // bursts; the statistic stays within 2% of the level.
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> jitter(-0.02, 0.02), slow(0.3, 1.2);
  for (const double burst_share : {0.0, 0.2, 0.4, 0.6}) {
    std::vector<plan::Time> steps;
    const int n = 60, burst_from = 13, burst_steps = static_cast<int>(burst_share * n);
    for (int i = 0; i < n; ++i) {
      const bool in_burst = i >= burst_from && i < burst_from + burst_steps;
      steps.push_back(plan::Time::ms(10.0 * (1 + jitter(rng)) * (in_burst ? 1 + slow(rng) : 1)));
    }
    const auto s = timeline::step_statistic(steps);
    INFO("burst share " << burst_share << ": median " << s.median.to_ms() << ", undisturbed " << s.undisturbed.to_ms());
    CHECK(s.undisturbed.to_ms() == Approx(10).epsilon(0.02));
    CHECK(s.disturbed_share == Approx(burst_share).margin(0.02));
    if (burst_share >= 0.6) CHECK(s.median.to_ms() > 11.5);  // the median went with the burst
  }
}

TEST_CASE("timeline::step_statistic: on symmetric noise it stays near the median", "[timeline]") {
  // A quiet device: 10 ms with symmetric 1% noise. p20 is 0.84 sigma below the median: 0.84%.
  std::mt19937 rng(11);
  std::normal_distribution<double> noise(0, 0.01);
  std::vector<plan::Time> steps;
  for (int i = 0; i < 200; ++i) steps.push_back(plan::Time::ms(10.0 * (1 + noise(rng))));
  const auto s = timeline::step_statistic(steps);
  CHECK(s.undisturbed.to_ms() == Approx(s.median.to_ms()).epsilon(0.015));
  CHECK(s.median.to_ms() == Approx(10).epsilon(0.005));
  CHECK(s.disturbed_share == 0);
  CHECK(s.steps == 200);
  CHECK(s.min.to_ms() <= s.undisturbed.to_ms());
  CHECK(s.max.to_ms() >= s.median.to_ms());
}

TEST_CASE("timeline::steps_after_warmup: the job's step 0 is its warm-up, a later window has none", "[timeline]") {
  const auto run_of = [](std::vector<int> steps) {
    timeline::Timeline t;
    t.world_size = 1;
    for (int s : steps) {
      timeline::TimelineEvent e;
      e.action = {schedule::ActionKind::F, 0, 0};
      e.start = plan::Time::ms(10.0 * s);
      e.end = e.start + plan::Time::ms(1);
      e.step = s;
      t.events.push_back(e);
    }
    return t;
  };
  CHECK(timeline::steps_after_warmup(run_of({0, 1, 2})).steps == std::vector<int>{1, 2});
  CHECK(timeline::steps_after_warmup(run_of({551, 552})).steps == std::vector<int>{551, 552});  // ProfilerStep#551 first
  CHECK(timeline::steps_after_warmup(run_of({0})).steps == std::vector<int>{0});                // a lone step stays
}
