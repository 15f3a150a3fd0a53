// What a plan says about its trainer: the framework key, fp8 as Megatron-core runs Transformer
// Engine, and the export to Megatron-LM's arguments, checked against that trainer's real option
// names.
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "plan/cost.hpp"
#include "plan/executable.hpp"
#include "plan/memory.hpp"
#include "plan/search_defaults.hpp"
#include "plan/trainer_export.hpp"
#include "plan/trainer_rules.hpp"
#include "tests/test_util.hpp"

using namespace parallax;

namespace {
const std::string kLlama =
    "model: {preset: transformer, layers: 4, hidden: 4096, heads: 32, kv_heads: 8, ffn: 14336, mlp: swiglu, norm: rmsnorm, "
    "positions: rope, bias: false, seq_len: 4096, vocab: 128256}\n"
    "data: {batch_size: 8}\n"
    "optimizer: {kind: adamw, lr: 0.0003, weight_decay: 0.1}\n"
    "hardware: h100-nvlink-ib\n";
}  // namespace

TEST_CASE("plan::framework: a trainer's semantics at once, what the scenario sets winning", "[plan]") {
  const auto m = test::scenario_from("framework: megatron\nparallel: {precision: bf16}\n" + kLlama);
  CHECK(m.parallel.p2p == plan::P2p::megatron);
  CHECK(m.parallel.master_weights);
  CHECK(m.layers[1].shape.flash_attention);
  CHECK(m.layers.back().shape.loss == plan::Loss::megatron);
  CHECK(m.framework_set == std::vector<std::string>{"model.attention=flash", "model.loss=megatron", "parallel.p2p=megatron",
                                                    "parallel.schedule=1f1b", "parallel.master_weights=true", "parallel.rank_order=tp-dp-pp",
                                                    "parallel.overlap_grad_reduce=false"});
  // Set in the file or by --set: the scenario's value, and not listed as the framework's.
  const auto own = test::scenario_from("framework: megatron\nparallel: {p2p: pytorch, precision: bf16}\n" + kLlama,
                                       {"model.attention=standard", "model.loss=eager"});
  CHECK(own.parallel.p2p == plan::P2p::pytorch);
  CHECK_FALSE(own.layers[1].shape.flash_attention);
  CHECK(own.layers.back().shape.loss == plan::Loss::eager);
  CHECK(own.framework_set ==
        std::vector<std::string>{"parallel.schedule=1f1b", "parallel.master_weights=true", "parallel.rank_order=tp-dp-pp",
                                 "parallel.overlap_grad_reduce=false"});
  // At fp32 there is nothing for master weights to keep: the framework leaves them off.
  const auto fp32 = test::scenario_from("framework: megatron\n" + kLlama);
  CHECK_FALSE(fp32.parallel.master_weights);
  CHECK(fp32.framework_set == std::vector<std::string>{"model.attention=flash", "model.loss=megatron", "parallel.p2p=megatron",
                                                       "parallel.schedule=1f1b", "parallel.rank_order=tp-dp-pp",
                                                       "parallel.overlap_grad_reduce=false"});
  // Whose ring attention, where there is context parallelism to run it.
  const auto cp = test::scenario_from("framework: megatron\n" + kLlama, {"parallel.context=2"});
  CHECK(cp.parallel.context_attention == plan::ContextAttention::megatron);
  CHECK(std::count(cp.framework_set.begin(), cp.framework_set.end(), "parallel.context_attention=megatron") == 1);
  // The trainers schedule 1F1B by default, and without a pipeline run each micro-batch's forward and
  // backward in turn: GPipe's order (every micro-batch's activations held) had been their default.
  CHECK(m.parallel.schedule == schedule::ScheduleKind::one_f_one_b);
  const auto gpipe = test::scenario_from("framework: megatron\nparallel: {precision: bf16, chunks: 4, schedule: gpipe}\n" + kLlama);
  CHECK(gpipe.parallel.schedule == schedule::ScheduleKind::gpipe);
  const auto refusal = plan::trainer_refusal(gpipe, plan::Framework::megatron);
  REQUIRE(refusal);
  CHECK(refusal->key == "parallel.schedule");
  CHECK_THAT(refusal->why, Catch::Contains("without a pipeline runs each micro-batch's forward and backward in turn"));
  CHECK(!plan::trainer_refusal(test::scenario_from("framework: megatron\nparallel: {precision: bf16, chunks: 4}\n" + kLlama),
                               plan::Framework::megatron));
  // With --overlap-grad-reduce, Megatron-core's DDP buckets are listed as the framework's.
  const auto overlapped = test::scenario_from("framework: megatron\nparallel: {precision: bf16, overlap_grad_reduce: true}\n" + kLlama);
  CHECK(overlapped.parallel.ddp_buckets == plan::DdpBuckets::megatron);
  CHECK(std::count(overlapped.framework_set.begin(), overlapped.framework_set.end(), "parallel.ddp_buckets=megatron") == 1);
  CHECK(m.parallel.ddp_buckets == plan::DdpBuckets::megatron);  // kept, though not listed, for a tuner turning overlap on
  // pytorch is today's semantics: nothing set.
  const auto torch = test::scenario_from(kLlama);
  CHECK(torch.framework == plan::Framework::pytorch);
  CHECK(torch.framework_set.empty());
  CHECK(torch.parallel.ddp_buckets == plan::DdpBuckets::pytorch);
  CHECK_FALSE(torch.parallel.master_weights);
  CHECK_THAT(test::parse_error("framework: jax\n" + kLlama), Catch::Contains("pytorch | megatron | torchtitan | deepspeed"));
}

TEST_CASE("plan::fp8: the blocks' linear GEMMs at the fp8 peak, attention and the head in bf16", "[plan]") {
  const auto s = test::scenario_from(kLlama);
  auto hw = s.hardware;
  const auto& block = s.layers[1];
  const auto& head = s.layers.back();
  // With H100's GEMM tables, fp8's blocks run faster than bf16's, and its head (bf16) alike.
  CHECK(plan::estimate_layer_cost(block, hw, plan::Precision::fp8, 1).forward < plan::estimate_layer_cost(block, hw, plan::Precision::bf16, 1).forward);
  CHECK(plan::estimate_layer_cost(head, hw, plan::Precision::fp8, 1).forward == plan::estimate_layer_cost(head, hw, plan::Precision::bf16, 1).forward);
  // On the roofline (the profile without its tables) the split is exact. H100's datasheet peaks,
  // dense: 1,979 fp8 and 989 bf16 TFLOP/s. A 4096-token sample's block is compute-bound, so its
  // forward is its FLOPs over the peaks, plus the call.
  hw.device.compute.reset();
  const double eff = hw.device.efficiency, overhead = hw.device.layer_overhead_us;
  const double attention = 4.0 * 4096 * 4096 * 4096, linear = block.flops_per_sample - attention;
  const auto fp8 = plan::estimate_layer_cost(block, hw, plan::Precision::fp8, 1);
  CHECK(fp8.forward.to_us() - overhead == Approx((linear / (1979 * eff) + attention / (989 * eff)) / 1e6));
  const auto bf16 = plan::estimate_layer_cost(block, hw, plan::Precision::bf16, 1);
  CHECK(bf16.forward.to_us() - overhead == Approx(block.flops_per_sample / (989 * eff) / 1e6));
  // The output layer stays in bf16 (Megatron-core applies fp8 to the transformer blocks only).
  CHECK(plan::estimate_layer_cost(head, hw, plan::Precision::fp8, 1).forward == plan::estimate_layer_cost(head, hw, plan::Precision::bf16, 1).forward);
  // Memory: with master weights, the bf16 weight and TE's fp8 copy and transpose (2 + 1 + 1 bytes).
  const auto m = test::scenario_from(kLlama, {"parallel.precision=fp8", "parallel.master_weights=true"});
  CHECK(plan::bytes_per_parameter(m).parameter == 4);
  CHECK(plan::bytes_per_parameter(test::scenario_from(kLlama, {"parallel.precision=bf16", "parallel.master_weights=true"})).parameter == 2);
  // On a plan: the copies of the blocks' weights only. The embedding (VocabParallelEmbedding) and the
  // output layer (ColumnParallelLinear) are not TE modules: 4 blocks of 4096 x (2 x 4096 + 2 x 1024 +
  // 3 x 14336) weights and two norms each; the embedding and output layer, 128,256 x 4,096 each, and
  // the final norm none.
  const auto fp8_plan = test::plan_from(kLlama, {"parallel.precision=fp8", "parallel.master_weights=true"});
  const auto bf16_plan = test::plan_from(kLlama, {"parallel.precision=bf16", "parallel.master_weights=true"});
  const double per_block = 4096.0 * (2 * 4096 + 2 * 1024 + 3 * 14336) + 2 * 4096;
  CHECK(fp8_plan.ranks[0].memory.params - bf16_plan.ranks[0].memory.params == Approx(2 * 4 * per_block));
  // The linear layers keep their inputs as fp8 casts: QKV's, the output projection's, the MLP's
  // (h each) and the down projection's (ffn), 1 byte an element in place of 2: s(3h + ffn) bytes fewer.
  plan::ParallelSpec at_bf16, at_fp8;
  at_bf16.precision = plan::Precision::bf16;
  at_fp8.precision = plan::Precision::fp8;
  const double seq = 4096, h = 4096, ffn = 14336;
  CHECK(plan::full_activation_bytes(block, at_bf16) - plan::full_activation_bytes(block, at_fp8) == Approx(seq * (3 * h + ffn)));
  // NeMo's and Megatron-LM's bf16 gradient reduction: 2 bytes a gradient, and half the bytes a bucket reduces.
  const auto bf16_grads = test::plan_from(kLlama, {"parallel.precision=bf16", "parallel.master_weights=true", "parallel.data=2",
                                                   "parallel.grad_reduce_in_bf16=true"});
  const auto fp32_grads = test::plan_from(kLlama, {"parallel.precision=bf16", "parallel.master_weights=true", "parallel.data=2"});
  CHECK(plan::bytes_per_parameter(bf16_grads.scenario).gradient == 2);
  CHECK(bf16_grads.ranks[0].memory.gradients * 2 == fp32_grads.ranks[0].memory.gradients);
  int64_t reduced_bf16 = 0, reduced_fp32 = 0;
  for (const auto& b : bf16_grads.stages[0].buckets) reduced_bf16 += b.bytes;
  for (const auto& b : fp32_grads.stages[0].buckets) reduced_fp32 += b.bytes;
  CHECK(reduced_bf16 * 2 == reduced_fp32);
  CHECK_THAT(test::parse_error(kLlama, {"parallel.grad_reduce_in_bf16=true"}), Catch::Contains("needs master_weights: true"));
  // A device without fp8 is refused; the executor does not run fp8 this round.
  CHECK_THAT(test::parse_error("model: {preset: mlp}\nparallel: {precision: fp8}\nhardware: a100-nvlink-ib\n"), Catch::Contains("has no fp8 peak"));
  CHECK_THROWS_WITH(plan::check_executable(test::scenario_from(kLlama, {"parallel.precision=fp8"})), Catch::Contains("fp8") && Catch::Contains("predict-only"));
}

