#include "plan/trainer_rules.hpp"

#include <algorithm>

#include "plan/knobs.hpp"
#include "plan/layers.hpp"

namespace parallax::plan {

using schedule::ScheduleKind;
namespace {

// The first transformer block of the model, or nothing (export refuses other models itself).
const Layer* first_block(const Scenario& s) {
  const auto it = std::find_if(s.layers.begin(), s.layers.end(), [](const Layer& l) { return l.kind == LayerKind::encoder; });
  return it == s.layers.end() ? nullptr : &*it;
}

// `key` where the scenario states it, else `cause`: a refusal of a knob left at its default points
// at the knob that made the default wrong.
std::string stated_or(const Scenario& s, const std::string& key, const std::string& cause) {
  const Location* at = s.places.find(key);
  return at && (at->line > 0 || !at->file.empty()) ? key : cause;
}

// torchrun starts as many processes on every node: a world beyond one node must fill whole nodes
// (12 GPUs on nodes of 8 would start 16, and the trainer derive another data degree, or fail).
// The refusal names the data degree, the one a user changes to fit a world to nodes, unless it is 1:
// then the largest degree that multiplies the world.
std::optional<TrainerRefusal> whole_nodes_refusal(const Scenario& s) {
  const ParallelSpec& par = s.parallel;
  const int world = par.world_size(), per_node = s.hardware.devices_per_node;
  if (world <= per_node || world % per_node == 0) return std::nullopt;
  const std::pair<const char*, int> degrees[] = {
      {"data", par.data}, {"tensor", par.tensor}, {"context", par.context}, {"pipeline", par.pipeline}};
  std::string product, key = "data";
  int largest = 1;
  for (const auto& [degree, value] : degrees) {
    if (value == 1) continue;
    product += std::string(product.empty() ? "" : " x ") + degree + " " + std::to_string(value);
    if (par.data == 1 && value > largest) largest = value, key = degree;
  }
  return TrainerRefusal{"parallel." + key, "torchrun starts as many processes on every node, and this plan's " + std::to_string(world) + " ranks (" +
                                               product + ") do not fill whole nodes of " + std::to_string(per_node) +
                                               ": plan a world of whole nodes (a multiple of " + std::to_string(per_node) + ")"};
}

// Without a pipeline, both trainers run a step's micro-batches as gradient accumulation, each
// one's forward and backward in turn (Megatron-core's forward_backward_no_pipelining; torchtitan's
// loop over local batches): 1F1B's order at one stage. Another schedule holds other activations.
std::optional<TrainerRefusal> unpipelined_refusal(const Scenario& s, const char* trainer) {
  const ParallelSpec& par = s.parallel;
  if (par.pipeline > 1 || par.chunks * par.grad_accumulation == 1 || par.schedule == ScheduleKind::one_f_one_b) return std::nullopt;
  return TrainerRefusal{"parallel.schedule", std::string(trainer) + " without a pipeline runs each micro-batch's forward and backward in " +
                                                 "turn, one in flight; this plan's schedule is " + name(par.schedule) +
                                                 " (set parallel.schedule: 1f1b)"};
}

// Megatron-LM's pretrain_gpt.py (arguments.py, schedules.py, at the mirror's d98e8a64).
std::optional<TrainerRefusal> megatron_refusal(const Scenario& s) {
  const ParallelSpec& par = s.parallel;
  if (auto nodes = whole_nodes_refusal(s)) return nodes;
  if (auto unpipelined = unpipelined_refusal(s, "Megatron-LM")) return unpipelined;
  if (par.pipeline > 1) {
    const bool ok = (par.schedule == ScheduleKind::one_f_one_b && par.virtual_stages == 1) || par.schedule == ScheduleKind::interleaved_1f1b;
    if (!ok)
      return TrainerRefusal{"parallel.schedule", std::string("Megatron-LM runs 1F1B and interleaved 1F1B; this plan's schedule is ") +
                                                     name(par.schedule) + " (set parallel.schedule: 1f1b or interleaved-1f1b)"};
    // Megatron-LM runs a step's micro-batches (global batch / (micro-batch x data)) as one schedule:
    // it has no flush between accumulation steps, which the plan would predict.
    const int microbatches = par.chunks * par.grad_accumulation;
    if (par.grad_accumulation > 1)
      return TrainerRefusal{"parallel.grad_accumulation",
                            "Megatron-LM runs a step's " + std::to_string(microbatches) + " micro-batches (chunks " + std::to_string(par.chunks) +
                                " x grad_accumulation " + std::to_string(par.grad_accumulation) +
                                ") as one pipeline schedule, without the flush between accumulation steps this plan predicts: plan it so, "
                                "with parallel.chunks: " + std::to_string(microbatches) + ", parallel.grad_accumulation: 1 and data.batch_size x " +
                                std::to_string(par.grad_accumulation)};
    // Its interleaved schedule takes the micro-batches in groups of the pipeline's size
    // (schedules.py, microbatch_group_size_per_vp_stage): it raises unless they fill whole groups.
    if (par.virtual_stages > 1 && microbatches % par.pipeline != 0)
      return TrainerRefusal{"parallel.chunks", "Megatron-LM's interleaved 1F1B needs the micro-batches (" + std::to_string(microbatches) +
                                                   ") a multiple of the pipeline's " + std::to_string(par.pipeline) + " stages: set parallel.chunks"};
  }
  // Megatron-core's DotProductAttention asserts context_parallel_size == 1: only Transformer
  // Engine's attention runs the ring.
  const Layer* block = first_block(s);
  if (par.context > 1 && block && !block->shape.flash_attention)
    return TrainerRefusal{"parallel.context", "Megatron-LM runs context parallelism in Transformer Engine's fused attention only; "
                                              "set model.attention: flash"};
  // Transformer Engine's flash and fused attention take 16-bit inputs only (dot_product_attention/
  // utils.py, "Filter: Data type"): a float32 model gets the unfused attention, not the plan's.
  if (par.precision == Precision::fp32 && block && block->shape.flash_attention)
    return TrainerRefusal{"model.attention", "Megatron-LM's flash attention (Transformer Engine's) runs in bf16 or fp16, and this plan is "
                                             "fp32: set model.attention: standard (its unfused attention) or parallel.precision: bf16"};
  if (par.activation_checkpointing == Recompute::selective_op)
    return TrainerRefusal{"parallel.activation_checkpointing", "selective_op is torchtitan's per-op checkpointing; Megatron-LM recomputes "
                                                               "selectively by module: set parallel.activation_checkpointing: selective "
                                                               "(with parallel.recompute_modules)"};
  if (par.sharded(Shard::gradients))
    return TrainerRefusal{"parallel.shard", std::string("Megatron-LM's export writes shard optimizer (--use-distributed-optimizer); "
                                                        "shard ") + name(par.shard) + " is Megatron-FSDP's, which Parallax does not export yet"};
  // Under sequence parallelism its mappings split each block's tokens over the tensor ranks and
  // assert that they divide (core/tensor_parallel/mappings.py).
  if (par.sequence_parallel && par.tensor > 1 && block && (block->shape.seq_len / par.context) % par.tensor != 0)
    return TrainerRefusal{"model.seq_len", "Megatron-LM's sequence parallelism splits each rank's " + std::to_string(block->shape.seq_len / par.context) +
                                               " tokens over the " + std::to_string(par.tensor) + " tensor ranks, which must divide them: set model.seq_len"};
  // Its MoE layer raises in training under tensor parallelism without sequence parallelism, whatever
  // the expert degree (core/transformer/moe/moe_layer.py, MoELayer.forward).
  if (first_moe_layer(s.layers) && par.tensor > 1 && !par.sequence_parallel)
    return TrainerRefusal{"parallel.sequence_parallel", "Megatron-core's MoE layer raises in training under tensor parallelism without "
                                                        "sequence parallelism (moe_layer.py): set parallel.sequence_parallel: true"};
  // parallel_state.py asserts that the distributed optimizer's copies divide the experts' data-
  // parallel ranks (world / (pipeline x expert x expert_tensor)) as well as the dense ones.
  if (par.shard_copies() > 1 && par.expert_replicas() % par.shard_copies() != 0)
    return TrainerRefusal{"parallel.shard_group", "Megatron-core needs the distributed optimizer's " + std::to_string(par.shard_copies()) +
                                                      " copies (--num-distributed-optimizer-instances) to divide the experts' " +
                                                      std::to_string(par.expert_replicas()) +
                                                      " data-parallel ranks (parallel_state.py): set parallel.shard_group so that they do"};
  // transformer_config.py asserts these beside --overlap-moe-expert-parallel-comm.
  if (par.overlap_moe_expert_parallel_comm) {
    const char* why = par.activation_checkpointing == Recompute::layer || par.activation_checkpointing == Recompute::stage
                          ? "full recomputation (activation_checkpointing layer or stage)"
                      : par.recomputes(kRecomputeMoe) ? "the MoE layer recomputed (moe in recompute_modules)"
                      : par.precision == Precision::fp32 ? "a float32 model (it needs bf16 or fp16)"
                      : mtp_layers(s) > 1                ? "more than one multi-token prediction layer"
                                                         : nullptr;
    if (why)
      return TrainerRefusal{"parallel.overlap_moe_expert_parallel_comm",
                            std::string("Megatron-core's --overlap-moe-expert-parallel-comm cannot run with ") + why +
                                " (transformer_config.py asserts it): set parallel.overlap_moe_expert_parallel_comm: false"};
  }
  // Its tp-pp-dp order is tp-cp-ep-pp-dp (initialize.py): the context and expert ranks inside the
  // pipeline's, where Parallax's tp-pp-dp puts them outside it.
  if (par.rank_order == RankOrder::tensor_pipeline_data && par.pipeline > 1 && (par.context > 1 || par.expert > 1))
    return TrainerRefusal{"parallel.rank_order", "Megatron-LM's tp-pp-dp order (--use-tp-pp-dp-mapping) places context and expert ranks "
                                                 "inside the pipeline's, where this plan's tp-pp-dp places them outside: set "
                                                 "parallel.rank_order: tp-dp-pp"};
  // arguments.py asserts rope or no positions beside multi-token prediction.
  if (block && mtp_layers(s) > 0 && !block->shape.form.mla.on() && block->shape.form.rotary.scaling == "yarn")
    return TrainerRefusal{"model.mtp_layers", "Megatron-LM's multi-token prediction takes rope positions or none (arguments.py), and "
                                              "this model's config scales its rotary positions by YaRN (--position-embedding-type yarn)"};
  if (par.p2p_scatter_gather && par.p2p_split() > 1 && par.pipeline > 1 && !par.sequence_parallel)
    return TrainerRefusal{"parallel.p2p_scatter_gather", "Megatron-LM sends each pipeline tensor whole since its pipeline moved into "
                                                         "Megatron-core (March 2023); the scatter-gather is an older Megatron-LM's: set "
                                                         "parallel.p2p_scatter_gather: false"};
  if (par.param_gather_overlapped() && !par.overlap_grad_reduce)
    return TrainerRefusal{"parallel.overlap_param_gather", "Megatron-LM overlaps the parameters' gather only beside the gradients' "
                                                           "reduction (arguments.py): set parallel.overlap_grad_reduce: true as well"};
  return std::nullopt;
}

// torchtitan v0.2.2's train.py and parallel_dims.py.
std::optional<TrainerRefusal> torchtitan_refusal(const Scenario& s) {
  const ParallelSpec& par = s.parallel;
  if (auto nodes = whole_nodes_refusal(s)) return nodes;
  if (auto unpipelined = unpipelined_refusal(s, "torchtitan")) return unpipelined;
  if (par.data > 1 && par.shard == Shard::none && (par.tensor > 1 || par.pipeline > 1))
    return TrainerRefusal{"parallel.data", "torchtitan replicates (DDP) only without tensor or pipeline parallelism; with them it shards "
                                           "its replicas: set parallel.shard: full (FSDP2)"};
  // FSDP2 always spans the context ranks (parallel_dims.py: fsdp_enabled is dp_shard or cp).
  if (par.context > 1 && par.shard != Shard::full)
    return TrainerRefusal{"parallel.context", "torchtitan shards the parameters over the context ranks (FSDP2 over data_parallel_shard x "
                                              "context): set parallel.shard: full"};
  if ((par.shard == Shard::optimizer || par.shard == Shard::gradients) && par.data > 1)
    return TrainerRefusal{"parallel.shard", std::string("torchtitan shards with FSDP2 (shard full) or replicates (none); shard ") + name(par.shard) +
                                                " is ZeRO-" + (par.shard == Shard::optimizer ? "1" : "2") + ", which it does not run"};
  // A shard of one rank is no FSDP: torchtitan replicates instead, which it runs only alone.
  if (par.shard == Shard::full && par.data > 1 && par.context == 1 && par.shard_ranks() == 1 && (par.tensor > 1 || par.pipeline > 1))
    return TrainerRefusal{"parallel.shard_group", "a shard_group of 1 replicates every rank (DDP), which torchtitan runs only without "
                                                  "tensor or pipeline parallelism: set parallel.shard_group to 2 or more"};
  // Its device mesh is pp, dp_replicate, dp_shard, cp, tp from the outermost (parallel_dims.py).
  if (par.rank_order == RankOrder::tensor_pipeline_data && par.pipeline > 1 && par.replicas() > 1)
    return TrainerRefusal{"parallel.rank_order", "torchtitan's device mesh puts the pipeline outermost (tp-cp-dp-pp): set "
                                                 "parallel.rank_order: tp-dp-pp"};
  if (par.grad_reduce_in_bf16)
    return TrainerRefusal{"parallel.grad_reduce_in_bf16", "torchtitan's replicas (DDP) reduce the gradients of its fp32 parameters; "
                                                          "set parallel.grad_reduce_in_bf16: false"};
  if (par.tensor > 1 && !par.sequence_parallel)
    return TrainerRefusal{stated_or(s, "parallel.sequence_parallel", "parallel.tensor"),
                          "torchtitan's tensor parallelism always splits the sequence in the norms; set "
                                                        "parallel.sequence_parallel: true"};
  const Layer* block = first_block(s);
  // Its Llama splits the key/value projections' columns over the tensor ranks and views them as
  // whole heads (model.py): the ranks must divide the key/value heads.
  if (par.tensor > 1 && block && block->shape.kv_heads() % par.tensor != 0)
    return TrainerRefusal{"parallel.tensor", "torchtitan splits the " + std::to_string(block->shape.kv_heads()) + " key/value heads over the " +
                                                 std::to_string(par.tensor) + " tensor ranks, which must divide them (it does not replicate "
                                                 "them): set parallel.tensor to a divisor of " + std::to_string(block->shape.kv_heads())};
  // parallelize.py asserts seq_len % (tensor x 2 x context) == 0 (parallel_dims.seq_len_divisor:
  // sequence parallelism splits by tensor, context parallelism's load balancing by 2 x context).
  if (const int64_t divisor = int64_t{par.tensor} * 2 * par.context; block && block->shape.seq_len % divisor != 0)
    return TrainerRefusal{"model.seq_len", "torchtitan needs seq_len a multiple of tensor x 2 x context (" + std::to_string(divisor) +
                                               "; parallel_dims.py), and this plan's is " + std::to_string(block->shape.seq_len)};
  // Async tensor parallelism is a torch.compile pass; the plan costs the blocks' memory-bound ops
  // fused (torch.compile) unless model.kernels says eager.
  if (par.tp_comm_overlap && par.tensor > 1 && block && block->shape.eager)
    return TrainerRefusal{"parallel.tp_comm_overlap", "torchtitan's async tensor parallelism needs torch.compile, and this plan's "
                                                      "model.kernels is eager: set model.kernels: fused or tp_comm_overlap: false"};
  // Mixed precision is FSDP2's (its MixedPrecisionPolicy) or, for DDP or one device, autocast's;
  // with tensor or pipeline parallelism and neither FSDP nor context parallelism, torchtitan turns
  // it off (distributed/utils.py, maybe_enable_amp) and trains in float32.
  if (!torchtitan_fsdp(par) && (par.tensor > 1 || par.pipeline > 1) && par.precision != Precision::fp32)
    return TrainerRefusal{"parallel.precision", std::string("torchtitan trains in float32 under tensor or pipeline parallelism without "
                                                            "FSDP (it turns mixed precision off): this plan's is ") +
                                                    name(par.precision) + "; shard over data ranks (parallel.shard: full) or plan fp32"};
  if (par.precision == Precision::fp16)
    return TrainerRefusal{"parallel.precision", "torchtitan trains in bfloat16 or float32 (and float8 linears), not fp16"};
  if (par.activation_checkpointing == Recompute::selective)
    return TrainerRefusal{"parallel.activation_checkpointing", "torchtitan's selective checkpointing saves by op (selective_ac_option "
                                                               "\"op\"), not Megatron-core's modules: set parallel.activation_checkpointing: "
                                                               "selective_op, which the plan then predicts as torchtitan runs it"};
  if (par.activation_checkpointing == Recompute::stage)
    return TrainerRefusal{"parallel.activation_checkpointing", "torchtitan recomputes per block (full) or per op (selective), not a "
                                                               "whole stage: set parallel.activation_checkpointing: layer"};
  return std::nullopt;
}

}  // namespace

bool torchtitan_fsdp(const ParallelSpec& par) {
  return (par.shard == Shard::full && par.shard_ranks() / par.context > 1) || par.context > 1;
}

int mtp_layers(const Scenario& s) {
  return static_cast<int>(std::count_if(s.layers.begin(), s.layers.end(), [](const Layer& l) { return l.shape.mtp; }));
}

const char* trainer_name(Framework trainer) {
  switch (trainer) {
    case Framework::megatron: return "Megatron-LM";
    case Framework::torchtitan: return "torchtitan";
    case Framework::deepspeed: return "DeepSpeed";
    case Framework::pytorch: break;
  }
  return "PyTorch";
}

std::optional<TrainerRefusal> trainer_refusal(const Scenario& s, Framework trainer) {
  switch (trainer) {
    case Framework::megatron: return megatron_refusal(s);
    case Framework::torchtitan: return torchtitan_refusal(s);
    case Framework::pytorch:
    case Framework::deepspeed: break;
  }
  return std::nullopt;
}

bool has_trainer_rules(Framework trainer) { return trainer == Framework::megatron || trainer == Framework::torchtitan; }

void check_trainer_runs(const Scenario& s, Framework trainer) {
  if (const auto refusal = trainer_refusal(s, trainer)) throw InputError(s.where(refusal->key), refusal->why);
}

}  // namespace parallax::plan
