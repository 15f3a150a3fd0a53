#pragma once
// The model as an ordered list of layers: what partition_len counts, what the executor builds and
// what the simulator costs. Parameters are named, shaped and ordered exactly as LibTorch registers
// them (a module's own parameters first, then its children in registration order), so DDP buckets
// computed here are the buckets the executor fills.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "plan/yaml_reader.hpp"

namespace parallax::plan {

struct ParamSpec {
  std::string name;  ///< full name, e.g. "layers.0.self_attn.in_proj_weight"
  std::vector<int64_t> shape;
  /// Split over the tensor-parallel group (Megatron-LM's column- and row-parallel weights, the
  /// vocabulary); false: every tensor rank holds it whole (norms, positions, row-parallel biases).
  bool tensor_split = false;
  /// A split weight is cut at most this many ways (0: any): grouped-query attention's key and value
  /// projections hold `kv_heads` heads, and a tensor group larger than that replicates them.
  int64_t max_split = 0;
  /// One of a mixture-of-experts layer's grouped expert weights (experts x out x in, as
  /// torchtitan's GroupedExperts holds them): split over parallel.expert by whole experts, each
  /// expert's slice then split over the tensor group as the dense MLP's (Megatron-core's default
  /// expert_tensor_parallel_size = tensor).
  bool expert = false;
  int64_t numel() const;
  /// Elements one rank holds in a tensor group of `tensor` and an expert group of `expert`, its
  /// experts split `expert_tensor` ways (0: as the tensor group).
  int64_t numel_on(int tensor, int expert = 1, int expert_tensor = 0) const {
    int64_t n = numel();
    if (this->expert) {
      n /= expert;  // the experts divide over the group (check_scenario)
      if (expert_tensor > 0) tensor = expert_tensor;
    }
    if (!tensor_split) return n;
    const int64_t ways = max_split > 0 && max_split < tensor ? max_split : tensor;
    return (n + ways - 1) / ways;
  }
};

/// A mixture-of-experts MLP (Shazeer et al. 2017; Mixtral, DeepSeek-V3, Qwen-MoE): a router picks
/// `top_k` of `experts` gated MLPs of width `ffn` for each token, `shared` more of the same width
/// see every token. Zero experts: a dense MLP.
struct MoeShape {
  int64_t experts = 0, top_k = 0, shared = 0, ffn = 0;
  /// Tokens an expert takes at most, as a multiple of its even share (GShard's capacity factor;
  /// the rest are dropped); 0: dropless, every routed token is computed.
  double capacity_factor = 0;
  /// The busiest expert-parallel rank's routed tokens over the average rank's, stated; 0: derived
  /// from a balanced router's random spread (plan::expert_load_imbalance).
  double imbalance = 0;
  /// Where the router's weights apply (`model.expert_weighting`): false, to each routed expert's
  /// output before the combine, which then keeps the outputs for the weights' gradient (the
  /// executor, Hugging Face transformers, DeepSpeed); true, to the experts' activation (Megatron-
  /// core's weighted SwiGLU since 2659630721, 2025-04-09), which keeps nothing more.
  bool weighted_activation = false;
  bool on() const { return experts > 0; }
  bool operator==(const MoeShape&) const = default;
};

enum class LayerKind {
  linear,     ///< torch::nn::Linear, optionally followed by ReLU
  embedding,  ///< token embedding + learned positions
  encoder,    ///< torch::nn::TransformerEncoderLayer (post-norm, ReLU, as LibTorch's default)
  head,       ///< LayerNorm + Linear to the vocabulary (language-model head)
  synthetic,  ///< a layer that states its own cost; simulated, not executed
};
const char* name(LayerKind k);
/// Whether tensor parallelism splits layers of this kind (Megatron-LM's transformer kinds:
/// embedding, encoder, head); the others cannot take parallel.tensor > 1.
inline bool tensor_splits(LayerKind k) { return k == LayerKind::embedding || k == LayerKind::encoder || k == LayerKind::head; }

/// The MLP of a transformer block: LibTorch's encoder layer's ReLU, GPT's GELU, Llama's SwiGLU
/// (gate, up and down projections; `ffn` is the width of gate and of up) or Nemotron-4's squared ReLU.
enum class Mlp { relu, gelu, swiglu, relu2 };

/// Multi-head latent attention (DeepSeek-V2 and -V3; `model.mla`, Hugging Face's field names): the
/// block's input is projected down to latents (Q to q_lora_rank, K and V together to kv_lora_rank,
/// plus one rotary key of qk_rope_head_dim that every head shares), each latent normed (RMSNorm),
/// then projected up per head: Q and K qk_nope_head_dim + qk_rope_head_dim wide, V v_head_dim wide.
/// q_lora_rank 0: Q straight from the input (DeepSeek-V2-Lite). Megatron-core's MLASelfAttention
/// keeps the down projections whole on every tensor rank and splits the up projections by heads.
struct Mla {
  int64_t q_lora_rank = 0, kv_lora_rank = 0, qk_nope_head_dim = 0, qk_rope_head_dim = 0, v_head_dim = 0;
  bool on() const { return kv_lora_rank > 0; }
  /// The latents one token's attention input becomes: what the down projections write.
  int64_t latent_width() const { return q_lora_rank + kv_lora_rank + qk_rope_head_dim; }
  bool operator==(const Mla&) const = default;
};
/// How rotary positions are encoded, as a Hugging Face config states it (`rope_theta`,
/// `rope_scaling`): what a trainer needs to build the same model (`parallax export`), at no cost
/// of its own. 0 / empty where the config does not say.
struct Rotary {
  double base = 0;           ///< rope_theta
  std::string scaling;       ///< rope_scaling's type: "llama3", "yarn", ...; empty: none
  double factor = 0;         ///< rope_scaling's factor
  double mscale = 0, mscale_all_dim = 0;  ///< YaRN's (DeepSeek's configs)
  int64_t original_max_positions = 0;     ///< rope_scaling's original_max_position_embeddings (YaRN's, Llama 3's)
  double low_freq = 0, high_freq = 0;     ///< Llama 3's low_freq_factor and high_freq_factor
  double fraction = 0;       ///< partial_rotary_factor: the share of each head rotated (Nemotron's 0.5); 0: all
  bool operator==(const Rotary&) const = default;
  /// Llama 3.1's scaling as Megatron-core and torchtitan fix it (factor 8, low 1, high 4, original
  /// 8192): what each states is that or unstated.
  bool llama31_scaling() const {
    return scaling == "llama3" && (factor == 0 || factor == 8) && (low_freq == 0 || low_freq == 1) && (high_freq == 0 || high_freq == 4) &&
           (original_max_positions == 0 || original_max_positions == 8192);
  }
};

/// What a Hugging Face config states that changes no cost but defines the model, kept so that
/// `parallax export` starts the trainer on the same model (0 or empty: not stated, the trainer's
/// default).
struct Definition {
  double norm_eps = 0;              ///< rms_norm_eps, norm_eps, layer_norm_eps or layer_norm_epsilon
  bool norm_1p = false;             ///< Nemotron's LayerNorm1P: the weight stored as gamma - 1
  bool gelu_tanh = false;           ///< GPT-2's gelu_new: GELU's tanh approximation
  std::string router_score;         ///< the router's scoring_func: "softmax" or "sigmoid" (DeepSeek)
  bool router_renormalize = true;   ///< norm_topk_prob: the top-k weights renormalized to sum to 1
  bool router_expert_bias = false;  ///< topk_method noaux_tc: DeepSeek-V3's per-expert balancing bias
  int64_t router_groups = 0, router_group_topk = 0;  ///< n_group, topk_group: group-limited routing
  double router_scaling = 0;        ///< routed_scaling_factor
  /// The balancing loss the model trained with: router_aux_loss_coef (Mixtral, Qwen3-MoE) or
  /// aux_loss_alpha (DeepSeek), per sequence where seq_aux says so; 0: none stated.
  double router_aux_coeff = 0;
  bool router_aux_per_sequence = false;
  bool operator==(const Definition&) const = default;
};
enum class Norm { layernorm, rmsnorm };
const char* name(Mlp m);
const char* name(Norm n);

/// The cross entropy after a transformer's head (`model.loss`), as each trainer runs it:
/// `eager` is torch's cross_entropy on the logits cast to fp32 (PyTorch, torchtitan); `megatron`
/// Megatron-core's unfused vocabulary-parallel cross entropy (one kernel per step of it, in place
/// in fp32: Megatron-LM's default, Megatron-DeepSpeed's); `fused` one compiled kernel each way
/// (torch.compile's, as torchtitan compiles its loss). They differ in the bytes they move and keep
/// (plan/cost.cpp `loss_bytes`, plan/memory.cpp), not in the loss.
enum class Loss { eager, megatron, fused };
const char* name(Loss l);

/// How a transformer's blocks are built. `decoder` false is LibTorch's TransformerEncoderLayer
/// (post-norm, multi-head attention, ReLU MLP, biases: the transformer preset as it always was);
/// true is the pre-norm decoder block of GPT and the Llama family that exec/model.cpp builds, with
/// the choices below. Embedding, blocks and head of one model share one form.
struct BlockForm {
  bool decoder = false;
  int64_t kv_heads = 0;          ///< key/value heads (grouped-query attention); 0: as many as heads
  int64_t head_dim = 0;          ///< each head's width; 0: hidden / heads (Qwen3's and Gemma's heads are wider)
  /// Each head's query and key normed (the block's norm kind, over head_dim) before rotary
  /// positions: Qwen3's q_norm and k_norm, Megatron-core's --qk-layernorm.
  bool qk_norm = false;
  Mlp mlp = Mlp::relu;
  Norm norm = Norm::layernorm;
  bool rope = false;             ///< rotary positions in attention; false: learned positions in the embedding
  /// Learned positions: the table's rows (`model.max_positions`, GPT-2's n_positions, Megatron-LM's
  /// --max-position-embeddings), of which a sample uses its first seq_len; 0: seq_len rows.
  int64_t position_rows = 0;
  bool bias = true;              ///< biases on the block's linears (the head's projection has none in a decoder)
  bool qkv_bias = true;          ///< biases on Q, K and V (Qwen2 has them where the rest has none)
  bool tie_embeddings = false;   ///< the head projects with the embedding's matrix
  Mla mla;                       ///< latent attention (off: Q, K and V projected from the input)
  /// Dropout's rate (`model.dropout`), after attention's softmax, on each residual branch and after
  /// the embedding, as Megatron-LM's --attention-dropout and --hidden-dropout (0.1 each in its GPT)
  /// run it; LibTorch's encoder layer (decoder false) also drops inside its MLP. At 0, PyTorch's
  /// dropout returns its input: no kernel and no mask.
  double dropout = 0;
  Rotary rotary;                 ///< with rope, from a Hugging Face config
  Definition definition;         ///< from a Hugging Face config
  bool operator==(const BlockForm&) const = default;
};

/// The shape knobs of a layer; which ones apply depends on its kind.
struct LayerShape {
  int64_t in = 0, out = 0;  ///< linear
  bool bias = true;         ///< linear
  bool relu = false;        ///< linear: ReLU after it
  int64_t hidden = 0, heads = 0, ffn = 0, seq_len = 0, vocab = 0;  ///< transformer kinds
  /// encoder: the attention kernel. Standard attention materialises the s x s scores (and keeps
  /// them for backward); flash attention (Dao et al. 2022) never does.
  bool flash_attention = false;
  /// With flash_attention: FlashAttention-2's kernel (`model.attention: flash2`, what torch's
  /// scaled_dot_product_attention ran on Hopper until torch 2.10 preferred cuDNN's), costed at the
  /// profile's flash2 efficiencies where it states them; otherwise the flash kernel the profile
  /// measured (Transformer Engine's, FlashAttention-3's on Hopper).
  bool flash2 = false;
  /// encoder: `model.kernels: eager`, the block's memory-bound ops as eager PyTorch runs torchtitan's
  /// Llama (each op of RMSNorm, rotary positions and SwiGLU a kernel of its own, norms and rotary
  /// positions in fp32); false: fused (Transformer Engine, Megatron-core, torch.compile).
  bool eager = false;
  /// head: the cross entropy after it (`model.loss`).
  Loss loss = Loss::eager;
  /// head: the predictions it makes per token, 1 + model.mtp_layers (DeepSeek-V3's multi-token
  /// prediction runs the shared head and its loss once more for each module).
  int predictions = 1;
  /// encoder: a multi-token prediction module (Megatron-core's MultiTokenPredictionLayer): before
  /// its block, the shifted tokens' embedding and the previous depth's hidden states are each
  /// normed (enorm, hnorm), concatenated and projected from 2 x hidden back to hidden (eh_proj).
  bool mtp = false;
  /// encoder: sliding-window attention (`model.sliding_window`): each query attends to its `window`
  /// most recent tokens, itself included; 0: every earlier token (full causal attention).
  int64_t window = 0;
  /// The keys a query attends to, averaged over the sequence's s queries: s / 2 causal (as the
  /// FLOP counts of FlashAttention take it), (W s - W (W - 1) / 2) / s under a window W < s.
  double keys_per_query() const;
  BlockForm form;  ///< embedding, encoder, head
  MoeShape moe;    ///< encoder: its MLP's experts (none: the dense MLP of width ffn)
  /// Key/value heads of an encoder block (`form.kv_heads`, or `heads` when that is 0; latent
  /// attention's heads each have their own K and V).
  int64_t kv_heads() const { return form.kv_heads > 0 && !form.mla.on() ? form.kv_heads : heads; }
  /// Learned positions' table rows (0 with rotary positions: no table).
  int64_t position_rows() const { return form.rope ? 0 : form.position_rows > 0 ? form.position_rows : seq_len; }
  /// Each attention head's width (`model.head_dim`, or hidden / heads).
  int64_t head_dim() const { return form.head_dim > 0 ? form.head_dim : heads > 0 ? hidden / heads : 0; }
  /// A query's and key's width per head, and a value's: head_dim, except under latent attention
  /// (qk_nope_head_dim + qk_rope_head_dim, and v_head_dim).
  int64_t qk_head_dim() const { return form.mla.on() ? form.mla.qk_nope_head_dim + form.mla.qk_rope_head_dim : head_dim(); }
  int64_t v_head_dim() const { return form.mla.on() ? form.mla.v_head_dim : head_dim(); }
  /// Q's width (all query heads); K's and V's (the key/value heads); and the attention's output,
  /// which the output projection takes back to hidden (the query heads' values).
  int64_t q_width() const { return heads * qk_head_dim(); }
  int64_t k_width() const { return kv_heads() * qk_head_dim(); }
  int64_t v_width() const { return kv_heads() * v_head_dim(); }
  int64_t attention_width() const { return heads * v_head_dim(); }
};

/// Bytes a dropout mask keeps per element (PyTorch's fused dropout keeps a bool mask).
constexpr double kMaskBytes = 1;

/// An encoder block's activations per sample in bytes (e bytes an element), as Korthikanti et al.
/// 2022 (section 4.1) count them, re-derived for grouped-query attention and gated MLPs
/// (docs/simulator.md): what every tensor rank keeps whole unless sequence parallelism splits it,
/// what tensor parallelism splits, the key/value part (split at most kv_heads ways), and the s x s
/// scores per head. With dropout (BlockForm::dropout > 0) the masks too: Korthikanti et al.'s count
/// is a GPT block's (GELU, dropout 0.1).
struct BlockActivations {
  double unsplit = 0, split = 0, kv = 0, scores = 0;
  /// Of unsplit: the two norms' outputs (the inputs of QKV and of the MLP), what recomputing the
  /// norms drops. Of split: a MoE block's routed experts' activation output (their down
  /// projections' input), what recomputing moe_act drops. Of split and of unsplit: what the MoE
  /// layer keeps inside it (its experts' tensors, the dispatched copies and their outputs; the
  /// router's probabilities), what recomputing moe drops (its input, the norm's output, stays).
  double norm_outputs = 0, expert_act = 0;
  double moe_split = 0, moe_unsplit = 0;
  /// Of split: latent attention's Q (with kv, what recomputing mla_up_proj drops); a dense block's
  /// MLP tensors (what recomputing mlp drops; its input, the norm's output, stays).
  double mla_q = 0, mlp_split = 0;
};
/// `linear_e`: bytes an element of what the linear layers keep of their inputs (e, or 1 where
/// Transformer Engine's fp8 linears keep their fp8 casts).
BlockActivations block_activations(const LayerShape& shape, double e, double linear_e);

/// An encoder block's attention core per sample: the scores (2 s^2 per query width) and the
/// attention-weighted values (2 s^2 per value width), causal or not (4 s^2 h at full attention).
double attention_core_flops_per_sample(const LayerShape& shape);

/// A dense block's matmuls in the order torchtitan's Llama runs them (wq, wk, wv, wo, then w1, w3,
/// w2 for a gated MLP or up, down), each as (outputs, inputs) per token on one of t tensor ranks
/// (key and value heads split at most kv_heads ways; latent attention's as torchtitan's
/// DeepSeek-V3 runs them, its down projections whole). Its per-op selective checkpointing
/// (Recompute::selective_op) keeps the output of the first, third, fifth... and recomputes the others.
struct Matmul {
  double out = 0, in = 0;
};
std::vector<Matmul> block_matmuls(const LayerShape& shape, double t);
/// What a dense block keeps per sample under torchtitan's per-op selective checkpointing, in bytes
/// on one tensor rank (sp: the ways sequence parallelism splits the block's input): its input
/// (the checkpoint's), the kept matmuls' outputs, flash attention's output with its fp32 softmax
/// statistics, and under sequence parallelism the two reduce-scatters' outputs.
double op_checkpoint_bytes(const LayerShape& shape, double e, double t, double sp);

/// Cost of a synthetic layer, stated by the user.
struct SyntheticCost {
  double fwd_us_per_sample = 0;
  double fwd_us_fixed = 0;
  double bwd_ratio = 2;
};

struct Layer {
  std::string name;  ///< e.g. "embed", "layers.3", "fc0"
  LayerKind kind = LayerKind::linear;
  LayerShape shape;
  SyntheticCost synthetic;  ///< only for kind == synthetic
  std::vector<ParamSpec> params;
  /// Elements held for backward per sample (inputs and intermediates autograd saves).
  double activation_elems_per_sample = 0;
  /// Elements of the layer's input per sample (kept by activation checkpointing at a stage start).
  double input_elems_per_sample = 0;
  /// Elements of the layer's output per sample (what a stage sends to the next one).
  double output_elems_per_sample = 0;
  /// Forward FLOPs per sample (multiply-add = 2); 0 for synthetic layers.
  double flops_per_sample = 0;

