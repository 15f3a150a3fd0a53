#pragma once
// A scenario: what to train (model, data, optimizer), how to split it (parallel) and on what
// (hardware). Parsed from YAML with every value checked; a Scenario that exists is consistent
// (batch divisible by chunks, partition_len covering the layers, ...), so later stages only meet
// errors of their own.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "plan/error.hpp"
#include "plan/framework.hpp"
#include "plan/hardware.hpp"
#include "plan/layers.hpp"
#include "plan/precision.hpp"
#include "schedule/schedule.hpp"

namespace parallax::plan {

/// `partition_len`: layers per stage as one number for every stage, a list, or "balanced".
struct PartitionLen {
  enum class Mode { per_stage, list, balanced };
  Mode mode = Mode::balanced;
  int per_stage = 0;
  std::vector<int> lens;
  bool operator==(const PartitionLen&) const = default;
};

struct DataSpec {
  std::string source = "synthetic";  ///< synthetic | fashion-mnist
  int batch_size = 32;               ///< samples per replica per mini-batch
  int steps = 10;                    ///< optimizer steps
  uint64_t seed = 0;
  bool shuffle = true;               ///< each epoch in a seeded random order (false: in file order)
};

/// `parallel.activation_checkpointing`: what backward recomputes instead of keeping.
enum class Recompute {
  none,       ///< keep every activation (`false`)
  /// keep each block's input, recompute that block alone in backward (`true`, `layer`); the
  /// embedding and the language-model head with its loss keep their activations
  /// (ParallelSpec::recomputes_forward)
  layer,
  stage,      ///< keep each stage's input, recompute the whole stage forward in backward (`stage`)
  selective,  ///< recompute only attention's core (scores, softmax, dropout), Korthikanti et al. 2022
  /// torchtitan's per-op selective checkpointing (activation_checkpoint.selective_ac_option "op"):
  /// in each block keep every second matmul's output and attention's, recompute the rest
  /// (plan::op_checkpoint_bytes).
  selective_op,
};
const char* name(Recompute r);

/// `parallel.recompute_modules`: what `selective` recomputes, as Megatron-core's
/// --recompute-modules names the pieces of a block (a bit each; core_attn alone is the default).
enum RecomputeModule : unsigned {
  kRecomputeCoreAttn = 1,   ///< attention's scores, softmax and dropout (Korthikanti et al. 2022)
  kRecomputeLayernorm = 2,  ///< the two norms: their outputs (the inputs of QKV and of the MLP) are not kept
  kRecomputeMoeAct = 4,     ///< a MoE block's routed experts' activation function: its output is not kept
  kRecomputeMoe = 8,        ///< a MoE block's whole MoE layer (router, dispatch, experts, combine): only its input is kept
  kRecomputeMlaUpProj = 16, ///< latent attention's up projections and rotary kernels: Q, K and V are not kept
  kRecomputeMlp = 32,       ///< a dense block's whole MLP: only its input (the norm's output) is kept
};
/// Each module's bit and Megatron-core's name for it, entry i holding bit 1 << i: the one list that
/// the knob's choices and parser and the texts below read.
struct RecomputeModuleName {
  RecomputeModule bit;
  const char* name;
};
inline constexpr RecomputeModuleName kRecomputeModules[] = {
    {kRecomputeCoreAttn, "core_attn"}, {kRecomputeLayernorm, "layernorm"}, {kRecomputeMoeAct, "moe_act"}, {kRecomputeMoe, "moe"},
    {kRecomputeMlaUpProj, "mla_up_proj"}, {kRecomputeMlp, "mlp"}};
/// The modules' names, in kRecomputeModules' order.
std::vector<std::string> recompute_module_names(unsigned modules);
/// The modules as YAML text: "[core_attn]", "[layernorm, moe_act]".
std::string recompute_modules_text(unsigned modules);

/// `parallel.p2p`: how a pipeline's sends and receives meet on NCCL.
enum class P2p {
  pytorch,   ///< torch.distributed.pipelining: a send waits until its peer posts the receive
  megatron,  ///< Megatron-LM: each receive is posted with the send before it (batch_isend_irecv), so no send waits
};
const char* name(P2p p);

/// `parallel.context_attention`: whose ring attention runs context parallelism.
enum class ContextAttention {
  torch,     ///< torch's context_parallel (torchtitan): keys and values all-gathered once, each step merged in fp32 apart
  megatron,  ///< Megatron-core over Transformer Engine: a ring of point-to-point sends, the merges inside its kernels
};
const char* name(ContextAttention a);

/// `parallel.moe_token_dispatcher`: how a MoE block's tokens reach their experts' ranks.
enum class TokenDispatcher {
  alltoall,  ///< NCCL's all-to-all (Megatron-core's alltoall dispatcher): every copy of a token sent to its expert's rank
  deepep,    ///< DeepSeek's DeepEP kernels (Megatron-core's flex dispatcher): once per node over the NICs, then NVLink
};
const char* name(TokenDispatcher d);

/// `parallel.ddp_buckets`: how data-parallel gradients are grouped into buckets, each reduced as
/// one collective once its last gradient is ready (with overlap_grad_reduce).
enum class DdpBuckets {
  pytorch,   ///< torch's DDP: first_bucket_mb, then bucket_cap_mb a bucket
  megatron,  ///< Megatron-core's DDP: max(40M, 1M x data x context) parameters a bucket on the first stage, one bucket elsewhere
};
const char* name(DdpBuckets b);
/// Parameters in one of Megatron-core's DDP buckets: its default --ddp-bucket-size,
/// max(40,000,000, 1,000,000 x the data-parallel ranks with context), in elements
/// (megatron/core/distributed/distributed_data_parallel.py).
int64_t megatron_bucket_params(int replicas);

/// `parallel.rank_order`: how global ranks walk the grid, fastest first (Megatron-core's `order`).
/// Either way a tensor-parallel group is on neighbouring devices; the order decides what shares a
/// node next: a stage's replicas (their all-reduce inside the node) or a replica's stages (their
/// sends inside the node).
enum class RankOrder {
  tensor_data_pipeline,  ///< `tp-dp-pp`, Megatron-LM's default
  tensor_pipeline_data,  ///< `tp-pp-dp`
};
const char* name(RankOrder o);

/// `parallel.shard`: what each data-parallel rank keeps of its stage's training state, ZeRO's
/// stages 0-3 in words (Rajbhandari et al. 2020). The unit of sharding is a layer, as torchtitan
/// applies FSDP2's `fully_shard` to each transformer block.
enum class Shard {
  none,       ///< DDP: every rank keeps everything and all-reduces the gradients
  optimizer,  ///< ZeRO-1: the optimizer state and master weights (Megatron-LM's --use-distributed-optimizer)
  gradients,  ///< ZeRO-2: and the gradients, reduce-scattered after each layer's backward
  full,       ///< ZeRO-3 / FSDP: and the parameters, all-gathered before each layer's forward and backward
};
const char* name(Shard s);

struct ParallelSpec {
  int data = 1;            ///< replicas (DDP)
  /// Context-parallel ranks per replica (Megatron-core's --context-parallel-size): each holds
  /// 1 / context of every sequence, keys and values pass around a ring of them.
  int context = 1;
  /// Expert-parallel ranks (Megatron-core's --expert-model-parallel-size): a MoE block's experts
  /// divide over them, and tokens reach their experts by all-to-all. The group lies inside data x
  /// context, its ranks the neighbouring replicas (Megatron-core's tp-cp-ep-dp-pp); the experts'
  /// gradients are reduced over the replicas / expert ranks holding the same experts.
  int expert = 1;
  /// Tensor ranks each expert is split over (Megatron-core's --expert-tensor-parallel-size): 0
  /// means as many as `tensor` (its default), else 1: experts whole, the expert group then any
  /// `expert` neighbouring ranks of tensor x data x context.
  int expert_tensor = 0;
  int tensor = 1;          ///< tensor-parallel ranks per stage (Megatron-LM column/row-parallel linears)
  bool sequence_parallel = false;  ///< Korthikanti et al. 2022: norms and dropout split over the TP group
  /// With tensor parallelism and no sequence parallelism, each tensor rank sends 1/tensor of a
  /// pipeline boundary tensor and the receiver all-gathers it: Megatron-LM from February 2021 until
  /// its pipeline moved into Megatron-core in March 2023 (--no-scatter-gather-tensors-in-pipeline
  /// turned it off). false: each sends the tensor whole (Megatron-core's get_tensor_shapes, torch's
  /// pipelining). Under sequence parallelism the tensor is split either way.
  bool p2p_scatter_gather = false;
  /// Each tensor rank's share of a pipeline boundary tensor: 1/tensor when it is split.
  int p2p_split() const { return sequence_parallel || p2p_scatter_gather ? tensor : 1; }
  bool tensor_across_nodes = false;  ///< allow a TP group to span nodes (slow; refused unless asked)
  int pipeline = 1;        ///< pipeline ranks per replica
  int virtual_stages = 1;  ///< stages per pipeline rank (YAML: `virtual`)
  PartitionLen partition_len;
  int chunks = 1;  ///< micro-batches per mini-batch
  schedule::ScheduleKind schedule = schedule::ScheduleKind::gpipe;
  std::string schedule_csv;  ///< path of an imported PyTorch pipelining CSV
  int grad_accumulation = 1;
  double bucket_cap_mb = 25;
  double first_bucket_mb = 1;
  DdpBuckets ddp_buckets = DdpBuckets::pytorch;
  Precision precision = Precision::fp32;
  Recompute activation_checkpointing = Recompute::none;
  /// What selective recompute recomputes (RecomputeModule bits).
  unsigned recompute_modules = kRecomputeCoreAttn;
  /// Whether backward recomputes this module: selective recompute naming it.
  bool recomputes(RecomputeModule m) const { return activation_checkpointing == Recompute::selective && (recompute_modules & m); }
  /// Whether backward re-runs this layer's whole forward from its kept input. `layer` checkpoints
  /// each block (transformer or linear layer) and not the embedding or the language-model head with
  /// its loss: torch.utils.checkpoint around each block, as torchtitan's full activation
  /// checkpointing, Megatron-LM's --recompute-granularity full and Hugging Face's
  /// gradient_checkpointing wrap them. `stage` re-runs the whole stage, head and loss included.
  bool recomputes_forward(LayerKind kind) const {
    return activation_checkpointing == Recompute::stage ||
           (activation_checkpointing == Recompute::layer && kind != LayerKind::embedding && kind != LayerKind::head);
  }
  P2p p2p = P2p::pytorch;
  RankOrder rank_order = RankOrder::tensor_data_pipeline;
  /// Parameters in the compute type with an fp32 master copy in the optimizer and fp32 gradients
  /// (Megatron-LM's mixed precision); false: fp32 parameters cast per op (torch.autocast).
  bool master_weights = false;
  /// What the data-parallel ranks shard (ZeRO's stages); `shard_group` says over how many.
  Shard shard = Shard::none;
  /// Data-parallel ranks one shard spans; 0 means all of `data`. Fewer is HSDP: shard inside
  /// each group, replicate across the groups (torchtitan's dp_shard x dp_replicate).
  int shard_group = 0;
  /// Shard full: free each layer's gathered parameters after its forward and gather them again
  /// for its backward (FSDP2's default); false keeps them gathered from forward to backward.
  bool reshard_after_forward = true;
  /// Shard full at precision fp8: the blocks' linear weights all-gathered in fp8, one byte each
  /// (torchao's enable_fsdp_float8_all_gather, as torchtitan runs it); false: in bf16, cast after.
  bool fp8_param_gather = false;
  /// Sharded gradients reduce-scattered after every micro-batch's backward, the step's summed
  /// gradients then kept as shards (FSDP2 without set_requires_gradient_sync(False), torchtitan's
  /// gradient accumulation; Megatron-FSDP's optim_grads and optim_grads_params; DeepSpeed's ZeRO-2
  /// and -3); false: once, after the step's last backward, the unsharded gradients summed until then.
  /// See reduces_every_microbatch for where the pipeline overrides it.
  bool reduce_scatter_every_microbatch = false;
  /// With master_weights: the gradients DDP reduces kept in 16 bits, not fp32: bf16 (Megatron-LM's
  /// --grad-reduce-in-bf16, NeMo's grad_sync_dtype: bf16), or fp16 under precision fp16.
  bool grad_reduce_in_bf16 = false;
  /// Data-parallel gradient reduction overlapped with the backward, bucket by bucket as each is
  /// ready (torch's DDP; Megatron-LM's --overlap-grad-reduce). false: one reduction of the stage's
  /// whole gradient buffer after its last backward (Megatron-LM's default, as its DDP sets
  /// bucket_size to None without --overlap-grad-reduce).
  bool overlap_grad_reduce = true;
  /// With the optimizer's state sharded and the parameters kept whole (shard optimizer or
  /// gradients): the all-gather of each rank's updated parameters runs bucket by bucket beside the
  /// next step's first forward (Megatron-LM's --overlap-param-gather, NeMo's overlap_param_sync);
  /// false: after the optimizer step, exposed (Megatron-LM's default; the executor's).
  bool overlap_param_gather = false;
  /// Whether the parameters' all-gather after a sharded optimizer step is overlapped with the
  /// next forward (it has one to overlap: shard optimizer or gradients over several ranks).
  bool param_gather_overlapped() const { return overlap_param_gather && sharded(Shard::optimizer) && !sharded(Shard::full) && shard_ranks() > 1; }
  /// Tensor parallelism's all-gathers and reduce-scatters overlapped with the linear layers'
  /// GEMMs they feed or drain (Megatron-LM's --tp-comm-overlap, Transformer Engine's userbuffers;
  /// torchtitan's async tensor parallelism). Needs sequence parallelism.
  bool tp_comm_overlap = false;
  /// A MoE model's all-to-alls hidden behind another micro-batch's compute: Megatron-core's
  /// combined 1F1B (--overlap-moe-expert-parallel-comm), the forward of one micro-batch run
  /// beside the backward of an earlier one in every steady-state step (schedule::combined_1f1b_order).
  bool overlap_moe_expert_parallel_comm = false;
  TokenDispatcher moe_token_dispatcher = TokenDispatcher::alltoall;
  ContextAttention context_attention = ContextAttention::torch;

