// Multi-head latent attention and multi-token prediction (DeepSeek-V2 and -V3; plan/layers.cpp,
// plan/cost.cpp, plan/traffic.cpp, plan/hf_config.cpp), checked against figures that do not come
// from Parallax: the parameter counts DeepSeek publishes, Megatron-LM's FLOPs formula for MLA, and
// bytes counted by hand.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "plan/cost.hpp"
#include "plan/executable.hpp"
#include "plan/hf_config.hpp"
#include "plan/memory.hpp"
#include "plan/trainer_export.hpp"
#include "tests/test_util.hpp"

using namespace parallax;

namespace {

const std::string kDeepSeekV3 = PARALLAX_SOURCE_DIR "/scenarios/models/deepseek-v3.json";

plan::Scenario deepseek(const std::string& parallel = "", const std::string& hardware = "ideal") {
  return test::scenario_from("model: {hf_config: " + kDeepSeekV3 + ", seq_len: 4096}\n" + parallel + "hardware: " + hardware + "\n");
}

bool is_mtp(const plan::Layer& l) { return l.name.rfind("mtp.", 0) == 0; }

// A block with latent attention at small sizes: hidden 64, 4 heads, q rank 16, kv rank 8, nope 8,
// rope 4, v 6.
const char* kSmall =
    "model: {preset: transformer, layers: 2, hidden: 64, heads: 4, ffn: 128, seq_len: 32, vocab: 100, mlp: swiglu, norm: rmsnorm,\n"
    "        positions: rope, bias: false, attention: flash,\n"
    "        mla: {q_lora_rank: 16, kv_lora_rank: 8, qk_nope_head_dim: 8, qk_rope_head_dim: 4, v_head_dim: 6}}\n";

std::string small(const std::string& parallel = "") { return std::string(kSmall) + parallel + "hardware: ideal\n"; }

}  // namespace

TEST_CASE("mla: DeepSeek-V3's config has the parameters DeepSeek publishes", "[plan][mla][hf]") {
  // 'DeepSeek-V3 ... with 671B total parameters with 37B activated for each token' (DeepSeek-AI,
  // 'DeepSeek-V3 Technical Report', arXiv 2412.19437, abstract). The report rounds: within 0.5%.
  const plan::Scenario s = deepseek();
  int64_t main_model = 0, experts = 0;
  for (const auto& l : s.layers) {
    if (is_mtp(l)) continue;
    main_model += l.param_count();
    experts += l.expert_param_count(1, 1);
  }
  CHECK(main_model == Approx(671e9).epsilon(0.005));
  const double activated = static_cast<double>(main_model - experts) + static_cast<double>(experts) * 8.0 / 256.0;
  CHECK(activated == Approx(37e9).epsilon(0.015));
  // Its one multi-token prediction module is a MoE block with enorm, hnorm and eh_proj, and the
  // head runs twice.
  REQUIRE(s.layers.size() == 64);
  const plan::Layer& mtp = s.layers[62];
  CHECK(mtp.name == "mtp.0");
  CHECK(mtp.shape.mtp);
  CHECK(mtp.shape.moe.on());
  CHECK(mtp.params[2].name == "mtp.0.eh_proj.weight");
  CHECK(mtp.params[2].shape == std::vector<int64_t>{7168, 2 * 7168});
  CHECK(s.layers.back().shape.predictions == 2);
}

TEST_CASE("mla: a block's projections, by hand, in Hugging Face's names and Megatron-core's splits", "[plan][mla]") {
  const plan::Scenario s = deepseek();
  const plan::Layer& b = s.layers[1];  // a dense block
  std::vector<std::string> names;
  for (const auto& p : b.params) names.push_back(p.name);
  CHECK(std::vector<std::string>(names.begin(), names.begin() + 7) ==
        std::vector<std::string>{"layers.0.self_attn.q_a_proj.weight", "layers.0.self_attn.q_a_layernorm.weight",
                                 "layers.0.self_attn.q_b_proj.weight", "layers.0.self_attn.kv_a_proj_with_mqa.weight",
                                 "layers.0.self_attn.kv_a_layernorm.weight", "layers.0.self_attn.kv_b_proj.weight",
                                 "layers.0.self_attn.o_proj.weight"});
  // Down projections and latent norms whole on every tensor rank; up and output projections split.
  for (int i : {0, 1, 3, 4}) CHECK_FALSE(b.params[i].tensor_split);
  for (int i : {2, 5, 6}) CHECK(b.params[i].tensor_split);
  const int64_t attention = 7168 * 1536 + 1536 + 1536 * 128 * 192 + 7168 * 576 + 512 + 512 * 128 * 256 + 128 * 128 * 7168;
  const int64_t mlp = 3 * 7168 * 18432, norms = 2 * 7168;
  CHECK(b.param_count() == attention + mlp + norms);
  // On one of 8 tensor ranks: the down projections and norms whole, the rest an eighth.
  const int64_t whole = 7168 * 1536 + 1536 + 7168 * 576 + 512 + norms;
  CHECK(b.param_count(8) == whole + (attention + mlp + norms - whole) / 8);
}