  int64_t param_count() const;
  /// Parameters one rank of a tensor-parallel group of `tensor` and an expert-parallel group of
  /// `expert` holds.
  int64_t param_count(int tensor, int expert = 1, int expert_tensor = 0) const;
  /// Of those, the experts' (reduced and sharded over the expert-data-parallel group).
  int64_t expert_param_count(int tensor, int expert, int expert_tensor = 0) const;
};

/// A scenario's layers, shared by its copies: read-only once parsed, assigned whole. The tuner
/// copies its scenario for each of hundreds of thousands of configurations, and copying every
/// layer's parameters (their names and shapes) was most of such a copy and a tenth of planning
/// one. Reads as a const std::vector<Layer>.
class LayerList {
 public:
  LayerList() = default;
  LayerList(std::vector<Layer> layers)  // NOLINT(google-explicit-constructor): assigned from a vector
      : layers_(std::make_shared<const std::vector<Layer>>(std::move(layers))) {}
  const std::vector<Layer>& all() const {
    static const std::vector<Layer> none;
    return layers_ ? *layers_ : none;
  }
  operator const std::vector<Layer>&() const { return all(); }  // NOLINT(google-explicit-constructor)
  size_t size() const { return all().size(); }
  bool empty() const { return all().empty(); }
  const Layer& operator[](size_t i) const { return all()[i]; }
  const Layer& front() const { return all().front(); }
  const Layer& back() const { return all().back(); }
  std::vector<Layer>::const_iterator begin() const { return all().begin(); }
  std::vector<Layer>::const_iterator end() const { return all().end(); }