  int stages() const { return pipeline * virtual_stages; }
  /// Tensor ranks an expert is split over (expert_tensor, or tensor when 0).
  int expert_tensor_ways() const { return expert_tensor > 0 ? expert_tensor : tensor; }
  /// Ranks holding the same experts, which reduce their gradients and shard their state
  /// (Megatron-core's expert-data-parallel group: tensor x data x context / (expert_tensor x expert)).
  int expert_replicas() const { return tensor * replicas() / (expert_tensor_ways() * expert); }
  /// The pipeline rank that holds `stage` (the schedule decides: looped or V-shaped).
  int rank_of_stage(int stage) const { return schedule::pipeline_rank_of_stage(stage, pipeline, schedule::v_shaped(schedule)); }
  /// Every GPU of the plan.
  int world_size() const { return data * context * pipeline * tensor; }
  /// The ranks (of one tensor rank) that hold a stage's parameters and reduce its gradients:
  /// data x context. The simulator plays them alike; a placement's `replica` counts them,
  /// context fastest (replica = data index x context + context index).
  int replicas() const { return data * context; }
  /// The ranks one shard of a stage's state is split over: its shard group's replicas with their
  /// context ranks (torchtitan's dp_shard_cp mesh, Megatron-core's data-with-context group). 1
  /// without sharding.
  int shard_ranks() const { return shard == Shard::none ? 1 : (shard_group > 0 ? shard_group : data) * context; }
  /// Copies of each shard (HSDP's replicate degree): 1 when the shard spans all of `data`, and
  /// without sharding.
  int shard_copies() const { return shard == Shard::none ? 1 : replicas() / shard_ranks(); }
  /// Sharded at this level or beyond.
  bool sharded(Shard level) const { return shard != Shard::none && shard >= level; }
  /// Whether bucket_cap_mb and first_bucket_mb decide anything: DDP's buckets (several replicas,
  /// gradients not sharded), reduced during the backward, grouped as torch's DDP groups them.
  bool bucket_caps_apply() const {
    return replicas() > 1 && !sharded(Shard::gradients) && overlap_grad_reduce && ddp_buckets == DdpBuckets::pytorch;
  }
  /// Whether sharded gradients are reduce-scattered after each micro-batch's backward rather than
  /// once a step: reduce_scatter_every_microbatch, except on stages of torch.distributed.pipelining
  /// (p2p pytorch with pipeline > 1), which turns FSDP's gradient sync off until the step's last
  /// backward whatever the trainer asks.
  bool reduces_every_microbatch() const {
    return sharded(Shard::gradients) && reduce_scatter_every_microbatch && !(pipeline > 1 && p2p == P2p::pytorch);
  }
  /// Ranks as the schedule sees them: one per tensor-parallel group (data x context x pipeline).
  int tensor_groups() const { return replicas() * pipeline; }
  bool operator==(const ParallelSpec&) const = default;
};

struct OptimizerSpec {
  std::string kind = "sgd";  ///< sgd | adam | adamw
  double lr = 0.01;
  double momentum = 0;
  double weight_decay = 0;
  /// `state_dtype: bf16`: the master weights and the optimizer's state in bf16, 2 bytes each
  /// (Apex's DistributedFusedAdam with dtype bf16, as NeMo's `optim.dtype: bf16`); needs
  /// master_weights. fp32 (the default): 4 bytes each.
  bool state_bf16 = false;
  /// Tensors of optimizer state per parameter (momentum: 1, Adam: 2).
  int state_per_param() const;
  /// Bytes of each master weight and state element.
  int state_bytes() const { return state_bf16 ? 2 : 4; }
};

/// Where each key of a scenario was written. A scenario's copies share it (the tuner copies the
/// scenario for every configuration it plans, and copying the map was 3% of a search), and one of
/// them that records a place first takes a copy of its own.
class KeyPlaces {
 public:
  void set(const std::string& key_path, const Location& where);
  /// The key's place, or nullptr where none was recorded.
  const Location* find(const std::string& key_path) const;