TEST_CASE("mla: FLOPs agree with Megatron-LM's count for multi-latent attention", "[plan][mla]") {
  // megatron/training/training.py num_floating_point_operations (core_v0.13.0), per layer and token,
  // forward (its 3 x 2 counts forward and backward): q_term = q_lora_rank x (hidden + heads x
  // (qk_head_dim + qk_pos_emb_head_dim) + 1), kv_lora_rank x (hidden + heads x (qk_head_dim +
  // v_head_dim) + 1), hidden x qk_pos_emb_head_dim, heads x v_head_dim x hidden; the core
  // seq x heads x (qk + rope) / 2 + seq x heads x v / 2 (causal). Its +1 terms are the latent
  // norms, which Parallax costs as memory-bound kernels, not FLOPs.
  const double h = 7168, n = 128, rq = 1536, rkv = 512, nope = 128, rope = 64, v = 128, s = 4096, ffn = 18432;
  const double megatron_linear = 2 * (rq * (h + n * (nope + rope)) + rkv * (h + n * (nope + v)) + h * rope + n * v * h);
  const double megatron_core = 2 * (s * n * (nope + rope) / 2 + s * n * v / 2);
  const plan::Scenario sc = deepseek();
  const plan::Layer& b = sc.layers[1];
  const double mlp = 2 * 3 * h * ffn;
  // Parallax counts the core unmasked (4 s^2 h at full attention), and its kernels skip half of it
  // as causal attention does: twice Megatron-LM's causal count.
  CHECK(b.flops_per_sample == Approx(s * (megatron_linear + mlp) + 2 * s * megatron_core).epsilon(1e-12));
  CHECK(plan::attention_core_flops_per_sample(b.shape) == Approx(2 * s * megatron_core).epsilon(1e-12));
}

TEST_CASE("mla: what a block keeps for backward, by hand", "[plan][mla]") {
  const plan::Plan p = test::plan_from(small());
  const plan::LayerShape& sh = p.layers()[1].shape;
  const double s = 32, h = 64, e = 2;
  const plan::BlockActivations a = plan::block_activations(sh, e, e);
  // Unsplit: the norms' inputs and outputs (4 x h) and the latents: q_a's output and its norm's
  // (16 + 16), kv_a's output (8 + 4) and its norm's (8).
  CHECK(a.unsplit == s * e * (4 * h + 16 + 16 + 12 + 8));
  // K: 4 heads x (8 + 4); V: 4 heads x 6.
  CHECK(a.kv == s * e * (4 * 12 + 4 * 6));
  // Split: Q (4 x 12), the output projection's input (4 x 6), SwiGLU's gate and up and the down
  // projection's input (3 x 128).
  CHECK(a.split == s * e * (48 + 24 + 3 * 128));
}

TEST_CASE("mla: the tensor group gathers the latents, not the hidden-wide input", "[plan][mla]") {
  const plan::Plan p = test::plan_from(small("parallel: {tensor: 2, sequence_parallel: true}\n"));
  const plan::TensorTraffic sp = plan::tensor_traffic(p.layers()[1], p.scenario.parallel, 1);
  const double e = plan::activation_bytes(p.scenario.parallel.precision);
  CHECK(sp.bytes == 32 * 64 * e);
  CHECK(sp.latent_bytes == 32 * (16 + 8 + 4) * e);  // q rank, kv rank, the shared rotary key
  CHECK(sp.forward_all_gather == 1);               // the MLP's
  CHECK(sp.latent.forward_all_gather == 1);
  CHECK(sp.forward_reduce_scatter == 2);           // after the output projection and the MLP
  CHECK(sp.latent.backward_reduce_scatter == 1);
  CHECK(sp.backward_reduce_scatter == 1);
  const plan::Plan ar = test::plan_from(small("parallel: {tensor: 2}\n"));
  const plan::TensorTraffic no_sp = plan::tensor_traffic(ar.layers()[1], ar.scenario.parallel, 1);
  CHECK(no_sp.forward_all_reduce == 2);
  CHECK(no_sp.backward_all_reduce == 1);
  CHECK(no_sp.latent.backward_all_reduce == 1);
}

