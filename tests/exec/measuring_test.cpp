// calibrate's repeat budget (exec/measuring.hpp): how many samples a figure is made of.
#include "exec/measuring.hpp"

#include <catch2/catch.hpp>
#include <cmath>

#include "plan/scenario.hpp"

using parallax::exec::measuring::another_sample;
using parallax::exec::measuring::Budget;
using parallax::exec::measuring::budget;
using parallax::exec::measuring::repeat;

TEST_CASE("measuring: a quick figure takes min_reps samples and min_total_us of them", "[exec][calibrate]") {
  const Budget b = budget(/*quick=*/false, nullptr);
  // 1 ms a sample: 12 samples are not yet 60 ms, 60 are.
  CHECK(another_sample(b, 11, 11e3, 11, 11e3));
  CHECK(another_sample(b, 12, 12e3, 12, 12e3));
  CHECK_FALSE(another_sample(b, 60, 60e3, 60, 60e3));
  // 10 ms a sample: 12 samples are 120 ms, enough.
  CHECK_FALSE(another_sample(b, 12, 120e3, 12, 120e3));
  CHECK_FALSE(another_sample(b, b.max_reps, 1, b.max_reps, 1));  // never more than max_reps
}

TEST_CASE("measuring: a figure whose samples take seconds stops at 4 once it has taken enough_us", "[exec][calibrate]") {
  const Budget b = budget(false, nullptr);
  // 1.5 s a sample (a transformer block of hidden 512 at 32 samples on the CPU): not 12 of them.
  CHECK(another_sample(b, 3, 4.5e6, 3, 4.5e6));  // the fewest is 4, whatever they took
  CHECK_FALSE(another_sample(b, 4, 6e6, 4, 6e6));
  // 300 ms a sample: on until 3 s.
  CHECK(another_sample(b, 9, 2.7e6, 9, 2.7e6));
  CHECK_FALSE(another_sample(b, 10, 3e6, 10, 3e6));
}

TEST_CASE("measuring: waiting for samples at the host's reference speed stops after wait_us", "[exec][calibrate]") {
  Budget b = budget(false, nullptr);
  // Without a gate every sample is at speed.
  CHECK_FALSE(another_sample(b, 12, 120e3, 0, 120e3));
  parallax::exec::measuring::HostGate gate;
  b.gate = &gate;
  // 100 ms a sample, 3 of 12 at speed: on, until 10 s.
  CHECK(another_sample(b, 12, 1.2e6, 3, 0.3e6));
  CHECK(another_sample(b, 99, 9.9e6, 3, 0.3e6));
  CHECK_FALSE(another_sample(b, 100, 10e6, 3, 0.3e6));
  CHECK_FALSE(another_sample(b, 12, 1.2e6, 4, 0.4e6));  // 4 at speed and 400 ms of them: done
}

TEST_CASE("measuring: repeat warms up once and takes samples while the budget says so", "[exec][calibrate]") {
  Budget b = budget(false, nullptr);
  b.max_reps = 30;  // instant samples never make min_total_us: max_reps ends them
  int calls = 0;
  const auto figures = repeat(
      [&] {
        ++calls;
        return std::vector<double>{static_cast<double>(calls), 7};
      },
      b);
  CHECK(calls == 31);
  REQUIRE(figures.size() == 2);
  CHECK(figures[0] < 10);  // a low quantile of 2..31, not the warm-up's
  CHECK(figures[1] == 7);
}

TEST_CASE("measuring: the optimizer step is timed as a run's OPTIM runs it, on gradients made anew each repeat",
          "[exec][calibrate]") {
  parallax::exec::measuring::PhaseClock clock(torch::kCPU);
  Budget b = budget(/*quick=*/true, nullptr);
  b.max_reps = 5;
  const parallax::exec::measuring::Bench bench{torch::kCPU, &clock, b};
  parallax::plan::OptimizerSpec sgd;  // plain SGD: each step moves a parameter by -lr x its gradient
  sgd.kind = "sgd";
  sgd.lr = 0.5;
  torch::manual_seed(7);
  const torch::Tensor g = torch::randn({64});  // the gradient optimizer_step_us draws next
  torch::manual_seed(7);
  const torch::Tensor p = torch::zeros({64});
  CHECK(parallax::exec::measuring::optimizer_step_us(sgd, {p}, bench) > 0);
  // The steps it took, each on the whole gradient: a repeat on zeroed gradients (1.13's
  // zero_grad() zeroes them in place) or on none (2.x's drops them; a GPU once timed that, 1.3
  // us for any size: docs/gpu.md) would leave the parameters where the first step put them.
  const double steps = (p / (-sgd.lr * g)).mean().item<double>();
  CHECK(steps >= 2);  // the warm-up and at least one timed repeat
  CHECK(steps == Approx(std::round(steps)).margin(1e-4));
}
