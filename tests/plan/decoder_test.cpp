// The Llama-family blocks and Hugging Face configs (plan/layers.cpp, plan/hf_config.cpp), checked
// against figures that do not come from Parallax: the parameter counts the model makers publish,
// and activation bytes counted tensor by tensor by hand (docs/simulator.md's derivation).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "plan/calibration.hpp"
#include "plan/cost.hpp"
#include "plan/hf_config.hpp"
#include "plan/memory.hpp"
#include "plan/plan.hpp"
#include "tests/test_util.hpp"

using namespace parallax;

namespace {

std::string model_file(const std::string& name) { return std::string(PARALLAX_SOURCE_DIR) + "/scenarios/models/" + name; }

plan::Scenario from_config(const std::string& name, int seq_len = 4096) {
  return test::scenario_from("model: {hf_config: " + model_file(name) + ", seq_len: " + std::to_string(seq_len) + "}\nhardware: ideal\n");
}

int64_t params(const plan::Scenario& s) {
  int64_t n = 0;
  for (const auto& l : s.layers) n += l.param_count();
  return n;
}

}  // namespace

TEST_CASE("plan::hf_config: the shipped configs have the parameter counts their makers publish", "[plan]") {
  // The totals of the released checkpoints (the Hugging Face Hub's safetensors metadata; Meta's
  // 8B / 70B / 405B, Mistral's 7.24B, Qwen's 7.61B, OpenAI's GPT-2 124M). GPT-2's learned
  // positions hold its n_positions (1,024) rows whatever the job's sequence.
  CHECK(params(from_config("llama-3.1-8b.json")) == 8'030'261'248);
  CHECK(params(from_config("llama-3.1-70b.json")) == 70'553'706'496);
  CHECK(params(from_config("llama-3.1-405b.json")) == 405'853'388'800);
  CHECK(params(from_config("mistral-7b.json")) == 7'241'732'096);
  CHECK(params(from_config("qwen2.5-7b.json")) == 7'615'616'512);
  CHECK(params(from_config("gpt2.json", 1024)) == 124'439'808);
  CHECK(params(from_config("gpt2.json", 128)) == 124'439'808);
  // Nemotron-4 15B's report gives 12.5B non-embedding parameters (Parker et al. 2024, Table 1):
  // 32 x (2 x 6144^2 + 2 x 6144 x 1024 + 2 x 6144 x 24576 + 4 x 6144 norms) = 12,483,035,136.
  const auto nemotron = from_config("nemotron-4-15b.json");
  CHECK(params(nemotron) - nemotron.layers.front().param_count() - nemotron.layers.back().param_count() == 12'483'035'136);
}

TEST_CASE("plan::hf_config: a Llama block's parameters, names and splits", "[plan]") {
  const auto s = from_config("llama-3.1-8b.json");
  REQUIRE(s.layers.size() == 34);
  const auto& block = s.layers[1];
  std::vector<std::string> names;
  for (const auto& p : block.params) names.push_back(p.name.substr(std::string("layers.0.").size()));
  CHECK(names == std::vector<std::string>{"self_attn.q_proj.weight", "self_attn.k_proj.weight", "self_attn.v_proj.weight",
                                          "self_attn.o_proj.weight", "mlp.gate_proj.weight", "mlp.up_proj.weight",
                                          "mlp.down_proj.weight", "input_layernorm.weight", "post_attention_layernorm.weight"});
  CHECK(block.params[1].shape == std::vector<int64_t>{1024, 4096});  // 8 key/value heads of 128
  CHECK(s.layers.front().params.size() == 1);                      // rotary: no position table
  CHECK(s.layers.back().params.back().name == "head.output.weight");  // untied, no bias
  // Two FLOPs per weight per token in the block's matrices, plus the scores (4 s^2 h per sample).
  const double s_len = 4096, matrices = 4096.0 * 4096 * 2 + 4096.0 * 1024 * 2 + 3 * 4096.0 * 14336;
  CHECK(block.flops_per_sample == Approx(2 * matrices * s_len + 4 * s_len * s_len * 4096));
  // Under tensor 16 the 8 key/value heads are replicated on two ranks each (Megatron-core); the
  // other matrices split 16 ways.
  CHECK(block.params[1].numel_on(16) == 1024 * 4096 / 8);
  CHECK(block.params[0].numel_on(16) == 4096 * 4096 / 16);
}

TEST_CASE("plan::layers: decoder activations counted tensor by tensor (Korthikanti et al. re-derived)", "[plan]") {
  // s 16, h 64, 8 heads of 8, 2 key/value heads (K and V 16 wide), SwiGLU ffn 96, bf16 (2 bytes).
  const auto s = test::scenario_from(
      "model: {preset: transformer, layers: 1, hidden: 64, heads: 8, kv_heads: 2, ffn: 96, mlp: swiglu, norm: rmsnorm, "
      "positions: rope, seq_len: 16, vocab: 10}\nhardware: ideal\n");
  const auto& block = s.layers[1];
  plan::ParallelSpec p;
  p.precision = plan::Precision::bf16;
  // By hand, bytes per sample: the norms' inputs 2 x 2048, QKV's and the MLP's inputs 2 x 2048;
  // Q 2048, K 512, V 512, the output projection's input 2048; SwiGLU's input (gate and up) 6144
  // and the down projection's input 3072; the softmax output 8 x 16 x 16 x 2 = 4096. No dropout.
  CHECK(plan::full_activation_bytes(block, p) == 8192 + 2048 + 1024 + 2048 + 6144 + 3072 + 4096);
  // Tensor 4: what is whole stays whole, Q, the output projection's input, the MLP and the
  // scores split 4 ways, K and V only 2 (two key/value heads, each on two ranks).
  p.tensor = 4;
  CHECK(plan::full_activation_bytes(block, p) == 8192 + (2048 + 2048 + 6144 + 3072 + 4096) / 4 + 1024 / 2);
  // The same count at full multi-head attention, a GELU MLP, dropout 0.1 (its masks, a byte an
  // element, and the softmax's dropped copy) and ffn = 4h is the paper's eq. 1: s*h*(34 + 5*a*s/h).
  const auto gpt = test::scenario_from(
      "model: {preset: transformer, layers: 1, hidden: 64, heads: 8, mlp: gelu, dropout: 0.1, seq_len: 16, vocab: 10}\nhardware: ideal\n");
  plan::ParallelSpec q;
  q.precision = plan::Precision::bf16;
  CHECK(plan::full_activation_bytes(gpt.layers[1], q) == Approx(16 * 64 * (34 + 5.0 * 8 * 16 / 64)));
  // Its embedding keeps the token ids (int64, counted as two elements of e = 2 bytes) and, with
  // dropout, Megatron-LM's embedding dropout's mask: 16 x 2 x 2 + 16 x 64.
  CHECK(plan::full_activation_bytes(gpt.layers[0], q) == 16 * 2 * 2 + 16 * 64);
  // LibTorch's encoder layer at dropout 0 (the transformer preset): its dropouts return their
  // inputs, and ReLU keeps one ffn-wide tensor (its output, the second linear's input). By hand,
  // bytes per sample: the layer's input, Q (scaled), K, V, the output projection's input, norm1's
  // input and output, norm2's input: 8 x 64 x 2; ReLU's output 256 x 2; the softmax 8 x 16 x 2.
  const auto e = test::scenario_from("model: {preset: transformer, layers: 1, hidden: 64, heads: 8, seq_len: 16, vocab: 10}\nhardware: ideal\n");
  CHECK(plan::full_activation_bytes(e.layers[1], q) == 16 * (8 * 64 * 2 + 256 * 2 + 8 * 16 * 2));
  CHECK(plan::full_activation_bytes(e.layers[0], q) == 16 * 2 * 2);
  // At dropout 0.1 it keeps the two residual masks (64 bytes each), the scores' mask and dropped
  // copy, and its MLP's dropout's mask and dropped copy (the second linear's input, apart from
  // ReLU's output now).
  const auto dropped = test::scenario_from(
      "model: {preset: transformer, layers: 1, hidden: 64, heads: 8, dropout: 0.1, seq_len: 16, vocab: 10}\nhardware: ideal\n");
  CHECK(plan::full_activation_bytes(dropped.layers[1], q) == 16 * (8 * 64 * 2 + 256 * 2 + 2 * 64 + 8 * 16 * (2 + 2 + 1) + 256 * (1 + 2)));
  // The head keeps the norm's and the projection's inputs (64 each, bf16) and the cross entropy's
  // fp32 softmax of the 10 logits, not the bf16 logits: 16 x (2 x 64 x 2 + 10 x 4).
  plan::ParallelSpec bf16;
  bf16.precision = plan::Precision::bf16;
  CHECK(plan::full_activation_bytes(s.layers.back(), bf16) == 16 * (2 * 64 * 2 + 10 * 4));
}

TEST_CASE("plan::layers: torchtitan's per-op checkpointing keeps every second matmul's output, counted by hand", "[plan]") {
  // The block above with flash attention: s 16, h 64, 8 heads of 8, 2 key/value heads, SwiGLU ffn 96, bf16.
  const auto s = test::scenario_from(
      "model: {preset: transformer, layers: 1, hidden: 64, heads: 8, kv_heads: 2, ffn: 96, mlp: swiglu, norm: rmsnorm, "
      "positions: rope, attention: flash, seq_len: 16, vocab: 10}\nhardware: ideal\n");
  const auto& block = s.layers[1];
  plan::ParallelSpec p;
  p.precision = plan::Precision::bf16;
  p.activation_checkpointing = plan::Recompute::selective_op;
  // torchtitan's Llama runs wq (64 wide), wk (16), wv (16), wo (64), w1 (96), w3 (96), w2 (64): it
  // keeps wq, wv, w1 and w2's outputs (240), with the block's input (64) and attention's output
  // (64), 2 bytes each, and the fp32 log-sum-exp of 8 heads: (368 x 2 + 32) x 16 tokens.
  CHECK(plan::full_activation_bytes(block, p) == (368 * 2 + 32) * 16);
  // Tensor 4 with sequence parallelism (torchtitan's only form): the input 16, wq 16, wv 8 (two
  // key/value heads on four ranks), w1 24, w2's partial sums 64 whole, attention's output 16, and
  // the two reduce-scatters' outputs (it keeps them) 16 each; 2 heads' statistics.
  p.tensor = 4;
  p.sequence_parallel = true;
  CHECK(plan::full_activation_bytes(block, p) == ((16 + 16 + 8 + 24 + 64 + 16 + 32) * 2 + 8) * 16);
  // Backward re-runs wk, wo and w3: 2 x 64 x (16 + 64 + 96) FLOPs a token of the block's
  // 16 x (4 x 64 x 64 + 4 x 64 x 16 + 6 x 64 x 96) + 4 x 16 x 16 x 64 (roofline: costs follow FLOPs).
  plan::ParallelSpec one;
  one.precision = plan::Precision::bf16;
  one.activation_checkpointing = plan::Recompute::selective_op;
  const plan::LayerCost c = plan::estimate_layer_cost(block, s.hardware, one, 4096);  // microseconds: no rounding to speak of
  CHECK(c.recompute.count_ns() == Approx(c.forward.count_ns() * 16.0 * 2 * 64 * (16 + 64 + 96) / 983040).epsilon(1e-3));
  // MoE blocks and standard attention are not derived: refused at the key.
  CHECK_THROWS_WITH(test::scenario_from("model: {preset: transformer, layers: 1, hidden: 64, heads: 8, seq_len: 16, vocab: 10}\n"
                                        "parallel: {activation_checkpointing: selective_op}\nhardware: ideal\n"),
                    Catch::Contains("selective_op is torchtitan's") && Catch::Contains("standard attention"));
}

TEST_CASE("plan::cost: eager kernels move torchtitan's Llama ops' bytes, counted op by op", "[plan]") {
  // s 16, h 64, 8 heads of 8, 2 key/value heads, SwiGLU ffn 96, RMSNorm, rotary positions, bf16 (e = 2),
  // on the H100 profile: a memory-bound kernel takes its bytes at 3,350 GB/s x 0.896.
  const std::string model = "model: {preset: transformer, layers: 1, hidden: 64, heads: 8, kv_heads: 2, ffn: 96, mlp: swiglu, "
                            "norm: rmsnorm, positions: rope, attention: flash, seq_len: 16, vocab: 10";
  const auto fused = test::scenario_from(model + "}\nparallel: {precision: bf16}\nhardware: h100-nvlink-ib\n");
  const auto eager = test::scenario_from(model + ", kernels: eager}\nparallel: {precision: bf16}\nhardware: h100-nvlink-ib\n");
  REQUIRE(eager.layers[1].shape.eager);
  const auto f = *plan::kernel_class_times(fused.layers[1], fused.hardware, fused.parallel, 1, true);
  const auto g = *plan::kernel_class_times(eager.layers[1], eager.hardware, eager.parallel, 1, true);
  const double byte_per_us = 3350e3 * 0.896;
  // Beyond the fused kernels, per element: the two RMSNorms (2 x 16 x 64 elements) 2e + 28 = 32
  // bytes forward and 4e + 76 = 84 backward; rotary positions on Q and K (16 x (64 + 16)) 16 and
  // 16 - 2e = 12; SwiGLU (16 x 96) 2e = 4 and 3e = 6.
  CHECK((g.forward.memory - f.forward.memory) * byte_per_us == Approx(32 * 2048 + 16 * 1280 + 4 * 1536));
  CHECK((g.backward.memory - f.backward.memory) * byte_per_us == Approx(84 * 2048 + 12 * 1280 + 6 * 1536));
  // The GEMMs and attention are the same kernels either way.
  CHECK(g.forward.gemm == Approx(f.forward.gemm));
  CHECK(g.backward.flash == Approx(f.backward.flash));
}

// `simulate`'s kernels line (plan::step_kernels) holds what backward re-runs as the step's costs
// charge it (LayerCost::recompute), split by kind: selective recompute's modules as the full
// recompute's forward. Each split is checked against the costs, which the step is made of.
TEST_CASE("plan::step_kernels: what selective recompute re-runs, by kind, as the step's costs charge it", "[plan]") {
  const std::string dense = "model: {preset: transformer, layers: 2, hidden: 1024, heads: 8, kv_heads: 2, ffn: 2816, mlp: swiglu, "
                            "norm: rmsnorm, positions: rope, attention: flash, seq_len: 1024, vocab: 1000}\n";
  const std::string standard = "model: {preset: transformer, layers: 2, hidden: 1024, heads: 8, ffn: 4096, attention: standard, seq_len: 1024, vocab: 1000}\n";
  const auto step = [](const std::string& model, const std::string& recompute) {
    return plan::resolve_plan(test::scenario_from(model + "data: {batch_size: 4}\nparallel: {chunks: 2, precision: bf16, " + recompute +
                                                  "}\nhardware: h100-nvlink-ib\n"));
  };
  const auto charged = [](const plan::Plan& p) {  // what the step's costs add to backward, over the step
    double us = 0;
    for (size_t l = 0; l < p.layers().size(); ++l)
      us += plan::estimate_layer_cost(p.layers()[l], p.scenario.hardware, p.scenario.parallel, p.microbatch_size, l > 0).recompute.to_us();
    return us * p.schedule.microbatches();
  };
  for (const auto& [model, recompute] : std::vector<std::pair<std::string, std::string>>{
           {dense, "activation_checkpointing: selective_op"},
           {standard, "activation_checkpointing: selective, recompute_modules: [core_attn, layernorm]"},
           {dense, "activation_checkpointing: selective, recompute_modules: [mlp, layernorm]"}}) {
    INFO(recompute);
    const plan::Plan none = step(model, "activation_checkpointing: false"), again = step(model, recompute);
    const auto k0 = *plan::step_kernels(none), k1 = *plan::step_kernels(again);
    REQUIRE(charged(again) > 0);
    CHECK(k1.total_us() - k0.total_us() == Approx(charged(again)).epsilon(1e-4));  // the costs are whole nanoseconds
    CHECK(k1.us.gemm > k0.us.gemm);  // each of these re-runs GEMMs and memory-bound kernels
    CHECK(k1.us.memory > k0.us.memory);
    CHECK(k1.us.flash == Approx(k0.us.flash));  // flash attention's output is kept
  }
}

TEST_CASE("plan::cost: dropout's kernels move their masks only above a rate of 0", "[plan]") {
  // s 16, h 64, 8 heads, GELU ffn 256, standard attention, bf16 (e = 2), on the H100 profile: a
  // memory-bound kernel takes its bytes at 3,350 GB/s x 0.896.
  const std::string model = "model: {preset: transformer, layers: 1, hidden: 64, heads: 8, mlp: gelu, attention: standard, seq_len: 16, vocab: 10";
  const auto at = [&](const std::string& dropout) {
    return test::scenario_from(model + ", dropout: " + dropout + "}\nparallel: {precision: bf16}\nhardware: h100-nvlink-ib\n");
  };
  const auto none = at("0"), dropped = at("0.1");
  const double byte_per_us = 3350e3 * 0.896;
  const auto block = [](const plan::Scenario& s, int l) { return *plan::kernel_class_times(s.layers[l], s.hardware, s.parallel, 1, l > 0); };
  // The block: both residual adds write a mask (16 x 64 bytes each); the softmax's dropout reads
  // the scores and writes them and a mask (8 x 16 x 16 x (2e + 1)). Backward moves each twice.
  const double block_bytes = 2 * 16 * 64 + 8 * 16 * 16 * 5;
  CHECK((block(dropped, 1).forward.memory - block(none, 1).forward.memory) * byte_per_us == Approx(block_bytes));
  CHECK((block(dropped, 1).backward.memory - block(none, 1).backward.memory) * byte_per_us == Approx(2 * block_bytes));
  CHECK(block(dropped, 1).forward.gemm == Approx(block(none, 1).forward.gemm));
  // The embedding's dropout: read, write and a mask (16 x 64 x (2e + 1)) each way.
  CHECK((block(dropped, 0).forward.memory - block(none, 0).forward.memory) * byte_per_us == Approx(16 * 64 * 5));
  CHECK((block(dropped, 0).backward.memory - block(none, 0).backward.memory) * byte_per_us == Approx(16 * 64 * 5));
  // LibTorch's encoder layer runs each residual's dropout apart from its add (2e + 1 more bytes an
  // element than the add alone, twice), and drops inside its MLP (16 x 256 x (2e + 1)).
  const std::string encoder = "model: {preset: transformer, layers: 1, hidden: 64, heads: 8, attention: standard, seq_len: 16, vocab: 10";
  const auto encoder_at = [&](const std::string& dropout) {
    return test::scenario_from(encoder + ", dropout: " + dropout + "}\nparallel: {precision: bf16}\nhardware: h100-nvlink-ib\n");
  };
  const auto plain = encoder_at("0"), dropping = encoder_at("0.1");
  CHECK((block(dropping, 1).forward.memory - block(plain, 1).forward.memory) * byte_per_us ==
        Approx(2 * 16 * 64 * 5 + 8 * 16 * 16 * 5 + 16 * 256 * 5));
  // A profile's measured figures are keyed by what the layer runs: dropout is part of the key.
  CHECK_THAT(plan::layer_signature(dropped.layers[1], plan::Precision::bf16), Catch::Contains(" dropout0.1"));
  CHECK_THAT(plan::layer_signature(none.layers[1], plan::Precision::bf16), !Catch::Contains("dropout"));
}

TEST_CASE("plan::memory: a ReLU MLP keeps one ffn-wide tensor, two when its down projection casts to fp8", "[plan]") {
  const std::string model = "model: {preset: transformer, layers: 1, hidden: 64, heads: 8, ffn: 256, attention: flash, seq_len: 16, vocab: 10, mlp: ";
  const auto block = [&](const std::string& mlp, const std::string& precision) {
    const auto s = test::scenario_from(model + mlp + "}\nparallel: {precision: " + precision + "}\nhardware: h100-nvlink-ib\n");
    return plan::full_activation_bytes(s.layers[1], s.parallel);
  };
  // bf16: GELU keeps its input and output (2 x 16 x 256 x 2 bytes), ReLU its output alone.
  CHECK(block("gelu", "bf16") - block("relu", "bf16") == 16 * 256 * 2);
  // fp8: ReLU's bf16 output for its backward and the down projection's fp8 cast, as GELU.
  CHECK(block("relu", "fp8") == block("gelu", "fp8"));
}

TEST_CASE("plan::memory: the loss's backward holds the logits' gradients as its trainer's cross entropy makes them", "[plan]") {
  // 2 samples of 16 tokens, 1,000 logits each, bf16, nothing recomputed: the transient is the loss's.
  auto transient = [](const std::string& framework) {
    return test::plan_from("framework: " + framework + "\nmodel: {preset: transformer, layers: 1, hidden: 64, heads: 8, seq_len: 16, vocab: 1000}\n"
                           "data: {batch_size: 2}\nparallel: {precision: bf16}\nhardware: ideal\n")
        .ranks[0].memory.recompute;
  };
  // torch's cross_entropy: nll_loss's fp32 gradient and log_softmax's, 8 bytes a logit.
  CHECK(transient("torchtitan") == 2 * 16 * 1000 * 8);
  CHECK(transient("pytorch") == 2 * 16 * 1000 * 8);
  // Megatron-LM's vocabulary-parallel cross entropy: in place, then cast to bf16; over the
  // vocabulary Megatron-LM pads to a multiple of 128 (1,024 logits).
  CHECK(transient("megatron") == 2 * 16 * 1024 * 2);
}

TEST_CASE("plan::memory: a fused loss keeps the logits at the compute type and writes their gradient so", "[plan]") {
  // 2 samples of 16 tokens, 1,000 logits each, bf16, torchtitan; eager: torch's cross_entropy on fp32 logits.
  auto memory = [](const std::string& loss) {
    return test::plan_from("framework: torchtitan\nmodel: {preset: transformer, layers: 1, hidden: 64, heads: 8, seq_len: 16, vocab: 1000, "
                           "loss: " + loss + "}\ndata: {batch_size: 2}\nparallel: {precision: bf16}\nhardware: ideal\n")
        .ranks[0].memory;
  };
  const auto eager = memory("eager"), fused = memory("fused");
  // Kept by the head: the fp32 softmax (4 bytes a logit) against the bf16 logits (2).
  CHECK(eager.activations - fused.activations == 2 * 16 * 1000 * (4 - 2));
  // The backward's gradient of the logits: 8 bytes a logit against one bf16 tensor.
  CHECK(fused.recompute == 2 * 16 * 1000 * 2);
  CHECK(eager.recompute == 2 * 16 * 1000 * 8);
  CHECK_THAT(test::parse_error("model: {preset: transformer, loss: compiled}\nhardware: ideal\n"), Catch::Contains("eager | megatron | fused"));
}

TEST_CASE("plan::cost: the cross entropy moves the bytes its trainer's kernels move, counted kernel by kernel", "[plan]") {
  // One sample of 16 tokens, 1,000 logits each, bf16 (e = 2), on the H100 profile: a memory-bound
  // kernel takes its bytes at 3,350 GB/s x 0.896. The head's GEMMs and norm are the same whatever
  // the loss; only the cross entropy's kernels differ.
  auto head = [](const std::string& loss) {
    const auto s = test::scenario_from("model: {preset: transformer, layers: 1, hidden: 64, heads: 8, seq_len: 16, vocab: 1000, loss: " +
                                       loss + "}\nparallel: {precision: bf16}\nhardware: h100-nvlink-ib\n");
    REQUIRE(s.layers.back().shape.loss == (loss == "eager" ? plan::Loss::eager : loss == "megatron" ? plan::Loss::megatron : plan::Loss::fused));
    return *plan::kernel_class_times(s.layers.back(), s.hardware, s.parallel, 1, true);
  };
  const auto eager = head("eager"), megatron = head("megatron"), fused = head("fused");
  const double byte_per_us = 3350e3 * 0.896, logits = 16 * 1000;
  // torch's cross_entropy(logits.float()): the cast (2 + 4), log_softmax's read and write (8): 14 a
  // logit; backward nll_loss's gradient (4), log_softmax's two reads and a write (12), the cast back
  // (4 + 2): 22. Megatron-core's, a kernel a step: the cast (6), max (4), subtract, exp and divide in
  // place (8 each), sum (4): 38; backward the multiply in place (8) and the cast back (6): 14.
  CHECK((megatron.forward.memory - eager.forward.memory) * byte_per_us == Approx((38 - 14) * logits));
  CHECK((megatron.backward.memory - eager.backward.memory) * byte_per_us == Approx((14 - 22) * logits));
  // A compiled one: the bf16 logits read once forward; read and the gradient written back: 2 and 4.
  CHECK((fused.forward.memory - eager.forward.memory) * byte_per_us == Approx((2 - 14) * logits));
  CHECK((fused.backward.memory - eager.backward.memory) * byte_per_us == Approx((4 - 22) * logits));
  CHECK(megatron.forward.gemm == Approx(eager.forward.gemm));
  // In fp32 there is no cast either way: Megatron's 32 and 8, torch's 8 and 16.
  CHECK(plan::loss_bytes(plan::Loss::megatron, 4).forward == 32);
  CHECK(plan::loss_bytes(plan::Loss::megatron, 4).backward == 8);
  CHECK(plan::loss_bytes(plan::Loss::eager, 4).forward == 8);
  CHECK(plan::loss_bytes(plan::Loss::eager, 4).backward == 16);
  // framework megatron runs Megatron-core's, and says so; a loss the scenario names wins.
  const std::string model = "model: {preset: transformer, layers: 1, hidden: 64, heads: 8, seq_len: 16, vocab: 1000";
  const auto by_framework = test::scenario_from("framework: megatron\n" + model + "}\nhardware: ideal\n");
  CHECK(by_framework.layers.back().shape.loss == plan::Loss::megatron);
  CHECK(std::count(by_framework.framework_set.begin(), by_framework.framework_set.end(), "model.loss=megatron") == 1);
  const auto named = test::scenario_from("framework: megatron\n" + model + ", loss: eager}\nhardware: ideal\n");
  CHECK(named.layers.back().shape.loss == plan::Loss::eager);
  CHECK(std::count(named.framework_set.begin(), named.framework_set.end(), "model.loss=megatron") == 0);
  CHECK(test::scenario_from("framework: torchtitan\n" + model + "}\nhardware: ideal\n").layers.back().shape.loss == plan::Loss::eager);
}

TEST_CASE("plan::layers: query and key norms (Qwen3's), counted by hand", "[plan]") {
  // The block above (s 16, h 64, 8 heads of 8, 2 key/value heads, SwiGLU ffn 96, RMSNorm, rotary
  // positions, no biases, bf16) with each head's query and key normed.
  const std::string model = "model: {preset: transformer, layers: 1, hidden: 64, heads: 8, kv_heads: 2, ffn: 96, mlp: swiglu, "
                            "norm: rmsnorm, positions: rope, bias: false, attention: flash, seq_len: 16, vocab: 10";
  const auto plain = test::scenario_from(model + "}\nparallel: {precision: bf16}\nhardware: h100-nvlink-ib\n");
  const auto normed = test::scenario_from(model + ", qk_norm: true}\nparallel: {precision: bf16}\nhardware: h100-nvlink-ib\n");
  const auto& block = normed.layers[1];
  // Two more parameters of one head's width (8), after o_proj as Qwen3Attention registers them.
  REQUIRE(block.params.size() == plain.layers[1].params.size() + 2);
  CHECK(block.params[4].name == "layers.0.self_attn.q_norm.weight");
  CHECK(block.params[5].name == "layers.0.self_attn.k_norm.weight");
  CHECK(block.params[5].shape == std::vector<int64_t>{8});
  // Kept for backward: the norms' inputs, Q (16 x 64) and K (16 x 16) before the norm, 2 bytes
  // each; at tensor 4 Q splits 4 ways, K 2 (two key/value heads).
  plan::ParallelSpec p;
  p.precision = plan::Precision::bf16;
  CHECK(plan::full_activation_bytes(block, p) - plan::full_activation_bytes(plain.layers[1], p) == 2 * 16 * (64 + 16));
  p.tensor = 4;
  CHECK(plan::full_activation_bytes(block, p) - plan::full_activation_bytes(plain.layers[1], p) == 2 * 16 * (64 / 4 + 16 / 2));
  // The norms read and write Q and K: 2e x 16 x (64 + 16) bytes forward, twice that backward, at
  // the profile's memory-bound 3,350 GB/s x 0.896; no GEMM changes.
  const auto f = *plan::kernel_class_times(plain.layers[1], plain.hardware, plain.parallel, 1, true);
  const auto g = *plan::kernel_class_times(block, normed.hardware, normed.parallel, 1, true);
  const double byte_per_us = 3350e3 * 0.896;
  CHECK((g.forward.memory - f.forward.memory) * byte_per_us == Approx(4 * 16 * 80));
  CHECK((g.backward.memory - f.backward.memory) * byte_per_us == Approx(8 * 16 * 80));
  CHECK(g.forward.gemm == Approx(f.forward.gemm));
  // Its own calibration signature; refused beside latent attention, whose norms are the latents'.
  CHECK(plan::layer_signature(block, plan::Precision::bf16) != plan::layer_signature(plain.layers[1], plan::Precision::bf16));
  CHECK_THAT(test::parse_error("model: {preset: transformer, hidden: 64, heads: 4, positions: rope, qk_norm: true, "
                               "mla: {kv_lora_rank: 8, qk_nope_head_dim: 8, qk_rope_head_dim: 4, v_head_dim: 6}}\nhardware: ideal\n"),
             Catch::Contains("model.qk_norm with model.mla"));
}

TEST_CASE("plan::layers: sliding-window attention, counted by hand", "[plan]") {
  // A Llama block at s 4,096 with flash attention on the H100 profile; a window of 1,024 tokens in
  // every block but every second (blocks 1, 3: Megatron-core's window_attn_skip_freq 2).
  const std::string model = "model: {preset: transformer, layers: 4, hidden: 512, heads: 4, kv_heads: 2, ffn: 1024, mlp: swiglu, "
                            "norm: rmsnorm, positions: rope, bias: false, attention: flash, seq_len: 4096, vocab: 100";
  const auto full = test::scenario_from(model + "}\nparallel: {precision: bf16}\nhardware: h100-nvlink-ib\n");
  const auto windowed =
      test::scenario_from(model + ", sliding_window: 1024, full_attention_every: 2}\nparallel: {precision: bf16}\nhardware: h100-nvlink-ib\n");
  std::vector<int64_t> windows;
  for (int i = 1; i <= 4; ++i) windows.push_back(windowed.layers[i].shape.window);
  CHECK(windows == std::vector<int64_t>{1024, 0, 1024, 0});
  // Keys a query attends to, over the 4,096 queries: the first 1,024 attend to 1 .. 1,024, the rest
  // to 1,024 each: (1,024 x 1,025 / 2 + 3,072 x 1,024) / 4,096 = 896.125; causal, 4,096 / 2.
  CHECK(windowed.layers[1].shape.keys_per_query() == Approx(896.125));
  CHECK(full.layers[1].shape.keys_per_query() == Approx(2048));
  CHECK(windowed.layers[2].shape.keys_per_query() == Approx(2048));
  // Flash attention's time: those FLOPs, at the causal figure of a 1,024-token sequence instead of
  // a 4,096-token one (the profile's fractions); the GEMMs and the memory-bound kernels unchanged.
  const auto f = *plan::kernel_class_times(full.layers[1], full.hardware, full.parallel, 1, true);
  const auto w = *plan::kernel_class_times(windowed.layers[1], windowed.hardware, windowed.parallel, 1, true);
  const plan::ComputeModel& c = *full.hardware.device.compute;
  const double fractions = c.flash_sequence_fraction(false, true, 4096) / c.flash_sequence_fraction(false, true, 1024);
  CHECK(w.forward.flash / f.forward.flash == Approx(896.125 / 2048 * fractions));
  CHECK(w.backward.flash / f.backward.flash == Approx(896.125 / 2048 * fractions));
  CHECK(w.forward.gemm == Approx(f.forward.gemm));
  CHECK(w.forward.memory == Approx(f.forward.memory));
  // A window as long as the sequence is full attention.
  CHECK(test::scenario_from(model + ", sliding_window: 4096}\nhardware: ideal\n").layers[1].shape.keys_per_query() == Approx(2048));
  // What it cannot plan, refused at the key.
  CHECK_THAT(test::parse_error(model + ", full_attention_every: 2}\nhardware: ideal\n"), Catch::Contains("needs model.sliding_window"));
  CHECK_THAT(test::parse_error(model + ", sliding_window: 1024}\nparallel: {context: 2}\nhardware: h100-nvlink-ib\n"),
             Catch::Contains("parallel.context 2 with sliding-window attention"));
  CHECK_THAT(test::parse_error("model: {preset: transformer, hidden: 64, heads: 4, positions: rope, sliding_window: 8, "
                               "mla: {kv_lora_rank: 8, qk_nope_head_dim: 8, qk_rope_head_dim: 4, v_head_dim: 6}}\nhardware: ideal\n"),
             Catch::Contains("model.sliding_window with model.mla"));
  // Mistral 7B v0.1's config: a window of 4,096 in every block, read from sliding_window.
  const test::TempFile config("parallax-window-test.json",
                              R"({"architectures": ["MistralForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336,
                                  "num_attention_heads": 32, "num_hidden_layers": 32, "num_key_value_heads": 8, "vocab_size": 32000,
                                  "hidden_act": "silu", "sliding_window": 4096})");
  const auto mistral = test::scenario_from("model: {hf_config: " + config.path + ", seq_len: 8192}\nhardware: ideal\n");
  CHECK(mistral.layers[1].shape.window == 4096);
  CHECK(mistral.layers[32].shape.window == 4096);
}

TEST_CASE("plan::layers: the block-form keys", "[plan]") {
  // Any of them makes a decoder block: GPT-2's (GELU, LayerNorm, learned positions) unless told.
  const auto gpt = test::scenario_from("model: {preset: transformer, layers: 1, hidden: 32, heads: 4, seq_len: 8, vocab: 10, "
                                       "tie_embeddings: true}\nhardware: ideal\n");
  CHECK(gpt.layers[1].shape.form.decoder);
  CHECK(gpt.layers[1].shape.form.mlp == plan::Mlp::gelu);
  CHECK(gpt.layers.back().params.size() == 2);  // head.norm only: the projection is the embedding's
  CHECK(gpt.model_description.find("decoder blocks") != std::string::npos);
  // The classic preset is unchanged: LibTorch's encoder layer, its signature as older profiles wrote it.
  const auto enc = test::scenario_from("model: {preset: transformer, layers: 1, hidden: 32, heads: 4, seq_len: 8, vocab: 10}\nhardware: ideal\n");
  CHECK_FALSE(enc.layers[1].shape.form.decoder);
  CHECK(plan::layer_signature(enc.layers[1], plan::Precision::fp32) == "encoder h32 heads4 ffn128 seq8 fp32");
  CHECK(plan::layer_signature(gpt.layers[1], plan::Precision::fp32) != plan::layer_signature(enc.layers[1], plan::Precision::fp32));
  // model.max_positions: the learned table's rows, hand-counted (rows x hidden), at least seq_len.
  const auto rows = [](const std::string& keys) {
    const auto s = test::scenario_from("model: {preset: transformer, layers: 1, hidden: 32, heads: 4, seq_len: 8, vocab: 10, " + keys +
                                       "}\nhardware: ideal\n");
    return s.layers.front().param_count() - 10 * 32;  // less the token table
  };
  CHECK(rows("tie_embeddings: true") == 8 * 32);
  CHECK(rows("tie_embeddings: true, max_positions: 64") == 64 * 32);
  CHECK(rows("max_positions: 64") == 64 * 32);  // LibTorch's encoder layer's embedding too
  CHECK(rows("positions: rope") == 0);
  CHECK_THAT(test::parse_error("model: {preset: transformer, hidden: 32, heads: 4, seq_len: 8, max_positions: 4}\nhardware: ideal\n"),
             Catch::Contains("model.seq_len 8 is longer than the 4 learned positions of model.max_positions"));
  CHECK_THAT(test::parse_error("model: {preset: transformer, hidden: 32, heads: 4, positions: rope, max_positions: 64}\nhardware: ideal\n"),
             Catch::Contains("rotary positions (model.positions: rope) have none"));
  CHECK_THAT(test::parse_error("model: {preset: transformer, hidden: 32, heads: 4, kv_heads: 3}\nhardware: ideal\n"),
             Catch::Contains("'model.kv_heads' (3) must divide 'model.heads' (4)"));
  CHECK_THAT(test::parse_error("model: {preset: transformer, hidden: 32, heads: 4, mlp: tanh}\nhardware: ideal\n"),
             Catch::Contains("relu | gelu | swiglu | relu2"));
  // Tensor 4 over 2 key/value heads replicates them; tensor 4 over 3 cannot.
  CHECK(test::parse_error("model: {preset: transformer, hidden: 64, heads: 8, kv_heads: 2}\nparallel: {tensor: 4}\nhardware: ideal\n").empty());
  CHECK_THAT(test::parse_error("model: {preset: transformer, hidden: 96, heads: 12, kv_heads: 3}\nparallel: {tensor: 4}\nhardware: ideal\n"),
             Catch::Contains("3 key/value heads"));
}

TEST_CASE("plan::hf_config: --set model.hf_config replaces the file's model but its seq_len", "[plan]") {
  const auto s = plan::load_scenario("", {"model.hf_config=" + model_file("llama-3.1-8b.json"), "parallel.partition_len=balanced"});
  CHECK(s.layers.size() == 34);
  CHECK(s.layers[1].shape.seq_len == 128);  // the default scenario's
  CHECK(s.model_description.rfind("llama-3.1-8b.json (LlamaForCausalLM): embed + 32 decoder blocks", 0) == 0);
  // Keys set beside it override the config.
  const auto t = plan::load_scenario("", {"model.hf_config=" + model_file("llama-3.1-8b.json"), "model.layers=4",
                                          "parallel.partition_len=balanced"});
  CHECK(t.layers.size() == 6);
}

TEST_CASE("plan::hf_config: a head width from head_dim where the heads do not split the width (Minitron-8B)", "[plan]") {
  // nvidia/Minitron-8B-Base's config: 48 heads of 128 at hidden 4,096 (4,096 / 48 is not whole).
  test::TempFile c("parallax-hf-test.json",
                   R"({"architectures": ["NemotronForCausalLM"], "hidden_size": 4096, "head_dim": 128, "num_attention_heads": 48,
                       "num_key_value_heads": 8, "intermediate_size": 16384, "num_hidden_layers": 32, "vocab_size": 256000,
                       "hidden_act": "relu2", "tie_word_embeddings": false})");
  const auto s = test::scenario_from("model: {hf_config: " + c.path + ", seq_len: 4096}\nhardware: ideal\n");
  // Per block by hand: Q and O 2 x 4096 x 48 x 128, K and V 2 x 4096 x 8 x 128, the squared-ReLU
  // MLP 2 x 4096 x 16384, two LayerNorm1Ps with biases 2 x 2 x 4096; then the untied embedding and
  // head 2 x 256000 x 4096 and the final norm 2 x 4096.
  const int64_t block = 2LL * 4096 * 48 * 128 + 2LL * 4096 * 8 * 128 + 2LL * 4096 * 16384 + 4LL * 4096;
  CHECK(params(s) == 32 * block + 2LL * 256000 * 4096 + 2 * 4096);
  CHECK(params(s) == 8'271'699'968);
  CHECK(s.layers[1].shape.head_dim() == 128);
  // Without head_dim the heads must split the width, and the message says where a key could help.
  test::TempFile bare("parallax-hf-test.json", R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 100, "num_attention_heads": 3,
                                                 "intermediate_size": 16, "num_hidden_layers": 1, "vocab_size": 10, "hidden_act": "silu"})");
  CHECK_THAT(test::parse_error("model: {hf_config: " + bare.path + ", seq_len: 8}\nhardware: ideal\n"),
             Catch::StartsWith(bare.path + ":1:56: the width 100 is not divisible by the 3 attention heads, and no head_dim"));
  // A --set that makes the heads not divide names the flag, not the file's line.
  CHECK_THROWS_WITH(plan::load_scenario("", {"model.heads=7"}), Catch::StartsWith("--set model.heads=7: 'model.hidden' (512)"));
}

TEST_CASE("plan::hf_config: the file must be JSON, and each field read of transformers' type", "[plan]") {
  const std::string llama = R"("architectures": ["LlamaForCausalLM"], "num_attention_heads": 4, "intermediate_size": 16,
                               "num_hidden_layers": 1, "vocab_size": 10, "hidden_act": "silu")";
  auto error = [](const test::TempFile& c) { return test::parse_error("model: {hf_config: " + c.path + ", seq_len: 8}\nhardware: ideal\n"); };
  SECTION("a number as a string (YAML would read 2048; Python keeps the string)") {
    test::TempFile c("parallax-hf-test.json", "{" + llama + ",\n \"hidden_size\": \"64\"}");
    CHECK_THAT(error(c), Catch::StartsWith(c.path + ":3:17: 'hidden_size' is \"64\"; transformers reads it as a whole JSON number"));
  }
  SECTION("a boolean as a string (\"false\" is true in Python)") {
    test::TempFile c("parallax-hf-test.json", "{" + llama + ", \"hidden_size\": 64, \"tie_word_embeddings\": \"false\"}");
    CHECK_THAT(error(c), Catch::Contains("'tie_word_embeddings' is \"false\"; transformers reads it as true or false"));
  }
  SECTION("text after the object, which YAML would drop") {
    test::TempFile c("parallax-hf-test.json", "{" + llama + ", \"hidden_size\": 64}\nhello\n");
    CHECK_THAT(error(c), Catch::StartsWith(c.path + ":3:1: not JSON"));
  }
  SECTION("YAML that is not JSON: an anchor, a trailing comma") {
    test::TempFile anchor("parallax-hf-test.json", "{" + llama + ", \"hidden_size\": &a 64, \"head_dim\": *a}");
    CHECK_THAT(error(anchor), Catch::Contains("not JSON"));
    test::TempFile comma("parallax-hf-test.json", "{" + llama + ", \"hidden_size\": 64,}");
    CHECK_THAT(error(comma), Catch::Contains("not JSON"));
  }
  SECTION("empty, or not an object") {
    test::TempFile empty("parallax-hf-test.json", "\n");
    CHECK_THAT(error(empty), Catch::Contains("empty file"));
    test::TempFile list("parallax-hf-test.json", "[1, 2]");
    CHECK_THAT(error(list), Catch::Contains("is a JSON object, not array"));
  }
  SECTION("a model's folder is read as from_pretrained reads it, its config.json") {
    const auto dir = std::filesystem::temp_directory_path() / ("parallax-hf-dir-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    CHECK_THAT(test::parse_error("model: {hf_config: " + dir.string() + ", seq_len: 8}\nhardware: ideal\n"),
               Catch::Contains("is a folder with no config.json in it"));
    std::filesystem::copy_file(model_file("llama-3.1-8b.json"), dir / "config.json");
    CHECK(params(test::scenario_from("model: {hf_config: " + dir.string() + ", seq_len: 8}\nhardware: ideal\n")) == 8'030'261'248);
    std::filesystem::remove_all(dir);
  }
}

TEST_CASE("plan::hf_config: what it cannot read is refused at the field", "[plan]") {
  SECTION("an unknown field") {
    test::TempFile c("parallax-hf-test.json", "{\n  \"architectures\": [\"LlamaForCausalLM\"],\n  \"hidden_size\": 64,\n  \"moe_layers\": 3\n}\n");
    CHECK_THAT(test::parse_error("model: {hf_config: " + c.path + ", seq_len: 8}\nhardware: ideal\n"),
               Catch::StartsWith(c.path + ":4:3: unknown key 'moe_layers'"));
  }
  SECTION("an unknown architecture") {
    test::TempFile c("parallax-hf-test.json", "{\"architectures\": [\"Gemma3ForCausalLM\"]}\n");
    CHECK_THAT(test::parse_error("model: {hf_config: " + c.path + ", seq_len: 8}\nhardware: ideal\n"),
               Catch::Contains("Gemma3ForCausalLM") && Catch::Contains("LlamaForCausalLM | MistralForCausalLM"));
  }
  SECTION("a sequence past Qwen's sliding window (its first max_window_layers blocks full: not planned)") {
    test::TempFile c("parallax-hf-test.json",
                     R"({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                         "num_key_value_heads": 4, "num_hidden_layers": 2, "vocab_size": 100, "hidden_act": "silu", "use_sliding_window": true,
                         "sliding_window": 16, "max_window_layers": 1})");
    CHECK_THAT(test::parse_error("model: {hf_config: " + c.path + ", seq_len: 32}\nhardware: ideal\n"),
               Catch::Contains("sliding-window attention of 16 tokens") && Catch::Contains("max_window_layers"));
    CHECK(test::parse_error("model: {hf_config: " + c.path + ", seq_len: 16}\nhardware: ideal\n").empty());
    // No block past max_window_layers, or layer_types naming none sliding, or the window off: no window at all.
    const std::string qwen = R"({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                                 "num_key_value_heads": 4, "num_hidden_layers": 2, "vocab_size": 100, "hidden_act": "silu", "sliding_window": 16, )";
    for (const std::string rest : {R"("use_sliding_window": true, "max_window_layers": 2})",
                                   R"("use_sliding_window": true, "max_window_layers": 1, "layer_types": ["full_attention", "full_attention"]})",
                                   R"("use_sliding_window": false, "layer_types": ["full_attention", "sliding_attention"]})"}) {
      test::TempFile full("parallax-hf-test.json", qwen + rest);
      INFO(rest);
      CHECK(test::parse_error("model: {hf_config: " + full.path + ", seq_len: 32}\nhardware: ideal\n").empty());
    }
    test::TempFile listed("parallax-hf-test.json", qwen + R"("use_sliding_window": true, "layer_types": ["full_attention", "sliding_attention"]})");
    CHECK_THAT(test::parse_error("model: {hf_config: " + listed.path + ", seq_len: 32}\nhardware: ideal\n"), Catch::Contains("sliding-window attention of 16"));
    // Mistral 7B's (v0.1) window is planned: sliding-window attention in every block.
    CHECK(from_config("mistral-7b.json", 8192).layers[1].shape.window == 4096);
  }
  SECTION("a sequence longer than learned positions; rotary ones take any length") {
    CHECK_THAT(test::parse_error("model: {hf_config: " + model_file("gpt2.json") + ", seq_len: 1025}\nhardware: ideal\n"),
               Catch::Contains("longer than the 1024 positions this model takes"));
    CHECK_NOTHROW(from_config("llama-3.1-8b.json", 262144));  // its max_position_embeddings: 131072
    // GPT2Config's default n_positions, 1,024, where the config leaves it out.
    test::TempFile bare("parallax-hf-gpt2.json", R"({"architectures": ["GPT2LMHeadModel"], "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 100})");
    CHECK(test::scenario_from("model: {hf_config: " + bare.path + ", seq_len: 64}\nhardware: ideal\n").layers.front().params[1].shape[0] == 1024);
    CHECK_THAT(test::parse_error("model: {hf_config: " + bare.path + ", seq_len: 2048}\nhardware: ideal\n"),
               Catch::Contains("(n_positions, not in the config: GPT2Config's default)"));
  }
  SECTION("no seq_len") {
    CHECK_THAT(test::parse_error("model: {hf_config: " + model_file("llama-3.1-8b.json") + "}\nhardware: ideal\n"),
               Catch::Contains("needs 'model.seq_len'"));
  }
  SECTION("a model_type of another family than the architecture (transformers takes its config class from model_type)") {
    test::TempFile c("parallax-hf-test.json",
                     R"({"architectures": ["LlamaForCausalLM"], "model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128,
                         "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100, "hidden_act": "silu"})");
    CHECK_THAT(test::parse_error("model: {hf_config: " + c.path + ", seq_len: 8}\nhardware: ideal\n"),
               Catch::Contains("model_type 'qwen2' is not LlamaForCausalLM's ('llama')"));
  }
  SECTION("another family's field: Qwen2-MoE's shared expert in a Qwen3-MoE config builds nothing in transformers") {
    test::TempFile c("parallax-hf-test.json",
                     R"({"architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                         "num_hidden_layers": 2, "vocab_size": 100, "hidden_act": "silu", "num_experts": 4, "num_experts_per_tok": 2,
                         "moe_intermediate_size": 32, "shared_expert_intermediate_size": 32})");
    CHECK_THAT(test::parse_error("model: {hf_config: " + c.path + ", seq_len: 8}\nhardware: ideal\n"),
               Catch::Contains("unknown key 'shared_expert_intermediate_size'"));
  }
  SECTION("DeepSeek's fields whose transformers defaults are V3's are read only as stated") {
    test::TempFile c("parallax-hf-test.json",
                     R"({"architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4,
                         "num_hidden_layers": 2, "vocab_size": 100, "hidden_act": "silu", "kv_lora_rank": 16, "qk_nope_head_dim": 8,
                         "qk_rope_head_dim": 8, "v_head_dim": 8, "n_routed_experts": null})");
    CHECK_THAT(test::parse_error("model: {hf_config: " + c.path + ", seq_len: 8}\nhardware: ideal\n"),
               Catch::Contains("missing required key 'q_lora_rank' (null for none)"));
  }
}