 private:
  std::shared_ptr<std::map<std::string, Location>> places_;
};

struct Scenario {
  std::string name;
  Framework framework = Framework::pytorch;
  /// What `framework` set ("parallel.p2p=megatron", "model.attention=flash"): its defaults that the
  /// scenario did not set itself.
  std::vector<std::string> framework_set;
  std::string file;  ///< where it was read from ("(built-in) ..." for the default)
  std::string model_description;
  LayerList layers;
  /// The model's own vocabulary (its embedding's or head's), before a trainer pads it (resolve_plan,
  /// padded_vocabulary); 0 for a model without one.
  int64_t model_vocab = 0;
  DataSpec data;
  ParallelSpec parallel;
  OptimizerSpec optimizer;
  HardwareProfile hardware;
  std::string hf_config_file;  ///< the Hugging Face config the model was read from; empty if none

  /// Every file the scenario was read from: itself, a hardware profile file, a Hugging Face config,
  /// a schedule CSV. An output path must name none of them (cli's require_output_folder).
  std::vector<std::string> files_read() const;

  /// The place of a key ("parallel.chunks"), for errors found after parsing.
  Location where(const std::string& key_path) const;
  KeyPlaces places;
};

/// The checks that need several values at once (batch divisible by chunks, a stage per layer at
/// least, the precision on the device, ...), for a Scenario changed after parsing (the tuner's
/// typed knobs); InputError at the value to change.
void check_scenario(const Scenario& scenario);
/// check_scenario's two halves, which it runs in this order. check_layout: the rules that read
/// only the layout (data, context, pipeline, tensor, the schedule with its virtual stages and
/// chunks, the batch: the knob table's layout, schedule and batch couplings, partition_len
/// aside), the model and the hardware. The tuner checks them once per layout rather than once per
/// combination of the knobs it crosses with it; a rule that reads a crossed knob belongs in
/// check_beyond_layout.
void check_layout(const Scenario& scenario);
void check_beyond_layout(const Scenario& scenario);

/// Parses and checks a scenario document (overrides already applied).
Scenario parse_scenario(const YamlDocument& doc);

/// The document of SCENARIO (a path; empty means the built-in default) with --set overrides
/// applied in order; InputError when it cannot be read.
YamlDocument scenario_document(const std::string& path, const std::vector<std::string>& overrides);

/// Loads SCENARIO (a path; empty means the built-in default) and applies --set overrides.
Scenario load_scenario(const std::string& path, const std::vector<std::string>& overrides);

/// Every key a scenario file may hold, as "section.key" (docs/scenarios.md lists the same).
std::vector<std::string> scenario_keys();

}  // namespace parallax::plan
