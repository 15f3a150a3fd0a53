#include "exec/model.hpp"
#include "tests/test_util.hpp"
// LibTorch's logging defines CHECK (glog's, which aborts the process); Catch's must win here.
#undef CHECK
#include <catch2/catch.hpp>

using namespace parallax;

namespace {

// Every stage's LibTorch parameters, in registration order, must be the plan's, name for name and
// shape for shape: the simulator's buckets are the executor's buckets.
void check_stages_match_plan(const plan::Plan& p) {
  for (const auto& st : p.stages) {
    exec::Stage module(p, st.index, 1);
    std::vector<std::pair<std::string, std::vector<int64_t>>> torch_params, plan_params;
    for (const auto& prm : module->named_parameters()) torch_params.emplace_back(prm.key(), prm.value().sizes().vec());
    for (int l = st.first_layer; l < st.first_layer + st.layer_count; ++l)
      for (const auto& prm : p.layers()[l].params) plan_params.emplace_back(prm.name, prm.shape);
    INFO("stage " << st.index);
    CHECK(torch_params == plan_params);
  }
}

}  // namespace

TEST_CASE("exec::Stage: parameters equal the plan's for the mlp preset", "[exec]") {
  check_stages_match_plan(test::plan_from("model: {preset: mlp, layers: 3, hidden: 32}\nparallel: {pipeline: 2}\nhardware: cpu-host\n"));
}

TEST_CASE("exec::Stage: parameters equal the plan's for the transformer preset", "[exec]") {
  check_stages_match_plan(test::plan_from(
      "model: {preset: transformer, layers: 4, hidden: 32, heads: 4, ffn: 64, seq_len: 8, vocab: 50}\n"
      "parallel: {pipeline: 3, partition_len: [2, 2, 2]}\nhardware: cpu-host\n"));
}

TEST_CASE("exec::Stage: parameters equal the plan's for an explicit layer list", "[exec]") {
  check_stages_match_plan(test::plan_from(
      "model:\n  layers:\n"
      "    - {kind: embedding, vocab: 20, hidden: 16, seq_len: 4}\n"
      "    - {kind: encoder, name: block, hidden: 16, heads: 2, seq_len: 4}\n"
      "    - {kind: head, hidden: 16, vocab: 20, seq_len: 4}\n"
      "parallel: {pipeline: 2, partition_len: [1, 2]}\nhardware: cpu-host\n"));
}

TEST_CASE("exec::Stage: the same layer starts from the same weights wherever it is built", "[exec]") {
  const auto whole = test::plan_from("model: {preset: mlp, layers: 2, hidden: 16}\nhardware: cpu-host\n");
  const auto split = test::plan_from("model: {preset: mlp, layers: 2, hidden: 16}\nparallel: {pipeline: 3}\nhardware: cpu-host\n");
  exec::Stage one(whole, 0, 5), last(split, 2, 5);
  CHECK(torch::equal(one->named_parameters()["out.weight"], last->named_parameters()["out.weight"]));
}

TEST_CASE("exec::Stage: a two-stage forward equals the one-stage forward", "[exec]") {
  const std::string yaml = "model: {preset: transformer, layers: 2, hidden: 16, heads: 2, ffn: 32, seq_len: 6, vocab: 30}\nhardware: cpu-host\n";
  const auto whole = test::plan_from(yaml);
  const auto split = test::plan_from(yaml, {"parallel.pipeline=2"});
  exec::Stage all(whole, 0, 3), first(split, 0, 3), second(split, 1, 3);
  const auto ids = torch::randint(30, {3, 6}, torch::kLong);
  const auto direct = all->forward(ids);
  CHECK(direct.sizes().vec() == exec::output_shape(whole.layers().back(), 3));
  CHECK(torch::allclose(direct, second->forward(first->forward(ids)), 1e-5, 1e-6));
}

TEST_CASE("exec::check_executable: refuses synthetic layers, and fp16 on the CPU only", "[exec]") {
  CHECK_THROWS_AS(exec::check_executable(test::scenario_from(test::synthetic_scenario(4, 2, 2, "gpipe"))), plan::InputError);
  CHECK_THROWS_WITH(exec::check_executable(test::scenario_from("model: {preset: mlp}\nparallel: {precision: fp16}\nhardware: ideal\n")),
                    Catch::Contains("fp16 cannot run on the CPU"));
  // On a CUDA profile fp16 trains with a loss scaler (a missing GPU is check_device's to say).
  CHECK_NOTHROW(exec::check_executable(test::scenario_from("model: {preset: mlp}\nparallel: {precision: fp16}\nhardware: t4-pcie\n")));
}