TEST_CASE("mla: multi-token prediction runs the head once more and exports as Megatron-LM's", "[plan][mla]") {
  const plan::Plan one = test::plan_from(small());
  const plan::Plan two = test::plan_from(small(), {"model.mtp_layers=1"});
  REQUIRE(two.layers().size() == one.layers().size() + 1);
  CHECK(two.layers().back().flops_per_sample == 2 * one.layers().back().flops_per_sample);
  const plan::Layer& mtp = two.layers()[3];
  CHECK(mtp.name == "mtp.0");
  CHECK(mtp.flops_per_sample == one.layers()[2].flops_per_sample + 32 * 2 * 2 * 64 * 64);  // + eh_proj
  const plan::TrainerExport m = plan::export_megatron(test::plan_from(small("framework: megatron\nparallel: {precision: bf16}\n"), {"model.mtp_layers=1"}));
  auto value = [&](const std::string& flag) {
    for (const auto& a : m.arguments)
      if (a.first == flag) return a.second;
    return std::string("absent");
  };
  CHECK(value("--num-layers") == "2");
  CHECK(value("--mtp-num-layers") == "1");
  CHECK(value("--multi-latent-attention").empty());
  CHECK(value("--q-lora-rank") == "16");
  CHECK(value("--kv-lora-rank") == "8");
  CHECK(value("--qk-head-dim") == "8");
  CHECK(value("--qk-pos-emb-head-dim") == "4");
  CHECK(value("--v-head-dim") == "6");
}

TEST_CASE("mla: what it cannot plan or run is refused at the key", "[plan][mla]") {
  CHECK_THAT(test::parse_error(small(), {"model.kv_heads=2"}), Catch::Contains("latent attention gives every head its own key and value"));
  CHECK_THAT(test::parse_error(small(), {"model.positions=learned"}), Catch::Contains("model.mla needs model.positions: rope"));
  CHECK_THAT(test::parse_error(small(), {"model.mla={kv_lora_rank: 8, qk_nope_head_dim: 8, qk_rope_head_dim: 3, v_head_dim: 6}"}),
             Catch::Contains("qk_rope_head_dim must be even"));
  CHECK_THAT(test::parse_error(small(), {"model.mla={kv_lora_rank: 8, qk_nope_head_dim: 8, qk_rope_head_dim: 4}"}),
             Catch::Contains("v_head_dim"));
  CHECK_THAT(test::parse_error(small("parallel: {activation_checkpointing: selective_op}\nframework: torchtitan\n")),
             Catch::Contains("has latent attention"));
  // The executor runs latent attention (standard attention, tensor 1); at tensor 2 it refuses the
  // tensor degree, not the block.
  CHECK_NOTHROW(plan::check_executable(test::scenario_from(small(), {"model.attention=standard"})));
  try {
    plan::check_executable(test::scenario_from(small("parallel: {tensor: 2}\n"), {"model.attention=standard"}));
    FAIL("tensor parallelism ran");
  } catch (const plan::InputError& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("parallel.tensor") && !Catch::Contains("latent"));
  }
  const plan::Scenario mtp =
      test::scenario_from("model: {preset: transformer, layers: 2, hidden: 64, heads: 4, mlp: swiglu, mtp_layers: 1}\nhardware: ideal\n");
  try {
    plan::check_executable(mtp);
    FAIL("multi-token prediction ran");
  } catch (const plan::InputError& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("model.mtp_layers") || Catch::Contains("multi-token prediction"));
  }
  // Dropout above 0 is predict-only: a recomputed forward would draw other masks.
  const plan::Scenario dropped = test::scenario_from("model: {preset: transformer, layers: 2, hidden: 64, heads: 4, dropout: 0.1}\nhardware: ideal\n");
  CHECK_THROWS_WITH(plan::check_executable(dropped), Catch::Contains("model.dropout") && Catch::Contains("predict-only"));
  CHECK_NOTHROW(plan::check_executable(test::scenario_from("model: {preset: transformer, layers: 2, hidden: 64, heads: 4, dropout: 0}\nhardware: ideal\n")));
  CHECK_THAT(test::parse_error("model: {preset: transformer, dropout: 1}\nhardware: ideal\n"), Catch::Contains("'dropout' is a rate"));
  // Flash attention is predict-only at the key that asked for it (a --set's, when one did).
  plan::YamlDocument doc = plan::YamlDocument::from_text("model: {preset: transformer, layers: 2, hidden: 64, heads: 4}\nhardware: ideal\n", "t.yaml");
  doc.apply_override("model.attention=flash");
  const plan::Scenario flash = plan::parse_scenario(doc);
  CHECK_THROWS_WITH(plan::check_executable(flash), Catch::StartsWith("--set model.attention=flash: flash attention"));
}

