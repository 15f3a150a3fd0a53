#include "plan/trainer_export.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <sstream>

#include "plan/knobs.hpp"
#include "plan/trainer_rules.hpp"
#include "plan/yaml_reader.hpp"

namespace parallax::plan {

using schedule::ScheduleKind;
namespace {

// `text` between `open` and `close`, built by appending: g++ 12 warns falsely (-Wrestrict) on
// "x" + std::string + "y" where the middle string is a function's result.
std::string enclosed(char open, const std::string& text, char close) {
  std::string out(1, open);
  out += text;
  out += close;
  return out;
}

// The processes torchrun starts on each node: the same number on every one (the trainers' rules
// refuse a world that does not fill its nodes, plan/trainer_rules.cpp).
int processes_per_node(const Plan& p) { return std::min(p.world_size, p.scenario.hardware.devices_per_node); }

// The blocks of a transformer plan (embed, blocks, head), or an InputError: the trainers take GPT-
// style language models only.
const Layer& first_block(const Plan& p, const std::string& trainer) {
  const auto& layers = p.layers();
  const bool transformer = layers.size() >= 3 && layers.front().kind == LayerKind::embedding && layers.back().kind == LayerKind::head &&
                           std::all_of(layers.begin() + 1, layers.end() - 1, [](const Layer& l) { return l.kind == LayerKind::encoder; });
  if (!transformer)
    throw InputError(p.scenario.where("model"), trainer + " trains a language model (embedding, transformer blocks, head); this model is " +
                                                    p.scenario.model_description);
  const Layer& block = layers[1];
  if (!block.shape.form.decoder)
    throw InputError(p.scenario.where("model"),
                     "the transformer preset's default block is LibTorch's TransformerEncoderLayer (post-norm, ReLU), which " + trainer +
                         " does not build; give the block's form (model.mlp: gelu for GPT's, or a Hugging Face config) to export it");
  return block;
}

// The plan's fullest rank against the device's memory: a plan that does not fit exports all the same
// (the user may mean to change the device), with this said first among the notes.
std::string does_not_fit_note(const Plan& p) {
  const auto fullest = std::max_element(p.ranks.begin(), p.ranks.end(),
                                        [](const RankPlan& a, const RankPlan& b) { return a.memory.total() < b.memory.total(); });
  const int64_t device = p.scenario.hardware.device.memory_bytes();
  if (fullest == p.ranks.end() || p.scenario.hardware.device.holds(fullest->memory.total())) return "";
  char text[256];
  std::snprintf(text, sizeof text,
                "THIS PLAN DOES NOT FIT: its fullest rank (%d) needs %.2f GiB of the %s's %.2f GiB, and the trainer would run out of "
                "memory (parallax plan shows each part)",
                fullest->rank, static_cast<double>(fullest->memory.total()) / (1 << 30), p.scenario.hardware.device.name.c_str(),
                static_cast<double>(device) / (1 << 30));
  return text;
}

int blocks_on(const Plan& p, const Stage& st) {
  int n = 0;
  for (int l = st.first_layer; l < st.first_layer + st.layer_count; ++l) n += p.layers()[l].kind == LayerKind::encoder && !p.layers()[l].shape.mtp;
  return n;
}

// Megatron-LM's --pipeline-model-parallel-layout: each (virtual) stage in the model's order, '|'
// between them, a letter a layer: E the embedding, t a block, m a multi-token prediction module, L
// the head and loss (NVIDIA's DeepSeek-V3 recipes lay out "Et|(tt|)*30mL" so).
std::string megatron_layout(const Plan& p) {
  std::string out;
  for (const Stage& st : p.stages) {
    if (!out.empty()) out += "|";
    for (int l = st.first_layer; l < st.first_layer + st.layer_count; ++l) {
      const Layer& layer = p.layers()[l];
      out += layer.kind == LayerKind::embedding ? "E" : layer.kind == LayerKind::head ? "L" : layer.shape.mtp ? "m" : "t";
    }
  }
  return out;
}

std::string command_text(const std::string& head, const std::vector<TrainerArgument>& args, const std::vector<std::string>& notes) {
  std::ostringstream o;
  o << head;
  for (size_t i = 0; i < args.size(); ++i)
    o << "  " << args[i].first << (args[i].second.empty() ? "" : " " + args[i].second) << (i + 1 < args.size() ? " \\\n" : "\n");
  for (const auto& n : notes) o << "# " << n << "\n";
  return o.str();
}

// Megatron-LM's uniform split, or its first/last stage counts (--decoder-first/last-pipeline-num-layers);
// any other split, and any with a multi-token prediction module, as its explicit layout.
void megatron_partition(const Plan& p, std::vector<TrainerArgument>* args) {
  const ParallelSpec& par = p.scenario.parallel;
  std::vector<int> blocks;
  for (const Stage& st : p.stages) blocks.push_back(blocks_on(p, st));
  const bool uniform = std::all_of(blocks.begin(), blocks.end(), [&](int n) { return n == blocks.front(); });
  const bool middle_even = blocks.size() < 3 || std::all_of(blocks.begin() + 1, blocks.end() - 1, [&](int n) { return n == blocks[1]; });
  const bool mtp = std::any_of(p.layers().begin(), p.layers().end(), [](const Layer& l) { return l.shape.mtp; });
  // Megatron-core refuses a first or last stage count of 0 (TransformerConfig): a stage with no
  // blocks (the embedding or the head alone) is laid out explicitly.
  const bool empty_stage = std::any_of(blocks.begin(), blocks.end(), [](int n) { return n == 0; });
  if (mtp || empty_stage || (par.virtual_stages > 1 ? !uniform : !middle_even)) {
    args->push_back({"--pipeline-model-parallel-layout", enclosed('\'', megatron_layout(p), '\'')});
    return;
  }
  if (par.virtual_stages > 1) {
    args->push_back({"--num-layers-per-virtual-pipeline-stage", std::to_string(blocks.front())});
    return;
  }
  if (uniform || blocks.size() < 2) return;
  args->push_back({"--decoder-first-pipeline-num-layers", std::to_string(blocks.front())});
  args->push_back({"--decoder-last-pipeline-num-layers", std::to_string(blocks.back())});
}

// Sliding-window attention as TransformerConfig's window_size (left, right: a query's W most recent
// tokens are itself and W - 1 to its left) and window_attn_skip_freq (every n-th block full: n is
// the first full block's number, counted from 1). MTP modules are left out of the pattern.
void megatron_window(const Plan& p, std::vector<TrainerArgument>* args) {
  int64_t window = 0, first_full = 0, block = 0;
  for (const Layer& l : p.layers()) {
    if (l.kind != LayerKind::encoder || l.shape.mtp) continue;
    ++block;
    if (l.shape.window > 0) window = l.shape.window;
    else if (first_full == 0) first_full = block;
  }
  if (window == 0) return;
  args->push_back({"--window-size", std::to_string(window - 1) + ",0"});
  if (first_full > 0) args->push_back({"--window-attn-skip-freq", std::to_string(first_full)});
}

// The router as the model's config defines it, in Megatron-core's terms (NVIDIA's own DeepSeek
// arguments, examples/post_training/modelopt/conf/deepseek-ai/): its scores' function, softmax
// before the top-k where the top-k weights are not renormalized (Megatron-core's default takes the
// softmax over the top-k, which renormalized weights equal), DeepSeek-V3's balancing bias, its
// group-limited routing and its scaling of the weights. Changes no cost; defines the model.
void megatron_router(const Plan& p, const Layer& moe_block, std::vector<TrainerArgument>* args) {
  const Definition& d = moe_block.shape.form.definition;
  const bool softmax = d.router_score != "sigmoid";
  // transformer_config.py: "Please use --moe-router-pre-softmax when topk is 1", which weighs the
  // one expert by its probability. A config's renormalized top-1 weighs it 1, another model; a
  // model of Parallax's keys states no router and takes the flag.
  const bool top1 = softmax && moe_block.shape.moe.top_k == 1;
  if (top1 && d.router_renormalize && !p.scenario.hf_config_file.empty())
    throw InputError(p.scenario.where("model"), "a softmax router of one expert a token, its weight renormalized to 1: Megatron-core "
                                                "takes top-1 only with --moe-router-pre-softmax, which weighs the expert by its "
                                                "probability instead (another model)");
  if (!softmax) args->push_back({"--moe-router-score-function", "sigmoid"});
  if (softmax && (!d.router_renormalize || top1)) args->push_back({"--moe-router-pre-softmax", ""});
  if (d.router_expert_bias) args->push_back({"--moe-router-enable-expert-bias", ""});
  if (d.router_groups > 1)
    args->insert(args->end(), {{"--moe-router-num-groups", std::to_string(d.router_groups)},
                               {"--moe-router-group-topk", std::to_string(d.router_group_topk)}});
  if (d.router_scaling > 0 && d.router_scaling != 1) args->push_back({"--moe-router-topk-scaling-factor", number_text(d.router_scaling)});
  // Megatron-core's balancing loss defaults to a coefficient of 0: none, where the config trained with one.
  if (d.router_aux_coeff > 0)
    args->insert(args->end(), {{"--moe-router-load-balancing-type", d.router_aux_per_sequence ? "seq_aux_loss" : "aux_loss"},
                               {"--moe-aux-loss-coeff", number_text(d.router_aux_coeff)}});
}

// A MoE model's experts as Megatron-core's arguments: its all-to-all dispatcher and grouped GEMMs
// (what the plan costs), the expert degree, and which blocks are MoE as a --moe-layer-freq list.
void megatron_experts(const Plan& p, std::vector<TrainerArgument>* args) {
  std::string pattern;
  const Layer* moe_block = nullptr;
  for (const Layer& l : p.layers())
    if (l.kind == LayerKind::encoder && !l.shape.mtp) {  // --moe-layer-freq lists the model's blocks
      pattern += std::string(pattern.empty() ? "[" : ",") + (l.shape.moe.on() ? "1" : "0");
      if (l.shape.moe.on()) moe_block = &l;
    }
  if (!moe_block) return;
  const MoeShape* moe = &moe_block->shape.moe;
  const ParallelSpec& par = p.scenario.parallel;
  args->insert(args->end(), {{"--num-experts", std::to_string(moe->experts)},
                             {"--moe-router-topk", std::to_string(moe->top_k)},
                             {"--moe-ffn-hidden-size", std::to_string(moe->ffn)},
                             {"--moe-layer-freq", "'" + pattern + "]'"},
                             {"--expert-model-parallel-size", std::to_string(par.expert)},
                             {"--moe-grouped-gemm", ""}});
  // Megatron-LM's expert tensor size defaults to the tensor size (arguments.py).
  if (par.expert_tensor_ways() != par.tensor) args->push_back({"--expert-tensor-parallel-size", std::to_string(par.expert_tensor_ways())});
  // DeepEP is Megatron-core's flex dispatcher with its DeepEP backend.
  if (par.moe_token_dispatcher == TokenDispatcher::deepep)
    args->insert(args->end(), {{"--moe-token-dispatcher-type", "flex"}, {"--moe-flex-dispatcher-backend", "deepep"}});
  else
    args->push_back({"--moe-token-dispatcher-type", "alltoall"});
  if (moe->shared > 0) args->push_back({"--moe-shared-expert-intermediate-size", std::to_string(moe->shared * moe->ffn)});
  megatron_router(p, *moe_block, args);
  if (moe->capacity_factor > 0) args->push_back({"--moe-expert-capacity-factor", number_text(moe->capacity_factor)});
  if (par.overlap_moe_expert_parallel_comm) args->push_back({"--overlap-moe-expert-parallel-comm", ""});
}

}  // namespace

namespace {

// Rotary positions as the model's config encodes them (BlockForm::rotary): the base where it is
// not Megatron-LM's 10,000, Llama 3's scaling, latent attention's YaRN. Returns a note for a
// scaling Megatron-LM's arguments here do not express, else "".
std::string megatron_rotary(const BlockForm& f, std::vector<std::pair<std::string, std::string>>* a) {
  const Rotary& r = f.rotary;
  if (r.base > 0 && r.base != 10000) a->push_back({"--rotary-base", std::to_string(std::llround(r.base))});
  if (r.scaling.empty()) return "";
  if (r.scaling == "llama3") {
    a->push_back({"--use-rope-scaling", ""});
    if (r.factor > 0 && r.factor != 8) a->push_back({"--rope-scaling-factor", number_text(r.factor)});
    Rotary fixed = r;  // Megatron-core's _apply_scaling takes the factor only (rotary_pos_embedding.py)
    fixed.factor = 8;
    return fixed.llama31_scaling() ? ""
                                   : "the model's config scales its rotary positions as Llama 3 with low_freq_factor " + number_text(r.low_freq) +
                                         ", high_freq_factor " + number_text(r.high_freq) + " and original_max_position_embeddings " +
                                         std::to_string(r.original_max_positions) +
                                         ", where Megatron-core fixes 1, 4 and 8192 (rotary_pos_embedding.py): set them in Megatron-LM";
  }
  // YaRN: latent attention's by --rope-type, any other attention's by --position-embedding-type
  // yarn (export_megatron); both take the factor and mscales (argument_utils.py,
  // _apply_yarn_config_from_args, whose other defaults are transformers' own).
  if (r.scaling == "yarn") {
    if (f.mla.on()) a->push_back({"--rope-type", "yarn"});
    if (r.factor > 0) a->push_back({"--rotary-scaling-factor", number_text(r.factor)});
    if (r.mscale > 0) a->push_back({"--mscale", number_text(r.mscale)});
    if (r.mscale_all_dim > 0) a->push_back({"--mscale-all-dim", number_text(r.mscale_all_dim)});
    if (!f.mla.on() && r.original_max_positions > 0)
      a->push_back({"--yarn-original-max-position-embeddings", std::to_string(r.original_max_positions)});
    return "";
  }
  return "the model's config scales its rotary positions by '" + r.scaling + "', which these arguments leave out: set it in Megatron-LM";
}

// The flags are Megatron-LM's at d98e8a64 (2026-08-22). What in this output a release before it
// lacks, by the release that first has it (each read in that tag's arguments.py or attention.py):
// a note naming the oldest release that runs the command, or "" when core_r0.14.0 does.
std::string megatron_release_note(const std::vector<TrainerArgument>& a, const LayerShape& sh, const ParallelSpec& par) {
  const auto has = [&](const std::string& flag, const std::string& value = "") {
    return std::any_of(a.begin(), a.end(), [&](const TrainerArgument& x) { return x.first == flag && (value.empty() || x.second == value); });
  };
  struct Need { bool in_output; int release; const char* what; };  // release: 15, 16 (core_r0.N.0) or 17 (later, main)
  const Need needs[] = {
      {has("--window-size"), 15, "--window-size"},
      {has("--moe-flex-dispatcher-backend"), 16, "--moe-flex-dispatcher-backend"},
      {par.tensor > sh.kv_heads(), 16, "key/value heads replicated over the tensor ranks"},
      {has("--position-embedding-type", "yarn"), 17, "--position-embedding-type yarn"},
  };
  int oldest = 14;
  std::string what;
  for (const Need& n : needs)
    if (n.in_output) {
      oldest = std::max(oldest, n.release);
      what += (what.empty() ? "" : ", ") + std::string(n.what);
    }
  if (oldest == 14) return "";
  return "needs Megatron-LM " + (oldest == 17 ? std::string("main after core_r0.16.0") : "core_r0." + std::to_string(oldest) + ".0 or later") +
         " (" + what + "); the flags are main's at d98e8a64";
}

}  // namespace

TrainerExport export_megatron(const Plan& p) {
  const Scenario& s = p.scenario;
  const ParallelSpec& par = s.parallel;
  const Layer& block = first_block(p, "Megatron-LM");
  check_trainer_runs(s, Framework::megatron);
  const LayerShape& sh = block.shape;
  const BlockForm& f = sh.form;
  TrainerExport out;
  auto& a = out.arguments;
  a.push_back({"--tensor-model-parallel-size", std::to_string(par.tensor)});
  a.push_back({"--pipeline-model-parallel-size", std::to_string(par.pipeline)});
  if (par.pipeline > 1) megatron_partition(p, &a);  // the schedule's rules: plan/trainer_rules.cpp
  if (par.context > 1) a.push_back({"--context-parallel-size", std::to_string(par.context)});
  if (par.sequence_parallel) a.push_back({"--sequence-parallel", ""});
  if (s.layers.back().shape.loss == Loss::fused)  // its memory is torch.compile's cross entropy, not Megatron-LM's fused one
    throw InputError(s.where("model.loss"), "model.loss: fused is torch.compile's cross entropy (torchtitan's compiled loss); Megatron-LM "
                                            "runs its vocabulary-parallel one: set model.loss: megatron");
  // model.kernels: eager is eager PyTorch's op-by-op norms, rotary positions and SwiGLU in fp32
  // (torchtitan's Llama without torch.compile); Megatron-LM runs Transformer Engine's fused ones.
  if (sh.eager)
    throw InputError(s.where("model.kernels"), "model.kernels: eager is eager PyTorch's op-by-op blocks (torchtitan's Llama without "
                                               "torch.compile); Megatron-LM runs Transformer Engine's fused kernels: set model.kernels: fused");
  a.push_back({"--micro-batch-size", std::to_string(p.microbatch_size)});
  a.push_back({"--global-batch-size", std::to_string(s.data.batch_size * par.grad_accumulation * par.data)});
  switch (par.activation_checkpointing) {
    case Recompute::none: break;
    case Recompute::selective: {
      a.push_back({"--recompute-granularity", "selective"});
      if (par.recompute_modules == kRecomputeCoreAttn) break;  // Megatron-core's default modules
      a.push_back({"--recompute-modules", join(recompute_module_names(par.recompute_modules), " ")});  // the flag takes them bare
      break;
    }
    case Recompute::selective_op: break;  // refused by check_trainer_runs
    case Recompute::layer:
      a.insert(a.end(), {{"--recompute-granularity", "full"}, {"--recompute-method", "uniform"}, {"--recompute-num-layers", "1"}});
      break;
    case Recompute::stage: {  // a stage's input kept, its blocks recomputed together: uniform recompute in
      int most = 0;            // groups of as many blocks as a stage holds (recompute.py; block recompute
      for (const Stage& st : p.stages) most = std::max(most, blocks_on(p, st));  // would keep each block's input)
      a.insert(a.end(), {{"--recompute-granularity", "full"}, {"--recompute-method", "uniform"}, {"--recompute-num-layers", std::to_string(most)}});
      break;
    }
  }
  if (s.optimizer.state_bf16)
    throw InputError(s.where("optimizer.state_dtype"), "Megatron-LM keeps master weights in fp32 or fp16 (--main-params-dtype); a bf16 "
                                                       "optimizer state is Apex's DistributedFusedAdam (NeMo's optim.dtype: bf16)");
  if (par.shard == Shard::optimizer) {
    a.push_back({"--use-distributed-optimizer", ""});
    if (par.shard_copies() > 1) a.push_back({"--num-distributed-optimizer-instances", std::to_string(par.shard_copies())});
  }
  // Megatron-LM keeps bf16 runs' gradients in fp32 unless told otherwise, fp16 runs' in fp16.
  if (par.grad_reduce_in_bf16 && par.precision != Precision::fp16) a.push_back({"--grad-reduce-in-bf16", ""});
  if (!par.grad_reduce_in_bf16 && par.precision == Precision::fp16) a.push_back({"--accumulate-allreduce-grads-in-fp32", ""});
  if (par.overlap_grad_reduce && par.replicas() > 1) a.push_back({"--overlap-grad-reduce", ""});
  if (par.param_gather_overlapped()) a.push_back({"--overlap-param-gather", ""});
  if (par.tp_comm_overlap && par.tensor > 1) a.push_back({"--tp-comm-overlap", ""});
  switch (par.precision) {
    case Precision::fp32: break;
    case Precision::bf16: a.push_back({"--bf16", ""}); break;
    case Precision::fp16: a.push_back({"--fp16", ""}); break;
    case Precision::fp8: a.insert(a.end(), {{"--bf16", ""}, {"--fp8-format", "hybrid"}}); break;
  }
  // Megatron-core's default fp8 recipe (delayed scaling) refuses to recompute the norms or the
  // experts' activation (TransformerConfig): per-tensor current scaling does.
  const bool fp8_recompute = par.precision == Precision::fp8 && par.activation_checkpointing == Recompute::selective &&
                             (par.recompute_modules & (kRecomputeLayernorm | kRecomputeMoeAct)) != 0;
  if (fp8_recompute) a.push_back({"--fp8-recipe", "tensorwise"});
  // The model.
  const int mtp = mtp_layers(s);
  const int64_t blocks = static_cast<int64_t>(p.layers().size()) - 2 - mtp;
  a.insert(a.end(), {{"--num-layers", std::to_string(blocks)},
                     {"--hidden-size", std::to_string(sh.hidden)},
                     {"--ffn-hidden-size", std::to_string(sh.ffn)},
                     {"--num-attention-heads", std::to_string(sh.heads)},
                     {"--seq-length", std::to_string(sh.seq_len)},
                     {"--max-position-embeddings", std::to_string(sh.form.rope ? sh.seq_len : sh.position_rows())}});
  if (sh.kv_heads() != sh.heads) a.insert(a.end(), {{"--group-query-attention", ""}, {"--num-query-groups", std::to_string(sh.kv_heads())}});
  if (f.head_dim > 0) a.push_back({"--kv-channels", std::to_string(f.head_dim)});
  // TransformerConfig's qk_layernorm: each head's query and key normed (the block's --normalization);
  // under latent attention it is what gives the latents their norms (gpt_layer_specs.py: the up
  // projections become norm-then-linear), which Parallax's latent attention always has.
  if (f.qk_norm || f.mla.on()) a.push_back({"--qk-layernorm", ""});
  megatron_window(p, &a);
  if (const Mla& m = f.mla; m.on()) {
    a.push_back({"--multi-latent-attention", ""});
    if (m.q_lora_rank > 0) a.push_back({"--q-lora-rank", std::to_string(m.q_lora_rank)});
    a.insert(a.end(), {{"--kv-lora-rank", std::to_string(m.kv_lora_rank)},
                       {"--qk-head-dim", std::to_string(m.qk_nope_head_dim)},
                       {"--qk-pos-emb-head-dim", std::to_string(m.qk_rope_head_dim)},
                       {"--v-head-dim", std::to_string(m.v_head_dim)}});
  }
  if (mtp > 0) a.push_back({"--mtp-num-layers", std::to_string(mtp)});
  megatron_experts(p, &a);
  if (f.mlp == Mlp::swiglu) a.push_back({"--swiglu", ""});
  if (f.mlp == Mlp::relu2) a.push_back({"--squared-relu", ""});
  if (f.mlp == Mlp::relu)
    throw InputError(s.where("model.mlp"), "Megatron-LM's MLP is GELU, SwiGLU or squared ReLU; this plan's is ReLU (set model.mlp)");
  a.push_back({"--normalization", f.norm == Norm::rmsnorm ? "RMSNorm" : "LayerNorm"});
  // The config's definition where it is not Megatron-LM's default (epsilon 1e-5, the whole head
  // rotated, exact GELU, LayerNorm's weight as is).
  const Definition& d = f.definition;
  if (d.norm_eps > 0 && d.norm_eps != 1e-5) a.push_back({"--norm-epsilon", number_text(d.norm_eps)});
  if (d.norm_1p) a.push_back({"--apply-layernorm-1p", ""});
  if (d.gelu_tanh && f.mlp == Mlp::gelu) a.push_back({"--openai-gelu", ""});
  if (f.rope && f.rotary.fraction > 0 && f.rotary.fraction != 1) a.push_back({"--rotary-percent", number_text(f.rotary.fraction)});
  a.push_back({"--position-embedding-type", !f.rope ? "learned_absolute" : f.rotary.scaling == "yarn" && !f.mla.on() ? "yarn" : "rope"});
  std::string rotary_note;
  if (f.rope) rotary_note = megatron_rotary(f, &a);
  if (!f.tie_embeddings) a.push_back({"--untie-embeddings-and-output-weights", ""});
  if (!f.bias) a.push_back({"--disable-bias-linear", ""});
  if (f.qkv_bias && !f.bias) a.push_back({"--add-qkv-bias", ""});
  a.insert(a.end(), {{"--attention-dropout", number_text(f.dropout)}, {"--hidden-dropout", number_text(f.dropout)}});
  // Transformer Engine's fused (cuDNN) attention, as NVIDIA's own H100 recipes take
  // (examples/llama/train_llama3_8b_h100_fp8.sh): a flash-style kernel, as the plan costs it, and
  // the one that runs latent attention's unequal key and value head widths on every Transformer
  // Engine release (2.7's FlashAttention refuses them). A plan costed with FlashAttention-2's
  // kernel (model.attention: flash2) gets Megatron-core's flash backend, Dao's package, but for
  // latent attention, which keeps the fused one (and says so).
  const bool dao = sh.flash2 && !f.mla.on();
  a.push_back({"--attention-backend", !sh.flash_attention ? "unfused" : dao ? "flash" : "fused"});
  const std::string attention_note =
      sh.flash2 && f.mla.on() ? "--attention-backend fused: latent attention's unequal key and value head widths run on Transformer "
                                "Engine's cuDNN attention, not on FlashAttention-2's kernel the plan was costed with"
                              : "";
  // The model's own vocabulary: Megatron-LM pads it itself (--make-vocab-size-divisible-by), as the plan did.
  const int64_t vocab = p.unpadded_vocab > 0 ? p.unpadded_vocab : p.layers().front().shape.vocab;
  a.insert(a.end(), {{"--tokenizer-type", "NullTokenizer"}, {"--vocab-size", std::to_string(vocab)}});
  if (s.data.source != "synthetic")
    throw InputError(s.where("data.source"), "Megatron-LM reads token corpora; this plan's data is " + s.data.source);
  a.push_back({"--mock-data", ""});
  // The optimizer: Megatron-LM's adam is AdamW (decoupled weight decay), as torch's adamw.
  const auto& o = s.optimizer;
  if (o.kind == "sgd") a.insert(a.end(), {{"--optimizer", "sgd"}, {"--sgd-momentum", number_text(o.momentum)}});
  else if (o.kind == "adamw") a.push_back({"--optimizer", "adam"});
  else throw InputError(s.where("optimizer.kind"), "Megatron-LM's adam is AdamW; this plan's optimizer is adam (L2 weight decay): set adamw");
  a.insert(a.end(), {{"--lr", number_text(o.lr)}, {"--weight-decay", number_text(o.weight_decay)},
                     {"--train-iters", std::to_string(s.data.steps)},
                     {"--log-interval", "1"},  // each step's time (the default logs every 100th)
                     {"--eval-iters", "0"}});  // no validation passes between or after the steps
  const int per_node = processes_per_node(p);
  // Megatron-core orders its ranks tp-cp-ep-dp-pp, or tp-cp-ep-pp-dp (initialize.py).
  if (par.rank_order == RankOrder::tensor_pipeline_data) a.push_back({"--use-tp-pp-dp-mapping", ""});
  out.notes = {
      "data parallel " + std::to_string(par.data) + ": Megatron-LM derives it (world size / (tensor x pipeline x context))",
      "--mock-data and NullTokenizer train on synthetic tokens, as the plan; give --data-path and a tokenizer for a corpus",
      std::string("Megatron-LM orders ranks ") + name(par.rank_order) + " and posts each receive with its send (Parallax: framework: megatron)"};
  // What the plan was predicted with that Megatron-LM does otherwise (framework: megatron sets each).
  std::vector<std::string> not_megatron;
  if (par.p2p != P2p::megatron) not_megatron.push_back("PyTorch's point-to-point");
  if (!par.master_weights && par.precision != Precision::fp32)
    not_megatron.push_back("fp32 parameters cast per op (torch.autocast) instead of 16-bit ones with fp32 masters");
  if (par.bucket_caps_apply())  // Megatron-core buckets by --ddp-bucket-size, on the first pipeline rank only
    not_megatron.push_back("torch's DDP buckets");
  if (s.layers.back().shape.loss == Loss::eager) not_megatron.push_back("torch's cross entropy");
  if (par.context > 1 && par.context_attention != ContextAttention::megatron) not_megatron.push_back("torch's context-parallel attention");
  out.does_not_fit = does_not_fit_note(p);
  if (!out.does_not_fit.empty()) out.notes.insert(out.notes.begin(), out.does_not_fit);
  if (!rotary_note.empty()) out.notes.push_back(rotary_note);
  if (!attention_note.empty()) out.notes.push_back(attention_note);
  if (const std::string release = megatron_release_note(a, sh, par); !release.empty()) out.notes.push_back(release);
  if (!not_megatron.empty()) {
    std::string what = not_megatron.front();
    for (size_t i = 1; i < not_megatron.size(); ++i) what += (i + 1 == not_megatron.size() ? " and " : ", ") + not_megatron[i];
    out.notes.push_back("this plan was predicted with " + what +
                        ", not Megatron-LM's semantics: plan it with framework: megatron for the step time this command gets");
  }
  if (fp8_recompute)
    out.notes.push_back("--fp8-recipe tensorwise: Megatron-core's default (delayed scaling) cannot recompute layernorm or moe_act; "
                        "recomputing them in fp8 needs Transformer Engine 2.6 or later");
  // Below Blackwell, validate_args asserts CUDA_DEVICE_MAX_CONNECTIONS=1 under tensor or context
  // parallelism (one hardware queue, so that a collective launched before a GEMM runs before it),
  // and only warns beside the MoE overlap, which wants more queues.
  const bool one_connection = (par.tensor > 1 || par.context > 1) && !par.overlap_moe_expert_parallel_comm;
  if ((par.tensor > 1 || par.context > 1) && par.overlap_moe_expert_parallel_comm)
    out.notes.push_back("CUDA_DEVICE_MAX_CONNECTIONS is left unset: Megatron-LM warns that tensor or context parallelism wants 1 and "
                        "--overlap-moe-expert-parallel-comm more (arguments.py)");
  std::ostringstream head;
  head << "# Megatron-LM (megatron/training/arguments.py) for '" << s.name << "': " << p.world_size << " GPUs, " << p.nodes << " node"
       << (p.nodes > 1 ? "s" : "") << " of " << s.hardware.name << " (parallax export megatron)\n"
       << (one_connection ? "CUDA_DEVICE_MAX_CONNECTIONS=1 " : "") << "torchrun --nproc-per-node " << per_node << " --nnodes " << p.nodes
       << (p.nodes > 1 ? " --node-rank \"$NODE_RANK\" --master-addr \"$MASTER_ADDR\"" : "") << " --master-port 6000 \\\n"
       << "  pretrain_gpt.py \\\n";
  out.text = command_text(head.str(), a, out.notes);
  return out;
}

}  // namespace parallax::plan