// Malformed where the field is: a scaling that is not a map had been read as none, layer_types
// that is not a list (or lists another count of blocks) as absent, and a null hidden_size as a
// missing one at the file's first line.
TEST_CASE("plan::hf_config: a malformed rope_scaling, rope_parameters or layer_types, or a null field, is refused where it is", "[plan]") {
  const std::string llama = "{\"architectures\": [\"LlamaForCausalLM\"], \"num_attention_heads\": 4, \"intermediate_size\": 16,\n"
                            " \"num_hidden_layers\": 2, \"vocab_size\": 10, \"hidden_act\": \"silu\",\n";
  auto error = [](const std::string& text) {
    test::TempFile c("parallax-hf-test.json", text);
    const std::string e = test::parse_error("model: {hf_config: " + c.path + ", seq_len: 8}\nhardware: ideal\n");
    return e.substr(std::min(e.size(), c.path.size()));  // the line and column on
  };
  CHECK(error(llama + " \"hidden_size\": 64, \"rope_scaling\": null}").empty());
  CHECK_THAT(error(llama + " \"hidden_size\": 64, \"rope_scaling\": \"linear\"}"),
             Catch::StartsWith(":3:37: 'rope_scaling' must be a map ({rope_type, factor, ...}) or null") && Catch::Contains("got linear"));
  CHECK_THAT(error(llama + " \"hidden_size\": 64, \"rope_parameters\": [1, 2]}"),
             Catch::Contains("'rope_parameters' must be a map") && Catch::Contains("got a list"));
  CHECK_THAT(error(llama + " \"hidden_size\": 64, \"layer_types\": \"full_attention\"}"),
             Catch::Contains("'layer_types' must list each of the 2 blocks' attention"));
  CHECK_THAT(error(llama + " \"hidden_size\": 64, \"layer_types\": [\"full_attention\"]}"),
             Catch::Contains("'layer_types' must list each of the 2 blocks' attention"));
  CHECK(error(llama + " \"hidden_size\": 64, \"layer_types\": [\"full_attention\", \"full_attention\"]}").empty());
  CHECK_THAT(error(llama + " \"hidden_size\": null}"), Catch::StartsWith(":3:17: 'hidden_size' is empty (null); it needs a value"));
}

