#include "exec/model.hpp"
#include "exec/split_backward.hpp"
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

TEST_CASE("exec::Stage: parameters equal the plan's for Llama-family and GPT decoder blocks", "[exec]") {
  for (const std::string form : {"kv_heads: 2, mlp: swiglu, norm: rmsnorm, positions: rope, bias: false",
                                 "mlp: relu2, kv_heads: 1, positions: rope, bias: false",
                                 "qkv_bias: true, bias: false, mlp: swiglu, norm: rmsnorm, kv_heads: 2", "mlp: gelu",
                                 "mlp: gelu, max_positions: 24",  // GPT-2's table longer than the sequence
                                 // Qwen3's attention (wider heads, query and key norms), and the norms as LayerNorms
                                 "kv_heads: 2, head_dim: 16, qk_norm: true, mlp: swiglu, norm: rmsnorm, positions: rope, bias: false",
                                 "qk_norm: true, norm: layernorm, positions: rope"}) {
    INFO(form);
    check_stages_match_plan(test::plan_from(
        "model: {preset: transformer, layers: 4, hidden: 32, heads: 4, ffn: 48, seq_len: 8, vocab: 50, " + form + "}\n"
        "parallel: {pipeline: 3, partition_len: [2, 2, 2]}\nhardware: cpu-host\n"));
  }
  // Mixture-of-experts blocks (issue 59): router gate, grouped experts, shared experts; a dense
  // first block (moe_layers' first_dense).
  check_stages_match_plan(test::plan_from(
      "model: {preset: transformer, layers: 3, hidden: 32, heads: 4, ffn: 48, seq_len: 8, vocab: 50, mlp: swiglu, norm: rmsnorm, "
      "experts: 4, experts_per_token: 2, shared_experts: 1, expert_ffn: 16, moe_layers: {every: 1, first_dense: 1}}\n"
      "parallel: {pipeline: 2}\nhardware: cpu-host\n"));
  // Latent attention (DeepSeek-V3's, and V2-Lite's without a query rank), with MoE blocks after a
  // dense first one.
  for (const std::string q_rank : {"q_lora_rank: 16, ", ""}) {
    INFO(q_rank);
    check_stages_match_plan(test::plan_from(
        "model: {preset: transformer, layers: 3, hidden: 32, heads: 4, ffn: 48, seq_len: 8, vocab: 50, mlp: swiglu, norm: rmsnorm, "
        "positions: rope, bias: false, mla: {" + q_rank + "kv_lora_rank: 8, qk_nope_head_dim: 8, qk_rope_head_dim: 4, v_head_dim: 6}, "
        "experts: 4, experts_per_token: 2, shared_experts: 1, expert_ffn: 16, moe_layers: {every: 1, first_dense: 1}}\n"
        "parallel: {pipeline: 2}\nhardware: cpu-host\n"));
  }
  // Tied embeddings on one stage: the head projects with the embedding's matrix.
  const auto tied = test::plan_from("model: {preset: transformer, layers: 1, hidden: 16, heads: 2, seq_len: 4, vocab: 20, "
                                    "tie_embeddings: true}\nhardware: cpu-host\n");
  check_stages_match_plan(tied);
  exec::Stage stage(tied, 0, 3);
  const auto ids = torch::randint(20, {2, 4});
  const auto out = stage->forward(ids);  // [seq, batch, vocab]
  auto embedding = stage->named_parameters()["embed.tok.weight"];
  stage->zero_grad();
  out.sum().backward();
  CHECK(out.sizes().vec() == std::vector<int64_t>{4, 2, 20});
  CHECK(embedding.grad().abs().sum().item<double>() > 0);
}