TEST_CASE("mla: DeepSeek-V2-Lite's config (no query rank) and the fields it refuses", "[plan][mla][hf]") {
  // DeepSeek-V2-Lite's shape (deepseek-ai/DeepSeek-Coder-V2-Lite-Base config.json): q_lora_rank
  // null, 27 blocks, the first dense.
  const std::string lite =
      R"({"architectures": ["DeepseekV2ForCausalLM"], "hidden_size": 2048, "intermediate_size": 10944, "moe_intermediate_size": 1408,
          "num_hidden_layers": 27, "num_attention_heads": 16, "num_key_value_heads": 16, "n_shared_experts": 2, "n_routed_experts": 64,
          "num_experts_per_tok": 6, "first_k_dense_replace": 1, "moe_layer_freq": 1, "kv_lora_rank": 512, "q_lora_rank": null,
          "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "v_head_dim": 128, "vocab_size": 102400, "hidden_act": "silu",
          "topk_method": "greedy", "n_group": 1, "topk_group": 1, "scoring_func": "softmax", "norm_topk_prob": false,
          "routed_scaling_factor": 1.0, "tie_word_embeddings": false})";
  {
    const test::TempFile c("parallax-mla-test.json", lite);
    const plan::HfModel m = plan::read_hf_config(c.path, 4096);
    CHECK(m.shape.form.mla.q_lora_rank == 0);
    CHECK(m.shape.first_dense == 1);
    CHECK(m.shape.moe.shared == 2);
    CHECK(m.shape.mtp_layers == 0);
    const auto s = test::scenario_from("model: {hf_config: " + c.path + ", seq_len: 4096}\nhardware: ideal\n");
    CHECK(s.layers[1].params[0].name == "layers.0.self_attn.q_proj.weight");
    CHECK(s.layers[1].params[0].shape == std::vector<int64_t>{16 * 192, 2048});
    // DeepSeek's 15.7B total for V2-Lite (its model card); within 1%.
    int64_t n = 0;
    for (const auto& l : s.layers) n += l.param_count();
    CHECK(static_cast<double>(n) == Approx(15.7e9).epsilon(0.01));
  }
  {
    std::string every_other = lite;
    every_other.replace(every_other.find("\"moe_layer_freq\": 1"), 19, "\"moe_layer_freq\": 2");
    const test::TempFile c("parallax-mla-test.json", every_other);
    CHECK_THAT(test::parse_error("model: {hf_config: " + c.path + ", seq_len: 8}\nhardware: ideal\n"),
               Catch::Contains("moe_layer_freq") && Catch::Contains("parallax-mla-test.json:"));
  }
}

TEST_CASE("mla: a DeepSeek-V3 step on 1,024 H100s plans and simulates", "[sim][mla]") {
  const plan::Plan p = test::plan_from("model: {hf_config: " + kDeepSeekV3 +
                                       ", seq_len: 4096}\n"
                                       "framework: megatron\n"
                                       "data: {batch_size: 16}\n"
                                       "parallel: {data: 64, pipeline: 8, virtual: 4, tensor: 2, expert: 64, expert_tensor: 1, chunks: 16,\n"
                                       "           schedule: interleaved-1f1b, precision: fp8, shard: optimizer, sequence_parallel: true}\n"
                                       "hardware: h100-nvlink-ib\n");
  CHECK(p.stages.size() == 32);
  CHECK(p.layers().size() == 64);
  // Exported as NVIDIA's DeepSeek-V3 recipe lays it out: with parallel.partition_len [2, ..., 2]
  // over embed, 61 blocks, mtp.0 and head, Megatron-LM's "Et|(tt|)*30mL".
  std::string layout = "'Et";
  for (int i = 0; i < 30; ++i) layout += "|tt";
  layout += "|mL'";
  std::string even = "[2";
  for (int i = 1; i < 32; ++i) even += ", 2";
  const plan::TrainerExport x = plan::export_megatron(test::plan_from(
      "model: {hf_config: " + kDeepSeekV3 + ", seq_len: 4096}\nframework: megatron\ndata: {batch_size: 16}\n"
      "parallel: {data: 64, pipeline: 8, virtual: 4, tensor: 2, expert: 64, expert_tensor: 1, chunks: 16, schedule: interleaved-1f1b,\n"
      "           precision: fp8, shard: optimizer, sequence_parallel: true, partition_len: " + even + "]}\nhardware: h100-nvlink-ib\n"));
  const auto found = std::find_if(x.arguments.begin(), x.arguments.end(), [](const auto& a) { return a.first == "--pipeline-model-parallel-layout"; });
  REQUIRE(found != x.arguments.end());
  CHECK(found->second == layout);
}

