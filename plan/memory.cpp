#include "plan/memory.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>
#include <set>

#include "plan/plan.hpp"

namespace parallax::plan {

using schedule::Collectives;
using schedule::ActionKind;
using schedule::Action;
using schedule::is_compute;
using schedule::receive_window;
using schedule::receives_from_peer;
using schedule::makes_input_gradient;
using schedule::makes_weight_gradient;
namespace {

// One micro-batch's bytes as a count: what the peak adds up is at most this for each micro-batch of
// the step, so where that would pass 2^62 (4 EiB) the sums would overflow int64; the numbers that
// lead there (a petabyte a layer, millions of samples) are out of scale.
int64_t microbatch_bytes(const Plan& plan, double bytes) {
  const double step = bytes * plan.chunks();
  if (!(step <= 0x1p62)) {
    char text[256];
    std::snprintf(text, sizeof text,
                  "a step's micro-batches would hold %g bytes on one stage: the model's sizes and the batch are out of scale",
                  step);
    throw OutOfScale(text);
  }
  return std::llround(bytes);
}

// A layer's full activations for one micro-batch: as `parallax calibrate` measured them with the
// CUDA caching allocator where the profile has them for this layer's signature (measured on one
// tensor rank, everything kept), else as counted above. The count misses what autocast saves (the
// 16-bit copies of the weights) and what the kernels keep beside their outputs; the measurement
// has both.
double layer_bytes(const Plan& plan, int l, const ParallelSpec& p) {
  const Layer& layer = plan.scenario.layers[l];
  const auto& cal = plan.scenario.hardware.calibration;
  const bool selective = p.activation_checkpointing == Recompute::selective || p.activation_checkpointing == Recompute::selective_op;
  if (cal && p.tensor == 1 && p.context == 1 && !selective)
    if (const SignatureCost* c = cal->layer(layer_signature(layer, p.precision)); c && !c->kept_bytes.empty()) {
      // Calibrate measures what a layer's forward leaves alive, its output included (the next
      // layer's input). The model's last layer hands its output, the logits, to the loss, and the
      // last stage lets them go once the loss has them (the loss's graph keeps what backward
      // needs), in the executor as in Megatron-LM; a ReLU after it would keep them (its output).
      const bool last = l + 1 == static_cast<int>(plan.scenario.layers.size()) && !(layer.kind == LayerKind::linear && layer.shape.relu);
      const double logits = last ? layer.output_elems_per_sample * activation_bytes(p.precision) * plan.microbatch_size : 0.0;
      return std::max(0.0, c->kept_bytes.at(plan.microbatch_size) - logits);
    }
  return full_activation_bytes(layer, p) * plan.microbatch_size;
}

// What the loss keeps until its backward (cross-entropy's log-probabilities) for one
// micro-batch, where calibrate measured it; the count has no figure for it (0).
double loss_bytes(const Plan& plan) {
  const auto& cal = plan.scenario.hardware.calibration;
  if (!cal || plan.scenario.layers.empty()) return 0;
  const SignatureCost* c = cal->loss(layer_signature(plan.scenario.layers.back(), plan.scenario.parallel.precision));
  const ParallelSpec& p = plan.scenario.parallel;
  return c && p.tensor == 1 && p.context == 1 ? c->kept_bytes.at(plan.microbatch_size) : 0;
}

// One tensor rank's share of a whole sequence's activations.
double whole_sequence_activation_bytes(const Layer& l, const ParallelSpec& p) {
  const double e = activation_bytes(p.precision);
  const double t = p.tensor;
  const double sp = p.sequence_parallel ? t : 1.0;
  switch (l.kind) {
    case LayerKind::encoder: {
      if (p.activation_checkpointing == Recompute::selective_op) return op_checkpoint_bytes(l.shape, e, t, sp);
      // Korthikanti et al. 2022's count (plan/layers.hpp, block_activations): at e = 2, ffn = 4h and
      // full attention, sbh(10 + 24/t + 5as/(ht)), the paper's eq. 2 with sequence parallelism off.
      // Key/value heads are split at most kv_heads ways (Megatron-core replicates past that).
      const BlockActivations x = block_activations(l.shape, e, p.precision == Precision::fp8 ? 1.0 : e);
      const double kv_ways = std::min(t, static_cast<double>(l.shape.kv_heads()));
      // Selective recompute drops what its modules recompute.
      const double scores = p.recomputes(kRecomputeCoreAttn) ? 0.0 : x.scores / t;
      // Recomputing the MoE layer drops all it keeps, its experts' activation output included.
      const bool moe = p.recomputes(kRecomputeMoe);
      const double unsplit = x.unsplit - (p.recomputes(kRecomputeLayernorm) ? x.norm_outputs : 0.0) - (moe ? x.moe_unsplit : 0.0);
      // Recomputing latent attention's up projections drops Q, K and V (Megatron-core frees them
      // once attention has read them and rebuilds them in place for its backward); recomputing a
      // dense block's MLP drops what the MLP keeps.
      const bool up = l.shape.form.mla.on() && p.recomputes(kRecomputeMlaUpProj);
      const double split = x.split - (moe ? x.moe_split : p.recomputes(kRecomputeMoeAct) ? x.expert_act : 0.0) - (up ? x.mla_q : 0.0) -
                           (p.recomputes(kRecomputeMlp) ? x.mlp_split : 0.0);
      return unsplit / sp + split / t + (up ? 0.0 : x.kv / kv_ways) + scores;
    }
    case LayerKind::head: {
      // The norm's and the projection's inputs (whole, or split by sequence parallelism), and what
      // the cross entropy keeps of the vocabulary-parallel logits: its fp32 softmax, whatever the
      // compute type (torch's log_softmax on the logits cast to fp32, as torchtitan and
      // torch.autocast run it; Megatron-LM's exp_logits of output.float()); the logits themselves
      // are not kept. A fused loss (model.loss: fused; torch.compile's, as torchtitan compiles its
      // loss) keeps the logits at the compute type and recomputes the softmax in its backward (a
      // token's max and log-sum-exp beside them are left out: 8 bytes against vocab x e).
      const double s = static_cast<double>(l.shape.seq_len);
      const double per_logit = l.shape.loss == Loss::fused ? e : 4.0;
      // Multi-token prediction keeps the same once per prediction.
      return l.shape.predictions * s * (2.0 * static_cast<double>(l.shape.hidden) / sp * e + static_cast<double>(l.shape.vocab) / t * per_logit);
    }
    case LayerKind::embedding: {
      // The token ids; under model.dropout the embedding dropout's mask too (on the rank's
      // sequence share under sequence parallelism, as Megatron-LM applies it).
      const double mask = l.shape.form.dropout > 0 ? kMaskBytes * static_cast<double>(l.shape.seq_len * l.shape.hidden) / sp : 0.0;
      return l.activation_elems_per_sample * e + mask;
    }
    default: return l.activation_elems_per_sample * e;
  }
}

}  // namespace

// Context parallelism divides every activation of a rank by its degree: a rank holds 1 / context of
// each sequence, and the scores of its queries against all the keys (s/c x s of them). The keys and
// values it receives around the ring in forward are dropped and received again in backward.
double full_activation_bytes(const Layer& l, const ParallelSpec& p) {
  return whole_sequence_activation_bytes(l, p) / p.context;
}

double input_activation_bytes(const Layer& l, const ParallelSpec& p) {
  const double split = p.sequence_parallel && l.kind != LayerKind::embedding ? p.tensor : 1.0;
  return l.input_elems_per_sample * activation_bytes(p.precision) / split / p.context;
}

double kept_activation_bytes(const Layer& l, const ParallelSpec& p) {
  switch (p.activation_checkpointing) {
    case Recompute::none:
    case Recompute::selective:
    case Recompute::selective_op: return full_activation_bytes(l, p);
    case Recompute::layer: return p.recomputes_forward(l.kind) ? input_activation_bytes(l, p) : full_activation_bytes(l, p);
    case Recompute::stage: return 0;
  }
  return 0;
}

int64_t stage_activation_bytes(const Plan& plan, const Stage& stage) {
  const auto& layers = plan.scenario.layers;
  const ParallelSpec& p = plan.scenario.parallel;
  double bytes = 0;  // for one micro-batch
  const int end = stage.first_layer + stage.layer_count;
  if (p.activation_checkpointing == Recompute::stage) {
    bytes = input_activation_bytes(layers[stage.first_layer], p) * plan.microbatch_size;  // only the stage input is kept
  } else {
    // What keeps all it made (no recompute; the head under layer recompute) counts as calibrate
    // measured it where it did.
    const bool none = p.activation_checkpointing == Recompute::none, layer = p.activation_checkpointing == Recompute::layer;
    for (int l = stage.first_layer; l < end; ++l)
      bytes += none || (layer && !p.recomputes_forward(layers[l].kind)) ? layer_bytes(plan, l, p)
                                                                         : kept_activation_bytes(layers[l], p) * plan.microbatch_size;
  }
  // The loss keeps its graph where its last layer does (else backward re-makes it: recomputed_bytes).
  if (end == static_cast<int>(layers.size()) && !p.recomputes_forward(layers.back().kind)) bytes += loss_bytes(plan);
  return microbatch_bytes(plan, bytes);
}

// What the loss's backward holds for a moment on top of the fp32 softmax the head keeps, for one
// micro-batch: torch's cross_entropy (model.loss: eager) makes nll_loss's fp32 gradient of the
// logits, then log_softmax's from it, both alive at once (8 bytes a logit); Megatron-core's
// vocabulary-parallel cross entropy (megatron) computes the gradient in place in its saved softmax
// and casts it to the compute type (e bytes a logit; none at fp32). A fused loss writes the
// gradient at the compute type in the kernel that recomputes the softmax (e bytes).
static double loss_backward_bytes(const Plan& plan, const Stage& stage) {
  const auto& layers = plan.scenario.layers;
  const ParallelSpec& p = plan.scenario.parallel;
  if (stage.first_layer + stage.layer_count != static_cast<int>(layers.size()) || layers.back().kind != LayerKind::head) return 0;
  const Layer& head = layers.back();
  const double logits = static_cast<double>(head.shape.seq_len) / p.context * static_cast<double>(head.shape.vocab) / p.tensor;
  const double e = activation_bytes(p.precision);
  switch (head.shape.loss) {
    case Loss::fused: return logits * plan.microbatch_size * e;
    case Loss::megatron: return logits * plan.microbatch_size * (e < 4 ? e : 0.0);
    case Loss::eager: break;
  }
  return logits * plan.microbatch_size * 8.0;
}

// A backward into gradients the step already holds makes each parameter's gradient anew and adds
// it in (autograd's AccumulateGrad): for a moment a parameter's gradient is there twice, the
// largest the most. Only where the stage runs more than one micro-batch a step and the gradients
// are tensors of their own: Megatron-LM's fused weight-gradient kernels accumulate into its
// contiguous buffer (`master_weights`), and FSDP's are shard_state's.
static int64_t accumulation_bytes(const Plan& plan, const Stage& stage) {
  const ParallelSpec& p = plan.scenario.parallel;
  if (p.chunks * p.grad_accumulation < 2 || p.master_weights || p.sharded(Shard::gradients)) return 0;
  int64_t largest = 0;
  for (int l = stage.first_layer; l < stage.first_layer + stage.layer_count; ++l)
    for (const ParamSpec& param : plan.scenario.layers[l].params)
      largest = std::max(largest, param.numel_on(p.tensor, p.expert, p.expert_tensor_ways()));
  return largest * bytes_per_parameter(plan.scenario).gradient;
}

// What a recompute holds for a moment beyond what its stage keeps, for one micro-batch.
static double recomputed_bytes(const Plan& plan, const Stage& stage) {
  const auto& layers = plan.scenario.layers;
  const ParallelSpec& p = plan.scenario.parallel;
  double sum = 0, largest = 0, kept_whole = 0;  // for one micro-batch
  for (int l = stage.first_layer; l < stage.first_layer + stage.layer_count; ++l) {
    // The model's last layer comes with the loss's kept bytes, kept or re-made with it.
    const bool last = l + 1 == static_cast<int>(layers.size());
    const double full = layer_bytes(plan, l, p) + (last ? loss_bytes(plan) : 0.0);
    sum += full;
    if (p.recomputes_forward(layers[l].kind)) largest = std::max(largest, full);
    else if (last) kept_whole = full;  // the head, freed by its backward before the blocks' recompute
  }
  double bytes = 0;
  switch (p.activation_checkpointing) {
    case Recompute::none: break;
    case Recompute::stage: bytes = sum; break;
    // A kept head's activations go with its backward, which runs before any block's recompute.
    case Recompute::layer: bytes = std::max(0.0, largest - kept_whole); break;
    case Recompute::selective:
    case Recompute::selective_op: {
      ParallelSpec kept = p;
      kept.activation_checkpointing = Recompute::none;
      for (int l = stage.first_layer; l < stage.first_layer + stage.layer_count; ++l)
        bytes = std::max(bytes, (full_activation_bytes(layers[l], kept) - full_activation_bytes(layers[l], p)) * plan.microbatch_size);
      break;
    }
  }
  return bytes;
}

int64_t recompute_bytes(const Plan& plan, const Stage& stage) {
  // The loss's backward runs before any recompute of its stage (the larger of the two is the
  // peak), except under stage recompute, which re-runs the head and the loss first and holds all it
  // re-ran while the loss's backward runs.
  const double recomputed = recomputed_bytes(plan, stage), loss = loss_backward_bytes(plan, stage);
  const bool loss_after = plan.scenario.parallel.activation_checkpointing == Recompute::stage;
  return microbatch_bytes(plan, loss_after ? recomputed + loss : std::max(recomputed, loss)) + accumulation_bytes(plan, stage);
}

int64_t receive_buffer_bytes(const Plan& plan, bool forward, int stage) {
  // The sender's output, or the gradient of the receiver's output, which is the next stage's
  // input: whole (also where a scatter-gather sends 1/t, sim/cost_model.cpp: the receiver gathers
  // the rest into it), or 1/t of it under sequence parallelism.
  const auto& layers = plan.scenario.layers;
  const ParallelSpec& p = plan.scenario.parallel;
  const double elems = forward ? layers[plan.stages[stage - 1].first_layer + plan.stages[stage - 1].layer_count - 1].output_elems_per_sample
                               : layers[plan.stages[stage + 1].first_layer].input_elems_per_sample;
  const double split = (p.sequence_parallel ? p.tensor : 1.0) * p.context;
  return microbatch_bytes(plan, elems * plan.microbatch_size * activation_bytes(p.precision) / split);
}

BytesPerParameter bytes_per_parameter(const Scenario& s) {
  const ParallelSpec& p = s.parallel;
  BytesPerParameter b;
  const int state = 4 * s.optimizer.state_per_param();
  if (p.master_weights) {
    // Megatron-LM: 16-bit parameters, fp32 gradients in one contiguous buffer that DDP reduces in
    // place, fp32 master weights beside the optimizer's state (bf16 both with state_dtype bf16).
    b.parameter = activation_bytes(p.precision);
    b.gradient = p.grad_reduce_in_bf16 ? 2 : 4;
    b.optimizer = s.optimizer.state_bytes() * (1 + s.optimizer.state_per_param());
  } else {
    // torch.autocast: fp32 parameters and gradients; DDP's buckets are a flat copy of the gradients.
    b.optimizer = state;
    b.bucket = p.replicas() > 1 ? 4 : 0;
  }
  // fp8: Transformer Engine keeps an fp8 copy of each weight and of its transpose (for the backward
  // GEMMs) beside the weight itself, 1 byte each. Counted on every parameter here; the embedding and
  // the output layer, which are not TE modules, are taken off (sharded_state_bytes); a block's norms
  // stay counted, a small overcount.
  if (p.precision == Precision::fp8) b.parameter += 2;
  return b;
}

int64_t reserve_bytes(const Device& device, int64_t allocated) {
  if (device.kind != DeviceKind::cuda) return 0;
  // Assumption, not a measurement: the CUDA context, cuBLAS and NCCL workspaces take about 1 GiB
  // of a GPU in a PyTorch job, and the caching allocator's fragmentation about 5% of what it
  // hands out (docs/simulator.md, Memory).
  return (int64_t{1} << 30) + allocated / 20;
}

std::string reserve_rule(const Device& device) {
  if (device.kind != DeviceKind::cuda) return "reserve: none on a CPU (no device context or caching allocator)";
  return "reserve: 1 GiB (the CUDA context, cuBLAS and NCCL workspaces) + 5% of the tensors (the caching allocator's "
         "fragmentation), an assumption (docs/simulator.md, Memory)";
}

static int64_t stage_parameters(const Plan& plan, const Stage& stage) {
  const ParallelSpec& p = plan.scenario.parallel;
  int64_t n = 0;
  for (int l = stage.first_layer; l < stage.first_layer + stage.layer_count; ++l)
    n += plan.scenario.layers[l].param_count(p.tensor, p.expert, p.expert_tensor_ways());
  return n;
}

// ZeRO-1 without Megatron-LM's buffer (exec/fsdp.cpp, gradients_to_shards; DeepSpeed's stage 1
// alike): before its step a rank copies its 1/n slice of each layer's averaged gradients out,
// layer by layer, freeing the layer's whole gradients after the copy. Returns what that holds at
// its fullest beyond the whole gradients: the slices made up to a layer, less the layers already
// freed before it.
static int64_t optimizer_slice_bytes(const Plan& plan, int pipeline_rank) {
  const ParallelSpec& p = plan.scenario.parallel;
  if (!p.sharded(Shard::optimizer) || p.sharded(Shard::gradients) || p.master_weights) return 0;
  const int64_t g = bytes_per_parameter(plan.scenario).gradient, n = p.shard_ranks();
  int64_t slices = 0, freed = 0, fullest = 0;
  for (const Stage& st : plan.stages)
    if (st.pipeline_rank == pipeline_rank)
      for (int l = st.first_layer; l < st.first_layer + st.layer_count; ++l) {
        const int64_t whole = plan.scenario.layers[l].param_count(p.tensor, p.expert, p.expert_tensor_ways()) * g;
        slices += (whole + n - 1) / n;
        fullest = std::max(fullest, slices - freed);
        freed += whole;
      }
  return fullest;
}

// The rank's fullest moment of activations and gradients, found by walking its action list: a
// forward adds a micro-batch's activations, its weight gradients (B or W) release them.
// Receive buffers: with Gloo the executor keeps the next schedule::receive_window receives posted
// ahead (exec/runtime.cpp), so a buffer is held from when it is posted: a forward's input until
// that forward (then it is one of the stage's activations), an output gradient until its backward.
// Gradients: where the optimizer step frees them (zero_grad(set_to_none=True), torch 2.x's
// default, which the executor does on both LibTorch lines), a stage's are made by its first
// weight-gradient action of the step, so a schedule whose most activations come before that (GPipe,
// one micro-batch) does not hold both at once; Megatron-LM's contiguous gradient buffer
// (`master_weights`) is kept, and FSDP's gradients are shard_state's.
struct PeakMoment {
  int64_t activations = 0;  // the most held at once
  int inflight = 0;         // the most micro-batches in flight at once
  int64_t with_gradients = 0;  // the most activations and gradients held at once
  int64_t at_optimizer = 0;    // the same at an optimizer step
};
static PeakMoment peak_moment(const Plan& plan, int pipeline_rank, int64_t gradients) {
  const auto& actions = plan.schedule.ranks[pipeline_rank];
  const ParallelSpec& p = plan.scenario.parallel;
  const bool made_each_step = !p.master_weights && !p.sharded(Shard::gradients);
  std::vector<int64_t> per_mb(plan.stages.size(), -1);  // by stage: bytes one micro-batch holds (-1: not yet found)
  std::vector<int64_t> stage_gradients(plan.stages.size(), 0);  // made each step: a stage's share of `gradients`
  if (made_each_step) {
    int64_t rank_params = 0;
    for (size_t i = 0; i < plan.stages.size(); ++i)
      if (plan.stages[i].pipeline_rank == pipeline_rank) rank_params += stage_parameters(plan, plan.stages[i]);
    // Each stage its cumulative share less the stages' before it: the parts add up to `gradients`.
    int64_t params_so_far = 0, given = 0;
    for (size_t i = 0; i < plan.stages.size(); ++i)
      if (plan.stages[i].pipeline_rank == pipeline_rank && rank_params > 0) {
        params_so_far += stage_parameters(plan, plan.stages[i]);
        const int64_t upto = std::llround(static_cast<double>(gradients) * params_so_far / rank_params);
        stage_gradients[i] = upto - given;
        given = upto;
      }
  }
  int64_t held = 0, grads = made_each_step ? 0 : gradients;
  int inflight = 0;
  PeakMoment peak;
  auto moment = [&] {
    peak.activations = std::max(peak.activations, held);
    peak.inflight = std::max(peak.inflight, inflight);
    peak.with_gradients = std::max(peak.with_gradients, held + grads);
  };
  const bool preposted = plan.schedule.collectives == Collectives::gloo;
  // (A walk of the whole list: only where receives are posted ahead.)
  const size_t window = preposted ? static_cast<size_t>(receive_window(plan.schedule, pipeline_rank)) : 0;
  std::vector<size_t> receives;  // the rank's RECVs from peers, in order
  for (size_t i = 0; i < actions.size(); ++i)
    if (preposted && receives_from_peer(plan.schedule, actions[i])) receives.push_back(i);
  size_t posted = 0, taken = 0;
  auto buffer = [&](const Action& recv) { return receive_buffer_bytes(plan, recv.kind == ActionKind::RECV_F, recv.stage); };
  auto top_up = [&] {
    for (; posted < receives.size() && posted - taken < window; ++posted) held += buffer(actions[receives[posted]]);
  };
  top_up();
  moment();
  // A split backward's I uses its output gradient and keeps the activations, which its W frees
  // (exec/split_backward.hpp keeps each layer's graph until W).
  for (size_t i = 0; i < actions.size(); ++i) {
    const Action& action = actions[i];
    if (taken < receives.size() && receives[taken] == i) {  // taken: its buffer waits for its compute
      ++taken;
      top_up();
    }
    if (!is_compute(action.kind)) {
      moment();
      if (action.kind == ActionKind::OPTIM) peak.at_optimizer = std::max(peak.at_optimizer, held + grads);
      continue;
    }
    for (const Action& a : action.parts()) {
      int64_t& bytes = per_mb[a.stage];
      if (bytes < 0) bytes = stage_activation_bytes(plan, plan.stages[a.stage]);
      const Action input{a.kind == ActionKind::F ? ActionKind::RECV_F : ActionKind::RECV_B, a.stage, a.mb};
      const bool received = preposted && receives_from_peer(plan.schedule, input);
      if (a.kind == ActionKind::F) {
        if (received) held -= buffer(input);
        held += bytes;
        ++inflight;
      }
      if (makes_input_gradient(a.kind) && received) held -= buffer(input);
      if (makes_weight_gradient(a.kind)) {
        held -= bytes;
        --inflight;
        grads += stage_gradients[a.stage];  // made by the stage's first of the step
        stage_gradients[a.stage] = 0;
      }
      moment();
    }
  }
  return peak;
}

int64_t params_without_fp8_copies(const Layer& layer, int tensor, int expert, int expert_tensor) {
  return layer.kind == LayerKind::embedding || layer.kind == LayerKind::head ? layer.param_count(tensor, expert, expert_tensor) : 0;
}

StateBytes sharded_state_bytes(const Scenario& s, int64_t params, int64_t expert_params, int64_t outside_blocks) {
  const ParallelSpec& p = s.parallel;
  const BytesPerParameter per = bytes_per_parameter(s);
  // The experts' state shards over the ranks that hold the same experts (Megatron-core's
  // expert-data-parallel group, as its distributed optimizer shards them; torchtitan's
  // dp_shard_mod_ep): the shard's ranks x tensor / (expert_tensor x expert) of them.
  const int64_t n = p.shard_ranks(), dense = params - expert_params;
  const int64_t n_expert = std::max<int64_t>(1, n * p.tensor / (p.expert_tensor_ways() * p.expert));
  auto part = [&](int bytes, Shard level) {
    if (!p.sharded(level)) return params * bytes;
    return (dense * bytes + n - 1) / n + (expert_params * bytes + n_expert - 1) / n_expert;
  };
  StateBytes out;
  out.params = part(per.parameter, Shard::full);
  if (p.precision == Precision::fp8) {  // the embedding and the output layer keep no fp8 copies
    const int64_t copies = 2 * outside_blocks;
    out.params -= p.sharded(Shard::full) ? (copies + n - 1) / n : copies;
  }
  out.gradients = part(per.gradient, Shard::gradients);
  out.optimizer = part(per.optimizer, Shard::optimizer);
  out.buckets = p.sharded(Shard::gradients) ? 0 : params * per.bucket;  // FSDP has no DDP bucket copy
  return out;
}

// What parallel.shard leaves a rank of its pipeline rank's parameters, gradients, optimizer state
// and DDP buckets (whole, or 1 / shard_ranks each, rounded up), plus what it holds beyond them at
// its fullest moment in a layer's backward (`gathered`): the gathered layers in flight and the
// gradients before their reduce-scatter. Returns what the backward's first moment holds of these
// (sharded gradients included), before any layer has made this micro-batch's gradients: the loss's
// backward runs then (estimate_memory).
static int64_t shard_state(const Plan& plan, int pipeline_rank, MemoryEstimate* m) {
  const Scenario& s = plan.scenario;
  const ParallelSpec& p = s.parallel;
  std::vector<int64_t> units;     // the rank's layers' parameters, in forward order: FSDP's units
  std::vector<int64_t> gathered;  // and their bytes gathered (gathered_parameter_bytes)
  int64_t expert_params = 0;      // of them, its experts'
  int64_t outside_blocks = 0;     // and the embedding's and output layer's
  for (const Stage& st : plan.stages)
    if (st.pipeline_rank == pipeline_rank)
      for (int l = st.first_layer; l < st.first_layer + st.layer_count; ++l) {
        units.push_back(s.layers[l].param_count(p.tensor, p.expert, p.expert_tensor_ways()));
        gathered.push_back(units.back() * gathered_parameter_bytes(p, s.layers[l]));
        expert_params += s.layers[l].expert_param_count(p.tensor, p.expert, p.expert_tensor_ways());
        outside_blocks += params_without_fp8_copies(s.layers[l], p.tensor, p.expert, p.expert_tensor_ways());
      }
  int64_t params = 0;
  for (int64_t u : units) params += u;
  const StateBytes state = sharded_state_bytes(s, params, expert_params, outside_blocks);
  m->params = state.params;
  m->gradients = state.gradients;
  m->optimizer = state.optimizer;
  m->buckets = state.buckets;
  if (!p.sharded(Shard::gradients)) return 0;
  // The rank is fullest during some layer's backward in the step's last micro-batch, the layers
  // walked from the last: those after it have their gradients reduced to shards already; its own
  // are held whole, and twice while they are copied into its reduce-scatter's input (FSDP2's
  // foreach_reduce_scatter_copy_in). Reduced once a step (torch's pipelining turns FSDP's sync off
  // for the other micro-batches, as DDP's no_sync), with several micro-batches a step every layer
  // up to this one holds its summed gradients whole; reduced every micro-batch
  // (ParallelSpec::reduces_every_microbatch), only its own are. Under full the layer is
  // gathered (in the compute type) with the one before it prefetched, or, kept from forward to
  // backward (reshard_after_forward false), every layer up to it. `gathered` is what that moment
  // holds beyond the sharded gradients the optimizer step holds.
  const BytesPerParameter per = bytes_per_parameter(s);
  const int64_t n = p.shard_ranks(), g = per.gradient;
  // The incoming gradients are of the gathered parameters' type: under full at 16 bits FSDP2's
  // param_dtype, added into the fp32 sum it reduces (torchtitan's mixed_precision_reduce).
  const int64_t incoming = p.sharded(Shard::full) && !p.master_weights && p.precision != Precision::fp32 ? 2 : g;
  const bool several = p.chunks * p.grad_accumulation > 1;
  const bool accumulating = several && !p.reduces_every_microbatch();
  int64_t fullest = 0, reduced = 0, upto = params, upto_gathered = 0;
  for (int64_t b : gathered) upto_gathered += b;
  // The backward's start: the earlier micro-batches' summed gradients whole, or their shards where
  // each micro-batch reduces its own (none in the step's first: the step freed them), and under
  // full the last layer gathered with the one before it prefetched (or every layer, kept).
  int64_t start = accumulating ? params * g : several ? m->gradients : 0;
  if (p.sharded(Shard::full) && !units.empty()) {
    const size_t last = units.size() - 1;
    start += p.reshard_after_forward ? gathered[last] + (last > 0 ? gathered[last - 1] : 0) : upto_gathered;
  }
  for (size_t l = units.size(); l-- > 0;) {
    const int64_t u = units[l], before = l > 0 ? gathered[l - 1] : 0;
    int64_t held = (reduced * g + n - 1) / n + (accumulating ? upto : u) * g + u * incoming;
    if (p.sharded(Shard::full)) held += p.reshard_after_forward ? gathered[l] + before : upto_gathered;
    fullest = std::max(fullest, held);
    reduced += u;
    upto -= u;
    upto_gathered -= gathered[l];
  }
  m->gathered = std::max<int64_t>(0, fullest - m->gradients);
  return start;
}

// Sharded gradients' two moments (estimate_memory): the loss's gradients at the backward's start,
// with what shard_state says is held then, or a recompute in a layer's backward.
struct ShardedBackward {
  int64_t loss = 0, recomputed = 0, start = 0;
};

// What the rank's fullest moment lacks of each part of `m` (whose parts are each at their own
// fullest): that moment is the larger of the walk's (activations and gradients together, with
// backward's transient) and the optimizer step's (with a ZeRO-1 step's slices), or, under sharded
// gradients, of the backward's start and a layer's backward.
static MemoryEstimate::Lacks fullest_moment_lacks(const MemoryEstimate& m, const PeakMoment& peak, int64_t backward,
                                                  int64_t slices, const ShardedBackward* sharded) {
  MemoryEstimate::Lacks lacks;
  int64_t apart = 0;  // of the activations and gradients (and the unsharded part) at once
  auto take = [&](int64_t* part, int64_t whole) {
    *part = std::clamp<int64_t>(apart, 0, whole);
    apart -= *part;
  };
  if (sharded) {
    const int64_t at_start = m.activations + sharded->loss + sharded->start;
    const int64_t in_layer = m.activations + m.gradients + m.gathered + sharded->recomputed;
    if (at_start >= in_layer) {
      lacks.transient = m.recompute - sharded->loss;
      apart = m.gradients + m.gathered - sharded->start;
      take(&lacks.gradients, m.gradients);
      take(&lacks.gathered, m.gathered);
    } else {
      lacks.transient = m.recompute - sharded->recomputed;
    }
    return lacks;
  }
  if (peak.with_gradients + backward >= peak.at_optimizer + slices) {
    lacks.transient = m.recompute - backward;
    apart = m.activations + m.gradients - peak.with_gradients;
    take(&lacks.gradients, m.gradients);
    take(&lacks.activations, m.activations);
  } else {  // the optimizer step: the activations are gone
    lacks.transient = m.recompute - slices;
    apart = m.activations + m.gradients - peak.at_optimizer;
    take(&lacks.activations, m.activations);
    take(&lacks.gradients, m.gradients);
  }
  return lacks;
}

int gathered_parameter_bytes(const ParallelSpec& p, const Layer& layer) {
  if (p.precision == Precision::fp32) return 4;
  // torchao's float8 all-gather: the blocks' nn.Linear weights (a block's norms, 0.004% of Llama
  // 3.1 8B's, counted with them); torchtitan's float8 leaves the output layer and the embedding.
  if (p.fp8_param_gather && layer.kind == LayerKind::encoder) return 1;
  return 2;  // FSDP2's MixedPrecisionPolicy(param_dtype=bf16), as torchtitan sets it (fp8: bf16 too)
}

void estimate_memory(Plan* plan) {
  const Scenario& s = plan->scenario;
  const ParallelSpec& p = s.parallel;
  std::vector<MemoryEstimate> per_pipeline_rank(p.pipeline);
  for (int r = 0; r < p.pipeline; ++r) {
    MemoryEstimate& m = per_pipeline_rank[r];
    const int64_t backward_start = shard_state(*plan, r, &m);
    const PeakMoment peak = peak_moment(*plan, r, m.gradients);
    m.activations = peak.activations;
    m.peak_inflight = peak.inflight;
    // A recompute briefly holds its forward's activations on top of what is kept (and the loss's
    // backward its gradients); a ZeRO-1 step its slices of the gradients. Each on its own moment:
    // the transient column shows the larger, and what the moments never hold is not at once.
    // Under sharded gradients the loss's moment is the backward's start, a recompute's a layer's.
    const bool sharding = s.parallel.sharded(Shard::gradients);
    ShardedBackward sharded{0, 0, backward_start};
    int64_t backward = 0;
    for (const Stage& st : plan->stages)
      if (st.pipeline_rank == r) {
        backward = std::max(backward, recompute_bytes(*plan, st));
        if (!sharding) continue;
        sharded.loss = std::max<int64_t>(sharded.loss, std::llround(loss_backward_bytes(*plan, st)));
        sharded.recomputed = std::max<int64_t>(sharded.recomputed, std::llround(recomputed_bytes(*plan, st)));
      }
    const int64_t slices = optimizer_slice_bytes(*plan, r);
    m.recompute = std::max(backward, slices);
    m.lacks = fullest_moment_lacks(m, peak, backward, slices, sharding ? &sharded : nullptr);
    m.reserve = reserve_bytes(s.hardware.device, m.allocated());
  }
  for (RankPlan& rp : plan->ranks) rp.memory = per_pipeline_rank[rp.pipeline_rank];
}

}  // namespace parallax::plan
