#include "sim/cost_model.hpp"

#include <algorithm>
#include <cmath>
#include <map>

#include "plan/cost.hpp"
#include "plan/memory.hpp"
#include "sim/nccl_model.hpp"

namespace parallax::sim {

namespace {

// What a calibrated profile adds around a stage's layers (zero without a calibration).
struct StageExtras {
  Time forward;    // data loading and the loss forward
  Time backward;   // the autograd call and the loss backward
  Time recompute;  // the loss forward again, with activation checkpointing
};

StageExtras stage_extras(const plan::Plan& plan, const plan::Stage& st) {
  StageExtras x;
  const auto& s = plan.scenario;
  if (!s.hardware.calibration) return x;
  const plan::Calibration& cal = *s.hardware.calibration;
  const int mb = plan.microbatch_size;
  const bool first = st.index == 0, last = st.index + 1 == static_cast<int>(plan.stages.size());
  auto data = [&](bool with_input) {
    auto it = cal.data.find(plan::data_key(s.data.source, plan.layers().front(), with_input));
    return it == cal.data.end() ? Time() : Time::us(it->second.at(mb));
  };
  if (first) x.forward += data(true);
  else if (last) x.forward += data(false);
  if (last) {
    if (const plan::SignatureCost* loss = cal.loss(plan::layer_signature(plan.layers().back(), s.parallel.precision))) {
      x.forward += Time::us(loss->forward.at(mb));
      x.backward += Time::us(loss->backward.at(mb));
      // Backward re-runs the loss where it re-runs the last layer: stage recompute, or layer
      // recompute of a model that ends in a block (an MLP); a head keeps its graph and the loss's.
      if (s.parallel.recomputes_forward(plan.layers().back().kind)) x.recompute = Time::us(loss->forward.at(mb));
    }
  }
  x.backward += Time::us(cal.backward_call_us);
  return x;
}

// The host's time to launch a stage's optimizer step, where calibrate measured it apart.
Time optimizer_launch(const plan::Plan& plan, const plan::Stage& st, const plan::Calibration& cal) {
  const auto& o = plan.scenario.optimizer;
  const plan::OptimizerCost* c = cal.optimizer(o.kind, o.momentum > 0);
  return c && !c->launch.empty() ? Time::us(c->launch.at(static_cast<double>(st.param_bytes) / 4.0)) : Time();
}

Time calibrated_optimizer(const plan::Plan& plan, const plan::Stage& st, const plan::Calibration& cal) {
  const auto& o = plan.scenario.optimizer;
  Time t;
  if (const plan::OptimizerCost* c = cal.optimizer(o.kind, o.momentum > 0)) {
    int tensors = 0;
    for (int l = st.first_layer; l < st.first_layer + st.layer_count; ++l)
      tensors += static_cast<int>(plan.layers()[l].params.size());
    // Parameters are fp32; a sharded optimizer steps 1 / shard_ranks of them.
    const plan::ParallelSpec& p = plan.scenario.parallel;
    const double stepped = static_cast<double>(st.param_bytes) / 4.0 / (p.sharded(plan::Shard::optimizer) ? p.shard_ranks() : 1);
    t = Time::us(c->us(stepped, tensors));
  }
  // fp16: the loss scaler unscales and checks the stage's gradients, and the host waits for the
  // flag, before the step (the executor runs it just ahead of the rank's first OPTIM).
  if (plan.scenario.parallel.precision == plan::Precision::fp16)
    t += Time::us(cal.loss_scaler.at(static_cast<double>(st.param_bytes) / 4.0));
  // DDP: the averaged buckets are divided and copied back into the gradients (two passes). Sharded
  // gradients have no buckets: each layer's reduce-scatter leaves its shard, divided as it lands
  // during the backward (exec/fsdp.cpp, finish_reduce).
  if (plan.scenario.parallel.replicas() > 1 && !plan.scenario.parallel.sharded(plan::Shard::gradients) && cal.copy_gb_per_s > 0)
    t += Time::us(2.0 * static_cast<double>(st.param_bytes) / (cal.copy_gb_per_s * 1e3));
  return t;
}

// How much slower compute runs when local ranks outnumber the cores they share. (Two ranks on
// two cores are already in the calibration's in-run factors, measured in such a run.)
double oversubscription(const plan::Plan& plan, const plan::Calibration& cal) {
  const int local = std::min(plan.world_size, plan.scenario.hardware.devices_per_node);
  return std::max(1.0, static_cast<double>(local) / cal.cores);
}

Time scaled(Time t, double f) { return t.scaled(f); }

// A Gloo collective measured on `measured` ranks (latency + bytes / bandwidth) scaled to `ranks` as
// a ring: the latency by (n-1)/(m-1), the bytes per rank by (n-1)/n over (m-1)/m (an all-reduce's
// 2(n-1)/n over 2(m-1)/m alike).
RingCost ring_scaled(const plan::AlphaBeta& measured, int measured_ranks, int ranks) {
  const double n = ranks, m = measured_ranks;
  return {measured.latency_us * (n - 1) / (m - 1), ((n - 1) / n) / ((m - 1) / m) / (measured.bandwidth_gb_per_s * 1e3)};
}

// The host's measured Gloo all-gather of `ranks` ranks gathering `bytes`. From the measured curve
// by size where the profile has one: at the size whose bytes a rank moves equal what it moves
// here ((n-1)/n of the tensor against (m-1)/m at the measured m ranks), plus the latency once
// more for each further step of the ring. Else the line through the large sizes, as a ring.
double calibrated_allgather_us(const plan::Calibration& cal, int ranks, double bytes) {
  const RingCost ring = ring_scaled(cal.allgather, cal.allreduce_ranks, ranks);
  if (cal.allgather_by_bytes.empty()) return ring.latency_us + bytes * ring.us_per_byte;
  // The ring's scaling of the bytes alone: the line's per-byte cost here over its cost as measured.
  const double as_measured = bytes * ring.us_per_byte * cal.allgather.bandwidth_gb_per_s * 1e3;
  return cal.allgather_by_bytes.at(as_measured) + ring.latency_us - cal.allgather.latency_us;
}

// One collective of a group of `t` ranks `stride` devices apart: NCCL's model on a GPU machine, a
// ring over the node link otherwise. A tensor-parallel group is `tensor` neighbouring ranks
// (plan/plan.hpp), inside one node unless the plan lets it span nodes.
double group_collective_us(const plan::Plan& plan, Collective coll, double bytes, int t, int stride) {
  const auto& hw = plan.scenario.hardware;
  if (t == 1 || bytes <= 0) return 0;
  GroupShape g;
  g.ranks = t;
  g.per_node = std::clamp(hw.devices_per_node / stride, 1, t);
  g.nodes = (t + g.per_node - 1) / g.per_node;
  g.nic_gb_per_s = hw.network ? hw.network->bandwidth_gb_per_s : 0;
  g.nics_per_node = hw.nics_per_node;
  if (hw.nccl) return collective_time_us(*hw.nccl, g, coll, bytes);
  const auto& cal = hw.calibration;
  if (g.nodes == 1 && cal && coll == Collective::all_gather && cal->allgather.bandwidth_gb_per_s > 0) {
    // Measured on this host as the executor gathers (a broadcast of each rank's slice), scaled to
    // t ranks as a ring. Not stretched by the in-run all-reduce factor: that is DDP's all-reduces
    // sharing the cores with the backward, which a gather beside compute is charged apart
    // (beside_compute).
    return calibrated_allgather_us(*cal, t, bytes);
  }
  if (g.nodes == 1 && cal && cal->allreduce.bandwidth_gb_per_s > 0) {
    // Measured on this host; a reduce-scatter (and an all-gather where the calibration has none
    // of its own) is half a ring all-reduce.
    const RingCost ring = calibrated_allreduce(plan, *cal, t);
    return (coll == Collective::all_reduce ? 1.0 : 0.5) * (ring.latency_us + bytes * ring.us_per_byte);
  }
  const plan::Link& link = g.nodes > 1 && hw.network ? *hw.network : hw.node_link;
  const double steps = coll == Collective::all_reduce ? 2.0 * (t - 1) : t - 1.0;
  const double per_byte = std::isinf(link.bandwidth_gb_per_s) ? 0.0 : steps / t / (link.bandwidth_gb_per_s * 1e3);
  return steps * link.latency_us + bytes * per_byte;
}

// A layer's tensor-parallel collectives in forward and in backward (plan::tensor_traffic). Every
// block of a model moves the same bytes, so NCCL's model runs once per size and collective, not
// once per layer and stage: the tuner costs tens of thousands of plans.
struct TensorTime {
  Time forward, backward;
};

class TensorTimer {
 public:
  explicit TensorTimer(const plan::Plan& plan) : plan_(plan) {}
  TensorTime operator()(const plan::TensorTraffic& x) {
    if (x.bytes <= 0) return {};
    TensorTime out = of(x, x.bytes);
    if (x.latent_bytes > 0) {
      const TensorTime latent = of(x.latent, x.latent_bytes);
      out.forward += latent.forward;
      out.backward += latent.backward;
    }
    return out;
  }