TEST_CASE("exec::Stage: a decoder block is causal, and a two-stage forward equals the one-stage one", "[exec]") {
  const std::string yaml = "model: {preset: transformer, layers: 2, hidden: 16, heads: 4, kv_heads: 2, ffn: 24, mlp: swiglu, "
                           "norm: rmsnorm, positions: rope, seq_len: 6, vocab: 30}\nhardware: cpu-host\n";
  const auto whole = test::plan_from(yaml);
  const auto split = test::plan_from(yaml, {"parallel.pipeline=2"});
  exec::Stage all(whole, 0, 3), first(split, 0, 3), second(split, 1, 3);
  const auto ids = torch::randint(30, {3, 6});
  const auto out = all->forward(ids);
  CHECK(torch::allclose(out, second->forward(first->forward(ids)), 1e-5, 1e-6));
  // Changing the last token changes no earlier position's output.
  auto changed = ids.clone();
  changed.index_put_({torch::indexing::Slice(), 5}, (ids.index({torch::indexing::Slice(), 5}) + 1) % 30);
  const auto out2 = all->forward(changed);
  CHECK(torch::allclose(out.slice(0, 0, 5), out2.slice(0, 0, 5), 1e-6, 1e-7));
  CHECK_FALSE(torch::allclose(out.slice(0, 5, 6), out2.slice(0, 5, 6), 1e-6, 1e-7));
}

TEST_CASE("exec::Stage: under a sliding window a token sees its window's tokens and no earlier ones", "[exec]") {
  // One block, a window of 3: position i reads tokens i - 2 .. i. Changing token 0 changes
  // positions 0 .. 2 and none after; in a block of full attention (full_attention_every 1 is not
  // allowed, so a second model without the window) it changes every position.
  const std::string model = "model: {preset: transformer, layers: 1, hidden: 16, heads: 4, kv_heads: 2, ffn: 24, mlp: swiglu, "
                            "norm: rmsnorm, positions: rope, seq_len: 8, vocab: 30";
  exec::Stage windowed(test::plan_from(model + ", sliding_window: 3}\nhardware: cpu-host\n"), 0, 3);
  exec::Stage full(test::plan_from(model + "}\nhardware: cpu-host\n"), 0, 3);
  const auto ids = torch::randint(30, {2, 8});
  auto changed = ids.clone();
  changed.index_put_({torch::indexing::Slice(), 0}, (ids.index({torch::indexing::Slice(), 0}) + 1) % 30);
  const auto a = windowed->forward(ids), b = windowed->forward(changed);
  CHECK_FALSE(torch::allclose(a.slice(0, 2, 3), b.slice(0, 2, 3), 1e-6, 1e-7));
  CHECK(torch::allclose(a.slice(0, 3, 8), b.slice(0, 3, 8), 1e-6, 1e-7));
  CHECK_FALSE(torch::allclose(full->forward(ids).slice(0, 7, 8), full->forward(changed).slice(0, 7, 8), 1e-6, 1e-7));
}