namespace {
// Megatron-LM's option names that export_megatron may print, copied from the parser that
// megatron/training/arguments.py builds (NVIDIA/Megatron-LM at d98e8a64, 2026-08-22: its literal
// add_argument calls and the options it generates from TransformerConfig's fields; the choices
// printed are among that parser's: --attention-backend fused|unfused, --normalization
// LayerNorm|RMSNorm, --fp8-format hybrid, --recompute-granularity full|selective, --recompute-method
// uniform|block, --optimizer adam|sgd, --tokenizer-type NullTokenizer). A name the parser lacks
// would make the exported command fail at launch.
const std::set<std::string> kMegatronOptions = {
    "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size", "--num-layers-per-virtual-pipeline-stage",
    "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers", "--sequence-parallel", "--micro-batch-size",
    "--global-batch-size", "--recompute-granularity", "--recompute-method", "--recompute-num-layers", "--use-distributed-optimizer", "--num-distributed-optimizer-instances", "--grad-reduce-in-bf16",
    "--overlap-grad-reduce", "--overlap-param-gather", "--accumulate-allreduce-grads-in-fp32",
    "--bf16", "--fp16", "--fp8-format", "--num-layers", "--hidden-size", "--ffn-hidden-size", "--num-attention-heads", "--seq-length",
    "--max-position-embeddings", "--group-query-attention", "--num-query-groups", "--swiglu", "--squared-relu", "--normalization",
    "--position-embedding-type", "--untie-embeddings-and-output-weights", "--disable-bias-linear", "--add-qkv-bias",
    "--attention-dropout", "--hidden-dropout", "--attention-backend", "--tokenizer-type", "--vocab-size", "--mock-data", "--optimizer",
    "--sgd-momentum", "--lr", "--weight-decay", "--train-iters", "--log-interval", "--eval-iters",
    // ModelParallelConfig's expert_tensor_parallel_size and TransformerConfig's fp8_recipe, by the
    // parser's ArgumentGroupFactory (arguments.py).
    "--expert-tensor-parallel-size", "--fp8-recipe",
    // What a config defines that changes no cost: TransformerConfig's layernorm_epsilon
    // (--norm-epsilon), layernorm_zero_centered_gamma (--apply-layernorm-1p) and router fields;
    // --openai-gelu and --rotary-percent in _add_network_size_args.
    "--norm-epsilon", "--apply-layernorm-1p", "--openai-gelu", "--rotary-percent", "--moe-router-score-function",
    "--moe-router-pre-softmax", "--moe-router-enable-expert-bias", "--moe-router-num-groups", "--moe-router-group-topk",
    "--moe-router-topk-scaling-factor",
    // The balancing loss (_add_moe_args: --moe-router-load-balancing-type, --moe-aux-loss-coeff).
    "--moe-router-load-balancing-type", "--moe-aux-loss-coeff",
    // Megatron-core's MoE options (the same parser; --overlap-moe-expert-parallel-comm since core 0.14).
    "--num-experts", "--moe-router-topk", "--moe-ffn-hidden-size", "--moe-layer-freq", "--expert-model-parallel-size",
    "--moe-token-dispatcher-type", "--moe-grouped-gemm", "--moe-shared-expert-intermediate-size", "--moe-expert-capacity-factor",
    "--overlap-moe-expert-parallel-comm", "--recompute-modules",
    // The flex dispatcher's backend, as Megatron-LM's MoE docs and the ModelZoo's scripts pass it.
    "--moe-flex-dispatcher-backend",
    // Latent attention (_add_mla_args; --multi-latent-attention from TransformerConfig), multi-token
    // prediction (TransformerConfig's mtp_num_layers) and the explicit pipeline layout (line 3103).
    "--multi-latent-attention", "--q-lora-rank", "--kv-lora-rank", "--qk-head-dim", "--qk-pos-emb-head-dim", "--v-head-dim",
    "--mtp-num-layers", "--pipeline-model-parallel-layout",
    // Heads wider than hidden / heads and each head's query and key normed (Qwen3): TransformerConfig's
    // kv_channels and qk_layernorm.
    "--kv-channels", "--qk-layernorm",
    // Sliding-window attention: TransformerConfig's window_size and window_attn_skip_freq (their
    // add_argument calls, lines 2384 and 2387).
    "--window-size", "--window-attn-skip-freq",
    // Rotary positions as the model's config encodes them (the same commit: --rotary-base,
    // --use-rope-scaling and --rope-scaling-factor in _add_network_size_args, lines 2418-2426;
    // --rope-type in _add_training_args, line 2906; --rotary-scaling-factor, --mscale and
    // --mscale-all-dim in _add_mla_args, lines 3558-3562).
    "--rotary-base", "--use-rope-scaling", "--rope-scaling-factor", "--rope-type", "--rotary-scaling-factor", "--mscale",
    "--mscale-all-dim",
    // YaRN for attention other than latent (_add_network_size_args, line 2400; argument_utils.py's
    // _apply_yarn_config_from_args) and the tp-pp-dp rank order (DistributedInitConfig's
    // use_tp_pp_dp_mapping, training/config/common_config.py line 105; initialize.py line 395).
    "--yarn-original-max-position-embeddings", "--use-tp-pp-dp-mapping"};
// torchtitan's job config fields, section.field, as torchtitan/config/job_config.py defines them
// (pytorch/torchtitan at 238fa995, 2026-02-23, the same as release v0.2.2: the last with TOML configs).
const std::set<std::string> kTorchtitanFields = {
    "model.name", "model.flavor", "model.converters", "parallelism.data_parallel_replicate_degree",
    "parallelism.data_parallel_shard_degree", "parallelism.fsdp_reshard_after_forward", "parallelism.tensor_parallel_degree", "parallelism.context_parallel_degree", "parallelism.pipeline_parallel_degree",
    "parallelism.pipeline_parallel_schedule", "parallelism.pipeline_parallel_schedule_csv", "parallelism.pipeline_parallel_microbatch_size",
    "parallelism.module_fqns_per_model_part", "quantize.linear.float8.recipe_name", "training.local_batch_size", "training.global_batch_size", "training.seq_len",
    "training.steps", "training.mixed_precision_param", "activation_checkpoint.mode", "activation_checkpoint.selective_ac_option",
    "optimizer.name", "optimizer.lr", "optimizer.weight_decay", "compile.enable", "compile.components",
    "quantize.linear.float8.enable_fsdp_float8_all_gather", "quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp",
    "quantize.linear.float8.filter_fqns", "parallelism.context_parallel_rotate_method"};

// Megatron-LM builds its embedding and output layer for the vocabulary padded with dummy tokens to
// a multiple of 128 x tensor (vocab_size_with_padding); torchtitan keeps the model's.
TEST_CASE("plan::framework: Megatron-LM's padded vocabulary, at each tensor degree", "[plan]") {
  const std::string bf16 = "parallel: {precision: bf16, tensor: 8}\n";
  const plan::Plan megatron = test::plan_from("framework: megatron\n" + bf16 + kLlama);
  const plan::Plan titan = test::plan_from("framework: torchtitan\n" + bf16 + kLlama);
  // By hand: 128256 / (128 x 8) = 125.25, so 126 x 1024 = 129024, 768 dummy rows.
  CHECK(megatron.layers().front().shape.vocab == 129024);
  CHECK(megatron.layers().back().shape.vocab == 129024);
  CHECK(megatron.unpadded_vocab == 128256);
  CHECK(titan.layers().back().shape.vocab == 128256);
  CHECK(titan.unpadded_vocab == 0);
  const auto params = [](const plan::Plan& p) {
    int64_t n = 0;
    for (const auto& l : p.layers()) n += l.param_count();
    return n;
  };
  CHECK(params(megatron) - params(titan) == 2 * 768 * 4096);  // the token table's rows and the output projection's (untied)
  const plan::Layer &head = megatron.layers().back(), &titan_head = titan.layers().back();
  CHECK(head.flops_per_sample - titan_head.flops_per_sample == Approx(2.0 * 4096 * 4096 * 768));  // seq x hidden x the dummy logits
  CHECK(head.activation_elems_per_sample - titan_head.activation_elems_per_sample == Approx(4096.0 * 768));
  // At tensor 4: 128256 / 512 = 250.5, so 251 x 512 = 128512; at tensor 1 a multiple of 128 already.
  CHECK(test::plan_from("framework: megatron\n" + bf16 + kLlama, {"parallel.tensor=4"}).layers().back().shape.vocab == 128512);
  const plan::Plan one = test::plan_from("framework: megatron\n" + bf16 + kLlama, {"parallel.tensor=1"});
  CHECK(one.layers().back().shape.vocab == 128256);
  CHECK(one.unpadded_vocab == 0);
  // Megatron-LM is given the model's own (it pads it itself), and the scenario keeps it for other degrees.
  const auto args = plan::export_megatron(megatron).arguments;
  CHECK(std::find(args.begin(), args.end(), std::pair<std::string, std::string>{"--vocab-size", "128256"}) != args.end());
  CHECK(megatron.scenario.model_vocab == 128256);
}

std::map<std::string, std::string> as_map(const plan::TrainerExport& e) {
  return {e.arguments.begin(), e.arguments.end()};
}

// The message an export of `sets` exits 2 with, or "" when it exports.
template <typename Export>
std::string export_error(const Export& exported, const std::vector<std::string>& sets) {
  try {
    exported(sets);
  } catch (const plan::InputError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST_CASE("plan::export: DeepSeek-V3's latent attention, MTP and layout as Megatron-LM's arguments", "[plan]") {
  const std::string source = std::string(PARALLAX_SOURCE_DIR) + "/scenarios/moe-671b-2048xH100.yaml";
  const auto e = plan::export_megatron(plan::resolve_plan(
      plan::load_scenario(source, {"parallel.schedule=interleaved-1f1b", "parallel.chunks=128", "data.batch_size=128"})));
  for (const auto& [name, value] : e.arguments) {
    INFO(name);
    CHECK(kMegatronOptions.count(name) == 1);
  }
  const auto a = as_map(e);
  CHECK(a.at("--num-layers") == "61");
  CHECK(a.at("--kv-lora-rank") == "512");
  CHECK(a.count("--qk-layernorm") == 1);  // Megatron-core's MLA norms its latents only with it
  CHECK(a.at("--mtp-num-layers") == "1");
  CHECK(a.count("--pipeline-model-parallel-layout") == 1);
  // Its config's YaRN scaling (factor 40, mscale 1.0 and 1.0), and its base, Megatron-LM's default.
  CHECK(a.at("--rope-type") == "yarn");
  CHECK(a.at("--rotary-scaling-factor") == "40");
  CHECK(a.at("--mscale") == "1");
  CHECK(a.at("--mscale-all-dim") == "1");
  CHECK(a.count("--rotary-base") == 0);
  // Its router as its config defines it, in the arguments NVIDIA's own DeepSeek scripts pass
  // (examples/post_training/modelopt/conf/deepseek-ai/DeepSeek-R1.sh): sigmoid scores, the
  // balancing bias, 4 of 8 groups, weights scaled by 2.5; and its RMSNorm's epsilon 1e-6.
  CHECK(a.at("--moe-router-score-function") == "sigmoid");
  CHECK(a.count("--moe-router-enable-expert-bias") == 1);
  CHECK(a.at("--moe-router-num-groups") == "8");
  CHECK(a.at("--moe-router-group-topk") == "4");
  CHECK(a.at("--moe-router-topk-scaling-factor") == "2.5");
  CHECK(a.count("--moe-router-pre-softmax") == 0);  // sigmoid scores are renormalized over the top-k
  CHECK(a.at("--norm-epsilon") == "1e-06");
  // Its balancing loss per sequence, at its config's aux_loss_alpha (Megatron-core's default
  // coefficient is 0: none).
  CHECK(a.at("--moe-router-load-balancing-type") == "seq_aux_loss");
  CHECK(a.at("--moe-aux-loss-coeff") == "0.001");
}

TEST_CASE("plan::export: what a config defines that changes no cost goes to Megatron-LM too", "[plan]") {
  auto exported = [](const std::string& model, int seq) {
    return as_map(plan::export_megatron(test::plan_from("model: {hf_config: " + std::string(PARALLAX_SOURCE_DIR) + "/scenarios/models/" +
                                                        model + ", seq_len: " + std::to_string(seq) + "}\nhardware: ideal\n")));
  };
  // Nemotron-4: LayerNorm1P and half of each head rotated (its partial_rotary_factor 0.5).
  const auto nemotron = exported("nemotron-4-15b.json", 4096);
  CHECK(nemotron.count("--apply-layernorm-1p") == 1);
  CHECK(nemotron.at("--rotary-percent") == "0.5");
  // GPT-2's gelu_new is GELU's tanh approximation, Megatron-LM's --openai-gelu.
  CHECK(exported("gpt2.json", 1024).count("--openai-gelu") == 1);
  // GPT-2's table of 1,024 learned positions, whatever the job's sequence.
  CHECK(exported("gpt2.json", 128).at("--max-position-embeddings") == "1024");
  // Qwen2.5's RMSNorm epsilon 1e-6; Llama 3.1's 1e-5 is Megatron-LM's default.
  CHECK(exported("qwen2.5-7b.json", 4096).at("--norm-epsilon") == "1e-06");
  CHECK(exported("llama-3.1-8b.json", 4096).count("--norm-epsilon") == 0);
  // Mixtral renormalizes its top-2 weights: Megatron-core's default, no --moe-router-pre-softmax.
  const auto mixtral = exported("mixtral-8x7b.json", 4096);
  CHECK(mixtral.count("--moe-router-pre-softmax") == 0);
  CHECK(mixtral.count("--moe-router-score-function") == 0);
}

TEST_CASE("plan::export: Megatron-LM's arguments, each one the trainer's, for every form and layout", "[plan]") {
  const std::string source = std::string(PARALLAX_SOURCE_DIR) + "/scenarios/llama-3.1-70b-64xH100.yaml";
  const auto p = plan::resolve_plan(plan::load_scenario(source, {}));
  const auto e = plan::export_megatron(p);
  for (const auto& [name, value] : e.arguments) {
    INFO(name);
    CHECK(kMegatronOptions.count(name) == 1);
  }
  const auto a = as_map(e);
  CHECK(a.at("--tensor-model-parallel-size") == "8");
  CHECK(a.at("--pipeline-model-parallel-size") == "4");
  CHECK(a.at("--num-layers-per-virtual-pipeline-stage") == "4");  // 80 blocks over 4 x 5 stages
  CHECK(a.at("--global-batch-size") == "128");
  CHECK(a.at("--micro-batch-size") == "1");
  CHECK(a.at("--num-query-groups") == "8");
  CHECK(a.at("--normalization") == "RMSNorm");
  CHECK(a.count("--swiglu") == 1);
  // Llama 3.1's rotary base and its llama3 scaling (factor 8, Megatron-LM's default factor).
  CHECK(a.at("--rotary-base") == "500000");
  CHECK(a.count("--use-rope-scaling") == 1);
  CHECK(a.count("--rope-scaling-factor") == 0);
  CHECK(a.count("--use-distributed-optimizer") == 1);
  CHECK(a.count("--overlap-grad-reduce") == 0);  // Megatron-LM's default, as the scenario's framework: megatron
  CHECK(a.at("--attention-dropout") == "0");  // Llama trains without dropout; Megatron-LM's default is 0.1
  CHECK(a.at("--hidden-dropout") == "0");
  const auto dropped = as_map(plan::export_megatron(plan::resolve_plan(plan::load_scenario(source, {"model.dropout=0.1"}))));
  CHECK(dropped.at("--attention-dropout") == "0.1");
  CHECK(dropped.at("--hidden-dropout") == "0.1");
  CHECK(e.text.find("torchrun --nproc-per-node 8 --nnodes 8") != std::string::npos);
  // Other forms and layouts print only the trainer's names too.
  for (const std::vector<std::string>& sets :
       {std::vector<std::string>{"parallel.precision=fp8", "parallel.activation_checkpointing=selective"},
        {"parallel.activation_checkpointing=layer", "model.mlp=relu2", "model.qkv_bias=true"},
        {"parallel.precision=fp16", "parallel.overlap_grad_reduce=true", "parallel.overlap_param_gather=true"},
        {"parallel.virtual=1", "parallel.schedule=1f1b", "parallel.partition_len=[21, 20, 20, 21]", "parallel.activation_checkpointing=stage"},
        {"model.mlp=gelu", "model.norm=layernorm", "model.positions=learned", "model.tie_embeddings=true", "model.bias=true",
         "parallel.virtual=1", "parallel.schedule=1f1b", "parallel.partition_len=[21, 20, 20, 21]", "model.kv_heads=64"}}) {
    const auto more = plan::export_megatron(plan::resolve_plan(plan::load_scenario(source, sets)));
    for (const auto& [name, value] : more.arguments) {
      INFO(name);
      CHECK(kMegatronOptions.count(name) == 1);
    }
  }
  // Qwen3's attention: 128-wide heads and query/key norms.
  const auto qwen3 = as_map(plan::export_megatron(plan::resolve_plan(plan::load_scenario(source, {"model.head_dim=256", "model.qk_norm=true"}))));
  for (const auto& [name, value] : qwen3) CHECK(kMegatronOptions.count(name) == 1);
  CHECK(qwen3.at("--kv-channels") == "256");
  CHECK(qwen3.count("--qk-layernorm") == 1);
  // A sliding window of 4,096 tokens (itself and 4,095 to its left) in all but every fourth block.
  const auto window = as_map(plan::export_megatron(plan::resolve_plan(
      plan::load_scenario(source, {"model.sliding_window=4096", "model.full_attention_every=4"}))));
  for (const auto& [name, value] : window) CHECK(kMegatronOptions.count(name) == 1);
  CHECK(window.at("--window-size") == "4095,0");
  CHECK(window.at("--window-attn-skip-freq") == "4");
  // fp16 gradients stay fp16 in Megatron-LM unless told to accumulate in fp32, as the plan keeps them.
  const auto fp16 = as_map(plan::export_megatron(plan::resolve_plan(plan::load_scenario(source, {"parallel.precision=fp16", "parallel.overlap_grad_reduce=true"}))));
  CHECK(fp16.count("--accumulate-allreduce-grads-in-fp32") == 1);
  CHECK(fp16.count("--overlap-grad-reduce") == 1);
  const auto context = as_map(plan::export_megatron(plan::resolve_plan(plan::load_scenario(source, {"parallel.data=1", "parallel.context=2"}))));
  CHECK(context.at("--context-parallel-size") == "2");
  CHECK(context.at("--global-batch-size") == "64");  // context parallelism splits sequences, not the batch
  const auto uneven = as_map(plan::export_megatron(plan::resolve_plan(
      plan::load_scenario(source, {"parallel.virtual=1", "parallel.schedule=1f1b", "parallel.partition_len=[19, 22, 22, 19]"}))));
  CHECK(uneven.at("--decoder-first-pipeline-num-layers") == "18");
  CHECK(uneven.at("--decoder-last-pipeline-num-layers") == "18");
  // Any other split goes as Megatron-LM's explicit layout, a letter a layer, '|' between stages.
  const auto t = [](int n) { return std::string(static_cast<size_t>(n), 't'); };
  const auto ragged = as_map(plan::export_megatron(plan::resolve_plan(
      plan::load_scenario(source, {"parallel.virtual=1", "parallel.schedule=1f1b", "parallel.partition_len=[21, 19, 21, 21]"}))));
  CHECK(ragged.at("--pipeline-model-parallel-layout") == "'E" + t(20) + "|" + t(19) + "|" + t(21) + "|" + t(20) + "L'");
  CHECK(ragged.count("--decoder-first-pipeline-num-layers") == 0);
  // The plan is Megatron-LM's step only under its semantics; the command names what differs.
  auto notes = [&](const std::vector<std::string>& sets) {
    std::string all;
    for (const auto& n : plan::export_megatron(plan::resolve_plan(plan::load_scenario(source, sets))).notes) all += n + "\n";
    return all;
  };
  CHECK(notes({}).find("not Megatron-LM's semantics") == std::string::npos);  // framework: megatron
  CHECK_THAT(notes({"framework=pytorch", "model.attention=flash"}),
             Catch::Contains("predicted with PyTorch's point-to-point, fp32 parameters cast per op (torch.autocast) instead of 16-bit "
                             "ones with fp32 masters, torch's DDP "
                             "buckets and torch's cross entropy, not Megatron-LM's semantics"));
  CHECK_THAT(notes({"parallel.overlap_grad_reduce=true", "parallel.ddp_buckets=pytorch"}),
             Catch::Contains("predicted with torch's DDP buckets, not Megatron-LM's semantics"));
  CHECK(notes({"parallel.overlap_grad_reduce=true"}).find("DDP buckets") == std::string::npos);  // Megatron-core's own
}

TEST_CASE("plan::export: a Megatron-LM command its validate_args and TransformerConfig accept, or exit 2", "[plan]") {
  // Each rule below is Megatron-LM's (NVIDIA/Megatron-LM at d98e8a64): a command that broke it
  // would stop at start-up on the rented GPUs, or run another job than the plan.
  const std::string source = std::string(PARALLAX_SOURCE_DIR) + "/scenarios/llama-3.1-70b-64xH100.yaml";
  auto megatron = [&](const std::vector<std::string>& sets) { return plan::export_megatron(plan::resolve_plan(plan::load_scenario(source, sets))); };
  auto error = [&](const std::vector<std::string>& sets) { return export_error(megatron, sets); };
  // arguments.py asserts CUDA_DEVICE_MAX_CONNECTIONS=1 under tensor parallelism below Blackwell.
  CHECK(megatron({}).text.find("\nCUDA_DEVICE_MAX_CONNECTIONS=1 torchrun ") != std::string::npos);
  CHECK(megatron({"parallel.tensor=1", "parallel.sequence_parallel=false", "parallel.data=16"}).text.find("CUDA_DEVICE_MAX_CONNECTIONS") ==
        std::string::npos);
  // TransformerConfig refuses a last stage of 0 blocks: the head alone goes as an explicit layout.
  const auto head_alone = as_map(megatron({"parallel.virtual=1", "parallel.schedule=1f1b", "parallel.partition_len=[28, 27, 26, 1]"}));
  CHECK(head_alone.count("--decoder-last-pipeline-num-layers") == 0);
  CHECK(head_alone.at("--pipeline-model-parallel-layout") == "'E" + std::string(27, 't') + "|" + std::string(27, 't') + "|" +
                                                                 std::string(26, 't') + "|L'");
  // --overlap-param-gather only with --overlap-grad-reduce.
  CHECK_THAT(error({"parallel.overlap_param_gather=true"}), Catch::Contains("parallel.overlap_grad_reduce: true as well"));
  // The interleaved schedule's micro-batches in whole groups of the pipeline's size (schedules.py).
  CHECK_THAT(error({"parallel.chunks=6", "data.batch_size=6"}), Catch::Contains("a multiple of the pipeline's 4 stages"));
  CHECK_THAT(error({"parallel.chunks=2", "data.batch_size=2"}), Catch::Contains("a multiple of the pipeline's 4 stages"));
  // Gradient accumulation runs in Megatron-LM as one longer schedule, not the plan's flushes.
  CHECK_THAT(error({"parallel.chunks=32", "data.batch_size=32", "parallel.grad_accumulation=2"}),
             Catch::Contains("parallel.chunks: 64, parallel.grad_accumulation: 1"));
  // A stage recomputed whole: uniform groups of a stage's blocks (block recompute keeps each block's input).
  const auto stage = as_map(megatron({"parallel.virtual=1", "parallel.schedule=1f1b", "parallel.partition_len=[21, 20, 20, 21]",
                                      "parallel.activation_checkpointing=stage"}));
  CHECK(stage.at("--recompute-method") == "uniform");
  CHECK(stage.at("--recompute-num-layers") == "20");
  // fp8 with the norms recomputed: not under the default delayed scaling.
  const auto fp8 = megatron({"parallel.precision=fp8", "parallel.activation_checkpointing=selective", "parallel.recompute_modules=[layernorm]"});
  CHECK(as_map(fp8).at("--fp8-recipe") == "tensorwise");
  CHECK(as_map(megatron({"parallel.precision=fp8"})).count("--fp8-recipe") == 0);
  // Each step's time logged, and no validation passes.
  CHECK(as_map(fp8).at("--log-interval") == "1");
  CHECK(as_map(fp8).at("--eval-iters") == "0");
}

TEST_CASE("plan::export: a torchtitan config that runs the plan's job", "[plan]") {
  // torchtitan v0.2.2's rules, each of which would otherwise run another job than the plan.
  const std::string fsdp_source = std::string(PARALLAX_SOURCE_DIR) + "/scenarios/llama-3.1-8b-64xH100-fsdp.yaml";
  auto titan = [&](const std::vector<std::string>& sets) { return plan::export_torchtitan(plan::resolve_plan(plan::load_scenario(fsdp_source, sets))); };
  auto error = [&](const std::vector<std::string>& sets) { return export_error(titan, sets); };
  // float8.py: a recipe name excludes the float8 all-gather; the output projection stays bf16.
  const auto gather = as_map(titan({"parallel.precision=fp8", "parallel.fp8_param_gather=true"}));
  CHECK(gather.count("quantize.linear.float8.recipe_name") == 0);
  CHECK(gather.at("quantize.linear.float8.enable_fsdp_float8_all_gather") == "true");
  CHECK(gather.at("quantize.linear.float8.filter_fqns") == "[\"output\"]");
  CHECK(as_map(titan({"parallel.precision=fp8"})).at("quantize.linear.float8.recipe_name") == "\"tensorwise\"");
  // Without a pipeline, local_batch_size is one forward's: 4 chunks of 1 accumulate to the global batch.
  const auto chunks = as_map(titan({"data.batch_size=4", "parallel.chunks=4"}));
  CHECK(chunks.at("training.local_batch_size") == "1");
  CHECK(chunks.at("training.global_batch_size") == "256");
  // Tensor parallelism without FSDP trains in float32 (maybe_enable_amp); context parallelism is FSDP's.
  CHECK_THAT(error({"parallel.data=1", "parallel.tensor=8", "parallel.sequence_parallel=true", "parallel.shard=none", "data.batch_size=8",
                    "parallel.chunks=8"}),
             Catch::Contains("torchtitan trains in float32"));
  CHECK_THAT(error({"parallel.shard=none", "parallel.data=32", "parallel.context=2"}), Catch::Contains("over the context ranks"));
}

TEST_CASE("plan::export: a MoE plan's experts, expert degree and combined 1F1B as Megatron-core's arguments", "[plan][moe]") {
  const std::string moe = kLlama + "parallel: {data: 4, expert: 4, chunks: 4, schedule: 1f1b, precision: bf16}\n";
  const std::vector<std::string> sets = {"model.experts=8", "model.experts_per_token=2", "model.expert_ffn=2048", "model.moe_layers={every: 2}",
                                         "parallel.overlap_moe_expert_parallel_comm=true"};
  const auto e = plan::export_megatron(plan::resolve_plan(test::scenario_from(moe, sets)));
  for (const auto& [name, value] : e.arguments) {
    INFO(name);
    CHECK(kMegatronOptions.count(name) == 1);
  }
  const auto a = as_map(e);
  CHECK(a.at("--num-experts") == "8");
  CHECK(a.at("--moe-router-topk") == "2");
  CHECK(a.at("--moe-ffn-hidden-size") == "2048");
  CHECK(a.at("--moe-layer-freq") == "'[0,1,0,1]'");
  CHECK(a.at("--expert-model-parallel-size") == "4");
  CHECK(a.count("--overlap-moe-expert-parallel-comm") == 1);
  const auto plain = as_map(plan::export_megatron(plan::resolve_plan(test::scenario_from(moe, {"model.experts=8"}))));
  CHECK(plain.count("--overlap-moe-expert-parallel-comm") == 0);
  CHECK(plain.at("--moe-token-dispatcher-type") == "alltoall");
  const auto deepep = as_map(plan::export_megatron(plan::resolve_plan(test::scenario_from(moe, {"model.experts=8", "parallel.moe_token_dispatcher=deepep"}))));
  CHECK(deepep.at("--moe-token-dispatcher-type") == "flex");
  CHECK(deepep.at("--moe-flex-dispatcher-backend") == "deepep");
  // Selective recompute of the norms and the experts' activation, as the MoE recipes set it.
  const auto modules = as_map(plan::export_megatron(plan::resolve_plan(test::scenario_from(
      moe, {"model.experts=8", "parallel.activation_checkpointing=selective", "parallel.recompute_modules=[layernorm, moe_act]"}))));
  CHECK(modules.at("--recompute-granularity") == "selective");
  CHECK(modules.at("--recompute-modules") == "layernorm moe_act");
  CHECK(plain.count("--recompute-modules") == 0);
  // And the whole MoE layer, as the ModelZoo's long-context Qwen3-235B runs set it.
  const auto layer = as_map(plan::export_megatron(plan::resolve_plan(test::scenario_from(
      moe, {"model.experts=8", "parallel.activation_checkpointing=selective", "parallel.recompute_modules=[layernorm, moe]"}))));
  CHECK(layer.at("--recompute-modules") == "layernorm moe");
}

TEST_CASE("plan::export: what a trainer cannot express exits 2 at the key to change", "[plan]") {
  const std::string source = std::string(PARALLAX_SOURCE_DIR) + "/scenarios/llama-3.1-70b-64xH100.yaml";
  auto megatron_error = [&](const std::vector<std::string>& sets) {
    try {
      plan::export_megatron(plan::resolve_plan(plan::load_scenario(source, sets)));
    } catch (const plan::InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK_THAT(megatron_error({"optimizer.state_dtype=bf16"}), Catch::Contains("DistributedFusedAdam"));
  CHECK_THAT(megatron_error({"parallel.schedule=interleaved-zero-bubble"}), Catch::Contains("Megatron-LM runs 1F1B and interleaved 1F1B"));
  CHECK_THAT(megatron_error({"parallel.context=2", "parallel.data=1", "model.attention=standard"}),
             Catch::Contains("Transformer Engine's fused attention"));
  // LibTorch's encoder block is no Megatron-LM block.
  CHECK_THROWS_WITH(plan::export_megatron(test::plan_from("model: {preset: transformer}\nhardware: ideal\n")),
                    Catch::Contains("TransformerEncoderLayer"));
  // torchtitan: its flavors only, its own names only.
  const auto titan = plan::export_torchtitan(plan::resolve_plan(plan::load_scenario(source, {"parallel.shard=full"})));
  for (const auto& [name, value] : titan.arguments) {
    INFO(name);
    CHECK(kTorchtitanFields.count(name) == 1);
  }
  CHECK(as_map(titan).at("model.flavor") == "\"70B\"");
  CHECK(titan.text.find("[parallelism]\ndata_parallel_replicate_degree = 1\n") != std::string::npos);
  CHECK(as_map(titan).at("parallelism.module_fqns_per_model_part").rfind("[[\"tok_embeddings\", \"layers.0\", \"layers.1\", \"layers.2\", \"layers.3\"], [\"layers.4\"", 0) == 0);
  const auto fp8 = plan::export_torchtitan(plan::resolve_plan(plan::load_scenario(source, {"parallel.shard=full", "parallel.precision=fp8"})));
  for (const auto& [name, value] : fp8.arguments) {
    INFO(name);
    CHECK(kTorchtitanFields.count(name) == 1);
  }
  const auto titan_context = plan::export_torchtitan(
      plan::resolve_plan(plan::load_scenario(source, {"parallel.data=1", "parallel.context=2", "data.batch_size=128", "parallel.shard=full"})));
  CHECK(as_map(titan_context).at("parallelism.context_parallel_degree") == "2");
  CHECK(as_map(titan_context).at("parallelism.context_parallel_rotate_method") == "\"alltoall\"");  // the ring the plan costs
  for (const auto& [name, value] : titan_context.arguments) {
    INFO(name);
    CHECK(kTorchtitanFields.count(name) == 1);
  }
  CHECK(fp8.text.find("[quantize.linear.float8]\nrecipe_name = \"tensorwise\"\n") != std::string::npos);
  CHECK(fp8.text.find("[model]\nname = \"llama3\"\nflavor = \"70B\"\nconverters = [\"quantize.linear.float8\"]\n") != std::string::npos);
  CHECK(fp8.text.find("[model]") == fp8.text.rfind("[model]"));  // a TOML table appears once
  // torchtitan's Llama 3 has no sliding window: refused at the key.
  CHECK_THROWS_WITH(plan::export_torchtitan(plan::resolve_plan(
                        plan::load_scenario(source, {"parallel.shard=full", "model.sliding_window=1024"}))),
                    Catch::Contains("model.sliding_window") && Catch::Contains("has a sliding window"));
  // FSDP2 over every replica, or HSDP: shard inside 8, replicate across the rest.
  const std::string fsdp_source = std::string(PARALLAX_SOURCE_DIR) + "/scenarios/llama-3.1-8b-64xH100-fsdp.yaml";
  const auto fsdp = plan::export_torchtitan(plan::resolve_plan(plan::load_scenario(fsdp_source, {})));
  for (const auto& [name, value] : fsdp.arguments) {
    INFO(name);
    CHECK(kTorchtitanFields.count(name) == 1);
  }
  CHECK(as_map(fsdp).at("parallelism.data_parallel_shard_degree") == "64");
  CHECK(as_map(fsdp).at("parallelism.data_parallel_replicate_degree") == "1");
  CHECK(as_map(fsdp).at("parallelism.fsdp_reshard_after_forward") == "\"always\"");
  // Checkpointing by op is torchtitan's selective; Megatron-core's by module is not, nor the reverse.
  CHECK(as_map(fsdp).at("activation_checkpoint.selective_ac_option") == "\"op\"");
  CHECK_THROWS_WITH(plan::export_torchtitan(plan::resolve_plan(plan::load_scenario(fsdp_source, {"parallel.activation_checkpointing=selective"}))),
                    Catch::Contains("selective_op"));
  CHECK_THROWS_WITH(plan::export_megatron(plan::resolve_plan(plan::load_scenario(source, {"parallel.activation_checkpointing=selective_op"}))),
                    Catch::Contains("selective_op is torchtitan's"));
  // Fused memory-bound kernels are torch.compile's in torchtitan; eager ones are its default.
  CHECK(as_map(fsdp).at("compile.enable") == "true");
  CHECK(as_map(plan::export_torchtitan(plan::resolve_plan(plan::load_scenario(fsdp_source, {"model.kernels=eager", "model.loss=eager"}))))
            .count("compile.enable") == 0);
  // torch.compile's components: the blocks (fused kernels), the loss (model.loss: fused; the scenario's), or both.
  CHECK(as_map(fsdp).at("compile.components") == "[\"model\", \"loss\"]");
  const auto components = [&](const std::vector<std::string>& sets) {
    return as_map(plan::export_torchtitan(plan::resolve_plan(plan::load_scenario(fsdp_source, sets)))).at("compile.components");
  };
  CHECK(components({"model.loss=eager"}) == "[\"model\"]");
  CHECK(components({"model.kernels=eager"}) == "[\"loss\"]");
  CHECK_THROWS_WITH(plan::export_megatron(plan::resolve_plan(plan::load_scenario(source, {"model.loss=fused"}))),
                    Catch::Contains("vocabulary-parallel"));
  const auto hsdp = as_map(plan::export_torchtitan(plan::resolve_plan(plan::load_scenario(fsdp_source, {"parallel.shard_group=8"}))));
  CHECK(hsdp.at("parallelism.data_parallel_shard_degree") == "8");
  CHECK(hsdp.at("parallelism.data_parallel_replicate_degree") == "8");
  CHECK_THROWS_WITH(plan::export_torchtitan(plan::resolve_plan(plan::load_scenario(fsdp_source, {"parallel.shard=optimizer"}))),
                    Catch::Contains("ZeRO-1"));
  // Gradient accumulation under FSDP2: torchtitan reduces every micro-batch, as its framework says;
  // a plan reducing once a step is told so.
  const auto notes_of = [&](const std::vector<std::string>& sets) {
    std::string all;
    for (const auto& n : plan::export_torchtitan(plan::resolve_plan(plan::load_scenario(fsdp_source, sets))).notes) all += n + "\n";
    return all;
  };
  const std::string accumulating = notes_of({"parallel.chunks=2", "data.batch_size=2"});
  CHECK(accumulating.find("after every micro-batch") == std::string::npos);
  const std::string once = notes_of({"parallel.chunks=2", "data.batch_size=2", "parallel.reduce_scatter_every_microbatch=false"});
  CHECK(once.find("torchtitan reduce-scatters FSDP's gradients after every micro-batch's backward") != std::string::npos);
  // The launch: run_train.sh on one node (its rendezvous is localhost:0); torchrun against one
  // rendezvous on each of several, as torchtitan's multinode_trainer.slurm.
  CHECK_THAT(notes_of({}), Catch::Contains("torchrun --nnodes 8 --nproc_per_node 8") && Catch::Contains("--rdzv_endpoint") &&
                               !Catch::Contains("run_train.sh on each"));
  CHECK_THAT(notes_of({"parallel.data=8", "data.batch_size=8"}), Catch::Contains("CONFIG_FILE=plan.toml NGPU=8 ./run_train.sh"));
  // Megatron-LM: the distributed optimizer, one instance per copy of a shard (its HSDP).
  const auto zero1 = as_map(plan::export_megatron(plan::resolve_plan(plan::load_scenario(source, {"parallel.data=4", "parallel.shard_group=2", "data.batch_size=32", "parallel.chunks=32"}))));
  CHECK(zero1.at("--num-distributed-optimizer-instances") == "2");
  CHECK_THROWS_WITH(plan::export_megatron(plan::resolve_plan(plan::load_scenario(source, {"parallel.shard=full"}))), Catch::Contains("Megatron-FSDP"));
  CHECK_THROWS_WITH(plan::export_torchtitan(plan::resolve_plan(plan::load_scenario(source, {"model.layers=40", "parallel.data=1", "parallel.partition_len=[3, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3]"}))),
                    Catch::Contains("flavors 8B, 70B and 405B"));
}

// What each trainer asserts at launch or silently runs otherwise (found by reading their source,
// 2026-12-06): each exits 2 at its key, or is written as the trainer takes it.
TEST_CASE("plan::export: what the trainers would refuse at launch, or run as another job, exits 2", "[plan]") {
  const std::string source = std::string(PARALLAX_SOURCE_DIR) + "/scenarios/llama-3.1-70b-64xH100.yaml";
  const std::string fsdp_source = std::string(PARALLAX_SOURCE_DIR) + "/scenarios/llama-3.1-8b-64xH100-fsdp.yaml";
  const auto megatron = [&](const std::vector<std::string>& sets) { return plan::export_megatron(plan::resolve_plan(plan::load_scenario(source, sets))); };
  const auto titan = [&](const std::vector<std::string>& sets) { return plan::export_torchtitan(plan::resolve_plan(plan::load_scenario(fsdp_source, sets))); };
  // torchrun starts as many processes on every node: 12 GPUs on nodes of 8 would start 16 (and
  // Megatron-LM derive a data degree of 4 where the plan has 3).
  CHECK_THAT(export_error(titan, {"parallel.data=12", "data.batch_size=12"}), Catch::Contains("do not fill whole nodes of 8"));
  CHECK_THAT(export_error(megatron, {"parallel.data=3", "parallel.tensor=4", "data.batch_size=48", "parallel.pipeline=1", "parallel.virtual=1",
                                     "parallel.schedule=1f1b", "parallel.partition_len=balanced", "parallel.chunks=48"}),
             Catch::Contains("do not fill whole nodes of 8"));
  CHECK_THAT(titan({"parallel.data=4", "data.batch_size=4"}).text, Catch::Contains("NGPU=4 ./run_train.sh"));
  CHECK_THAT(export_error(titan, {"model.dropout=0.1"}), Catch::Contains("has no dropout"));
  // The same rule keeps the tuner's trainer-bound search to worlds of whole nodes.
  const auto twelve = plan::trainer_refusal(plan::load_scenario(fsdp_source, {"parallel.data=12", "data.batch_size=12"}), plan::Framework::torchtitan);
  REQUIRE(twelve);
  CHECK(twelve->key == "parallel.data");
  CHECK_THAT(twelve->why, Catch::Contains("12 ranks (data 12) do not fill"));
  // A world of one replica names the degree that makes it: 12 ranks of tensor 4 x pipeline 3.
  const auto one_replica = plan::trainer_refusal(
      plan::load_scenario(source, {"parallel.data=1", "parallel.tensor=4", "parallel.pipeline=3", "parallel.virtual=1", "parallel.schedule=1f1b", "parallel.partition_len=balanced"}),
      plan::Framework::megatron);
  REQUIRE(one_replica);
  CHECK(one_replica->key == "parallel.tensor");
  CHECK_THAT(one_replica->why, Catch::Contains("12 ranks (tensor 4 x pipeline 3) do not fill whole nodes of 8"));
  // Megatron-LM's tp-pp-dp puts context ranks inside the pipeline's, Parallax's outside.
  CHECK_THAT(export_error(megatron, {"parallel.rank_order=tp-pp-dp", "parallel.tensor=4", "parallel.context=2"}),
             Catch::Contains("parallel.rank_order") && Catch::Contains("inside the pipeline"));
  // Megatron-core's rank order tp-pp-dp is a flag; torchtitan's mesh has the pipeline outermost.
  CHECK(as_map(megatron({"parallel.rank_order=tp-pp-dp"})).count("--use-tp-pp-dp-mapping") == 1);
  CHECK(as_map(megatron({})).count("--use-tp-pp-dp-mapping") == 0);
  CHECK_THAT(export_error(titan, {"parallel.rank_order=tp-pp-dp", "parallel.pipeline=2", "parallel.data=32", "parallel.schedule=1f1b"}),
             Catch::Contains("parallel.rank_order") && Catch::Contains("pipeline outermost"));
  // A shard of one rank is DDP in torchtitan, which it runs only without tensor or pipeline parallelism.
  CHECK_THAT(export_error(titan, {"parallel.tensor=2", "parallel.data=32", "parallel.shard_group=1"}),
             Catch::Contains("parallel.shard_group") && Catch::Contains("replicates"));
  // Megatron-core's sequence parallelism asserts that the tensor ranks divide the tokens.
  CHECK_THAT(export_error(megatron, {"model.seq_len=4100"}), Catch::Contains("model.seq_len") && Catch::Contains("must divide"));
  // torchtitan's parallelize.py asserts seq_len % (tensor x 2 x context) == 0: 8196 % 16 = 4.
  CHECK_THAT(export_error(titan, {"parallel.tensor=8", "parallel.data=8", "parallel.sequence_parallel=true", "model.seq_len=8196"}),
             Catch::Contains("multiple of tensor x 2 x context (16") && Catch::Contains("8196"));
  // Its Llama views each tensor rank's key/value columns as whole heads: 8 heads over 16 ranks do
  // not split. Megatron-core replicates them since core_r0.16.0 (attention.py), and the note says so.
  CHECK_THAT(export_error(titan, {"parallel.tensor=16", "parallel.tensor_across_nodes=true", "parallel.data=4", "parallel.sequence_parallel=true"}),
             Catch::Contains("splits the 8 key/value heads over the 16 tensor ranks"));
  CHECK_THAT(megatron({"parallel.tensor=16", "parallel.tensor_across_nodes=true", "parallel.data=1"}).text,
             Catch::Contains("# needs Megatron-LM core_r0.16.0 or later (key/value heads replicated over the tensor ranks)"));
  CHECK_THAT(megatron({}).text, !Catch::Contains("# needs Megatron-LM"));
  // Transformer Engine's flash and fused attention take 16-bit inputs: fp32 with flash attention
  // has no attention backend in Megatron-LM; with standard attention it is the unfused one.
  CHECK_THAT(export_error(megatron, {"parallel.precision=fp32"}), Catch::Contains("set model.attention: standard"));
  CHECK(as_map(megatron({"parallel.precision=fp32", "model.attention=standard"})).at("--attention-backend") == "unfused");
  CHECK(as_map(megatron({})).at("--attention-backend") == "fused");
  // torchtitan's DDP reduces after every micro-batch: a plan accumulating 4 says it is short by 3.
  CHECK_THAT(titan({"parallel.shard=none", "parallel.grad_accumulation=4", "framework=torchtitan"}).text,
             Catch::Contains("after every micro-batch's backward (4 a step)") && Catch::Contains("longer by 3 all-reduces"));
  CHECK_THAT(titan({"parallel.shard=none", "framework=torchtitan"}).text, !Catch::Contains("after every micro-batch's backward"));
  // torchtitan's flavor is Llama 3's tokenizer and rotary positions as well as its shape.
  CHECK_THAT(export_error(titan, {"model.vocab=32768"}), Catch::Contains("vocabulary of 128256"));
  // The plan was predicted as another trainer runs it: said.
  CHECK_THAT(plan::export_torchtitan(plan::resolve_plan(plan::load_scenario(source, {"parallel.shard=full"}))).text,
             Catch::Contains("predicted with framework: megatron"));
  // YaRN outside latent attention: Megatron-LM's --position-embedding-type yarn and its factors.
  test::TempFile yarn("parallax-yarn.json",
                      R"({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 3584, "intermediate_size": 18944, "num_attention_heads": 28,
                          "num_key_value_heads": 4, "num_hidden_layers": 28, "vocab_size": 152064, "hidden_act": "silu", "rope_theta": 1000000.0,
                          "tie_word_embeddings": false, "rms_norm_eps": 1e-6,
                          "rope_scaling": {"factor": 4.0, "original_max_position_embeddings": 32768, "type": "yarn"}})");
  const auto args = as_map(plan::export_megatron(
      test::plan_from("framework: megatron\nmodel: {hf_config: " + yarn.path + ", seq_len: 4096}\nhardware: h100-nvlink-ib\n"
                      "parallel: {precision: bf16, master_weights: true}\n")));
  CHECK(args.at("--position-embedding-type") == "yarn");
  CHECK(args.at("--rotary-scaling-factor") == "4");
  CHECK(args.at("--yarn-original-max-position-embeddings") == "32768");
  // ... which arguments.py refuses beside multi-token prediction.
  CHECK_THROWS_WITH(plan::export_megatron(test::plan_from("framework: megatron\nmodel: {hf_config: " + yarn.path + ", seq_len: 4096}\n"
                                                          "hardware: h100-nvlink-ib\nparallel: {precision: bf16, master_weights: true}\n",
                                                          {"model.mtp_layers=1"})),
                    Catch::Contains("multi-token prediction takes rope positions or none"));
  // torchtitan's flavors scale rotary positions as Llama 3.1: a config stating none is Llama 3.0's.
  test::TempFile llama30("parallax-llama30.json",
                         R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336, "num_attention_heads": 32,
                             "num_key_value_heads": 8, "num_hidden_layers": 32, "vocab_size": 128256, "hidden_act": "silu",
                             "rope_theta": 500000.0, "rope_scaling": null, "tie_word_embeddings": false})");
  CHECK_THAT(export_error(titan, {"model.hf_config=" + llama30.path}), Catch::Contains("rotates positions as Llama 3.1"));
}

TEST_CASE("plan::export: Megatron-core's combined 1F1B under what it asserts against exits 2", "[plan][moe]") {
  const std::string moe = std::string(PARALLAX_SOURCE_DIR) + "/scenarios/models/qwen3-30b-a3b.json";
  const std::string base = "framework: megatron\nmodel: {hf_config: " + moe + ", seq_len: 4096}\nhardware: h100-nvlink-ib\n"
                           "data: {batch_size: 8}\nparallel: {precision: bf16, data: 4, expert: 2, chunks: 8, schedule: 1f1b, sequence_parallel: false, "
                           "overlap_moe_expert_parallel_comm: true}\n";
  const auto error = [&](const std::vector<std::string>& sets) {
    return export_error([&](const std::vector<std::string>& s) { return plan::export_megatron(test::plan_from(base, s)); }, sets);
  };
  CHECK(error({}).empty());
  CHECK_THAT(error({"parallel.activation_checkpointing=layer"}), Catch::Contains("full recomputation"));
  CHECK_THAT(error({"parallel.activation_checkpointing=selective", "parallel.recompute_modules=[moe]"}), Catch::Contains("MoE layer recomputed"));
  CHECK_THAT(error({"parallel.precision=fp32", "parallel.master_weights=false"}), Catch::Contains("bf16 or fp16"));
  CHECK_THAT(error({"model.mtp_layers=2"}), Catch::Contains("multi-token prediction"));
}

// Megatron-core's MoE layer raises in training under tensor parallelism without sequence
// parallelism whatever the expert degree (moe_layer.py), and parallel_state.py asserts that the
// distributed optimizer's copies divide the experts' data-parallel ranks as well as the dense ones.
TEST_CASE("plan::export: Megatron-core's MoE assertions at any expert degree exit 2, and the tuner keeps to them", "[plan][moe]") {
  const std::string moe = std::string(PARALLAX_SOURCE_DIR) + "/scenarios/models/qwen3-30b-a3b.json";
  const std::string base = "framework: megatron\nmodel: {hf_config: " + moe + ", seq_len: 4096}\nhardware: h100-nvlink-ib\n"
                           "data: {batch_size: 16}\nparallel: {precision: bf16, data: 2, tensor: 4, sequence_parallel: true, pipeline: 2, "
                           "chunks: 16, schedule: 1f1b, shard: optimizer}\n";
  const auto error = [&](const std::vector<std::string>& sets) {
    return export_error([&](const std::vector<std::string>& s) { return plan::export_megatron(test::plan_from(base, s)); }, sets);
  };
  CHECK(error({}).empty());
  CHECK_THAT(error({"parallel.sequence_parallel=false"}), Catch::Contains("--set parallel.sequence_parallel") && Catch::Contains("moe_layer.py"));
  const auto refusal = plan::trainer_refusal(test::plan_from(base, {"parallel.sequence_parallel=false"}).scenario, plan::Framework::megatron);
  REQUIRE(refusal);
  CHECK(refusal->key == "parallel.sequence_parallel");
  // A dense model under tensor parallelism without sequence parallelism runs.
  CHECK(!plan::trainer_refusal(plan::load_scenario(std::string(PARALLAX_SOURCE_DIR) + "/scenarios/llama-3.1-70b-64xH100.yaml",
                                                   {"parallel.sequence_parallel=false"}),
                               plan::Framework::megatron));
  // 16 ranks of tensor 4 x pipeline 2 x data 2 and expert 4 (expert_tensor 1): the experts' data-
  // parallel ranks are 16 / (2 x 4 x 1) = 2; two distributed-optimizer copies divide them, ...
  const std::vector<std::string> eight = {"parallel.data=2", "parallel.expert=4", "parallel.expert_tensor=1"};
  CHECK(error(eight).empty());
  CHECK(as_map(plan::export_megatron(test::plan_from(base, {"parallel.data=4", "data.batch_size=32", "parallel.expert=4", "parallel.expert_tensor=1",
                                                              "parallel.shard_group=2"})))
            .at("--num-distributed-optimizer-instances") == "2");
  // ... and four do not: data 8, shard_group 2 gives 4 copies over the experts' 64 / (2 x 16) = 2.
  CHECK_THAT(error({"parallel.data=8", "data.batch_size=64", "parallel.expert=16", "parallel.expert_tensor=1", "parallel.shard_group=2"}),
             Catch::Contains("--set parallel.shard_group") && Catch::Contains("4 copies") && Catch::Contains("experts' 2 data-parallel"));
}

// What a trainer runs otherwise than the plan's model: Megatron-LM's blocks are Transformer Engine's
// fused ones, torchtitan's Llama always runs scaled_dot_product_attention.
TEST_CASE("plan::export: eager blocks in Megatron-LM and standard attention in torchtitan exit 2", "[plan]") {
  const std::string source = std::string(PARALLAX_SOURCE_DIR) + "/scenarios/llama-3.1-70b-64xH100.yaml";
  const std::string fsdp_source = std::string(PARALLAX_SOURCE_DIR) + "/scenarios/llama-3.1-8b-64xH100-fsdp.yaml";
  const auto megatron = [&](const std::vector<std::string>& sets) { return plan::export_megatron(plan::resolve_plan(plan::load_scenario(source, sets))); };
  const auto titan = [&](const std::vector<std::string>& sets) { return plan::export_torchtitan(plan::resolve_plan(plan::load_scenario(fsdp_source, sets))); };
  CHECK_THAT(export_error(megatron, {"model.kernels=eager"}), Catch::Contains("--set model.kernels") && Catch::Contains("set model.kernels: fused"));
  CHECK_THAT(export_error(titan, {"model.attention=standard", "parallel.activation_checkpointing=layer"}),
             Catch::Contains("model.attention") && Catch::Contains("scaled_dot_product_attention") && Catch::Contains("set model.attention: flash"));
  CHECK(export_error(titan, {}).empty());
}

// A plan that does not fit exports, said first among the notes with its figures; one that fits
// says nothing of it. torchtitan v0.2.2's training all-gathers context parallelism's keys and values
// whatever its rotate method, which the note says beside the key.
TEST_CASE("plan::export: a plan that does not fit says so first, torchtitan's context parallelism says how it rotates", "[plan]") {
  const std::string source = std::string(PARALLAX_SOURCE_DIR) + "/scenarios/llama-3.1-70b-64xH100.yaml";
  const std::vector<std::string> unsplit = {"parallel.tensor=1", "parallel.sequence_parallel=false", "parallel.data=16", "data.batch_size=8",
                                            "parallel.chunks=8", "parallel.virtual=1", "parallel.schedule=1f1b", "parallel.partition_len=balanced"};
  const plan::Plan p = plan::resolve_plan(plan::load_scenario(source, unsplit));
  int64_t fullest = 0;
  for (const auto& r : p.ranks) fullest = std::max(fullest, r.memory.total());
  REQUIRE(fullest > p.scenario.hardware.device.memory_bytes());
  const plan::TrainerExport e = plan::export_megatron(p);
  REQUIRE(!e.notes.empty());
  CHECK_THAT(e.notes.front(), Catch::StartsWith("THIS PLAN DOES NOT FIT") && Catch::Contains("of the NVIDIA H100 80GB SXM5's 80.00 GiB"));
  CHECK(e.does_not_fit == e.notes.front());
  CHECK_THAT(e.text, Catch::Contains("# THIS PLAN DOES NOT FIT"));
  CHECK(plan::export_megatron(plan::resolve_plan(plan::load_scenario(source, {}))).does_not_fit.empty());
  const std::string titan = plan::export_torchtitan(plan::resolve_plan(plan::load_scenario(
                                                        std::string(PARALLAX_SOURCE_DIR) + "/scenarios/llama-3.1-405b-3072xH100.yaml",
                                                        {"parallel.shard=full"})))
                                .text;
  CHECK_THAT(titan, Catch::Contains("context_parallel_rotate_method = \"alltoall\"") && Catch::Contains("in validation only"));
  // Predicted as torch runs it (parallel.context_attention: torch, torchtitan's and PyTorch's):
  // torch's own all-gather, nothing to say.
  const std::string torch_cp = plan::export_torchtitan(plan::resolve_plan(plan::load_scenario(
                                                           std::string(PARALLAX_SOURCE_DIR) + "/scenarios/llama-3.1-405b-3072xH100.yaml",
                                                           {"parallel.shard=full", "parallel.context_attention=torch"})))
                                   .text;
  CHECK_THAT(torch_cp, Catch::Contains("context_parallel_rotate_method = \"allgather\"") && !Catch::Contains("in validation only"));
  // And Megatron-LM runs Transformer Engine's ring, which a plan predicted with torch's is not.
  const plan::TrainerExport m = plan::export_megatron(plan::resolve_plan(plan::load_scenario(
      std::string(PARALLAX_SOURCE_DIR) + "/scenarios/llama-3.1-405b-3072xH100.yaml", {"parallel.context_attention=torch"})));
  CHECK_THAT(m.text, Catch::Contains("torch's context-parallel attention, not Megatron-LM's semantics"));
}

TEST_CASE("plan::export: torchtitan's mixed precision and its sequence-parallel rule, said where they differ", "[plan]") {
  const std::string fsdp = std::string(PARALLAX_SOURCE_DIR) + "/scenarios/llama-3.1-8b-64xH100-fsdp.yaml";
  // fp32 parameters under FSDP2's mixed precision: a plan with masters is told so.
  const auto notes = [&](const std::vector<std::string>& sets) {
    std::string all;
    for (const auto& n : plan::export_torchtitan(plan::resolve_plan(plan::load_scenario(fsdp, sets))).notes) all += n + "\n";
    return all;
  };
  CHECK_THAT(notes({}), !Catch::Contains("master"));
  CHECK_THAT(notes({"parallel.master_weights=true"}), Catch::Contains("plan it with parallel.master_weights: false"));
  // Tensor parallelism without sequence parallelism, set on the command line: the refusal points
  // at the --set that made it, the knob not written anywhere.
  try {
    plan::export_torchtitan(plan::resolve_plan(plan::load_scenario(fsdp, {"parallel.tensor=8", "parallel.data=8"})));
    FAIL("refused");
  } catch (const plan::InputError& e) {
    CHECK_THAT(e.what(), Catch::StartsWith("--set parallel.tensor=8") && Catch::Contains("always splits the sequence"));
  }
}

TEST_CASE("plan::search_defaults: the tuner searches the trainer's own selective policy", "[plan][tune]") {
  auto searched = [](const plan::Scenario& s) {
    std::vector<std::string> names;
    for (const auto& v : plan::default_recompute(s, s.parallel.world_size())) names.push_back(std::get<std::string>(v));
    return names;
  };
  using Names = std::vector<std::string>;
  // torchtitan checkpoints by op, Megatron-core by module; neither runs the other's.
  const std::string dir = std::string(PARALLAX_SOURCE_DIR) + "/scenarios/";
  CHECK(searched(plan::load_scenario(dir + "llama-3.1-8b-64xH100-fsdp.yaml", {})) == Names{"false", "layer", "stage", "selective_op"});
  CHECK(searched(plan::load_scenario(dir + "llama-3.1-70b-64xH100.yaml", {})) == Names{"false", "layer", "stage", "selective"});
  // The per-op count is derived for dense blocks only: a torchtitan MoE model is not offered it.
  CHECK(searched(plan::load_scenario(dir + "llama-3.1-8b-64xH100-fsdp.yaml", {"model.experts=8", "model.experts_per_token=2", "parallel.activation_checkpointing=layer"})) ==
        Names{"false", "layer", "stage"});
}

TEST_CASE("plan::export: a MoE router's balancing loss, its top-1, and the attention backend, as Megatron-core takes them", "[plan]") {
  const std::string models = std::string(PARALLAX_SOURCE_DIR) + "/scenarios/models/";
  const std::string llama = std::string(PARALLAX_SOURCE_DIR) + "/scenarios/llama-3.1-70b-64xH100.yaml";
  const auto megatron = [&](const std::vector<std::string>& sets) {
    return as_map(plan::export_megatron(plan::resolve_plan(plan::load_scenario(llama, sets))));
  };
  // Mixtral trained with router_aux_loss_coef 0.02 over each micro-batch: Megatron-core's default
  // coefficient is 0 (transformer_config.py), so the loss must be passed.
  const std::vector<std::string> mixtral = {"model.hf_config=" + models + "mixtral-8x7b.json", "parallel.partition_len=balanced",
                                            "parallel.tensor=4", "parallel.data=4"};
  const auto m = megatron(mixtral);
  CHECK(m.at("--moe-router-load-balancing-type") == "aux_loss");
  CHECK(m.at("--moe-aux-loss-coeff") == "0.02");
  CHECK(m.count("--moe-router-pre-softmax") == 0);  // top-2, renormalized: the softmax over the top-k
  // Top-1 renormalized (Mixtral's config at one expert a token) is no model Megatron-core builds:
  // it asserts --moe-router-pre-softmax at top-1, which weighs the expert by its probability.
  auto top1 = mixtral;
  top1.push_back("model.experts_per_token=1");
  CHECK_THROWS_WITH(megatron(top1), Catch::Contains("takes top-1 only with --moe-router-pre-softmax"));
  // A model of Parallax's own keys states no router: top-1 gets the flag Megatron-core asks for.
  const auto preset = as_map(plan::export_megatron(test::plan_from(
      "model: {preset: transformer, layers: 4, hidden: 256, heads: 4, ffn: 512, seq_len: 128, vocab: 1024, mlp: swiglu, "
      "norm: rmsnorm, positions: rope, experts: 4, experts_per_token: 1, expert_ffn: 256}\nhardware: ideal\n")));
  CHECK(preset.count("--moe-router-pre-softmax") == 1);
  // FlashAttention-2's costs export Megatron-core's flash backend (Dao's package), flash's the fused one.
  CHECK(megatron({"model.attention=flash2"}).at("--attention-backend") == "flash");
  CHECK(megatron({}).at("--attention-backend") == "fused");
}

TEST_CASE("plan::export: Llama 3's rotary scaling and norm epsilon beyond what the trainers fix", "[plan]") {
  // Megatron-core's _apply_scaling and torchtitan's RoPEScalingArgs fix low_freq_factor 1,
  // high_freq_factor 4 and original_max_position_embeddings 8192; torchtitan's norm_eps is 1e-5.
  const std::string root = PARALLAX_SOURCE_DIR;
  const auto dir = test::temp_path("parallax_export_rotary");
  std::filesystem::create_directories(dir);
  // The shipped scenario with its model's config edited.
  const auto with = [&](const std::string& scenario, const std::string& model, const std::function<void(nlohmann::json&)>& edit) {
    nlohmann::json c = nlohmann::json::parse(std::ifstream(root + "/scenarios/models/" + model));
    edit(c);
    const std::string path = (dir / model).string();
    std::ofstream(path) << c.dump(1);
    return plan::resolve_plan(plan::load_scenario(root + "/scenarios/" + scenario, {"model.hf_config=" + path}));
  };
  const auto low = [](nlohmann::json& c) { c["rope_scaling"]["low_freq_factor"] = 2; };
  CHECK_THROWS_WITH(plan::export_torchtitan(with("llama-3.1-8b-64xH100-fsdp.yaml", "llama-3.1-8b.json", low)),
                    Catch::Contains("low_freq_factor 1, high_freq_factor 4"));
  std::string notes;
  for (const auto& n : plan::export_megatron(with("llama-3.1-70b-64xH100.yaml", "llama-3.1-70b.json", low)).notes) notes += n + "\n";
  CHECK_THAT(notes, Catch::Contains("low_freq_factor 2, high_freq_factor 4 and original_max_position_embeddings 8192, where "
                                    "Megatron-core fixes 1, 4 and 8192"));
  const auto eps = [](nlohmann::json& c) { c["rms_norm_eps"] = 1e-6; };
  CHECK_THROWS_WITH(plan::export_torchtitan(with("llama-3.1-8b-64xH100-fsdp.yaml", "llama-3.1-8b.json", eps)),
                    Catch::Contains("norms with epsilon 1e-5; this model's config states 1e-06"));
  CHECK_NOTHROW(plan::export_torchtitan(with("llama-3.1-8b-64xH100-fsdp.yaml", "llama-3.1-8b.json", [](nlohmann::json&) {})));
  std::filesystem::remove_all(dir);
}