// Configs as transformers writes them today, and left-out fields at their config class's defaults:
// each checked against the same model stated the older or the explicit way.
TEST_CASE("plan::hf_config: configs as transformers 4.56+ and 5 write them, and fields left to the family's default", "[plan]") {
  const auto count = [](const std::string& json) {
    test::TempFile c("parallax-hf-today.json", json);
    return params(test::scenario_from("model: {hf_config: " + c.path + ", seq_len: 64}\nhardware: ideal\n"));
  };
  const auto scenario = [](const std::string& json, int seq_len = 64) {
    test::TempFile c("parallax-hf-today.json", json);
    return test::scenario_from("model: {hf_config: " + c.path + ", seq_len: " + std::to_string(seq_len) + "}\nhardware: ideal\n");
  };
  const std::string llama = R"("hidden_size": 64, "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2,
                               "num_hidden_layers": 2, "vocab_size": 100, "hidden_act": "silu")";
  const int64_t base = count(R"({"architectures": ["LlamaForCausalLM"], "torch_dtype": "bfloat16", )" + llama + "}");
  // dtype (4.56+), layer_types, transformers' private keys, a checkpoint's quantization: no cost.
  CHECK(count(R"({"architectures": ["LlamaForCausalLM"], "dtype": "bfloat16", "_attn_implementation_autoset": true,
                  "layer_types": ["full_attention", "full_attention"], "quantization_config": {"quant_method": "fp8"}, )" + llama + "}") == base);
  // A bare config class's save: no architectures, its model_type's causal LM.
  CHECK(count(R"({"model_type": "llama", )" + llama + "}") == base);
  // transformers 5's rope_parameters: the base read as rope_theta was.
  const plan::Scenario v5 = scenario(R"({"architectures": ["LlamaForCausalLM"], "rope_parameters": {"rope_theta": 500000.0, "rope_type": "default"}, )" +
                                     llama + "}");
  CHECK(v5.layers[1].shape.form.rotary.base == 500000.0);
  CHECK(v5.layers[1].shape.form.rotary.scaling.empty());
  // Inside the rotary maps too, each field read holds its JSON type (YAML would take "8.0" as 8).
  test::TempFile quoted("parallax-hf-today.json", R"({"architectures": ["LlamaForCausalLM"], "rope_scaling": {"rope_type": "llama3", "factor": "8.0"}, )" +
                                                      llama + "}");
  CHECK_THAT(test::parse_error("model: {hf_config: " + quoted.path + ", seq_len: 64}\nhardware: ideal\n"),
             Catch::Contains("'rope_scaling.factor' is \"8.0\"; transformers reads it as a JSON number"));
  test::TempFile theta("parallax-hf-today.json", R"({"architectures": ["LlamaForCausalLM"], "rope_parameters": {"rope_theta": "5e5"}, )" + llama + "}");
  CHECK_THAT(test::parse_error("model: {hf_config: " + theta.path + ", seq_len: 64}\nhardware: ideal\n"),
             Catch::Contains("'rope_parameters.rope_theta' is \"5e5\""));
  // A path with an emoji, as json.dumps writes it: a surrogate pair of \u escapes.
  CHECK(count(R"({"architectures": ["LlamaForCausalLM"], "_name_or_path": "/data/\ud83e\udd99-ft", )" + llama + "}") == base);
  // MistralConfig's defaults: 8 key/value heads, a window of 4,096 (MixtralConfig's: 8, none).
  const std::string wide = R"("hidden_size": 256, "intermediate_size": 128, "num_attention_heads": 16, "num_hidden_layers": 2,
                              "vocab_size": 100, "hidden_act": "silu")";
  const plan::Scenario mistral = scenario(R"({"architectures": ["MistralForCausalLM"], )" + wide + "}", 8192);
  CHECK(params(mistral) == params(scenario(R"({"architectures": ["MistralForCausalLM"], "num_key_value_heads": 8, "sliding_window": 4096, )" +
                                           wide + "}", 8192)));
  CHECK(mistral.layers[1].shape.kv_heads() == 8);
  CHECK(mistral.layers[1].shape.window == 4096);
  CHECK(scenario(R"({"architectures": ["MistralForCausalLM"], "sliding_window": null, )" + wide + "}", 8192).layers[1].shape.window == 0);
  // Qwen3Config's head_dim is 128 whatever hidden / heads is (256 / 16 = 16 here).
  CHECK(count(R"({"architectures": ["Qwen3ForCausalLM"], "num_key_value_heads": 4, )" + wide + "}") ==
        count(R"({"architectures": ["Qwen3ForCausalLM"], "num_key_value_heads": 4, "head_dim": 128, )" + wide + "}"));
  // LlamaConfig's mlp_bias is false whatever attention_bias says: not planned as biases everywhere.
  test::TempFile biased("parallax-hf-today.json", R"({"architectures": ["LlamaForCausalLM"], "attention_bias": true, )" + llama + "}");
  CHECK_THAT(test::parse_error("model: {hf_config: " + biased.path + ", seq_len: 64}\nhardware: ideal\n"),
             Catch::Contains("attention_bias true with mlp_bias false (LlamaForCausalLM's default)"));
  // GPT-2's own n_special and predict_special_tokens (gpt2-medium's config has them).
  CHECK(count(R"({"architectures": ["GPT2LMHeadModel"], "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 64, "vocab_size": 100,
                  "n_special": 0, "predict_special_tokens": true})") ==
        count(R"({"architectures": ["GPT2LMHeadModel"], "n_embd": 64, "n_layer": 2, "n_head": 4, "n_positions": 64, "vocab_size": 100})"));
}