TEST_CASE("exec::Stage: a latent-attention block is causal, and its rotary key reaches every head", "[exec]") {
  const std::string yaml = "model: {preset: transformer, layers: 1, hidden: 16, heads: 4, ffn: 24, mlp: swiglu, norm: rmsnorm, "
                           "positions: rope, seq_len: 6, vocab: 30, mla: {q_lora_rank: 8, kv_lora_rank: 8, qk_nope_head_dim: 4, "
                           "qk_rope_head_dim: 4, v_head_dim: 4}}\nhardware: cpu-host\n";
  exec::Stage stage(test::plan_from(yaml), 0, 3);
  const auto ids = torch::randint(30, {3, 6});
  const auto out = stage->forward(ids);
  auto changed = ids.clone();
  changed.index_put_({torch::indexing::Slice(), 5}, (ids.index({torch::indexing::Slice(), 5}) + 1) % 30);
  const auto out2 = stage->forward(changed);
  CHECK(torch::allclose(out.slice(0, 0, 5), out2.slice(0, 0, 5), 1e-6, 1e-7));
  CHECK_FALSE(torch::allclose(out.slice(0, 5, 6), out2.slice(0, 5, 6), 1e-6, 1e-7));
  // The shared rotary key's projection (the last qk_rope_head_dim rows of kv_a_proj_with_mqa) gets
  // a gradient, as do both latents' norms.
  stage->zero_grad();
  out.square().sum().backward();
  const auto params = stage->named_parameters();
  CHECK(params["layers.0.self_attn.kv_a_proj_with_mqa.weight"].grad().slice(0, 8, 12).abs().sum().item<double>() > 0);
  CHECK(params["layers.0.self_attn.kv_a_layernorm.weight"].grad().abs().sum().item<double>() > 0);
  CHECK(params["layers.0.self_attn.q_a_layernorm.weight"].grad().abs().sum().item<double>() > 0);
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

TEST_CASE("exec: a backward split into I and W gives every parameter and the input the gradients of one backward", "[exec]") {
  // The transformer preset's one stage (embedding, encoder blocks, head) and the mlp's: I then W
  // over the layer-cut graph against LibTorch's own backward of the whole stage.
  for (const std::string model : {"{preset: transformer, layers: 2, hidden: 32, heads: 4, ffn: 64, seq_len: 8, vocab: 50}",
                                  "{preset: mlp, layers: 3, hidden: 32}"}) {
    INFO(model);
    const auto p = test::plan_from("model: " + model + "\nhardware: cpu-host\n");
    exec::Stage split(p, 0, 7), whole(p, 0, 7);
    const bool tokens = p.layers().front().kind == plan::LayerKind::embedding;
    const torch::Tensor x = tokens ? torch::randint(50, {4, 8}) : torch::randn({4, 784}).requires_grad_(true);
    exec::SplitGraph graph;
    const torch::Tensor y = exec::forward_split(*split, x, &graph);
    const torch::Tensor grad = torch::randn(y.sizes());
    const torch::Tensor input_grad = exec::backward_input(graph, y, grad);
    exec::backward_weight(*split, graph);
    const torch::Tensor x2 = tokens ? x : x.detach().clone().requires_grad_(true);
    whole->forward(x2).backward(grad);
    if (!tokens) CHECK(torch::allclose(input_grad, x2.grad(), 1e-5, 1e-6));
    const auto a = split->named_parameters(), b = whole->named_parameters();
    REQUIRE(a.size() == b.size());
    for (size_t i = 0; i < a.size(); ++i) {
      INFO(a[i].key());
      REQUIRE(a[i].value().grad().defined());
      CHECK(torch::allclose(a[i].value().grad(), b[i].value().grad(), 1e-5, 1e-6));
    }
  }
}

// Every expert's weights get a gradient, zero for an expert no token chose: DDP's buckets wait for
// every parameter's hook, on every rank (exec/moe.cpp runs each local expert, on no rows if none).
TEST_CASE("exec::Stage: a MoE block gives every expert a gradient, and top-k mixes k experts", "[exec]") {
  const auto plan = test::plan_from(
      "model: {preset: transformer, layers: 1, hidden: 16, heads: 2, ffn: 32, seq_len: 1, vocab: 20, mlp: gelu, "
      "experts: 8, experts_per_token: 2, expert_ffn: 8}\nhardware: cpu-host\n");
  exec::Stage stage(plan, 0, 5);
  const auto out = stage->forward(torch::tensor({{3}}, torch::kLong));  // one token: 2 of 8 experts chosen
  out.sum().backward();
  const auto params = stage->named_parameters();
  const auto up = params["layers.0.mlp.experts.up_proj"].grad();
  REQUIRE(up.defined());
  int touched = 0;
  for (int e = 0; e < 8; ++e) touched += up[e].abs().sum().item<double>() > 0;
  CHECK(touched == 2);
  CHECK(params["layers.0.mlp.router.gate.weight"].grad().abs().sum().item<double>() > 0);
}
