#include <catch2/catch.hpp>

#include "plan/layers.hpp"
#include "tests/test_util.hpp"

using namespace parallax;

TEST_CASE("plan::layers: Linear registers weight [out, in] then bias [out]", "[plan]") {
  const auto l = plan::make_linear("fc0", 784, 256, true);
  REQUIRE(l.params.size() == 2);
  CHECK(l.params[0].name == "fc0.weight");
  CHECK(l.params[0].shape == std::vector<int64_t>{256, 784});
  CHECK(l.params[1].name == "fc0.bias");
  CHECK(l.params[1].shape == std::vector<int64_t>{256});
  CHECK(l.flops_per_sample == 2.0 * 784 * 256);
}

TEST_CASE("plan::layers: TransformerEncoderLayer in LibTorch's registration order", "[plan]") {
  const int64_t h = 64, ffn = 256;
  const auto l = plan::make_encoder("layers.0", h, 4, ffn, 16);
  std::vector<std::string> names;
  for (const auto& p : l.params) names.push_back(p.name.substr(std::string("layers.0.").size()));
  CHECK(names == std::vector<std::string>{"self_attn.in_proj_weight", "self_attn.in_proj_bias",
                                          "self_attn.out_proj.weight", "self_attn.out_proj.bias",
                                          "linear1.weight", "linear1.bias", "linear2.weight", "linear2.bias",
                                          "norm1.weight", "norm1.bias", "norm2.weight", "norm2.bias"});
  CHECK(l.params[0].shape == std::vector<int64_t>{3 * h, h});
  // Parameter count, independently: attention 4h^2 + 4h, FFN 2*h*ffn + ffn + h, norms 4h.
  CHECK(l.param_count() == 4 * h * h + 4 * h + 2 * h * ffn + ffn + h + 4 * h);
}

TEST_CASE("plan::layers: the transformer preset is embed, the blocks, head", "[plan]") {
  const auto s = test::scenario_from(
      "model: {preset: transformer, layers: 3, hidden: 32, heads: 4, seq_len: 8, vocab: 100}\nhardware: ideal\n");
  REQUIRE(s.layers.size() == 5);
  CHECK(s.layers.front().name == "embed");
  CHECK(s.layers[2].name == "layers.1");
  CHECK(s.layers.back().name == "head");
  CHECK(s.layers[1].shape.ffn == 128);  // ffn defaults to 4 x hidden
  CHECK(s.layers.back().params.back().name == "head.output.bias");
  CHECK(s.layers.back().params.back().shape == std::vector<int64_t>{100});
}

TEST_CASE("plan::layers: an explicit layer list, with names and kinds", "[plan]") {
  const auto s = test::scenario_from(
      "model:\n"
      "  layers:\n"
      "    - {kind: linear, in: 8, out: 4, activation: relu}\n"
      "    - {kind: synthetic, name: big, fwd_us_per_sample: 3, params_mb: 1}\n"
      "hardware: ideal\n");
  REQUIRE(s.layers.size() == 2);
  CHECK(s.layers[0].name == "layers.0");
  CHECK(s.layers[0].shape.relu);
  CHECK(s.layers[1].name == "big");
  CHECK(s.layers[1].param_count() == 1024 * 1024 / 4);
  CHECK_THAT(test::parse_error("model:\n  layers:\n    - {kind: conv}\nhardware: ideal\n"),
             Catch::StartsWith("test.yaml:3:14: 'model.layers[0].kind' must be one of linear | embedding"));
}