 private:
  TensorTime of(const plan::TensorCollectives& x, double bytes) {
    auto us = [&](Collective c, int count) { return count == 0 ? 0.0 : count * time_us(c, bytes); };
    return {Time::us(us(Collective::all_reduce, x.forward_all_reduce) + us(Collective::all_gather, x.forward_all_gather) +
                     us(Collective::reduce_scatter, x.forward_reduce_scatter)),
            Time::us(us(Collective::all_reduce, x.backward_all_reduce) + us(Collective::all_gather, x.backward_all_gather) +
                     us(Collective::reduce_scatter, x.backward_reduce_scatter))};
  }
  double time_us(Collective c, double bytes) {
    const auto [it, fresh] = cache_.try_emplace({static_cast<int>(c), bytes}, 0.0);
    if (fresh) it->second = group_collective_us(plan_, c, bytes, plan_.scenario.parallel.tensor, 1);
    return it->second;
  }
  const plan::Plan& plan_;
  std::map<std::pair<int, double>, double> cache_;
};

// Context parallelism's ring in one layer (plan::context_traffic): each of its steps sends the
// keys and values one hop while attention computes a block (1 / context of the layer's attention
// core); a step takes the longer of the two, so what the sends do not hide is added (Megatron-core's
// ring; torch's gathers them instead, below). A context
// group is `context` ranks `tensor` apart (tp-cp-dp-pp): inside a node while tensor x context
// devices fit in one, else each hop crosses the network on its device's share of the node's NICs.
// Every rank sends at once, each to its own neighbour, so no link carries two of the ring's sends.
TensorTime context_ring(const plan::Plan& plan, const plan::ContextTraffic& ring, const plan::LayerCost& lc) {
  if (ring.steps == 0) return {};
  const auto& hw = plan.scenario.hardware;
  const int span = plan.scenario.parallel.tensor * plan.scenario.parallel.context;
  const bool in_node = span <= hw.devices_per_node || !hw.network;
  const plan::Link& link = in_node ? hw.node_link : *hw.network;
  const double share = in_node ? 1.0 : std::min(1.0, static_cast<double>(std::max(1, hw.nics_per_node)) / hw.devices_per_node);
  auto send = [&](double bytes) {
    return Time::us(link.latency_us + (std::isinf(link.bandwidth_gb_per_s) ? 0.0 : bytes / (link.bandwidth_gb_per_s * share * 1e3)));
  };
  const int c = plan.scenario.parallel.context;
  auto exposed = [&](Time sends, Time attention) { return std::max(Time(), sends - attention / c); };
  if (plan.scenario.parallel.context_attention == plan::ContextAttention::torch) {
    // torch's context_parallel: the other ranks' keys and values all-gathered once, beside the
    // first step (its own), before every other step can start; in backward again, and each step's
    // key and value gradients passed on in fp32 beside the next step, the last one waited for.
    const Time gather = send(ring.steps * ring.step_bytes);
    const Time gradients = send(ring.step_bytes * 4.0 / plan::activation_bytes(plan.scenario.parallel.precision));
    return {exposed(gather, lc.attention_forward),
            exposed(gather, lc.attention_backward) + exposed(gradients, lc.attention_backward) * ring.steps + gradients};
  }
  return {exposed(send(ring.step_bytes), lc.attention_forward) * ring.steps,
          exposed(send(2 * ring.step_bytes), lc.attention_backward) * ring.steps};
}

// A MoE block's token traffic (plan::expert_traffic) per micro-batch: its all-to-alls, and the
// routed tokens' all-gather and reduce-scatter over the tensor group. NCCL runs an all-to-all as a
// send to and a receive from every other rank of the group at once (ncclSend/ncclRecv in one
// group): the peers inside the rank's node over the node's links (NVLink: each GPU its own), the
// others over the rank's share of its node's NICs, the slower of the two setting the time, plus
// one latency of the farthest link. An expert group is `expert` ranks `expert_tensor` apart
// (Megatron-core's expert grid, etp-ep-dp-pp). The busiest rank receives imbalance x the average.
// DeepEP (parallel.moe_token_dispatcher: deepep) sends a token over the NICs once to each other
// node holding any of its experts, to the GPU of the same index there, which forwards it over
// NVLink to the GPUs holding them (DeepSeek-V3's report, section 3.2.2; DeepEP's normal kernels):
// the NICs carry remote_copies_per_group (by node) of NCCL's bytes; NVLink the rank's own tokens
// and the forwarded ones, each once per GPU holding any of its experts (DeepEP's dispatch layout,
// is_token_in_rank), remote_copies_per_group (by rank) of the per-expert copies.
struct ExpertTime {
  TensorTime all_to_all, tensor;
};

ExpertTime expert_time(const plan::Plan& plan, const plan::ExpertTraffic& x, TensorTimer& tensor_timer) {
  ExpertTime out;
  const auto& hw = plan.scenario.hardware;
  const plan::ParallelSpec& p = plan.scenario.parallel;
  if (x.all_to_all_bytes > 0) {
    const int ranks = p.expert, in_node = std::clamp(hw.devices_per_node / p.expert_tensor_ways(), 1, ranks);
    const double per_peer = x.all_to_all_bytes * x.imbalance / (ranks - 1);
    auto over = [&](const plan::Link& link, double bytes, double share) {
      return std::isinf(link.bandwidth_gb_per_s) ? 0.0 : bytes / (link.bandwidth_gb_per_s * share * 1e3);
    };
    double nvlink = per_peer * (in_node - 1), nic = per_peer * (ranks - in_node), latency = hw.node_link.latency_us;
    if (p.moe_token_dispatcher == plan::TokenDispatcher::deepep) {
      if (ranks > in_node) {
        // Of the copies arriving from other nodes, those for the node's other GPUs go on over NVLink.
        nvlink += nic * (in_node - 1) / in_node;
        nic *= remote_copies_per_group(x.experts, x.top_k, (ranks + in_node - 1) / in_node);
      }
      // Over NVLink, a token (its own or one landed from another node) goes once to each GPU that
      // holds any of its experts: of the per-expert copies, the per-rank share (the sum over
      // the node's GPUs works out to exactly that factor).
      nvlink *= remote_copies_per_group(x.experts, x.top_k, ranks);
    }
    double us = over(hw.node_link, nvlink, 1.0);
    if (ranks > in_node && hw.network) {
      const double nic_share = std::min(1.0, static_cast<double>(std::max(1, hw.nics_per_node)) / hw.devices_per_node);
      us = std::max(us, over(*hw.network, nic, nic_share));
      latency = hw.network->latency_us;
    }
    const Time one = Time::us(latency + us);
    out.all_to_all = {one * x.forward, one * x.backward};
  }
  // Only experts split over the whole tensor group gather (expert_tensor = tensor): the tensor
  // group's collectives, timed (and cached by size) as its others are.
  if (x.tensor_bytes > 0) {
    plan::TensorTraffic pair;
    pair.bytes = x.tensor_bytes * x.imbalance;
    pair.forward_all_gather = pair.forward_reduce_scatter = 1;
    // Twice in backward where it recomputes the MoE layer.
    pair.backward_all_gather = pair.backward_reduce_scatter = plan.scenario.parallel.recomputes(plan::kRecomputeMoe) ? 2 : 1;
    out.tensor = tensor_timer(pair);
  }
  return out;
}

// What a collective run beside `beside` of compute adds to it: the part the compute does not
// cover, and the slowdown of the compute it hides behind (hardware.interference's factor).
Time exposed_beside(Time collective, Time beside, const plan::Interference& interference) {
  const Time hidden = std::min(collective, beside);
  return collective - hidden + hidden.scaled(interference.compute - 1.0);
}

// The interference the cost model charges a collective started beside compute (the calls of
// exposed_beside below). Gloo (CPU hosts) moves a collective's bytes in its own threads on the
// rank's cores: the launcher binds each rank to its share of the cores (exec/launcher.cpp), its
// compute takes all of them (cores / ranks intra-op threads) and Gloo's threads run at
// SCHED_BATCH (exec/threads.cpp). Over loopback part of a collective's time is CPU work (the
// copies into and out of the sockets), which the cores do instead of the compute; the rest is
// waiting for the peer, which costs the compute nothing. Compute beside a collective therefore
// loses the collective's CPU share of the time it hides (a factor of 1 + share), the share
// calibrate measures on the all-gather (Calibration::allgather_cpu_share). A profile without it
// takes the whole time (a factor of 2), as if the collective were all CPU work. Seen with
// `parallax run -o` on FSDP's prefetched gathers (docs/simulator.md, Sharded data parallelism).
// DDP's all-reduces beside the last backward are played as flows instead and take the
// data-parallel probe's measured in-run figures (in_run_data: the all-reduce factor, the last
// backward's extra per MB).
bool on_gloo(const plan::Plan& plan) { return plan.schedule.collectives == schedule::Collectives::gloo; }

plan::Interference beside_compute(const plan::Plan& plan) {
  plan::Interference in = plan.scenario.hardware.interference;
  if (!on_gloo(plan)) return in;
  const auto& cal = plan.scenario.hardware.calibration;
  const double cpu_share = cal && cal->allgather_cpu_share > 0 ? std::min(cal->allgather_cpu_share, 1.0) : 1.0;
  in.compute = std::max(in.compute, 1.0 + cpu_share);
  return in;
}

// Tensor parallelism's collectives under parallel.tp_comm_overlap (Megatron-LM's
// --tp-comm-overlap): Transformer Engine splits each all-gather and reduce-scatter into chunks
// that run beside the chunks of the GEMM they feed or drain. What the layer's GEMMs do not
// cover stays exposed; the covered part slows the GEMMs as any communication beside compute
// does (hardware.interference's compute_while_communicating).
// torch's async tensor parallelism (torchtitan's enable_async_tensor_parallel; inductor's
// micro_pipeline_tp pass) fuses an all-gather with the matmuls that read its output (A @ B) and a
// reduce-scatter with the one matmul that writes its input. In backward that leaves:
// - the reduce-scatters whole (`unfused`): they take the sum of two or three matmuls (the input
//   gradients of Q, K and V, or of the gate and up projections), which the pass does not match;
// - the all-gathers beside the input gradients' matmuls only (`cover` 1/2 of the linear
//   backward: a linear's input and weight gradients take the same FLOPs), as the weight
//   gradient reads the gathered tensor transposed.
// Its authors measured the forward up to 29% faster and the step 8% (the PyTorch dev-discuss post
// introducing it, Llama 3 8B and 70B).
struct BackwardOverlap {
  Time unfused;        ///< backward collectives left whole
  double cover = 1.0;  ///< the share of the linear backward the others run beside
};

TensorTime overlapped_with_gemms(const TensorTime& tp, const BackwardOverlap& back, const plan::LayerCost& lc, const plan::Interference& in) {
  return {exposed_beside(tp.forward, lc.linear_forward, in),
          exposed_beside(tp.backward - back.unfused, lc.linear_backward.scaled(back.cover), in) + back.unfused};
}

// Transformer Engine's overlap (framework megatron) covers backward as forward; torch's pass
// (every other framework) as above.
BackwardOverlap backward_overlap(const plan::Scenario& s, plan::TensorTraffic x, TensorTimer& timer) {
  if (s.framework == plan::Framework::megatron) return {};
  for (plan::TensorCollectives* c : {static_cast<plan::TensorCollectives*>(&x), &x.latent})
    c->forward_all_reduce = c->backward_all_reduce = c->forward_all_gather = c->forward_reduce_scatter = c->backward_all_gather = 0;
  return {timer(x).backward, 0.5};
}

// A shard's ranks are neighbouring replicas: tensor devices apart (tp-dp-pp), tensor x pipeline
// under tp-pp-dp.
int shard_stride(const plan::ParallelSpec& p) {
  return p.tensor * (p.rank_order == plan::RankOrder::tensor_pipeline_data ? p.pipeline : 1);
}

// Without tp_comm_overlap, Megatron-LM's and Transformer Engine's column-parallel linears (Q, K and
// V; the MLP's up) still overlap two backward collectives with their own GEMMs under sequence
// parallelism, each launched with async_op=True: the all-gather of the layer's input, kept sharded
// and gathered again for the weight gradient, beside the input gradient's GEMM ("Overlap input AG
// with dgrad"), and the reduce-scatter of that input gradient beside the weight gradient's GEMM
// ("Overlap dgrad-RS/AR with wgrad"; Megatron-LM's LinearWithGradAccumulationAndAsyncCommunication,
// TE's Linear, LayerNormLinear and LayerNormMLP backward). So a block's backward reduce-scatters
// (tensor_traffic's, one per column-parallel linear) and as many re-gathers of the same bytes run
// beside those GEMMs: what the GEMMs do not cover stays, the covered part slows them (the
// interference factor). The row-parallel linears' gathers of their output gradients stay whole.
// Without sequence parallelism the same linears all-reduce their input gradient beside the weight
// gradient's GEMM instead (`allreduce(dgrad, ctx.tp_group, async_op=True)` in the same code), and
// a block's backward has no other tensor collective (latent attention's latents aside: whole).
// Other frameworks (torch's DTensor tensor parallelism) run every collective between the kernels.
Time megatron_backward(const plan::TensorTraffic& x, bool sequence_parallel, TensorTimer& timer, const plan::LayerCost& lc,
                       const plan::Interference& in) {
  if (!sequence_parallel) {
    plan::TensorTraffic whole = x, reduces;
    whole.backward_all_reduce = 0;
    reduces.bytes = x.bytes;
    reduces.backward_all_reduce = x.backward_all_reduce;
    return timer(whole).backward + exposed_beside(timer(reduces).backward, lc.column_weight_gradient, in);
  }
  plan::TensorTraffic whole = x, gathers, scatters;
  whole.backward_reduce_scatter = 0;
  gathers.bytes = scatters.bytes = x.bytes;
  gathers.backward_all_gather = scatters.backward_reduce_scatter = x.backward_reduce_scatter;
  return timer(whole).backward + exposed_beside(timer(gathers).backward, lc.column_input_gradient, in) +
         exposed_beside(timer(scatters).backward, lc.column_weight_gradient, in);
}

// A sharded stage's collectives inside its forwards and backwards. Shard full's parameter
// all-gathers around one stage's layers, per micro-batch (FSDP2's implicit
// prefetch): each layer's parameters are gathered over its shard's ranks before its forward, the
// next layer's gather running beside this layer's compute; in backward the same in reverse order
// when reshard_after_forward freed them after the forward. What a gather takes beyond the compute
// beside it is exposed (the stage's first gather whole); the part it hides slows that compute as
// any communication beside compute does (hardware.interference's compute factor). `forward` and
// `backward` are the layers' times; the backward's extra goes into each layer's own.
class ShardCollectives {
 public:
  ShardCollectives(const plan::Plan& plan, const plan::Interference& beside_compute) : plan_(plan), interference_(beside_compute) {}