namespace parallax::plan {
namespace {

// torchtitan builds its Llama 3 from a flavor; Parallax exports a plan whose model is one of them
// (torchtitan/models/llama3/__init__.py: dim, layers, heads, key/value heads, and the MLP width its
// ffn_dim_multiplier and multiple_of give).
struct TitanFlavor {
  const char* name;
  int64_t hidden, blocks, heads, kv_heads, ffn;
};
constexpr TitanFlavor kLlama3Flavors[] = {{"8B", 4096, 32, 32, 8, 14336}, {"70B", 8192, 80, 64, 8, 28672}, {"405B", 16384, 126, 128, 8, 53248}};

const char* titan_flavor(const Plan& p, const Layer& block) {
  const LayerShape& sh = block.shape;
  const BlockForm& f = sh.form;
  const int64_t blocks = static_cast<int64_t>(p.layers().size()) - 2;
  const bool llama = f.mlp == Mlp::swiglu && f.norm == Norm::rmsnorm && f.rope && !f.bias && !f.qkv_bias && !f.tie_embeddings;
  for (const auto& fl : kLlama3Flavors)
    if (llama && sh.hidden == fl.hidden && blocks == fl.blocks && sh.heads == fl.heads && sh.kv_heads() == fl.kv_heads && sh.ffn == fl.ffn) {
      // Every flavor has Llama 3's tokenizer and rotary positions (theta 500,000, scaled as Llama
      // 3.1's by 8): a model of the same shape with others would train as another.
      const int64_t vocab = p.unpadded_vocab > 0 ? p.unpadded_vocab : p.layers().front().shape.vocab;
      if (vocab != 128256)
        throw InputError(p.scenario.where("model"), std::string("torchtitan's Llama 3 ") + fl.name + " has Llama 3's vocabulary of 128256; this "
                                                    "model's is " + std::to_string(vocab));
      // A config states its theta (base > 0) and its scaling or none; a model from the presets
      // states neither.
      const Rotary& r = f.rotary;
      const bool llama31_scaling = r.llama31_scaling();
      if ((r.base > 0 && (r.base != 500000 || !llama31_scaling)) || (r.base == 0 && !r.scaling.empty() && !llama31_scaling))
        throw InputError(p.scenario.where("model"), std::string("torchtitan's Llama 3 ") + fl.name + " rotates positions as Llama 3.1 "
                                                    "(theta 500000, llama3 scaling by 8, low_freq_factor 1, high_freq_factor 4, "
                                                    "original_max_position_embeddings 8192); this model's config states others");
      // torchtitan's TransformerModelArgs: norm_eps 1e-5, which no flavor changes.
      if (const double eps = f.definition.norm_eps; eps > 0 && eps != 1e-5)
        throw InputError(p.scenario.where("model"), std::string("torchtitan's Llama 3 ") + fl.name + " norms with epsilon 1e-5; this model's "
                                                    "config states " + number_text(eps));
      return fl.name;
    }
  throw InputError(p.scenario.where("model"), "Parallax exports torchtitan's Llama 3 only, its flavors 8B, 70B and 405B "
                                                  "(torchtitan/models/llama3; torchtitan's DeepSeek-V3 and Qwen3 are not exported yet); "
                                                  "this model is " + p.scenario.model_description +
                                                  " (plan one of scenarios/models/llama-3.1-*.json)");
}

std::string quoted(const std::string& s) { return enclosed('"', s, '"'); }

}  // namespace

TrainerExport export_torchtitan(const Plan& p) {
  for (const Layer& l : p.layers())
    if (l.shape.window > 0)
      throw InputError(p.scenario.where("model.sliding_window"), "torchtitan's Llama 3 attends to every earlier token; this plan's layer '" +
                                                                  l.name + "' has a sliding window");
  const Scenario& s = p.scenario;
  const ParallelSpec& par = s.parallel;
  const Layer& block = first_block(p, "torchtitan");
  if (block.shape.form.dropout > 0)
    throw InputError(s.where("model.dropout"), "torchtitan's Llama 3 has no dropout; this plan's blocks drop at " +
                                                   number_text(block.shape.form.dropout) + " (set model.dropout: 0)");
  // Its Llama 3 always runs scaled_dot_product_attention (cuDNN, flash, or the math kernel as the
  // last resort: models/attention.py), never an attention that keeps its scores.
  if (!block.shape.flash_attention)
    throw InputError(s.where("model.attention"), "torchtitan's Llama 3 runs PyTorch's scaled_dot_product_attention (flash or cuDNN), "
                                                 "and this plan's attention is standard (its scores kept, as in eager attention): set "
                                                 "model.attention: flash");
  TrainerExport out;
  auto& a = out.arguments;
  a.push_back({"model.name", quoted("llama3")});
  a.push_back({"model.flavor", quoted(titan_flavor(p, block))});
  check_trainer_runs(s, Framework::torchtitan);
  // The plan costs the blocks' memory-bound ops fused unless model.kernels says eager: torchtitan
  // fuses them with torch.compile.
  const bool compiled = !block.shape.eager;
  if (par.tp_comm_overlap && par.tensor > 1) a.push_back({"parallelism.enable_async_tensor_parallel", "true"});
  // torch.compile's components: the model (its blocks' fused kernels) and the loss (model.loss: fused).
  const bool fused_loss = s.layers.back().shape.loss == Loss::fused;
  if (compiled || fused_loss) {
    a.push_back({"compile.enable", "true"});
    a.push_back({"compile.components", compiled && fused_loss ? "[\"model\", \"loss\"]" : compiled ? "[\"model\"]" : "[\"loss\"]"});
  }
  const bool fsdp = par.shard == Shard::full;
  a.push_back({"parallelism.data_parallel_replicate_degree", std::to_string(fsdp ? par.data / (par.shard_ranks() / par.context) : par.data)});
  a.push_back({"parallelism.data_parallel_shard_degree", std::to_string(fsdp ? par.shard_ranks() / par.context : 1)});
  if (fsdp) a.push_back({"parallelism.fsdp_reshard_after_forward", quoted(par.reshard_after_forward ? "always" : "never")});
  a.push_back({"parallelism.tensor_parallel_degree", std::to_string(par.tensor)});
  // torch's context_parallel all-gathers the keys and values (its default rotate method, which
  // parallel.context_attention: torch predicts); a plan predicted with Megatron-core's ring asks
  // for torch's all-to-all rotater, which v0.2.2 applies in validation only (a note says so below).
  if (par.context > 1)
    a.insert(a.end(), {{"parallelism.context_parallel_degree", std::to_string(par.context)},
                       {"parallelism.context_parallel_rotate_method",
                        quoted(par.context_attention == ContextAttention::torch ? "allgather" : "alltoall")}});
  a.push_back({"parallelism.pipeline_parallel_degree", std::to_string(par.pipeline)});
  if (par.pipeline > 1) {
    static const std::map<ScheduleKind, const char*> kSchedules = {
        {ScheduleKind::gpipe, "GPipe"}, {ScheduleKind::one_f_one_b, "1F1B"}, {ScheduleKind::interleaved_1f1b, "Interleaved1F1B"},
        {ScheduleKind::looped_bfs, "LoopedBFS"}, {ScheduleKind::interleaved_zero_bubble, "InterleavedZeroBubble"},
        {ScheduleKind::zbv_zero_bubble, "ZBVZeroBubble"}, {ScheduleKind::dualpipev, "DualPipeV"}};
    // The file as Parallax read it (from its working directory), wherever torchtitan starts.
    if (par.schedule == ScheduleKind::csv)
      a.push_back({"parallelism.pipeline_parallel_schedule_csv", quoted(std::filesystem::absolute(par.schedule_csv).lexically_normal().string())});
    else a.push_back({"parallelism.pipeline_parallel_schedule", quoted(kSchedules.at(par.schedule))});
    a.push_back({"parallelism.pipeline_parallel_microbatch_size", std::to_string(p.microbatch_size)});
    // The modules of each model part (a stage, in stage order), by torchtitan's Llama 3 names.
    std::string parts;
    for (const Stage& st : p.stages) {
      std::string names;
      for (int l = st.first_layer; l < st.first_layer + st.layer_count; ++l) {
        const Layer& layer = p.layers()[l];
        const std::string fqns = layer.kind == LayerKind::embedding ? quoted("tok_embeddings")
                                 : layer.kind == LayerKind::head    ? quoted("norm") + ", " + quoted("output")
                                                                    : quoted(layer.name);
        names += (names.empty() ? "" : ", ") + fqns;
      }
      parts += (parts.empty() ? "[" : ", [") + names + "]";
    }
    a.push_back({"parallelism.module_fqns_per_model_part", "[" + parts + "]"});
  }
  // local_batch_size is one forward's per replica (torchtitan accumulates gradients over
  // global / (local x data) of them) unless a pipeline splits it into micro-batches itself.
  a.push_back({"training.local_batch_size", std::to_string(par.pipeline > 1 ? s.data.batch_size : p.microbatch_size)});
  a.push_back({"training.global_batch_size", std::to_string(s.data.batch_size * par.grad_accumulation * par.data)});
  a.push_back({"training.seq_len", std::to_string(block.shape.seq_len)});
  a.push_back({"training.steps", std::to_string(s.data.steps)});
  switch (par.precision) {
    case Precision::fp32: a.push_back({"training.mixed_precision_param", quoted("float32")}); break;
    case Precision::bf16: a.push_back({"training.mixed_precision_param", quoted("bfloat16")}); break;
    case Precision::fp8:  // torchao's float8 linears with per-tensor (tensorwise) scaling
      a.push_back({"training.mixed_precision_param", quoted("bfloat16")});
      a.push_back({"model.converters", enclosed('[', quoted("quantize.linear.float8"), ']')});
      // float8.py: a recipe name excludes the float8 all-gather; without one the config is tensorwise.
      if (par.fp8_param_gather)  // with the scales precomputed once a step, as torchao recommends beside it
        a.insert(a.end(), {{"quantize.linear.float8.enable_fsdp_float8_all_gather", "true"},
                           {"quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp", "true"}});
      else
        a.push_back({"quantize.linear.float8.recipe_name", quoted("tensorwise")});
      // The output projection stays bf16, as the plan costs it and torchtitan's own configs filter it.
      a.push_back({"quantize.linear.float8.filter_fqns", enclosed('[', quoted("output"), ']')});
      break;
    case Precision::fp16: break;  // refused by check_trainer_runs
  }
  switch (par.activation_checkpointing) {
    case Recompute::none: a.push_back({"activation_checkpoint.mode", quoted("none")}); break;
    case Recompute::layer: a.push_back({"activation_checkpoint.mode", quoted("full")}); break;
    case Recompute::selective:
    case Recompute::stage: break;  // refused by check_trainer_runs
    case Recompute::selective_op:
      a.insert(a.end(), {{"activation_checkpoint.mode", quoted("selective")}, {"activation_checkpoint.selective_ac_option", quoted("op")}});
      break;
  }
  const auto& o = s.optimizer;
  if (o.kind == "sgd") throw InputError(s.where("optimizer.kind"), "torchtitan's optimizers are Adam and AdamW; this plan's is sgd");
  a.push_back({"optimizer.name", quoted(o.kind == "adamw" ? "AdamW" : "Adam")});
  a.push_back({"optimizer.lr", number_text(o.lr)});
  a.push_back({"optimizer.weight_decay", number_text(o.weight_decay)});
  // run_train.sh starts one node's job (its rendezvous is localhost:0); over several nodes each
  // runs torchrun against one rendezvous, as torchtitan's multinode_trainer.slurm does.
  const std::string per_node = std::to_string(processes_per_node(p));
  const std::string launch =
      p.nodes > 1 ? "torchrun --nnodes " + std::to_string(p.nodes) + " --nproc_per_node " + per_node +
                        " --rdzv_id 101 --rdzv_backend c10d --rdzv_endpoint \"$HEAD_NODE_IP:29500\" -m torchtitan.train"
                        " --job.config_file plan.toml on each of the " + std::to_string(p.nodes) +
                        " nodes (as torchtitan's multinode_trainer.slurm; its run_train.sh starts one node's job)"
                  : "CONFIG_FILE=plan.toml NGPU=" + per_node + " ./run_train.sh";
  out.notes = {"torchtitan reads a tokenized dataset (training.dataset); the plan's synthetic tokens have no torchtitan counterpart",
               "launch: " + launch + " (torchtitan v0.2.2's TOML job config; later torchtitan configures jobs in Python)"};
  out.does_not_fit = does_not_fit_note(p);
  if (!out.does_not_fit.empty()) out.notes.insert(out.notes.begin(), out.does_not_fit);
  // Context parallelism: torchtitan v0.2.2 sets the rotate method in validation only
  // (components/validate.py); training keeps torch's default, which all-gathers the keys and values.
  if (par.context > 1 && par.context_attention != ContextAttention::torch)
    out.notes.push_back("torchtitan v0.2.2 applies context_parallel_rotate_method in validation only; its training keeps torch's "
                        "default, which all-gathers every rank's keys and values before attention and merges each step in fp32, "
                        "where this plan predicts Megatron-core's ring: plan it with parallel.context_attention: torch (framework: "
                        "torchtitan) for the step time this config gets");
  // Its gradient accumulation never turns FSDP2's sync off (pytorch/torchtitan#1710); its pipeline
  // schedules do, as this plan's would (ParallelSpec::reduces_every_microbatch).
  if (par.sharded(Shard::gradients) && par.data > 1 && par.pipeline == 1 && par.chunks * par.grad_accumulation > 1 &&
      !par.reduce_scatter_every_microbatch)
    out.notes.push_back("torchtitan reduce-scatters FSDP's gradients after every micro-batch's backward; this plan was predicted "
                        "reducing them once a step: plan it with parallel.reduce_scatter_every_microbatch: true (framework: "
                        "torchtitan sets it) for the step time and memory this config gets");
  // Its replicas (replicate, DDP) reduce in backward hooks, which its loop never turns off either.
  // A shard of one rank is DDP there too (data_parallel_shard_degree 1).
  const bool replicated = !torchtitan_fsdp(par);
  if (replicated && par.data > 1 && par.pipeline == 1 && par.chunks * par.grad_accumulation > 1) {
    const int microbatches = par.chunks * par.grad_accumulation;
    out.notes.push_back("torchtitan's DDP all-reduces the gradients after every micro-batch's backward (" + std::to_string(microbatches) +
                        " a step); this plan was predicted reducing them once, which is how Parallax predicts DDP: the step this "
                        "config gets is longer by " + std::to_string(microbatches - 1) + " all-reduces of the gradients");
  }
  if (s.framework != Framework::torchtitan && s.framework != Framework::pytorch)
    out.notes.push_back(std::string("this plan was predicted with framework: ") + name(s.framework) + " (" + trainer_name(s.framework) +
                        "'s semantics), not torchtitan's: plan it with framework: torchtitan for the step time this config gets");
  // FSDP2's mixed precision: fp32 parameters (sharded), cast to bf16 per layer; no masters.
  if (par.master_weights && par.precision != Precision::fp32)
    out.notes.push_back("torchtitan keeps fp32 parameters and computes in bf16 (FSDP2's mixed precision, no master copies); this plan "
                        "was predicted with 16-bit parameters and fp32 master weights: plan it with parallel.master_weights: false "
                        "(framework: torchtitan sets it) for the memory this config takes");
  if (replicated && par.data > 1 && par.bucket_cap_mb != 100)
    out.notes.push_back("torchtitan's DDP buckets gradients by 100 MB (replicate's bucket_cap_mb); this plan was predicted with " +
                        number_text(par.bucket_cap_mb) + ": plan it with parallel.bucket_cap_mb: 100 (framework: torchtitan sets it)");
  // TOML: one table per section ("quantize.linear.float8"), in the order the arguments came.
  std::ostringstream o_text;
  o_text << "# torchtitan job config (torchtitan/config/job_config.py, v0.2.2) for '" << s.name << "': " << p.world_size
         << " GPUs (parallax export torchtitan)\n";
  std::vector<std::pair<std::string, std::string>> tables;  // (section, its lines); TOML allows a table once
  for (const auto& [key, value] : a) {
    const std::string sec = key.substr(0, key.rfind('.'));
    auto it = std::find_if(tables.begin(), tables.end(), [&](const auto& t) { return t.first == sec; });
    if (it == tables.end()) it = tables.insert(tables.end(), {sec, ""});
    it->second += key.substr(key.rfind('.') + 1) + " = " + value + "\n";
  }
  for (size_t i = 0; i < tables.size(); ++i) o_text << (i ? "\n" : "") << "[" << tables[i].first << "]\n" << tables[i].second;
  for (const auto& n : out.notes) o_text << "# " << n << "\n";
  out.text = o_text.str();
  return out;
}

}  // namespace parallax::plan