// MFU's numerator as torchtitan (its utils.get_num_flop_per_token) and Megatron-LM count it: 6 x the
// parameters a token passes through, the embedding table left out, plus 12 x layers x query width x
// sequence. Hand-counted from the published configs: Llama 3.1 8B's 8,030,261,248 parameters less
// its 128,256 x 4,096 table; GPT-2's 124,439,808 less its token (50,257 x 768) and position (1,024 x
// 768) tables, plus its output layer tied to the token table (a matrix a token still passes through).
TEST_CASE("plan::model_work: a step's model FLOPs as trainers count them for MFU", "[plan]") {
  const auto llama = plan::resolve_plan(test::scenario_from(
      "model: {hf_config: " + model_file("llama-3.1-8b.json") + ", seq_len: 8192}\ndata: {batch_size: 2}\n"
      "parallel: {data: 4, grad_accumulation: 3, precision: bf16}\nhardware: h100-nvlink-ib\n"));
  const plan::ModelWork w = plan::model_work(llama);
  const double tokens = 4.0 * 2 * 3 * 8192;
  CHECK(w.samples == 24);
  CHECK(w.tokens == tokens);
  CHECK(w.flops == Approx((6.0 * (8'030'261'248 - 128'256.0 * 4'096) + 12.0 * 32 * 4096 * 8192) * tokens).epsilon(1e-12));
  CHECK(w.peak_flops == Approx(989e12));  // the H100 SXM's dense bf16, as torchtitan's get_peak_flops has it
  CHECK(w.gpus == 4);
  const auto gpt2 = plan::resolve_plan(from_config("gpt2.json", 1024));
  const plan::ModelWork g = plan::model_work(gpt2);
  CHECK(g.flops == Approx((6.0 * (124'439'808 - 50'257.0 * 768 - 1'024.0 * 768 + 50'257.0 * 768) + 12.0 * 12 * 768 * 1024) *
                          g.tokens).epsilon(1e-12));
  CHECK(g.peak_flops == 0);  // no GPU: no MFU
}