  Time forward(const plan::Stage& st, const std::vector<Time>& forward) {
    Time extra, beside;
    for (int l = st.first_layer; l < st.first_layer + st.layer_count; ++l) {
      extra += exposed(gather(l), beside);
      beside = forward[l];
    }
    return extra;
  }
  /// Adds each layer's exposed gather and slowdown to `backward` (by layer); returns their sum.
  Time backward(const plan::Stage& st, std::vector<Time>* backward) {
    if (!plan_.scenario.parallel.reshard_after_forward) return {};
    Time total, beside;
    for (int l = st.first_layer + st.layer_count - 1; l >= st.first_layer; --l) {
      const Time next_beside = (*backward)[l];
      const Time extra = exposed(gather(l), beside);
      (*backward)[l] += extra;
      total += extra;
      beside = next_beside;
    }
    return total;
  }

  /// With gradients reduce-scattered every micro-batch (ParallelSpec::reduces_every_microbatch),
  /// what that adds to each backward of the stage but the step's last (whose reduce-scatters are
  /// its buckets, simulated as flows): a layer's reduce-scatter runs beside the next layer's
  /// backward, beside that layer's prefetched gather too under full (the two share the links);
  /// what they take beyond it is exposed, and the stage's first layer's reduce-scatter whole (the
  /// backward ends waiting for it, as FSDP2's final callback and Megatron-FSDP's finish_grad_sync
  /// do). `backward`: the layers' times before the gathers' extra.
  Time reduce_scatters(const plan::Stage& st, const std::vector<Time>& backward) {
    const plan::ParallelSpec& p = plan_.scenario.parallel;
    const bool regathered = p.sharded(plan::Shard::full) && p.reshard_after_forward;
    std::map<int, double> bytes;  // by layer: its bucket, gradient bytes as the buckets reduce them
    for (const plan::Bucket& b : st.buckets) bytes[b.ready_layer] += static_cast<double>(b.bytes);
    auto reduce_scatter = [&](int layer) {
      const auto it = bytes.find(layer);
      // Gloo's is an all-reduce of which the rank keeps its slice (exec/fsdp.hpp), as the step's
      // last backward's buckets are played (Simulation::plan_collective).
      return it == bytes.end() ? Time() : timed(on_gloo(plan_) ? Collective::all_reduce : Collective::reduce_scatter, it->second);
    };
    Time total;
    for (int l = st.first_layer + st.layer_count - 2; l >= st.first_layer; --l) {
      const Time with = regathered ? gather(l) : Time();  // gathered beside layer l + 1's backward
      total += exposed(with + reduce_scatter(l + 1), backward[l]) - exposed(with, backward[l]);
    }
    return total + reduce_scatter(st.first_layer);
  }

