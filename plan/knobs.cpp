#include "plan/knobs.hpp"

#include <cstdio>
#include <limits>
#include <stdexcept>

#include "plan/search_defaults.hpp"

namespace parallax::plan {

using schedule::ScheduleKind;
namespace {

constexpr int kMaxCount = 1 << 24;

// A table entry from the member the value lives in (of Settings or its ParallelSpec).
template <typename T>
Knob typed(std::string key, KnobType type, T Settings::*member, std::string doc) {
  Knob k;
  k.key = std::move(key);
  k.type = type;
  k.doc = std::move(doc);
  k.get = [member](const Settings& s) { return KnobValue(s.*member); };
  k.set = [member](Settings& s, const KnobValue& v) { s.*member = std::get<T>(v); };
  return k;
}

Knob integer(std::string key, int Settings::*member, int max, std::string doc) {
  Knob k = typed<int>(std::move(key), KnobType::integer, member, std::move(doc));
  k.min = 1;
  k.max = max;
  return k;
}

// A knob the tuner searches: how its enumeration couples it, and its values when not told.
Knob searched(Knob k, Coupling coupling, SearchDefault values) {
  k.coupling = coupling;
  k.search_default = std::move(values);
  return k;
}

Knob megabytes(std::string key, double Settings::*member, bool above_zero, std::string doc) {
  Knob k = typed<double>(std::move(key), KnobType::number, member, std::move(doc));
  k.above_min = above_zero;
  return k;
}

// The generated schedules, named as plan::name() names them (the one place their names live).
constexpr ScheduleKind kGenerated[] = {ScheduleKind::gpipe,
                                      ScheduleKind::one_f_one_b,
                                      ScheduleKind::interleaved_1f1b,
                                      ScheduleKind::looped_bfs,
                                      ScheduleKind::interleaved_zero_bubble,
                                      ScheduleKind::zbv_zero_bubble,
                                      ScheduleKind::dualpipev};

Knob schedule_knob() {
  Knob k;
  k.key = "parallel.schedule";
  k.type = KnobType::choice;
  for (ScheduleKind kind : kGenerated) k.choices.push_back(name(kind));
  k.choices.push_back("<file>.csv");
  k.doc = "pipeline schedule, as torch.distributed.pipelining makes it (interleaved-zero-bubble, zbv-zero-bubble and dualpipev split "
          "backwards into input and weight gradients), or a PyTorch pipelining CSV (a path: in a file, relative to the file; on "
          "the command line, to the working directory)";
  k.get = [](const Settings& s) {
    return KnobValue(s.schedule == ScheduleKind::csv ? s.schedule_csv : std::string(name(s.schedule)));
  };
  k.set = [](Settings& s, const KnobValue& v) {
    const auto& text = std::get<std::string>(v);
    s.schedule_csv.clear();
    if (text.ends_with(".csv")) {
      s.schedule = ScheduleKind::csv;
      s.schedule_csv = text;
      return;
    }
    for (ScheduleKind kind : kGenerated)
      if (text == name(kind)) s.schedule = kind;
  };
  return k;
}

Knob flag(std::string key, bool Settings::*member, std::string doc) {
  return typed<bool>(std::move(key), KnobType::boolean, member, std::move(doc));
}

// Megatron-core's --recompute-modules, the ones Parallax costs (kRecomputeModules).
Knob recompute_modules_knob() {
  Knob k;
  k.key = "parallel.recompute_modules";
  k.type = KnobType::modules;
  for (const auto& m : kRecomputeModules) k.choices.push_back(m.name);
  k.doc = "with activation_checkpointing: selective, what backward recomputes (Megatron-core's --recompute-modules): core_attn "
          "(attention's scores and softmax; the default), layernorm (the two norms: their outputs, the inputs of QKV and the MLP, "
          "are not kept), moe_act (a MoE block's experts' activation function: its output is not kept), moe (a MoE block's whole "
          "MoE layer: router, dispatch, experts and combine, its all-to-alls included, re-run in backward from its input), mla_up_proj "
          "(latent attention's up projections and rotary kernels: Q, K and V are not kept), mlp (a dense block's whole MLP, re-run "
          "from its input; MoE blocks take moe). Predict-only";
  k.get = [](const Settings& s) { return KnobValue(recompute_modules_text(s.recompute_modules)); };
  k.set = [](Settings& s, const KnobValue& v) {
    // The canonical text ("[layernorm, moe]"), name by name: "moe" is also a part of "moe_act".
    const std::string& text = std::get<std::string>(v);
    s.recompute_modules = 0;
    size_t at = 0;
    while ((at = text.find_first_not_of("[], ", at)) != std::string::npos) {
      const size_t end = text.find_first_of("[], ", at);
      const std::string item = text.substr(at, end == std::string::npos ? std::string::npos : end - at);
      for (const auto& m : kRecomputeModules)
        if (item == m.name) s.recompute_modules |= m.bit;
      at = end;
    }
  };
  return k;
}

// YAML's true and false stay valid: true is `layer`, as torch and Megatron users mean it.
Knob recompute_knob() {
  Knob k;
  k.key = "parallel.activation_checkpointing";
  k.type = KnobType::choice;
  k.choices = {"false", "true", "layer", "stage", "selective", "selective_op"};
  k.doc = "what backward recomputes: false keeps every activation; true or layer keeps each block's input and recomputes that block (the embedding and the head with its loss keep their activations, as torchtitan and Megatron-LM checkpoint blocks); stage keeps each stage's input and recomputes the stage; selective recomputes what parallel.recompute_modules names, attention's scores by default (Korthikanti et al. 2022); selective_op is torchtitan's per-op policy (selective_ac_option op: each block keeps its first, third, fifth... matmul's output and attention's, and recomputes the rest); both predict-only";
  k.get = [](const Settings& s) { return KnobValue(std::string(name(s.activation_checkpointing))); };
  k.set = [](Settings& s, const KnobValue& v) {
    const auto& text = std::get<std::string>(v);
    s.activation_checkpointing = text == "true" || text == "layer" ? Recompute::layer
                                 : text == "stage"                 ? Recompute::stage
                                 : text == "selective"             ? Recompute::selective
                                 : text == "selective_op"          ? Recompute::selective_op
                                                                   : Recompute::none;
  };
  return k;
}

// A choice among an enum's values, each named as plan::name() names it (the one place the names
// live); `values` in the order the docs list them.
template <typename E>
Knob choice(std::string key, E ParallelSpec::*member, std::vector<E> values, std::string doc) {
  Knob k;
  k.key = std::move(key);
  k.type = KnobType::choice;
  for (E e : values) k.choices.push_back(name(e));
  k.doc = std::move(doc);
  k.get = [member](const Settings& s) { return KnobValue(std::string(name(s.*member))); };
  k.set = [member, values](Settings& s, const KnobValue& v) {
    for (E e : values)
      if (std::get<std::string>(v) == name(e)) s.*member = e;
  };
  return k;
}

Knob p2p_knob() {
  return choice("parallel.p2p", &ParallelSpec::p2p, {P2p::pytorch, P2p::megatron},
                "how stages exchange activations on NCCL: pytorch (torch.distributed.pipelining: a send waits until its peer posts the receive) or megatron (Megatron-LM batches each send with the next receive and posts receives ahead: no send waits, and an output leaves as its compute ends; predict-only). Gloo posts receives ahead either way");
}

Knob rank_order_knob() {
  return choice("parallel.rank_order", &ParallelSpec::rank_order,
                {RankOrder::tensor_data_pipeline, RankOrder::tensor_pipeline_data},
                "how ranks are numbered over the grid, fastest first, as Megatron-core's order: tp-dp-pp (Megatron-LM's default: a stage's replicas on neighbouring devices, so its all-reduce stays in a node where it can) or tp-pp-dp (a replica's stages on neighbouring devices, so the pipeline's sends do)");
}

Knob precision_knob() {
  return choice("parallel.precision", &ParallelSpec::precision, {Precision::fp32, Precision::bf16, Precision::fp16, Precision::fp8},
                "compute type, as torch.autocast: parameters, gradients and buckets stay fp32; activations and stage-to-stage tensors use the compute type (fp16 with a loss scaler). fp8 is Transformer Engine's, as Megatron-core runs it: the linear layers' GEMMs at the device's fp8 peak with per-tensor scaling, attention and norms in bf16 (predict-only). The device must list a peak for it");
}

std::vector<Knob> make_table() {
  std::vector<Knob> t;
  t.push_back(searched(integer("parallel.data", &Settings::data, kMaxCount, "replicas (DDP); one DDP group per pipeline stage across replicas"),
                       Coupling::layout, default_data));
  t.push_back(searched(integer("parallel.context", &Settings::context, kMaxCount,
                      "context-parallel ranks per replica (Megatron-core's --context-parallel-size): each holds 1 / context of every "
                      "sequence, cut into 2 x context chunks so causal attention gives each the same work; keys and values pass around "
                      "a ring of them beside attention, and gradients are reduced over data x context. Ranks: tp-cp-dp-pp with the "
                      "default rank order. Transformer models only; seq_len must divide into 2 x context chunks. Predict-only above 1"),
                       Coupling::layout, default_context));
  t.push_back(choice("parallel.context_attention", &ParallelSpec::context_attention, {ContextAttention::torch, ContextAttention::megatron},
                     "with context > 1, whose ring attention: torch (torch's context_parallel, as torchtitan trains with it: the "
                     "keys and values all-gathered once beside the first step, its default rotate method; each step's output and "
                     "log-sum-exp merged in fp32 by kernels of their own; the key and value gradients passed round in fp32) or "
                     "megatron (Megatron-core over Transformer Engine, --cp-comm-type p2p: keys and values passed round a ring "
                     "beside each step, the merges inside its kernels). framework: megatron sets megatron"));
  t.push_back(searched(integer("parallel.expert", &Settings::expert, kMaxCount,
                      "expert-parallel ranks (Megatron-core's --expert-model-parallel-size): each MoE block's experts divide over them "
                      "and tokens reach their experts by an all-to-all before the experts and another after. The group lies inside "
                      "data x context (Megatron-core's tp-cp-ep-dp-pp: neighbouring replicas), or with expert_tensor 1 inside tensor x "
                      "data x context (ranks expert_tensor apart). Must divide the experts and those ranks. The executor runs it over "
                      "c10d's all-to-all; with parallel.shard it is predict-only"),
                       Coupling::crossed, default_expert));
  Knob expert_tensor = integer("parallel.expert_tensor", &Settings::expert_tensor, kMaxCount,
                               "tensor ranks each expert is split over (Megatron-core's --expert-tensor-parallel-size): tensor (the "
                               "default, its default: each tensor rank computes its share of every expert's width over the tensor "
                               "group's tokens, gathered and scattered around the experts) or 1 (experts whole, each rank its own "
                               "tokens; the expert group then divides tensor x data x context). A MoE model's: refused on a dense one. "
                               "Predict-only");
  expert_tensor.zero_word = "tensor";
  t.push_back(searched(expert_tensor, Coupling::crossed, default_expert_tensor));
  t.push_back(searched(integer("parallel.pipeline", &Settings::pipeline, kMaxCount, "pipeline ranks per replica"),
                       Coupling::layout, default_pipeline));
  t.push_back(searched(integer("parallel.tensor", &Settings::tensor, kMaxCount,
                      "tensor-parallel ranks per stage (Megatron-LM: attention heads and the MLP split over them, an all-reduce after each); must divide heads and ffn. Ranks: tensor fastest (parallel.rank_order), so a group sits in one node. Predict-only above 1"),
                       Coupling::layout, default_tensor));
  t.push_back(searched(flag("parallel.sequence_parallel", &Settings::sequence_parallel,
                   "with tensor > 1: norms and dropout split over the tensor group too, all-gather and reduce-scatter in place of its all-reduces (Korthikanti et al. 2022)"),
                       Coupling::crossed, default_sequence_parallel));
  t.push_back(flag("parallel.tensor_across_nodes", &Settings::tensor_across_nodes,
                   "allow a tensor-parallel group to span nodes (its all-reduces then cross the network)"));
  t.push_back(searched(schedule_knob(), Coupling::schedule, default_schedule));
  t.push_back(searched(integer("parallel.virtual", &Settings::virtual_stages, 1024,
                      "stages per pipeline rank (interleaved-1f1b, looped-bfs, interleaved-zero-bubble; 2 for zbv-zero-bubble and "
                      "dualpipev); stage s lives on rank s mod pipeline, or in a V for zbv-zero-bubble and dualpipev (rank r holds "
                      "r and 2 x pipeline - 1 - r)"),
                       Coupling::schedule, default_virtual));
  t.push_back(searched(integer("parallel.chunks", &Settings::chunks, kMaxCount,
                      "micro-batches per mini-batch; must divide data.batch_size"),
                       Coupling::schedule, derived));
  Knob part = typed<PartitionLen>("parallel.partition_len", KnobType::partition, &Settings::partition_len,
                    "layers per stage: one integer for every stage, a list with one entry per stage such as [4, 6], or balanced");
  t.push_back(searched(part, Coupling::schedule, derived));
  t.push_back(searched(megabytes("parallel.bucket_cap_mb", &Settings::bucket_cap_mb, true,
                        "DDP bucket cap, MiB (bucket_cap_mb of DistributedDataParallel)"),
                       Coupling::buckets, default_bucket_cap));
  t.push_back(searched(megabytes("parallel.first_bucket_mb", &Settings::first_bucket_mb, false,
                        "cap of the first bucket, MiB (DDP's _DEFAULT_FIRST_BUCKET_BYTES)"),
                       Coupling::buckets, default_first_bucket));
  t.push_back(choice("parallel.ddp_buckets", &ParallelSpec::ddp_buckets, {DdpBuckets::pytorch, DdpBuckets::megatron},
                     "how data-parallel gradients are grouped into the buckets reduced during the backward: pytorch (torch's "
                     "DDP: first_bucket_mb, then bucket_cap_mb a bucket) or megatron (Megatron-core's DDP at its default "
                     "--ddp-bucket-size: max(40M, 1M x data x context) parameters a bucket on the first pipeline rank's first "
                     "model chunk, its whole gradient buffer as one bucket on every other stage; framework: megatron sets it). "
                     "bucket_cap_mb and first_bucket_mb apply to pytorch only"));
  t.push_back(integer("data.batch_size", &Settings::batch_size, kMaxCount,
                      "samples per replica per mini-batch; the global batch is data x batch_size x grad_accumulation"));
  t.push_back(searched(integer("parallel.grad_accumulation", &Settings::grad_accumulation, kMaxCount,
                      "mini-batches per optimizer step; no DDP communication on the ones in between"),
                       Coupling::batch, scenario_grad_accumulation));
  t.push_back(searched(recompute_knob(), Coupling::crossed, default_recompute));
  t.push_back(recompute_modules_knob());
  t.push_back(p2p_knob());
  t.push_back(searched(rank_order_knob(), Coupling::crossed, scenario_rank_order));
  t.push_back(searched(precision_knob(), Coupling::crossed, default_precision));
  t.push_back(flag("parallel.master_weights", &Settings::master_weights,
                   "parameters in the compute type with fp32 master weights and fp32 gradients (Megatron-LM's mixed precision: 18 bytes a parameter with Adam); false: fp32 parameters cast per op (torch.autocast). Predict-only: the executor runs false"));
  t.push_back(flag("parallel.grad_reduce_in_bf16", &Settings::grad_reduce_in_bf16,
                   "with master_weights: keep and reduce the gradients in 16 bits (2 bytes a parameter) instead of fp32: bf16 "
                   "(Megatron-LM's --grad-reduce-in-bf16, NeMo's grad_sync_dtype: bf16), or fp16 under precision fp16 (Megatron-LM "
                   "without --accumulate-allreduce-grads-in-fp32). Predict-only"));
  t.push_back(flag("parallel.overlap_grad_reduce", &Settings::overlap_grad_reduce,
                   "reduce data-parallel gradients bucket by bucket during the backward (torch's DDP; Megatron-LM's "
                   "--overlap-grad-reduce); false: the stage's whole gradient buffer in one reduction after its last backward "
                   "(Megatron-LM's default; framework: megatron and deepspeed set false). Predict-only when false"));
  t.push_back(flag("parallel.overlap_param_gather", &Settings::overlap_param_gather,
                   "with shard optimizer or gradients: all-gather the updated parameters bucket by bucket beside the next "
                   "step's first forward (Megatron-LM's --overlap-param-gather, NeMo's overlap_param_sync); false: after the "
                   "optimizer step, exposed (Megatron-LM's default, and what the executor runs). Refused with shard none, as "
                   "Megatron-LM refuses it; under shard full FSDP gathers each layer itself. Predict-only when true"));
  t.push_back(flag("parallel.p2p_scatter_gather", &Settings::p2p_scatter_gather,
                   "with tensor > 1 and no sequence_parallel: each tensor rank sends 1/tensor of a pipeline stage's "
                   "boundary tensor and the receiver all-gathers it (Megatron-LM from February 2021 until March 2023, when "
                   "its pipeline moved into Megatron-core; the published runs of that time); false: the tensor whole "
                   "(Megatron-core, torch's pipelining). Sequence parallelism splits it either way. Predict-only where it applies "
                   "(tensor > 1)"));
  t.push_back(flag("parallel.tp_comm_overlap", &Settings::tp_comm_overlap,
                   "overlap tensor parallelism's all-gathers and reduce-scatters with the linear layers' GEMMs: all of them "
                   "under framework megatron (Megatron-LM's --tp-comm-overlap), all but backward's reduce-scatters otherwise "
                   "(torch's async tensor parallelism, as torchtitan runs it); needs sequence_parallel. Predict-only"));
  t.push_back(searched(flag("parallel.overlap_moe_expert_parallel_comm", &Settings::overlap_moe_expert_parallel_comm,
                   "with expert > 1: Megatron-core's combined 1F1B (--overlap-moe-expert-parallel-comm): one more warm-up "
                   "forward, then each steady-state step runs a micro-batch's forward beside an earlier one's backward, each "
                   "one's all-to-alls hidden behind the other's compute (as DualPipeV's pairs). Needs schedule 1f1b with "
                   "pipeline 1, or interleaved-1f1b with virtual > 1 (Megatron-core's rule); holds one more micro-batch's "
                   "activations (tune: with --search)"),
                       Coupling::crossed, scenario_moe_overlap));
  t.push_back(choice("parallel.moe_token_dispatcher", &ParallelSpec::moe_token_dispatcher,
                     {TokenDispatcher::alltoall, TokenDispatcher::deepep},
                     "with expert > 1, how tokens reach their experts' ranks: alltoall (NCCL's all-to-all, Megatron-core's "
                     "--moe-token-dispatcher-type alltoall: each copy of a token goes to its expert's rank, the copies for "
                     "other nodes over the NICs) or deepep (DeepSeek's DeepEP, Megatron-core's flex dispatcher with DeepEP: a "
                     "token crosses once to each other node holding any of its experts, to the GPU of its own index there, "
                     "which forwards it over NVLink, so the NICs carry a token once per node instead of once per expert). "
                     "Predict-only: the executor runs c10d's all-to-all"));
  t.push_back(searched(choice("parallel.shard", &ParallelSpec::shard, {Shard::none, Shard::optimizer, Shard::gradients, Shard::full},
                              "what the data-parallel ranks shard, ZeRO's stages 0-3: none (DDP's all-reduce), optimizer (the "
                              "optimizer state and master weights: ZeRO-1, Megatron-LM's --use-distributed-optimizer), gradients (and "
                              "the gradients, reduce-scattered after each layer's backward: ZeRO-2), full (and the parameters, "
                              "all-gathered before each layer's forward and backward with the next layer's gather prefetched: ZeRO-3, "
                              "FSDP2's fully_shard per block). HSDP is predict-only"),
                       Coupling::crossed, default_shard));
  Knob group = integer("parallel.shard_group", &Settings::shard_group, kMaxCount,
                       "data-parallel ranks one shard spans (data: all of them); fewer is HSDP, sharded inside each group and "
                       "replicated across data / shard_group groups (torchtitan's dp_shard and dp_replicate). Must divide data; with "
                       "context parallelism a shard spans shard_group x context ranks");
  group.zero_word = "data";
  t.push_back(searched(group, Coupling::crossed, default_shard_group));
  t.push_back(searched(flag("parallel.reshard_after_forward", &Settings::reshard_after_forward,
                   "with shard full: free each layer's gathered parameters after its forward and gather them again before its "
                   "backward (FSDP2's default); false keeps them from forward to backward (more memory, one gather fewer), "
                   "refused without shard full (tune: with --search)"),
                       Coupling::crossed, scenario_reshard));
  t.push_back(flag("parallel.fp8_param_gather", &Settings::fp8_param_gather,
                   "with shard full and precision fp8: all-gather the blocks' linear weights in fp8, 1 byte a parameter instead "
                   "of bf16's 2 (torchtitan's quantize.linear.float8.enable_fsdp_float8_all_gather; the embedding, the output "
                   "layer and the norms stay bf16). Predict-only"));
  t.push_back(flag("parallel.reduce_scatter_every_microbatch", &Settings::reduce_scatter_every_microbatch,
                   "with shard gradients or full and several micro-batches a step: reduce-scatter each layer's gradients after "
                   "every micro-batch's backward, so the step's gradients add up as shards (FSDP2's default, torchtitan without "
                   "pipelining; Megatron-FSDP; DeepSpeed's ZeRO-2 and -3: framework megatron, torchtitan and deepspeed set "
                   "true); false: once after the step's last backward, the unsharded gradients held until then (FSDP2 under "
                   "set_requires_gradient_sync(False)). torch.distributed.pipelining (p2p pytorch, pipeline > 1) always does "
                   "the latter. Predict-only when it applies"));
  return t;
}

}  // namespace

KnobValue Knob::read(const Field& f) const {
  switch (type) {
    case KnobType::integer:
      if (zero_word.empty()) return static_cast<int>(to_int(f, static_cast<int64_t>(min), static_cast<int64_t>(max)));
      if (f.is_scalar() && f.node().Scalar() == zero_word) return 0;
      try {
        return static_cast<int>(to_int(f, static_cast<int64_t>(min), static_cast<int64_t>(max)));
      } catch (const InputError&) {
        f.fail("'" + key + "' must be " + allowed());
      }
    case KnobType::number: {
      // A bound that excludes `min` is checked here alone, so that -5 and 0 get the same message.
      const double v = to_finite_number(f, above_min ? -std::numeric_limits<double>::infinity() : min);
      if (above_min && v <= min) f.fail("'" + key + "' must be > " + number_text(min) + ", got " + number_text(v));
      return v;
    }
    case KnobType::boolean: return to_bool(f);
    case KnobType::partition: return read_partition(f);
    case KnobType::modules: {
      // A list of names ([layernorm, moe_act]) or one name; kept as its canonical text.
      std::vector<Field> items = f.is_sequence() ? f.elements() : std::vector<Field>{f};
      if (items.empty()) f.fail("'" + key + "' needs at least one of " + join(choices, ", "));
      unsigned bits = 0;
      for (const Field& item : items) {
        const std::string n = to_choice(item, choices);
        for (size_t i = 0; i < choices.size(); ++i)
          if (choices[i] == n) bits |= 1u << i;
      }
      return recompute_modules_text(bits);
    }
    case KnobType::choice: {
      // A CSV schedule is a path: from the file, relative to its folder; from a flag, to the
      // working directory.
      if (choices.back() == "<file>.csv" && f.is_scalar() && f.node().Scalar().ends_with(".csv"))
        return f.resolve_path(to_text(f));
      return to_choice(f, choices);
    }
  }
  throw std::logic_error("knob type");
}

KnobValue Knob::parse(const std::string& text, const Location& where) const {
  try {
    YamlDocument doc = YamlDocument::from_text("{}", where.file);
    doc.apply_override(key + "=" + text);
    Field f = Field::root(doc)[section()][name()];
    if (!f.present()) f.fail("'" + key + "' needs a value");
    return read(f);
  } catch (const InputError& e) {
    throw InputError(where, e.message(), key);
  }
}

std::string Knob::format(const KnobValue& v) const {
  switch (type) {
    case KnobType::integer: return std::get<int>(v) == 0 && !zero_word.empty() ? zero_word : std::to_string(std::get<int>(v));
    case KnobType::number: return number_text(std::get<double>(v));
    case KnobType::boolean: return std::get<bool>(v) ? "true" : "false";
    case KnobType::choice: return std::get<std::string>(v);
    case KnobType::partition: return partition_text(std::get<PartitionLen>(v));
    case KnobType::modules: return std::get<std::string>(v);
  }
  return "";
}

std::string Knob::allowed() const {
  switch (type) {
    case KnobType::integer:
      if (!zero_word.empty()) return zero_word + " | integer >= " + number_text(min);
      return max >= kMaxCount ? "integer >= " + number_text(min) : "integer " + number_text(min) + ".." + number_text(max);
    case KnobType::number: return std::string("number ") + (above_min ? "> " : ">= ") + number_text(min);
    case KnobType::boolean: return "true | false";
    case KnobType::choice: return join(choices, " | ");
    case KnobType::partition: return "balanced | N | [N, N, ...]";
    case KnobType::modules: return "[" + join(choices, " | ") + ", ...]";
  }
  return "";
}

const std::vector<Knob>& knobs() {
  static const std::vector<Knob> table = make_table();
  return table;
}

const Knob* find_knob(const std::string& key) {
  for (const Knob& k : knobs())
    if (k.key == key) return &k;
  return nullptr;
}

const Knob& knob(const std::string& key) {
  if (const Knob* k = find_knob(key)) return *k;
  throw std::logic_error("no knob '" + key + "'");
}

std::vector<std::string> knob_names(const std::string& section) {
  std::vector<std::string> out;
  for (const Knob& k : knobs())
    if (k.section() == section) out.push_back(k.name());
  return out;
}

void read_knobs(const Field& root, Settings* settings) {
  for (const Knob& k : knobs()) {
    const Field section = root[k.section()];
    if (!section.present() || !section.is_map()) continue;  // the section's reader reports its shape
    const Field f = section[k.name()];
    if (f.present()) k.set(*settings, k.read(f));
  }
}

Settings settings_of(const Scenario& s) {
  Settings out;
  static_cast<ParallelSpec&>(out) = s.parallel;
  out.batch_size = s.data.batch_size;
  return out;
}

void apply(const Settings& settings, Scenario* s) {
  s->parallel = settings;
  s->data.batch_size = settings.batch_size;
}

Scenario with_settings(const Scenario& base, const Settings& settings) {
  Scenario s = base;
  apply(settings, &s);
  check_scenario(s);
  return s;
}

Overrides overrides(const Settings& base, const Settings& settings) {
  Overrides o;
  for (const Knob& k : knobs()) {
    const KnobValue v = k.get(settings);
    if (v != k.get(base)) o.emplace_back(k.key, k.format(v));
  }
  return o;
}

std::string describe(const Overrides& o) {
  if (o.empty()) return "as given";
  std::string s;
  for (const auto& [key, value] : o) s += (s.empty() ? "" : ", ") + key.substr(key.find('.') + 1) + "=" + value;
  return s;
}

std::vector<std::string> set_flags(const Overrides& o) {
  std::vector<std::string> out;
  for (const auto& [key, value] : o) out.push_back(key + "=" + value);
  return out;
}

std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

}  // namespace parallax::plan