TEST_CASE("mla: recomputing the up projections drops Q, K and V, recomputing mlp the dense MLP's tensors", "[plan][mla]") {
  const std::string selective = "parallel: {precision: bf16, activation_checkpointing: selective, recompute_modules: [";
  auto on_h100 = [&](const std::string& modules) { return test::plan_from(kSmall + selective + modules + "]}\nhardware: h100-nvlink-ib\n"); };
  const plan::Plan none = on_h100("core_attn"), up = on_h100("core_attn, mla_up_proj"), mlp = on_h100("core_attn, mlp");
  const plan::Layer& b = none.layers()[1];
  const double e = 2, s = 32;
  auto kept = [&](const plan::Plan& p) { return plan::full_activation_bytes(p.layers()[1], p.scenario.parallel); };
  CHECK(kept(none) - kept(up) == s * e * (48 + 48 + 24));  // Q (4 x 12), K (4 x 12), V (4 x 6)
  CHECK(kept(none) - kept(mlp) == s * e * 3 * 128);         // SwiGLU's gate and up, the down projection's input
  // Each costs its forward again in backward, and only that.
  const auto cost = [&](const plan::Plan& p) { return plan::estimate_layer_cost(b, p.scenario.hardware, p.scenario.parallel, 1); };
  CHECK(cost(up).recompute > cost(none).recompute);
  CHECK(cost(mlp).recompute > cost(none).recompute);
  CHECK(cost(up).forward == cost(none).forward);
  CHECK_THAT(test::parse_error("model: {preset: transformer, layers: 2, hidden: 64, heads: 4}\n"
                               "parallel: {activation_checkpointing: selective, recompute_modules: [mla_up_proj]}\nhardware: ideal\n"),
             Catch::Contains("mla_up_proj") && Catch::Contains("model.mla"));
}

TEST_CASE("mla: DeepSeek's group-limited routing must split the experts as transformers and Megatron-core do", "[plan][mla][hf]") {
  // n_group equal groups of the experts, a token's top-k among the experts of its topk_group best
  // groups: 256 experts do not split into 7 groups, 8 groups have no 9 best, and 8 experts a token
  // do not fit in one group of 32 (Megatron-core asserts the first, group_limited_topk fails the others).
  nlohmann::json config = nlohmann::json::parse(std::ifstream(kDeepSeekV3));
  const auto dir = test::temp_path("parallax_mla_groups");
  std::filesystem::create_directories(dir);
  const auto error_with = [&](const std::string& key, int value) {
    nlohmann::json c = config;
    c[key] = value;
    const std::string path = (dir / (key + std::to_string(value) + ".json")).string();
    std::ofstream(path) << c.dump(1);
    try {
      test::plan_from("model: {hf_config: " + path + ", seq_len: 4096}\nhardware: h100-nvlink-ib\n");
    } catch (const plan::InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK_THAT(error_with("n_group", 7), Catch::Contains("n_group 7 does not divide the 256 experts into equal groups"));
  CHECK_THAT(error_with("topk_group", 9), Catch::Contains("topk_group 9 is not a count of the 8 groups"));
  CHECK_THAT(error_with("topk_group", 0), Catch::Contains("topk_group 0 is not a count of the 8 groups"));
  CHECK_THAT(error_with("n_group", 256), Catch::Contains("num_experts_per_tok 8 is more than the 4 experts of topk_group groups"));
  CHECK(error_with("topk_group", 4).empty());  // its own
  std::filesystem::remove_all(dir);
}
