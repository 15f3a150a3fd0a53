#include "plan/scenario.hpp"

#include <algorithm>
#include <iterator>
#include <filesystem>
#include <numeric>

#include "plan/builtin.hpp"
#include "plan/knobs.hpp"

namespace parallax::plan {

using schedule::ScheduleKind;
using schedule::v_shaped;
namespace {

const std::vector<std::string> kTopKeys = {"name", "framework", "model", "data", "parallel", "optimizer", "hardware"};
// The data keys that are not knobs (data.batch_size is; plan/knobs.cpp reads the knobs).
const std::vector<std::string> kDataKeys = {"source", "steps", "seed", "shuffle"};
const std::vector<std::string> kOptimizerKeys = {"kind", "lr", "momentum", "weight_decay", "state_dtype"};

constexpr int64_t kMaxCount = 1 << 24;
constexpr int64_t kMaxRanks = 1 << 20;  // a job's ranks (check_layout)

// A key the scenario or a --set states (an absent one falls back to its section in where()).
void remember(Scenario& s, const Field& f) {
  if (f.present()) s.places.set(f.path(), f.where());
}

std::vector<std::string> with_knobs(std::vector<std::string> keys, const std::string& section) {
  for (auto& k : knob_names(section)) keys.push_back(std::move(k));
  return keys;
}

// A key written without a value ("tensor:" on a line of its own) reads as YAML's null, which every
// reader takes for an absent key: the default, silently (a --set KEY= exits 2). Refused instead.
void refuse_empty_values(const Field& m) {
  if (!m.present() || !m.is_map()) return;
  for (const auto& item : m.node())
    if (item.second.IsNull())
      Field(m.doc(), item.second, m.path() + "." + item.first.Scalar(), item.first.Mark())
          .fail("'" + m.path() + "." + item.first.Scalar() + "' has no value: give one, or leave the key out for its default");
}

// The sections' shapes and the values that are not knobs; the knobs follow in parse_scenario.
DataSpec parse_data(const Field& m, Scenario& s) {
  DataSpec d;
  if (!m.present()) return d;
  expect_keys(m, with_knobs(kDataKeys, "data"));
  if (m["source"].present()) d.source = to_choice(m["source"], {"synthetic", "fashion-mnist"});
  d.steps = static_cast<int>(int_or(m, "steps", d.steps, 1, kMaxCount));
  d.seed = static_cast<uint64_t>(int_or(m, "seed", 0, 0));
  d.shuffle = bool_or(m, "shuffle", d.shuffle);
  remember(s, m["source"]);
  return d;
}

void check_parallel_section(const Field& m, Scenario& s) {
  if (!m.present()) return;
  if (m.is_map() && m["distributed_optimizer"].present())
    m["distributed_optimizer"].fail("'parallel.distributed_optimizer' is now 'parallel.shard: optimizer' (ZeRO-1: the optimizer "
                                    "state and master weights sharded over the data-parallel ranks); write that instead");
  expect_keys(m, knob_names("parallel"));
  remember(s, m);
}

OptimizerSpec parse_optimizer(const Field& m) {
  OptimizerSpec o;
  if (!m.present()) return o;
  expect_keys(m, kOptimizerKeys);
  if (m["kind"].present()) o.kind = to_choice(m["kind"], {"sgd", "adam", "adamw"});
  o.lr = finite_number_or(m, "lr", o.lr, 0);
  o.momentum = finite_number_or(m, "momentum", 0, 0);
  o.weight_decay = finite_number_or(m, "weight_decay", 0, 0);
  if (o.momentum > 0 && o.kind != "sgd")
    m["momentum"].fail("'optimizer.momentum' applies to sgd only (to change a scenario's optimizer, give the whole section: "
                       "--set 'optimizer={kind: " + o.kind + ", lr: " + number_text(o.lr) + "}')");
  if (m["state_dtype"].present()) o.state_bf16 = to_choice(m["state_dtype"], {"fp32", "bf16"}) == "bf16";
  return o;
}

[[noreturn]] void fail_at(const Scenario& s, const std::string& key, const std::string& message) {
  throw InputError(s.where(key), message, key);
}

// Of two keys a rule ties together, the one the scenario or a --set states (its place recorded), so
// that the error points at what the user wrote: `first` when both or neither are.
const std::string& stated_key(const Scenario& s, const std::string& first, const std::string& second) {
  const auto stated = [&](const std::string& key) {
    const Location* at = s.places.find(key);
    return at && (at->line > 0 || !at->file.empty());
  };
  return stated(first) || !stated(second) ? first : second;
}

// Of the keys a rule reads, the first a --set gave (the user's latest word on the plan), else the
// first: an error then points at the flag that made the plan what it is, not at the file's line.
std::string overridden_key(const Scenario& s, const std::vector<std::string>& keys) {
  for (const std::string& key : keys)
    if (const Location* at = s.places.find(key); at && at->file.rfind("--set ", 0) == 0) return key;
  return keys.front();
}

}  // namespace

// Tensor and context parallelism split the layers of a transformer (embedding, blocks, head) only.
static void require_transformer_layer(const Scenario& s, const Layer& l, const std::string& key, const std::string& what) {
  if (!tensor_splits(l.kind))
    fail_at(s, key, what + " transformer layers (embedding, encoder, head); layer '" + l.name + "' is a " + name(l.kind) + " layer");
}

// Checks that need several values at once; each error points at the value to change.
// Megatron-LM's tensor parallelism splits attention heads and the MLP's ffn columns over the
// group, and the vocabulary of the embedding and head (padded, as Megatron pads it); other layer
// kinds have no split. What the tensor degree alone must divide (the layout's rule).
static void check_tensor_shapes(const Scenario& s) {
  const ParallelSpec& p = s.parallel;
  if (p.tensor == 1) return;
  const std::string t = std::to_string(p.tensor);
  const Layer* previous = nullptr;
  for (const Layer& l : s.layers) {
    // A model's blocks are mostly alike: one of each run of equal shapes is enough (the tuner
    // checks millions of configurations of a 126-block model).
    const bool same = previous && previous->kind == l.kind && previous->shape.heads == l.shape.heads &&
                      previous->shape.kv_heads() == l.shape.kv_heads() && previous->shape.ffn == l.shape.ffn;
    previous = &l;
    if (same) continue;
    if (!tensor_splits(l.kind)) require_transformer_layer(s, l, "parallel.tensor", "parallel.tensor " + t + " splits");  // the message only when it fails: the tuner checks millions
    if (l.kind != LayerKind::encoder) continue;
    if (l.shape.heads % p.tensor != 0)
      fail_at(s, "parallel.tensor", "parallel.tensor " + t + " does not divide the " + std::to_string(l.shape.heads) +
                                        " attention heads of layer '" + l.name + "'; each tensor rank takes whole heads");
    // Megatron-core splits key/value heads over the group; a group larger than the key/value heads
    // replicates each head on tensor / kv_heads ranks (plan/layers.hpp's max_split).
    const int64_t kv = l.shape.kv_heads();
    if (kv % p.tensor != 0 && p.tensor % kv != 0)
      fail_at(s, "parallel.tensor", "parallel.tensor " + t + " and the " + std::to_string(kv) + " key/value heads of layer '" + l.name +
                                        "': one must divide the other (the heads are split over the group, or each is replicated on "
                                        "tensor / kv_heads ranks)");
    if (l.shape.ffn % p.tensor != 0)
      fail_at(s, "parallel.tensor", "parallel.tensor " + t + " does not divide the ffn width " + std::to_string(l.shape.ffn) +
                                        " of layer '" + l.name + "'");
  }
  const int per_node = s.hardware.devices_per_node;
  if (!p.tensor_across_nodes && (p.tensor > per_node || per_node % p.tensor != 0))
    fail_at(s, "parallel.tensor", "parallel.tensor " + t + " does not fit the " + std::to_string(per_node) + " devices of a '" +
                                      s.hardware.name + "' node evenly; its all-reduces would cross the network after every layer "
                                      "(set parallel.tensor_across_nodes: true to plan it anyway)");
}

// What tensor parallelism asks of the knobs crossed with it: sequence parallelism splits over
// its group, and the MoE blocks' experts split over the expert tensor degree.
static void check_tensor_parallel(const Scenario& s) {
  const ParallelSpec& p = s.parallel;
  if (p.sequence_parallel && p.tensor == 1)
    fail_at(s, "parallel.sequence_parallel", "sequence_parallel splits over the tensor-parallel group; it needs parallel.tensor > 1");
  if (p.tensor == 1 || !first_moe_layer(s.layers)) return;
  const std::string t = std::to_string(p.tensor);
  const int64_t expert_ways = p.expert_tensor_ways();
  const Layer* previous = nullptr;
  for (const Layer& l : s.layers) {
    const bool same = previous && previous->shape.moe == l.shape.moe;
    previous = &l;
    if (same || l.kind != LayerKind::encoder || !l.shape.moe.on()) continue;
    const int64_t shared = l.shape.moe.shared * l.shape.moe.ffn;
    if (l.shape.moe.ffn % expert_ways != 0 || shared % p.tensor != 0)
      fail_at(s, "parallel.tensor", "parallel.tensor " + t + " does not divide the experts' width " + std::to_string(l.shape.moe.ffn) +
                                        " of layer '" + l.name + "' (set parallel.expert_tensor: 1 to keep routed experts whole)");
  }
}

// Megatron-core's context parallelism splits each sequence of a transformer into 2 x context
// chunks (two per rank, for causal load balance); other layer kinds have no sequence to split.
static void check_context_parallel(const Scenario& s) {
  const ParallelSpec& p = s.parallel;
  if (p.context == 1) return;
  const std::string c = std::to_string(p.context);
  for (const Layer& l : s.layers) {
    if (!tensor_splits(l.kind)) require_transformer_layer(s, l, "parallel.context", "parallel.context " + c + " splits the sequences of");
    if (l.shape.window > 0 && l.shape.window < l.shape.seq_len)
      fail_at(s, "parallel.context", "parallel.context " + c + " with sliding-window attention (layer '" + l.name +
                                         "'): Parallax does not plan a ring over a window; set parallel.context: 1");
    if (l.shape.seq_len % (2 * p.context) != 0)
      fail_at(s, "parallel.context", "parallel.context " + c + " cuts each sequence into 2 x " + c + " chunks, but layer '" + l.name +
                                         "' has seq_len " + std::to_string(l.shape.seq_len) + " (not a multiple of " +
                                         std::to_string(2 * p.context) + ")");
  }
}

// What each schedule asks of the stages per rank and the micro-batches, as torch's classes do.
static void check_schedule_shape(const Scenario& s) {
  const ParallelSpec& p = s.parallel;
  const std::string sched = name(p.schedule);
  const bool multi = p.schedule == ScheduleKind::interleaved_1f1b || p.schedule == ScheduleKind::looped_bfs ||
                     p.schedule == ScheduleKind::interleaved_zero_bubble || p.schedule == ScheduleKind::csv;
  if (v_shaped(p.schedule) && p.virtual_stages != 2)
    fail_at(s, stated_key(s, "parallel.virtual", "parallel.schedule"),
            sched + " places exactly two stages on each rank (a V); set parallel.virtual: 2 (got " +
                                       std::to_string(p.virtual_stages) + ")");
  if (!v_shaped(p.schedule) && !multi && p.virtual_stages > 1)
    fail_at(s, stated_key(s, "parallel.schedule", "parallel.virtual"),
            "parallel.virtual > 1 needs a schedule with several stages per rank: interleaved-1f1b, "
                                    "looped-bfs, interleaved-zero-bubble, zbv-zero-bubble or dualpipev (or a CSV schedule)");
  if (p.schedule == ScheduleKind::interleaved_1f1b || p.schedule == ScheduleKind::interleaved_zero_bubble) {
    const int rounds = std::max(1, p.chunks / p.pipeline);
    if (p.chunks % rounds != 0)
      fail_at(s, "parallel.chunks", sched + " needs chunks to be a multiple of its rounds (max(1, chunks / pipeline) = " +
                                        std::to_string(rounds) + "), as in PyTorch; got chunks " + std::to_string(p.chunks) +
                                        // Megatron-LM's interleaved schedule asks more (schedules.py raises; export says so).
                                        (s.framework == Framework::megatron && p.schedule == ScheduleKind::interleaved_1f1b
                                             ? " (Megatron-LM asks more: a multiple of the pipeline size, " + std::to_string(p.pipeline) + ")"
                                             : ""));
  }
  if (p.schedule == ScheduleKind::dualpipev && p.chunks < p.stages())
    fail_at(s, "parallel.chunks", "dualpipev needs at least as many micro-batches as stages (2 x pipeline = " +
                                      std::to_string(p.stages()) + "), as in PyTorch; got chunks " + std::to_string(p.chunks));
}

// Megatron-core's combined 1F1B: what its arguments check (megatron/training/arguments.py and the
// user guide's hard requirements), in the plan's words.
static void check_moe_overlap(const Scenario& s) {
  const ParallelSpec& p = s.parallel;
  const char* key = "parallel.overlap_moe_expert_parallel_comm";
  if (p.expert < 2)
    fail_at(s, key, "overlap_moe_expert_parallel_comm hides the all-to-alls of expert parallelism; it needs parallel.expert > 1 "
                    "(Megatron-core asserts the same)");
  const bool one_stage = p.pipeline == 1 && p.virtual_stages == 1;
  if (one_stage ? p.schedule != ScheduleKind::one_f_one_b && p.schedule != ScheduleKind::interleaved_1f1b
                : p.schedule != ScheduleKind::interleaved_1f1b || p.virtual_stages < 2)
    fail_at(s, key, std::string("overlap_moe_expert_parallel_comm is Megatron-core's combined 1F1B, an extension of its interleaved "
                                "1F1B: it needs parallel.schedule 1f1b with pipeline 1, or interleaved-1f1b with virtual > 1 "
                                "(Megatron-core requires virtual pipeline stages when pipeline > 1); this plan has schedule ") +
                        name(p.schedule) + ", pipeline " + std::to_string(p.pipeline) + ", virtual " + std::to_string(p.virtual_stages));
}

// Expert parallelism as Megatron-core places it (ParallelSpec::expert): every MoE block's experts
// divide over the expert group, which lies inside data x context.
static void check_expert_parallel(const Scenario& s) {
  const ParallelSpec& p = s.parallel;
  const Layer* moe = first_moe_layer(s.layers);
  if (!moe) {
    if (p.expert > 1)
      fail_at(s, "parallel.expert", "parallel.expert (" + std::to_string(p.expert) + ") splits a mixture-of-experts model's experts; "
                                    "this model has none (model.experts)");
    if (p.expert_tensor != 0)
      fail_at(s, "parallel.expert_tensor", "parallel.expert_tensor (" + std::to_string(p.expert_tensor) + ") splits a mixture-of-experts "
                                           "model's experts over tensor ranks; this model has none (model.experts)");
    return;
  }
  const int64_t experts = moe->shape.moe.experts;
  if (experts % p.expert != 0)
    fail_at(s, "parallel.expert", "the " + std::to_string(experts) + " experts of each MoE block do not divide over parallel.expert = " +
                                      std::to_string(p.expert) + " ranks; each expert rank holds experts / expert of them");
  if (p.expert_tensor != 0 && p.expert_tensor != 1 && p.expert_tensor != p.tensor)
    fail_at(s, "parallel.expert_tensor", "parallel.expert_tensor " + std::to_string(p.expert_tensor) + ": Parallax splits experts over the "
                                             "whole tensor group (" + std::to_string(p.tensor) + ", the default) or not at all (1)");
  const int room = p.tensor * p.replicas() / p.expert_tensor_ways();  // Megatron-core: etp x ep x edp = tp x cp x dp
  const bool whole = p.expert_tensor_ways() == 1 && p.tensor > 1;  // experts whole under tensor parallelism
  if (room % p.expert != 0)
    fail_at(s, "parallel.expert", "parallel.expert (" + std::to_string(p.expert) + ") does not divide " +
                                      (whole ? "tensor x data x context = " : "data x context = ") + std::to_string(room) +
                                      "; the expert group lies inside the data-parallel ranks (Megatron-core)" +
                                      (p.tensor > 1 && !whole ? "; with expert_tensor 1 it may span tensor x data x context" : ""));
  if (p.expert > 1 && p.tensor > 1 && !p.sequence_parallel)
    fail_at(s, "parallel.sequence_parallel", "expert > 1 with tensor > 1 needs sequence_parallel: true (Megatron-core asserts the same: "
                                             "each tensor rank dispatches its own tokens)");
}

void check_layout(const Scenario& s) {
  const ParallelSpec& p = s.parallel;
  const int layers = static_cast<int>(s.layers.size());
  const int stages = p.stages();
  // Each degree may reach kMaxCount; their product is the job's ranks, each simulated with its own
  // events (about 20 KB a rank): beyond any cluster built, and past what a machine holds.
  const int64_t ranks = int64_t{p.data} * p.context * p.pipeline * p.tensor;
  // Named at the largest degree, the likeliest mistyped (its --set where a flag gave it).
  const std::pair<int, const char*> degrees[] = {
      {p.data, "parallel.data"}, {p.context, "parallel.context"}, {p.pipeline, "parallel.pipeline"}, {p.tensor, "parallel.tensor"}};
  const char* largest = std::max_element(std::begin(degrees), std::end(degrees))->second;
  if (ranks > kMaxRanks)
    fail_at(s, largest, "data x context x pipeline x tensor = " + std::to_string(ranks) + " ranks; Parallax plans at most " +
                               std::to_string(kMaxRanks) + " (more than any cluster built: a mistyped degree?)");
  if (s.data.batch_size % p.chunks != 0)
    fail_at(s, "parallel.chunks", "data.batch_size (" + std::to_string(s.data.batch_size) +
                                      ") is not divisible by parallel.chunks (" + std::to_string(p.chunks) +
                                      "); chunks must divide the batch into equal micro-batches");
  if (p.pipeline > layers)
    fail_at(s, "parallel.pipeline", "parallel.pipeline (" + std::to_string(p.pipeline) +
                                        ") is larger than the model's " + std::to_string(layers) +
                                        " layers; every stage needs at least one layer");
  if (stages > layers)
    fail_at(s, "parallel.virtual", "pipeline x virtual = " + std::to_string(stages) +
                                       " stages, but the model has only " + std::to_string(layers) +
                                       " layers; every stage needs at least one layer");
  check_schedule_shape(s);
  check_tensor_shapes(s);
  check_context_parallel(s);
  const int nodes = s.hardware.nodes_for(p.world_size());
  const std::string grid = overridden_key(s, {"parallel", "parallel.data", "parallel.context", "parallel.pipeline", "parallel.tensor",
                                              "parallel.expert", "hardware"});
  if (s.hardware.max_nodes && nodes > *s.hardware.max_nodes)
    fail_at(s, grid, "the plan needs " + std::to_string(p.world_size()) + " ranks = " + std::to_string(nodes) +
                               " nodes of " + std::to_string(s.hardware.devices_per_node) + " devices, but hardware '" +
                               s.hardware.name + "' caps nodes at " + std::to_string(*s.hardware.max_nodes));
  if (nodes > 1 && !s.hardware.network)
    fail_at(s, "hardware", "the plan needs " + std::to_string(nodes) + " nodes, but hardware '" + s.hardware.name +
                               "' has no 'network' between nodes");
}

void check_beyond_layout(const Scenario& s) {
  const ParallelSpec& p = s.parallel;
  const int layers = static_cast<int>(s.layers.size());
  const int stages = p.stages();
  const PartitionLen& part = p.partition_len;
  if (part.mode == PartitionLen::Mode::per_stage && part.per_stage * stages != layers)
    fail_at(s, "parallel.partition_len",
            "partition_len " + std::to_string(part.per_stage) + " x " + std::to_string(stages) + " stages = " +
                std::to_string(part.per_stage * stages) + " layers, but the model has " + std::to_string(layers) +
                " layers; give a list (e.g. [5, 5]) or \"balanced\"");
  if (part.mode == PartitionLen::Mode::list) {
    const int sum = std::accumulate(part.lens.begin(), part.lens.end(), 0);
    if (static_cast<int>(part.lens.size()) != stages || sum != layers)
      fail_at(s, "parallel.partition_len",
              "partition_len lists " + std::to_string(part.lens.size()) + " stages covering " + std::to_string(sum) +
                  " layers, but the plan has " + std::to_string(stages) + " stages (pipeline x virtual) and the model " +
                  std::to_string(layers) + " layers; the list needs one entry per stage summing to the layer count");
  }
  check_tensor_parallel(s);
  check_expert_parallel(s);
  if (p.overlap_moe_expert_parallel_comm) check_moe_overlap(s);
  if (p.shard_group > 0 && p.data % p.shard_group != 0)
    fail_at(s, "parallel.shard_group", "shard_group " + std::to_string(p.shard_group) + " does not divide data " +
                                           std::to_string(p.data) + "; a shard spans a divisor of the data-parallel ranks (HSDP: "
                                           "data / shard_group copies of it)");
  if (p.master_weights && p.precision == Precision::fp32)
    fail_at(s, "parallel.master_weights", "master_weights keeps fp32 masters of 16-bit parameters; it needs precision bf16, fp16 or fp8");
  if (s.optimizer.state_bf16 && !p.master_weights)
    fail_at(s, "optimizer.state_dtype", "state_dtype bf16 keeps master_weights' masters and optimizer state in bf16; it needs "
                                        "master_weights: true (torch's optimizers keep their state in the fp32 parameters' type)");
  if (p.grad_reduce_in_bf16 && !p.master_weights)
    fail_at(s, "parallel.grad_reduce_in_bf16", "grad_reduce_in_bf16 keeps master_weights' gradients in 16 bits; it needs master_weights: true "
                                               "(without it the gradients are those of the fp32 parameters)");
  if (p.recompute_modules != kRecomputeCoreAttn && p.activation_checkpointing != Recompute::selective)
    fail_at(s, "parallel.recompute_modules", "recompute_modules " + recompute_modules_text(p.recompute_modules) + " says what selective "
                                             "recompute recomputes; it needs activation_checkpointing: selective (Megatron-core's "
                                             "--recompute-granularity selective)");
  if ((p.recompute_modules & kRecomputeMlaUpProj) &&
      std::none_of(s.layers.begin(), s.layers.end(), [](const Layer& l) { return l.shape.form.mla.on(); }))
    fail_at(s, "parallel.recompute_modules", "mla_up_proj recomputes latent attention's up projections; this model has none (model.mla)");
  if ((p.recompute_modules & (kRecomputeMoeAct | kRecomputeMoe)) && !first_moe_layer(s.layers))
    fail_at(s, "parallel.recompute_modules", std::string((p.recompute_modules & kRecomputeMoeAct) ? "moe_act recomputes a MoE block's experts' activation function"
                                                                                                 : "moe recomputes a MoE block's MoE layer") +
                                                 "; this model has no MoE blocks (model.experts)");
  if (p.activation_checkpointing == Recompute::selective_op)
    for (const Layer& l : s.layers)
      if (!op_checkpointing_derived(l))
        fail_at(s, "parallel.activation_checkpointing",
                "selective_op is torchtitan's per-op policy as derived for dense blocks with flash attention (docs/simulator.md); block '" +
                    l.name + "' " + (l.shape.moe.on() ? "is a MoE block" : l.shape.form.mla.on() ? "has latent attention (model.mla)" : "runs standard attention") +
                    ": use selective, layer or stage");
  // A knob that says how sharding runs means nothing without it: refused as Megatron-LM refuses the
  // first (arguments.py), rather than left without effect where the user meant it to have one.
  if (p.overlap_param_gather && !p.sharded(Shard::optimizer))
    fail_at(s, "parallel.overlap_param_gather", "overlap_param_gather overlaps the gather of the parameters the distributed optimizer "
                                                "updated in shards; it needs parallel.shard: optimizer or more (Megatron-LM asserts "
                                                "--use-distributed-optimizer beside --overlap-param-gather)");
  if (p.shard_group > 0 && p.shard == Shard::none)
    fail_at(s, "parallel.shard_group", "shard_group says over how many data-parallel ranks a shard spans (HSDP: fewer than data); it "
                                       "needs parallel.shard (full for FSDP's HSDP, torchtitan's dp_shard); without it nothing is sharded");
  if (!p.reshard_after_forward && !p.sharded(Shard::full))
    fail_at(s, "parallel.reshard_after_forward", "reshard_after_forward says whether FSDP frees each layer's gathered parameters after "
                                                 "its forward; it needs parallel.shard: full (without it the parameters stay whole)");
  if (p.fp8_param_gather && (p.precision != Precision::fp8 || !p.sharded(Shard::full)))
    fail_at(s, "parallel.fp8_param_gather", "fp8_param_gather gathers FSDP's fp8 weights; it needs parallel.precision: fp8 and "
                                            "parallel.shard: full");
  if (p.tp_comm_overlap && p.tensor > 1 && !p.sequence_parallel)
    fail_at(s, "parallel.tp_comm_overlap", "tp_comm_overlap overlaps the all-gathers and reduce-scatters of sequence parallelism with "
                                           "the GEMMs; it needs sequence_parallel: true (Megatron-LM asserts the same)");
  if (p.precision == Precision::fp8 && !s.hardware.device.peak_tflops.count(Precision::bf16))
    fail_at(s, "parallel.precision", std::string("precision fp8 runs attention and norms in bf16, and hardware '") + s.hardware.name +
                                         "' lists no bf16 peak");
  if (!s.hardware.device.peak_tflops.count(p.precision))
    fail_at(s, "parallel.precision", std::string("hardware '") + s.hardware.name + "' (" + s.hardware.device.name +
                                         ") has no " + name(p.precision) + " peak; use a precision it lists");
}

void check_scenario(const Scenario& s) {
  check_layout(s);
  check_beyond_layout(s);
}

std::vector<std::string> recompute_module_names(unsigned modules) {
  std::vector<std::string> names;
  for (const auto& m : kRecomputeModules)
    if (modules & m.bit) names.push_back(m.name);
  return names;
}

// Appended, not "[" + ... + "]": g++ 12 warns falsely (-Wrestrict) on that concatenation.
std::string recompute_modules_text(unsigned modules) {
  std::string text = "[";
  text += join(recompute_module_names(modules), ", ");
  text += "]";
  return text;
}

const char* name(Recompute r) {
  switch (r) {
    case Recompute::none: return "false";
    case Recompute::layer: return "layer";
    case Recompute::stage: return "stage";
    case Recompute::selective: return "selective";
    case Recompute::selective_op: return "selective_op";
  }
  return "?";
}

const char* name(P2p p) { return p == P2p::megatron ? "megatron" : "pytorch"; }
const char* name(TokenDispatcher d) { return d == TokenDispatcher::deepep ? "deepep" : "alltoall"; }
const char* name(ContextAttention a) { return a == ContextAttention::megatron ? "megatron" : "torch"; }
const char* name(DdpBuckets b) { return b == DdpBuckets::megatron ? "megatron" : "pytorch"; }
int64_t megatron_bucket_params(int replicas) { return std::max<int64_t>(40'000'000, 1'000'000 * static_cast<int64_t>(replicas)); }
const char* name(RankOrder o) { return o == RankOrder::tensor_pipeline_data ? "tp-pp-dp" : "tp-dp-pp"; }
const char* name(Shard s) {
  switch (s) {
    case Shard::none: return "none";
    case Shard::optimizer: return "optimizer";
    case Shard::gradients: return "gradients";
    case Shard::full: return "full";
  }
  return "none";
}


int OptimizerSpec::state_per_param() const {
  if (kind == "sgd") return momentum > 0 ? 1 : 0;
  return 2;
}

void KeyPlaces::set(const std::string& key_path, const Location& where) {
  // Copy on write: a map that another scenario shares is copied before it changes.
  if (!places_ || places_.use_count() > 1)
    places_ = places_ ? std::make_shared<std::map<std::string, Location>>(*places_) : std::make_shared<std::map<std::string, Location>>();
  (*places_)[key_path] = where;
}

const Location* KeyPlaces::find(const std::string& key_path) const {
  if (!places_) return nullptr;
  const auto it = places_->find(key_path);
  return it == places_->end() ? nullptr : &it->second;
}

Location Scenario::where(const std::string& key_path) const {
  // Fall back to the nearest recorded parent, then to the file itself.
  for (std::string path = key_path;;) {
    const Location* at = places.find(path);
    if (at && (at->line > 0 || !at->file.empty())) return *at;
    const auto dot = path.rfind('.');
    if (dot == std::string::npos) break;
    path = path.substr(0, dot);
  }
  return Location{file, 1, 1};
}

static Framework parse_framework(const Field& f) {
  if (!f.present()) return Framework::pytorch;
  std::vector<std::string> names;
  for (Framework x : frameworks()) names.push_back(name(x));
  const std::string picked = to_choice(f, names);
  for (Framework x : frameworks())
    if (picked == name(x)) return x;
  return Framework::pytorch;
}

Scenario parse_scenario(const YamlDocument& doc) {
  Scenario s;
  const Field root = Field::root(doc);
  static const std::vector<std::string> every_key = scenario_keys();  // for the hint on a misplaced key
  expect_keys(root, kTopKeys, every_key);
  s.file = doc.file();
  s.name = string_or(root, "name", std::filesystem::path(doc.file()).stem().string());
  s.framework = parse_framework(root["framework"]);
  const FrameworkSemantics& trainer = semantics(s.framework);
  s.layers = parse_model(root["model"], &s.model_description, trainer.model);
  if (root["model"]["hf_config"].present()) s.hf_config_file = hf_config_file(root["model"]["hf_config"]);
  for (const Layer& l : s.layers)
    if (l.kind == LayerKind::embedding || l.kind == LayerKind::head) s.model_vocab = l.shape.vocab;
  if (trainer.model.flash_attention && !root["model"]["attention"].present() &&
      std::any_of(s.layers.begin(), s.layers.end(), [](const Layer& l) { return l.shape.flash_attention; }))
    s.framework_set.push_back("model.attention=flash");
  if (trainer.model.loss != Loss::eager && !root["model"]["loss"].present() && s.layers.back().kind == LayerKind::head)
    s.framework_set.push_back(std::string("model.loss=") + name(trainer.model.loss));
  if (trainer.model.weighted_activation && !root["model"]["expert_weighting"].present() &&
      std::any_of(s.layers.begin(), s.layers.end(), [](const Layer& l) { return l.shape.moe.on(); }))
    s.framework_set.push_back("model.expert_weighting=activation");
  for (const char* section : {"data", "parallel", "optimizer"}) refuse_empty_values(root[section]);
  s.data = parse_data(root["data"], s);
  check_parallel_section(root["parallel"], s);
  Settings knob_values;
  for (const auto& [key, value] : trainer.knobs) {  // the trainer's semantics, then what the scenario sets
    const Knob& k = knob(key);
    if (root[k.section()][k.name()].present()) continue;
    k.set(knob_values, k.parse(value, root.where()));
    s.framework_set.push_back(key + "=" + value);
  }
  read_knobs(root, &knob_values);
  // A trainer's master weights are fp32 copies of 16-bit parameters: at fp32 it has none.
  const std::string masters = "parallel.master_weights=true";
  if (knob_values.precision == Precision::fp32 && knob_values.master_weights &&
      std::find(s.framework_set.begin(), s.framework_set.end(), masters) != s.framework_set.end()) {
    knob_values.master_weights = false;
    s.framework_set.erase(std::find(s.framework_set.begin(), s.framework_set.end(), masters));
  }
  // Reducing gradients every micro-batch is about sharded ones: not listed where nothing shards
  // them (the value stays, for a tuner trying shard gradients or full).
  if (!knob_values.sharded(Shard::gradients))
    std::erase(s.framework_set, std::string("parallel.reduce_scatter_every_microbatch=true"));
  // Whose ring attention is about context parallelism: not listed without it (the value stays).
  if (knob_values.context == 1) std::erase(s.framework_set, std::string("parallel.context_attention=megatron"));
  // Buckets are about reducing during the backward: not listed without it (the value stays).
  if (!knob_values.overlap_grad_reduce) std::erase(s.framework_set, std::string("parallel.ddp_buckets=megatron"));
  apply(knob_values, &s);
  for (const Knob& k : knobs()) remember(s, root[k.section()][k.name()]);
  remember(s, root["model"]);  // and the model keys later checks name (exec's predict-only ones, the exports)
  for (const char* key : {"attention", "kernels", "loss", "mlp", "head_dim", "capacity_factor", "tie_embeddings", "sliding_window",
                          "expert_weighting", "dropout"})
    remember(s, root["model"][key]);
  s.optimizer = parse_optimizer(root["optimizer"]);
  remember(s, root["optimizer"]);  // and its keys, which later rules and the exports name
  for (const char* key : {"kind", "lr", "state_dtype"}) remember(s, root["optimizer"][key]);
  remember(s, root["hardware"]);
  s.hardware = resolve_hardware(root["hardware"]);
  // A key that is absent points at its section (or the top of the file) in later errors.
  if (!s.places.find("parallel")) s.places.set("parallel", root.where());
  check_scenario(s);
  return s;
}

std::vector<std::string> Scenario::files_read() const {
  std::vector<std::string> files;
  // A built-in scenario or profile names no file ("(built-in) ..."), and an inline profile its scenario.
  for (const std::string& f : {file, hardware.source, hf_config_file, parallel.schedule_csv})
    if (!f.empty() && std::filesystem::is_regular_file(f) && std::find(files.begin(), files.end(), f) == files.end())
      files.push_back(f);
  return files;
}

YamlDocument scenario_document(const std::string& path, const std::vector<std::string>& overrides) {
  YamlDocument doc = [&] {
    if (!path.empty()) return YamlDocument::from_file(path);
    const BuiltinFile def = builtin_default_scenario();
    return YamlDocument::from_text(def.text, std::string("(built-in) scenarios/") + def.name + ".yaml");
  }();
  for (const auto& o : overrides) doc.apply_override(o);
  return doc;
}

Scenario load_scenario(const std::string& path, const std::vector<std::string>& overrides) {
  return parse_scenario(scenario_document(path, overrides));
}

std::vector<std::string> scenario_keys() {
  std::vector<std::string> keys = {"name", "framework", "hardware", "model.preset", "model.layers", "model.hf_config", "model.kv_heads",
                                   "model.mlp", "model.norm", "model.positions", "model.tie_embeddings", "model.bias",
                                   "model.qkv_bias"};
  for (const auto& k : kDataKeys) keys.push_back("data." + k);
  for (const Knob& k : knobs()) keys.push_back(k.key);
  for (const auto& k : kOptimizerKeys) keys.push_back("optimizer." + k);
  return keys;
}

}  // namespace parallax::plan