 private:
  Time exposed(Time gather, Time beside) const { return exposed_beside(gather, beside, interference_); }
  Time gather(int layer) {
    const plan::ParallelSpec& p = plan_.scenario.parallel;
    const plan::Layer& l = plan_.layers()[layer];
    const double bytes = static_cast<double>(l.param_count(p.tensor, p.expert, p.expert_tensor_ways())) * plan::gathered_parameter_bytes(p, l);
    return timed(Collective::all_gather, bytes);
  }
  // One collective over the shard's ranks, costed once per kind and size.
  Time timed(Collective coll, double bytes) {
    const auto [it, fresh] = cache_.try_emplace({coll, bytes}, Time());
    if (fresh) {
      const plan::ParallelSpec& p = plan_.scenario.parallel;
      it->second = Time::us(group_collective_us(plan_, coll, bytes, p.shard_ranks(), shard_stride(p)));
    }
    return it->second;
  }
  const plan::Plan& plan_;
  const plan::Interference interference_;
  std::map<std::pair<Collective, double>, Time> cache_;  // a model's blocks move the same bytes
};

}  // namespace

// A token's k experts, picked without replacement among E, miss a given group's E / n with chance
// C(E - E/n, k) / C(E, k), the product below.
double remote_copies_per_group(int64_t experts, int64_t k, int groups) {
  if (groups <= 1 || k <= 0 || experts <= 0) return 1.0;
  const double e = static_cast<double>(experts), per_group = e / groups;
  double missed = 1.0;
  for (int64_t i = 0; i < k; ++i) missed *= std::max(0.0, (e - per_group - static_cast<double>(i)) / (e - static_cast<double>(i)));
  const double groups_hit = (groups - 1) * (1.0 - missed);             // other groups a token reaches
  const double copies = static_cast<double>(k) * (groups - 1) / groups;  // its copies bound for them
  return groups_hit / copies;
}

const plan::InRunFactors& in_run_factors(const plan::Plan& plan, const plan::Calibration& cal) {
  return plan.scenario.parallel.replicas() > 1 && cal.in_run_data ? *cal.in_run_data : cal.in_run;
}

RingCost calibrated_allreduce(const plan::Plan& plan, const plan::Calibration& cal, int ranks) {
  const RingCost ring = ring_scaled(cal.allreduce, cal.allreduce_ranks, ranks);
  const double in_run = in_run_factors(plan, cal).allreduce;
  return {in_run * ring.latency_us, in_run * ring.us_per_byte};
}

Time optimizer_time(const plan::Scenario& s, int64_t stage_params) {
  const plan::Device& device = s.hardware.device;
  if (std::isinf(device.memory_bandwidth_gb_per_s)) return Time::us(device.layer_overhead_us);
  const plan::OptimizerTraffic per = plan::optimizer_traffic(s);
  const double params = static_cast<double>(stage_params);
  // Sharded state: each rank steps its 1 / shard_ranks; with sharded gradients it also zeroes only
  // its shard of them.
  const plan::ParallelSpec& p = s.parallel;
  const double shard = p.sharded(plan::Shard::optimizer) ? params / p.shard_ranks() : params;
  const double zeroed = p.sharded(plan::Shard::gradients) ? shard : params;
  // Memory-bound kernels reach the profile's memory_efficiency of the bandwidth, as a layer's do.
  const double rate = device.memory_bandwidth_gb_per_s * (device.compute ? device.compute->memory_efficiency : 1.0);
  return Time::us(device.layer_overhead_us) + Time::ns(std::llround((shard * per.per_shard + zeroed * per.per_param) / rate));
}

// ZeRO-1 and -2 keep the parameters whole: after its step each rank's updated slice goes to the
// others, an all-gather over the shard's ranks, of the parameters in the type the model keeps them
// (the compute type under master weights, as Megatron-LM's buffers; else fp32). Without
// parallel.overlap_param_gather it runs after the step, before anything else (Megatron-LM's default;
// the executor's, which on Gloo gathers fp32 parameters): charged to OPTIM. With it, beside the
// next step's first forward (overlapped_parameter_gathers).
static int gathered_bytes_per_param(const plan::ParallelSpec& p) { return p.master_weights ? plan::activation_bytes(p.precision) : 4; }

// Sharded gradients: the executor's hooks copy each gradient into its layer's flat buffer as it
// arrives, and the reduce-scatters share the cores, all through the backward; a layer's
// reduce-scatter starts once its gradients are in (exec/fsdp.cpp, on_grad), so the last layer's
// starts as the backward ends. `extra` (the step's last backward's copies and core sharing, added
// to its end by Simulation::start_compute) is spread over the layers in proportion, moving each
// layer's reduce-scatter later with it. (DDP's buckets keep the offsets: its reducer's finalize at
// the backward's end is what the calibration's extra measured.)
static void spread_over_backward(Time extra, StageCost* c) {
  if (extra <= Time()) return;
  auto spread = [&](std::vector<Time>& offsets, Time whole) {
    if (whole <= Time()) return;
    for (Time& t : offsets) t = t.scaled((whole + extra) / whole);
  };
  spread(c->bucket_ready, c->backward);
  spread(c->bucket_ready_in_weight, c->backward_weight);
}

static Time parameters_after_step(const plan::Plan& plan, const plan::Stage& st) {
  const plan::ParallelSpec& p = plan.scenario.parallel;
  if (!p.sharded(plan::Shard::optimizer) || p.sharded(plan::Shard::full) || p.param_gather_overlapped()) return Time();
  const double bytes = plan.scenario.hardware.nccl ? static_cast<double>(st.param_count * gathered_bytes_per_param(p))
                                                   : static_cast<double>(st.param_bytes);
  return Time::us(group_collective_us(plan, Collective::all_gather, bytes, p.shard_ranks(), shard_stride(p)));
}

// Megatron-LM's --overlap-param-gather: the all-gather of the rank's first bucket (in forward
// order) starts with the step (its optimizer's zero_grad) and the forward waits for it; each later
// bucket's is started by the forward pre-hook of the first module of the bucket before it, so it
// runs beside the forward of that bucket's parameters (megatron/core/distributed/
// distributed_data_parallel.py's forward pre-hooks, on every module; param_and_grad_buffer.py's
// finish_param_sync dispatching the next bucket). A bucket's forward is its layers' forward shared
// out by parameters (buckets cut through layers). What a later gather takes beyond that compute is
// exposed; the part it hides slows the compute (hardware.interference), as FSDP's prefetched
// gathers do (ShardCollectives). An expert's parameters count as plan::data_parallel_bytes says.
// Megatron-core buckets only the first pipeline rank's first chunk (plan::bucket_caps): every
// other stage's gather is one bucket, its first, which runs while the stage waits for the
// pipeline to fill. Sets c's first_gather and first_forward_extra, and chunk_gather: what the
// interleaved schedule prefetches whole instead (Simulation's chunk_prefetch_).
static void overlapped_parameter_gathers(const plan::Plan& plan, const plan::Stage& st, const std::vector<Time>& forward, StageCost* c) {
  const plan::ParallelSpec& p = plan.scenario.parallel;
  if (!p.param_gather_overlapped()) return;
  const int per_param = gathered_bytes_per_param(p);
  auto numel = [&](const plan::ParamRef& r) {
    return static_cast<double>(plan.layers()[r.layer].params[r.index].numel_on(p.tensor, p.expert, p.expert_tensor_ways()));
  };
  std::map<int, double> layer_params;  // a layer's parameters on this rank
  for (const plan::Bucket& b : st.buckets)
    for (const plan::ParamRef& r : b.params) layer_params[r.layer] += numel(r);
  const plan::Interference overlapped = beside_compute(plan);
  Time beside;
  bool first = true;
  double stage_bytes = 0;
  for (auto b = st.buckets.rbegin(); b != st.buckets.rend(); ++b) {  // forward order
    double bytes = 0, compute_us = 0;
    for (const plan::ParamRef& r : b->params) {
      compute_us += forward[r.layer].to_us() * numel(r) / layer_params[r.layer];
      bytes += static_cast<double>(plan::data_parallel_bytes(p, plan.layers()[r.layer].params[r.index], per_param));
    }
    const Time gather = Time::us(group_collective_us(plan, Collective::all_gather, bytes, p.shard_ranks(), shard_stride(p)));
    if (first) c->first_gather = gather;
    else c->first_forward_extra += exposed_beside(gather, beside, overlapped);
    first = false;
    beside = Time::us(compute_us);  // the next bucket's gather runs beside this one's forward
    stage_bytes += bytes;
  }
  // The buckets gathered together (one coalesced launch, as an interleaved schedule starts them).
  if (stage_bytes > 0) c->chunk_gather = Time::us(group_collective_us(plan, Collective::all_gather, stage_bytes, p.shard_ranks(), shard_stride(p)));
}

std::vector<StageCost> stage_costs(const plan::Plan& plan, const std::vector<plan::LayerCost>* layer_costs) {
  const auto& s = plan.scenario;
  const plan::Recompute recompute_choice = s.parallel.activation_checkpointing;
  const plan::Calibration* cal = s.hardware.calibration ? &*s.hardware.calibration : nullptr;
  const int elem = plan::activation_bytes(s.parallel.precision);
  TensorTimer tensor_timer(plan);
  const plan::Interference overlapped = beside_compute(plan);
  ShardCollectives shard_collectives(plan, overlapped);
  const bool gathered = s.parallel.sharded(plan::Shard::full) && s.parallel.shard_ranks() > 1;
  std::vector<StageCost> out;
  for (const plan::Stage& st : plan.stages) {
    StageCost c;
    const int last = st.first_layer + st.layer_count - 1;
    std::vector<Time> fwd_layer(plan.layers().size()), bwd_layer(plan.layers().size()), weight_layer(plan.layers().size());
    Time forward_with_grad, forward_memory_bound, backward_memory_bound, recompute;
    for (int l = st.first_layer; l <= last; ++l) {
      // Layer and stage recompute run the forward of what backward re-runs without keeping its
      // activations.
      const bool no_grad_forward = s.parallel.recomputes_forward(plan.layers()[l].kind);
      const auto lc = layer_costs ? (*layer_costs)[l]
                                  : plan::estimate_layer_cost(plan.layers()[l], s.hardware, s.parallel,
                                                              plan.microbatch_size, /*input_gradient=*/l > 0);
      // Tensor parallelism's collectives run between the layer's kernels, not beside them; a
      // full recompute repeats the forward's.
      // So do the context ring's sends that attention does not hide.
      const plan::TensorTraffic traffic = plan::tensor_traffic(plan.layers()[l], s.parallel, plan.microbatch_size);
      TensorTime tp = tensor_timer(traffic);
      if (s.parallel.tp_comm_overlap)
        tp = overlapped_with_gemms(tp, backward_overlap(s, traffic, tensor_timer), lc, overlapped);
      else if (s.framework == plan::Framework::megatron &&
               (s.parallel.sequence_parallel ? traffic.backward_reduce_scatter > 0
                                             // Megatron-core asks for sequence parallelism with MoE and tensor
                                             // parallelism: a MoE block's all-reduces are not its linears'.
                                             : traffic.backward_all_reduce > 0 && !plan.layers()[l].shape.moe.on()))
        tp.backward = megatron_backward(traffic, s.parallel.sequence_parallel, tensor_timer, lc, overlapped);
      const TensorTime ring = context_ring(plan, plan::context_traffic(plan.layers()[l], s.parallel, plan.microbatch_size), lc);
      tp.forward += ring.forward;
      tp.backward += ring.backward;
      // And a MoE block's all-to-alls and its routed tokens' tensor collectives.
      const ExpertTime moe = expert_time(plan, plan::expert_traffic(plan.layers()[l], s.parallel, plan.microbatch_size), tensor_timer);
      tp.forward += moe.all_to_all.forward + moe.tensor.forward;
      tp.backward += moe.all_to_all.backward + moe.tensor.backward;
      c.all_to_all_forward += moe.all_to_all.forward;
      c.all_to_all_backward += moe.all_to_all.backward;
      c.expert_forward += lc.expert_forward;
      c.expert_backward += lc.expert_backward;
      fwd_layer[l] = (no_grad_forward ? lc.forward_no_grad : lc.forward) + tp.forward;
      c.forward += fwd_layer[l];
      forward_with_grad += lc.forward + tp.forward;
      recompute += lc.recompute + (no_grad_forward ? tp.forward : Time());
      // Layer recompute re-runs each layer just before its own backward; stage and selective
      // recompute are charged where the stage's backward starts (below).
      // torchtitan's per-op checkpointing re-runs what it did not keep of each block before that
      // block's backward, as layer recompute does (its tensor-parallel all-gathers are not charged again).
      const Time layer_recompute = recompute_choice == plan::Recompute::layer          ? lc.recompute + (no_grad_forward ? tp.forward : Time())
                                   : recompute_choice == plan::Recompute::selective_op ? lc.recompute
                                                                                        : Time();
      c.backward += lc.backward + tp.backward + layer_recompute;
      c.forward_launch += lc.forward_launch;
      c.backward_launch += lc.backward_launch + (no_grad_forward ? lc.forward_launch : Time());  // a full recompute relaunches
      bwd_layer[l] = lc.backward + tp.backward + layer_recompute;
      weight_layer[l] = lc.backward_weight;
      c.backward_weight += lc.backward_weight;
      if (lc.forward_memory_bound) forward_memory_bound += lc.forward;
      if (lc.backward_memory_bound) backward_memory_bound += lc.backward;
    }
    if (s.parallel.reduces_every_microbatch() && s.parallel.shard_ranks() > 1)
      c.reduce_scatter_between = shard_collectives.reduce_scatters(st, bwd_layer);
    if (gathered) {
      c.forward += shard_collectives.forward(st, fwd_layer);
      c.backward += shard_collectives.backward(st, &bwd_layer);
    }
    overlapped_parameter_gathers(plan, st, fwd_layer, &c);
    c.forward_memory_bound = forward_memory_bound * 2 > forward_with_grad;
    c.backward_memory_bound = backward_memory_bound * 2 > c.backward;
    c.optimizer_memory_bound = cal == nullptr;
    const StageExtras extras = stage_extras(plan, st);
    c.forward += extras.forward;
    // Stage recompute re-runs the whole stage forward (with autograd) before the backward;
    // selective recompute, attention's cores (counted here as if all at the start).
    // Layer recompute of a model that ends in a block re-runs the loss (extras.recompute) first.
    const Time stage_recompute = recompute_choice == plan::Recompute::stage     ? recompute + extras.recompute
                                 : recompute_choice == plan::Recompute::selective ? recompute
                                 : recompute_choice == plan::Recompute::layer     ? extras.recompute
                                                                                  : Time();
    const Time before_layers = stage_recompute + extras.backward;
    c.backward += before_layers;
    for (const plan::Bucket& b : st.buckets) {
      Time at = before_layers, in_weight;
      for (int l = last; l >= b.ready_layer; --l) at += bwd_layer[l], in_weight += weight_layer[l];
      c.bucket_ready.push_back(at);
      c.bucket_ready_in_weight.push_back(in_weight);
    }
    // Each tensor rank sends its 1 / context of the tokens, and 1/t of them where the tensor is
    // split (sequence parallelism, or the scatter-gather of Megatron-LM before Megatron-core).
    const double per_rank = static_cast<double>(plan.microbatch_size) * elem / s.parallel.p2p_split() / s.parallel.context;
    c.send_forward_bytes = std::llround(plan.layers()[last].output_elems_per_sample * per_rank);
    c.send_backward_bytes = std::llround(plan.layers()[st.first_layer].input_elems_per_sample * per_rank);
    c.optimizer = cal ? calibrated_optimizer(plan, st, *cal)
                      : optimizer_time(s, st.param_count);
    if (cal) c.optimizer_launch = optimizer_launch(plan, st, *cal);
    if (cal && s.parallel.replicas() > 1 && cal->copy_gb_per_s > 0)
      c.bucket_copy_in = Time::us(static_cast<double>(st.param_bytes) / (cal->copy_gb_per_s * 1e3));
    if (cal) {
      const double f = oversubscription(plan, *cal);
      const plan::InRunFactors& in = in_run_factors(plan, *cal);
      // Alone x factor + extra, the proportional part only up to the longest probed action (see
      // InRunFactors::forward_probed_us). Never below 0: a negative extra larger than the time
      // alone would.
      auto in_run = [&](Time alone, double factor, double extra_us, double probed_us) {
        const Time proportional = probed_us > 0 ? std::min(alone, Time::us(probed_us)) : alone;
        return std::max(Time(), scaled(alone, f) + scaled(proportional, f * (factor - 1)) + scaled(Time::us(extra_us), f));
      };
      c.forward = in_run(c.forward, in.forward, in.forward_extra_us, in.forward_probed_us);
      const Time backward_alone = c.backward;
      c.backward = in_run(c.backward, in.backward, in.backward_extra_us, in.backward_probed_us);
      for (Time& t : c.bucket_ready) t = in_run(t, in.backward, in.backward_extra_us, in.backward_probed_us);
      // A W keeps its share of the backward in the run.
      if (backward_alone > Time()) {
        const double share = c.backward / backward_alone;
        c.backward_weight = scaled(c.backward_weight, share);
        for (Time& t : c.bucket_ready_in_weight) t = scaled(t, share);
      }
      c.optimizer = in_run(c.optimizer, in.optimizer, in.optimizer_extra_us, in.optimizer_probed_us);
      c.bucket_copy_in = scaled(c.bucket_copy_in, f * in.backward);
      if (s.parallel.replicas() > 1)
        c.sync_backward_extra = std::max(
            Time(), scaled(Time::us(in.sync_backward_extra_us_per_mb * static_cast<double>(st.param_bytes) / 1e6), f));
      if (s.parallel.sharded(plan::Shard::gradients)) spread_over_backward(c.bucket_copy_in + c.sync_backward_extra, &c);
      // Messages as the pipeline probe measured them.
      const plan::InRunFactors& msg = cal->in_run;
      auto call = [&](int64_t bytes) {
        if (cal->send_call.empty()) return Time();
        return scaled(Time::us(std::max(0.0, cal->send_call.at(static_cast<double>(bytes)) + msg.send_extra_us)), f);
      };
      c.send_forward_call = call(c.send_forward_bytes);
      c.send_backward_call = call(c.send_backward_bytes);
    }
    if (s.hardware.fitted) {  // plan/fitted.hpp
      c.optimizer = scaled(c.optimizer, s.hardware.fitted->optimizer);
      c.send_forward_call += Time::us(s.hardware.fitted->send_forward_us);
      c.send_backward_call += Time::us(s.hardware.fitted->send_backward_us);
    }
    c.optimizer += parameters_after_step(plan, st);
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace parallax::sim
