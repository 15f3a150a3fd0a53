// The loss scaler against PyTorch GradScaler's documented rule (torch/cuda/amp/grad_scaler.py and
// the _amp_update_scale_ kernel, 1.13) and against plain arithmetic on known gradients.
#include "exec/grad_scaler.hpp"
// LibTorch's logging defines CHECK (glog's, which aborts the process); Catch's must win here.
#undef CHECK
#include <catch2/catch.hpp>

#include <cfloat>
#include <limits>

using parallax::exec::GradScaler;
using parallax::exec::GradScalerOptions;

TEST_CASE("exec::GradScaler: grows after growth_interval clean steps, halves and resets on an overflow", "[exec]") {
  GradScaler s({/*init_scale=*/8.0, /*growth_factor=*/2.0, /*backoff_factor=*/0.5, /*growth_interval=*/3});
  CHECK(s.scale() == 8.0);
  CHECK(s.update(false));
  CHECK(s.update(false));
  CHECK(s.scale() == 8.0);
  CHECK(s.update(false));  // the third clean step in a row
  CHECK(s.scale() == 16.0);
  CHECK(s.growth_tracker() == 0);
  CHECK(s.update(false));
  CHECK(s.update(false));
  CHECK_FALSE(s.update(true));  // overflow: no step, half the scale, the count starts again
  CHECK(s.scale() == 8.0);
  CHECK(s.growth_tracker() == 0);
  CHECK(s.update(false));
  CHECK(s.update(false));
  CHECK(s.scale() == 8.0);
  CHECK(s.update(false));
  CHECK(s.scale() == 16.0);
}

TEST_CASE("exec::GradScaler: the scale never grows past what fp32 holds", "[exec]") {
  GradScaler s({/*init_scale=*/0x1p127, 2.0, 0.5, /*growth_interval=*/1});
  CHECK(s.update(false));
  CHECK(s.scale() == 0x1p127);  // 2^128 is inf in fp32
  CHECK_THROWS(GradScaler({0.0, 2.0, 0.5, 1}));
  CHECK_THROWS(GradScaler({1.0, 2.0, 1.5, 1}));
}

TEST_CASE("exec::GradScaler: unscaling divides every gradient by the scale and flags inf and NaN", "[exec]") {
  torch::nn::Linear layer(3, 2);
  const torch::Tensor wg = torch::tensor({{1.0f, -2.0f, 3.0f}, {0.5f, 0.25f, -4.0f}});
  const torch::Tensor bg = torch::tensor({7.0f, -1.0f});
  GradScaler s({/*init_scale=*/1024.0, 2.0, 0.5, 2000});
  auto set_grads = [&](float scale) {
    layer->weight.mutable_grad() = wg * scale;
    layer->bias.mutable_grad() = bg * scale;
  };
  set_grads(1024.0f);
  torch::Tensor found;
  s.unscale(layer->parameters(), found);
  CHECK(torch::equal(layer->weight.grad(), wg));  // powers of two: exact
  CHECK(torch::equal(layer->bias.grad(), bg));
  REQUIRE(found.defined());
  CHECK(found.item<float>() == 0.0f);

  for (float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    set_grads(1024.0f);
    layer->bias.mutable_grad()[1].fill_(bad);
    torch::Tensor flag;
    s.unscale(layer->parameters(), flag);
    CHECK(flag.item<float>() == 1.0f);
  }
  // The flag accumulates across calls (a rank's several stages): once set it stays set.
  torch::Tensor flag = torch::ones({1});
  set_grads(1024.0f);
  s.unscale(layer->parameters(), flag);
  CHECK(flag.item<float>() == 1.0f);
}

TEST_CASE("exec::GradScaler: a scaled backward and an unscale give the unscaled gradients", "[exec]") {
  torch::manual_seed(3);
  torch::nn::Linear layer(4, 3);
  const torch::Tensor x = torch::randn({5, 4}), target = torch::tensor({0, 2, 1, 1, 0});
  torch::nn::functional::cross_entropy(layer->forward(x), target).backward();
  const torch::Tensor reference = layer->weight.grad().clone();
  layer->zero_grad();
  GradScaler s({/*init_scale=*/65536.0, 2.0, 0.5, 2000});
  (torch::nn::functional::cross_entropy(layer->forward(x), target) * s.scale()).backward();
  torch::Tensor found;
  s.unscale(layer->parameters(), found);
  CHECK(torch::allclose(layer->weight.grad(), reference, 1e-6, 1e-7));
  CHECK(found.item<float>() == 0.0f);
}