 private:
  std::shared_ptr<const std::vector<Layer>> layers_;
};

/// The model's first mixture-of-experts block (every MoE block has the same experts), or nullptr
/// for a dense model; and how many blocks are MoE.
const Layer* first_moe_layer(const std::vector<Layer>& layers);
int moe_block_count(const std::vector<Layer>& layers);

/// Whether op_checkpoint_bytes' count is derived for this layer: any layer but a MoE block or a
/// block with standard attention (whose math kernel's batched matmuls torchtitan's policy does not save).
bool op_checkpointing_derived(const Layer& layer);

/// Expands `model:` (a preset, a Hugging Face config or an explicit `layers:` list) into the layer
/// list. The returned string is a one-line description ("transformer, 8 blocks, hidden 512").
/// What a trainer runs where the model does not say (plan/framework.hpp): the attention kernel where
/// `model.attention` is absent, the cross entropy where `model.loss` is.
struct ModelDefaults {
  bool flash_attention = false;
  Loss loss = Loss::eager;
  bool weighted_activation = false;  ///< MoeShape::weighted_activation
};
std::vector<Layer> parse_model(const Field& model, std::string* description, const ModelDefaults& defaults = {});
/// The file a `model.hf_config` value names (a config.json, or the folder of a downloaded snapshot
/// holding one), relative to the scenario's folder; InputError at the value when there is none.
std::string hf_config_file(const Field& config);

/// A transformer's shape: what the transformer preset's keys and a Hugging Face config give.
struct TransformerShape {
  int64_t blocks = 8, hidden = 512, heads = 8, ffn = 2048, seq_len = 128, vocab = 10000;
  bool flash_attention = false, flash2 = false, eager = false;  ///< LayerShape's
  Loss loss = Loss::eager;                                      ///< the head's
  BlockForm form;
  MoeShape moe;  ///< the MoE blocks' experts (none: every block dense)
  /// Which blocks are MoE: block i (from 0) when i >= first_dense and (i + 1) is a multiple of
  /// every (DeepSeek's first_k_dense_replace; Llama 4's interleave_moe_layer_step).
  int64_t moe_every = 1, first_dense = 0;
  /// Multi-token prediction modules after the blocks (`model.mtp_layers`; DeepSeek-V3's
  /// num_nextn_predict_layers): each a block of the model's form (a MoE one where block `blocks + k`
  /// would be) with its eh_proj, and the head's projection and loss run once more.
  int64_t mtp_layers = 0;
  bool moe_block(int64_t i) const { return moe.on() && i >= first_dense && (i + 1) % moe_every == 0; }
  /// Sliding-window attention (`model.sliding_window`, 0: none) in every block but every
  /// full_attention_every-th (`model.full_attention_every`, 0: none full; Megatron-core's
  /// window_attn_skip_freq: block i, from 0, has full attention when (i + 1) is a multiple of it).
  int64_t window = 0, full_attention_every = 0;
  int64_t block_window(int64_t i) const { return full_attention_every > 0 && (i + 1) % full_attention_every == 0 ? 0 : window; }
};
/// embed, blocks, the multi-token prediction modules, head.
std::vector<Layer> make_transformer(const TransformerShape& t);

/// Builders, also used by tests to check the shapes against hand-computed ones.
Layer make_linear(const std::string& name, int64_t in, int64_t out, bool relu, bool bias = true);
Layer make_embedding(const std::string& name, int64_t vocab, int64_t hidden, int64_t seq_len, const BlockForm& form = {});
Layer make_encoder(const std::string& name, int64_t hidden, int64_t heads, int64_t ffn,
                   int64_t seq_len, bool flash_attention = false, const BlockForm& form = {}, const MoeShape& moe = {});
Layer make_head(const std::string& name, int64_t hidden, int64_t vocab, int64_t seq_len, const BlockForm& form = {});
/// An embedding's or head's vocabulary set to `vocab` rows (a trainer's dummy tokens,
/// padded_vocabulary): its vocabulary-parallel parameters, and the head's logits and their FLOPs.
/// Other layers are left as they are.
void set_vocabulary(Layer* layer, int64_t vocab);
Layer make_synthetic(const std::string& name, const SyntheticCost& cost, double params_mb,
                     double activation_mb);

}  // namespace parallax::plan
