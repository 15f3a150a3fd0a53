// Context parallelism (parallel.context) against what Megatron-core does: its rank order
// (tp-cp-dp-pp, megatron/core/parallel_state.py), Korthikanti et al.'s activation count with a
// rank's share of the sequence, the ring's bytes worked by hand, gradients reduced over
// data x context, and the tuner searching it.
#include <catch2/catch.hpp>
#include <limits>

#include "plan/cost.hpp"
#include "plan/executable.hpp"
#include "plan/memory.hpp"
#include "plan/plan.hpp"
#include "plan/trainer_rules.hpp"
#include "sim/cost_model.hpp"
#include "sim/simulator.hpp"
#include "tests/test_util.hpp"
#include "tune/search.hpp"

using namespace parallax;

namespace {

// A Llama-3-8B-shaped block: 32 heads, 8 key/value heads of 128, 4,096-token sequences.
const std::string kLlama =
    "model: {preset: transformer, layers: 4, hidden: 4096, heads: 32, kv_heads: 8, ffn: 14336, mlp: swiglu, norm: rmsnorm, "
    "positions: rope, bias: false, seq_len: 4096, vocab: 128256, attention: flash}\n"
    "data: {batch_size: 8}\n"
    "parallel: {precision: bf16, chunks: 8}\n"
    "optimizer: {kind: adamw, lr: 0.0003}\n"
    "hardware: h100-nvlink-ib\n";

}  // namespace

TEST_CASE("plan::context: ranks in Megatron-core's order tp-cp-dp-pp", "[plan][context]") {
  plan::ParallelSpec p;
  p.tensor = 2;
  p.context = 2;
  p.data = 3;
  p.pipeline = 2;
  CHECK(p.world_size() == 24);
  CHECK(p.replicas() == 6);
  CHECK(p.tensor_groups() == 12);
  // Megatron-core numbers ranks with tensor fastest, then context, then data, then pipeline.
  for (int pp = 0; pp < 2; ++pp)
    for (int dp = 0; dp < 3; ++dp)
      for (int cp = 0; cp < 2; ++cp)
        for (int tp = 0; tp < 2; ++tp) {
          const int megatron = tp + 2 * (cp + 2 * (dp + 3 * pp));
          const plan::Placement w = plan::placement_of(p, megatron);
          INFO("rank " << megatron);
          CHECK(w.tensor_rank == tp);
          CHECK(w.replica == dp * 2 + cp);
          CHECK(w.pipeline_rank == pp);
          CHECK(plan::rank_of(p, w) == megatron);
        }
}

TEST_CASE("plan::context: a rank keeps 1 / context of Korthikanti et al.'s activations", "[plan][context]") {
  // The 22B model of the paper's Table 3 in fp16: sbh(34 + 5as/h) bytes a block, where a rank of
  // a context group holds s/c of the tokens and their scores against all s keys (5 a (s/c) s b).
  plan::BlockForm gpt;  // the paper's block: a GELU MLP, dropout 0.1
  gpt.decoder = true;
  gpt.mlp = plan::Mlp::gelu;
  gpt.dropout = 0.1;
  const plan::Layer block = plan::make_encoder("layers.0", 6144, 64, 4 * 6144, 2048, false, gpt);
  const double s = 2048, h = 6144, a = 64;
  for (int c : {1, 2, 4, 8}) {
    plan::ParallelSpec p;
    p.precision = plan::Precision::fp16;
    p.context = c;
    INFO("context " << c);
    CHECK(plan::full_activation_bytes(block, p) == Approx((s / c) * h * 34 + 5 * a * (s / c) * s));
    p.activation_checkpointing = plan::Recompute::layer;
    CHECK(plan::kept_activation_bytes(block, p) == Approx(2 * (s / c) * h));  // the block's input, fp16
  }
}

TEST_CASE("plan::context: the ring's bytes and what attention does not hide", "[plan][context]") {
  const plan::Scenario s = test::scenario_from(kLlama, {"parallel.context=4", "parallel.tensor=2", "parallel.context_attention=megatron"});
  const plan::Layer& block = s.layers[1];
  // Each step sends K and V of the rank's 4096 / 4 tokens, of 8 x 128 / 2 = 512 columns per
  // tensor rank, in bf16: 2 x 1024 x 512 x 2 bytes per sample.
  CHECK(plan::context_traffic(block, s.parallel, 2).step_bytes == Approx(2.0 * 2 * 1024 * 512 * 2));
  const plan::ContextTraffic ring = plan::context_traffic(block, s.parallel, 1);  // the plan's micro-batch
  CHECK(ring.steps == 3);
  CHECK(ring.step_bytes == Approx(2.0 * 1024 * 512 * 2));
  CHECK(plan::context_traffic(s.layers.front(), s.parallel, 2).steps == 0);  // the embedding has no attention
  // On a slow node link every step's send outlasts its block of attention: the stage's forward
  // grows by steps x (send - attention / context) a block, its backward by the same with twice the bytes.
  plan::Scenario slow = s;
  slow.hardware.node_link = {"slow", 1.0, 0.0};  // 1 GB/s, no latency
  const plan::Plan fast_plan = plan::resolve_plan(s), slow_plan = plan::resolve_plan(slow);
  REQUIRE(fast_plan.microbatch_size == 1);
  const auto fast = sim::stage_costs(fast_plan), slowed = sim::stage_costs(slow_plan);
  const plan::LayerCost lc = plan::estimate_layer_cost(block, s.hardware, s.parallel, fast_plan.microbatch_size);
  const double send_us = ring.step_bytes / 1e3;  // at 1 GB/s
  const int blocks = 4;
  CHECK((slowed[0].forward - fast[0].forward).to_us() ==
        Approx(blocks * 3 * (send_us - lc.attention_forward.to_us() / 4)).epsilon(1e-3));
  CHECK((slowed[0].backward - fast[0].backward).to_us() ==
        Approx(blocks * 3 * (2 * send_us - lc.attention_backward.to_us() / 4)).epsilon(1e-3));
}

TEST_CASE("plan::context: torch's context_parallel gathers the keys and values once and merges each step in fp32", "[plan][context]") {
  // What torch/distributed/tensor/experimental/_attention.py runs beside its attention calls, worked
  // by hand for a rank's 1,024 tokens (4,096 / 4), 32 query heads and 8 key/value heads of 128, bf16.
  const plan::Scenario s = test::scenario_from(kLlama, {"parallel.context=4"});
  CHECK(s.parallel.context_attention == plan::ContextAttention::torch);  // PyTorch's, and torchtitan's
  CHECK(test::scenario_from("framework: megatron\n" + kLlama, {"parallel.context=4"}).parallel.context_attention ==
        plan::ContextAttention::megatron);
  const plan::Layer& block = s.layers[1];
  plan::ParallelSpec megatron = s.parallel;
  megatron.context_attention = plan::ContextAttention::megatron;
  const plan::LayerCost torch_cost = plan::estimate_layer_cost(block, s.hardware, s.parallel, 1);
  const plan::LayerCost megatron_cost = plan::estimate_layer_cost(block, s.hardware, megatron, 1);
  const double out = 1024.0 * 4096, query = out, kv = 1024.0 * 2 * 1024, e = 2, c = 4;
  // Forward: each step's output cast to fp32 (read 2, write 4), the three later ones merged
  // (out - block: 12 bytes; x sigmoid: 8; out - that: 12), the result cast back; the keys and
  // values concatenated before each of the 3 sends (read, write).
  const double forward = out * ((e + 4) * c + 32 * (c - 1) + (4 + e)) + kv * 2 * e * (c - 1);
  // Backward: fp32 accumulators zeroed; the last rank adds each step's query gradient whole (read
  // 4 + 2, write 4) and its key and value gradients, after the first a half through a
  // concatenation (read, write 4 bytes of the whole); the fp32 key and value gradients
  // concatenated for each of 4 sends; the keys and values for 3; everything cast back.
  const double backward = 4 * (query + kv) + query * (8 + e) * c + kv * ((8 + e) + (c - 1) * ((8 + e) / 2 + 8)) + kv * 8 * c +
                          kv * 2 * e * (c - 1) + (4 + e) * (query + kv);
  CHECK(forward == 553'648'128);
  CHECK(backward == 425'721'856);
  const double bytes_per_us = s.hardware.device.memory_bandwidth_gb_per_s * 1e3 * s.hardware.device.compute->memory_efficiency;
  CHECK((torch_cost.attention_forward - megatron_cost.attention_forward).to_us() == Approx(forward / bytes_per_us).margin(0.002));  // Time holds whole ns
  CHECK((torch_cost.attention_backward - megatron_cost.attention_backward).to_us() == Approx(backward / bytes_per_us).margin(0.002));
  // The exchange on a slow link: one all-gather of the other 3 ranks' keys and values beside the
  // first step, in forward and again in backward; there each step's fp32 key and value gradients
  // (twice the bf16 bytes) go on beside the next step, and the last is waited for.
  plan::Scenario slow = s;
  slow.hardware.node_link = {"slow", 1.0, 0.0};  // 1 GB/s, no latency
  const auto fast = sim::stage_costs(plan::resolve_plan(s)), slowed = sim::stage_costs(plan::resolve_plan(slow));
  const plan::ContextTraffic ring = plan::context_traffic(block, s.parallel, 1);
  const double a_f = torch_cost.attention_forward.to_us(), a_b = torch_cost.attention_backward.to_us();
  auto exchange = [&](const plan::Link& link) {  // a block's exposed exchange, forward and backward, in us
    const auto send = [&](double bytes) { return link.latency_us + bytes / (link.bandwidth_gb_per_s * 1e3); };
    const auto exposed = [](double sends, double attention) { return std::max(0.0, sends - attention / 4); };
    const double gather = send(3 * ring.step_bytes), gradients = send(2 * ring.step_bytes);
    return std::pair{exposed(gather, a_f), exposed(gather, a_b) + 3 * exposed(gradients, a_b) + gradients};
  };
  const auto [slow_f, slow_b] = exchange(slow.hardware.node_link);
  const auto [fast_f, fast_b] = exchange(s.hardware.node_link);
  REQUIRE(slow_f > 0);
  const int blocks = 4;
  CHECK((slowed[0].forward - fast[0].forward).to_us() == Approx(blocks * (slow_f - fast_f)).epsilon(1e-3));
  CHECK((slowed[0].backward - fast[0].backward).to_us() == Approx(blocks * (slow_b - fast_b)).epsilon(1e-3));
}

TEST_CASE("plan::context: a rank computes 1 / context of the tokens", "[plan][context]") {
  // On the roofline (no shape model), FLOP-bound: the forward's FLOP time divides by the context degree.
  plan::Scenario whole = test::scenario_from(kLlama);
  whole.hardware.device.compute.reset();
  whole.hardware.device.memory_bandwidth_gb_per_s = std::numeric_limits<double>::infinity();
  plan::Scenario split = whole;
  split.parallel.context = 4;
  const double call = whole.hardware.device.layer_overhead_us;
  for (size_t l = 0; l < whole.layers.size(); ++l) {
    const auto a = plan::estimate_layer_cost(whole.layers[l], whole.hardware, whole.parallel, 1);
    const auto b = plan::estimate_layer_cost(split.layers[l], split.hardware, split.parallel, 1);
    INFO(whole.layers[l].name);
    CHECK(b.forward.to_us() - call == Approx((a.forward.to_us() - call) / 4).epsilon(1e-6));
  }
  // The boundary tensor a stage sends is the rank's tokens only.
  const auto sends_whole = sim::stage_costs(plan::resolve_plan(test::scenario_from(kLlama, {"parallel.pipeline=2"})));
  const auto sends_split = sim::stage_costs(plan::resolve_plan(test::scenario_from(kLlama, {"parallel.pipeline=2", "parallel.context=2"})));
  CHECK(sends_split[0].send_forward_bytes * 2 == sends_whole[0].send_forward_bytes);
}

TEST_CASE("sim: a tensor rank sends the boundary tensor whole, or 1/t where it is split", "[sim][tensor]") {
  // Megatron-core's get_tensor_shapes: (seq / context [/ tensor under sequence parallelism], micro-batch,
  // hidden); Megatron-LM's scatter-gather of 2021-2023 split it without sequence parallelism too.
  auto sent = [](std::vector<std::string> sets) {
    sets.insert(sets.end(), {"parallel.pipeline=2", "parallel.tensor=4", "parallel.data=2"});
    return sim::stage_costs(plan::resolve_plan(test::scenario_from(kLlama, sets)))[0].send_forward_bytes;
  };
  const int64_t whole = int64_t{4096} * 1 * 4096 * 2;  // micro-batch 1 (batch 8 over 8 chunks), bf16
  CHECK(sent({}) == whole);
  CHECK(sent({"parallel.sequence_parallel=true"}) == whole / 4);
  CHECK(sent({"parallel.p2p_scatter_gather=true"}) == whole / 4);
  CHECK(sent({"parallel.p2p_scatter_gather=true", "parallel.sequence_parallel=true"}) == whole / 4);
  // Megatron-LM of today has no scatter-gather: its export and tune refuse it where it would apply.
  const auto s = test::scenario_from(kLlama, {"parallel.pipeline=2", "parallel.schedule=1f1b", "parallel.tensor=4", "parallel.p2p_scatter_gather=true"});
  const auto refusal = plan::trainer_refusal(s, plan::Framework::megatron);
  REQUIRE(refusal);
  CHECK(refusal->key == "parallel.p2p_scatter_gather");
  CHECK_FALSE(plan::trainer_refusal(test::scenario_from(kLlama, {"parallel.pipeline=2", "parallel.schedule=1f1b", "parallel.tensor=4"}),
                                    plan::Framework::megatron));
}

TEST_CASE("plan::context: gradients are reduced over data x context", "[plan][context]") {
  const plan::Plan alone = test::plan_from(kLlama, {"parallel.shard=optimizer", "parallel.master_weights=true"});
  const plan::Plan context = test::plan_from(kLlama, {"parallel.context=2", "parallel.shard=optimizer", "parallel.master_weights=true"});
  CHECK(alone.stages[0].buckets.empty());  // one replica: no DDP
  CHECK_FALSE(context.stages[0].buckets.empty());
  CHECK(context.ranks[0].memory.optimizer * 2 == Approx(alone.ranks[0].memory.optimizer).epsilon(1e-9));
  // The simulator all-reduces each bucket between the two context ranks.
  const sim::SimRun run = sim::simulate(context);
  CHECK(run.timeline.world_size == 2);
  const bool reduced = std::any_of(run.timeline.events.begin(), run.timeline.events.end(),
                                   [](const timeline::TimelineEvent& e) { return e.lane == timeline::Lane::allreduce; });
  CHECK(reduced);
}

TEST_CASE("plan::context: what cannot be split exits 2 at parallel.context, and the executor refuses it", "[plan][context]") {
  CHECK_THAT(test::parse_error(kLlama, {"parallel.context=3"}), Catch::Contains("2 x 3 chunks") && Catch::Contains("seq_len 4096"));
  CHECK_THAT(test::parse_error("model: {preset: mlp}\nparallel: {context: 2}\nhardware: ideal\n"), Catch::Contains("parallel.context 2 splits the sequences"));
  CHECK_THROWS_WITH(plan::check_executable(test::scenario_from(kLlama, {"parallel.context=2"})),
                    Catch::Contains("context parallelism") && Catch::Contains("predict-only"));
}

TEST_CASE("tune: the default space searches context parallelism for long sequences on GPUs", "[tune][context]") {
  const plan::Scenario s = test::scenario_from(kLlama);
  const tune::Space sp = tune::default_space(s, 16);
  // 4,096 tokens: chunks of 512 or more for context 1, 2 and 4.
  CHECK(sp.ints("parallel.context") == std::vector<int>{1, 2, 4});
  tune::Evaluator ev(s);
  size_t invalid = 0;
  std::string why;
  const auto configs = tune::enumerate(ev, sp, &invalid, &why);
  std::set<int> contexts;
  for (const auto& c : configs) {
    CHECK(c.data * c.context * c.pipeline * c.tensor == 16);
    contexts.insert(c.context);
  }
  CHECK(contexts == std::set<int>{1, 2, 4});
  // Short sequences, or a CPU: context stays 1.
  CHECK(tune::default_space(test::scenario_from(kLlama, {"model.seq_len=1024"}), 16).ints("parallel.context") == std::vector<int>{1});
}

TEST_CASE("sim: tp_comm_overlap hides tensor parallelism's collectives behind the linear GEMMs", "[sim][tensor]") {
  const std::vector<std::string> tp = {"parallel.tensor=4", "parallel.sequence_parallel=true"};
  auto with = [&](std::vector<std::string> sets) { return sim::stage_costs(plan::resolve_plan(test::scenario_from(kLlama, sets))); };
  auto overlapped = tp;
  overlapped.push_back("parallel.tp_comm_overlap=true");
  const auto exposed = with(tp), hidden = with(overlapped);
  plan::Scenario free_links = test::scenario_from(kLlama, tp);  // collectives that take no time
  free_links.hardware.nccl.reset();
  free_links.hardware.node_link = {"free", std::numeric_limits<double>::infinity(), 0.0};
  const auto alone = sim::stage_costs(plan::resolve_plan(free_links));
  // Communication is what exposed adds over free links. Overlapped, the blocks' and the head's
  // GEMMs cover theirs (they take longer here), which then cost only the GEMMs' slowdown beside
  // them, x 0.19 (h100-nvlink-ib's compute_while_communicating); the embedding's reduce-scatter
  // has no GEMM to hide behind and stays whole.
  const double comm = (exposed[0].forward - alone[0].forward).to_us();
  REQUIRE(comm > 0);
  const double added = (hidden[0].forward - alone[0].forward).to_us();
  CHECK(added > 0.19 * comm);
  CHECK(added < 0.3 * comm);
  CHECK(hidden[0].backward < exposed[0].backward);
  // Backward: torch's async TP (this scenario's framework, pytorch) fuses the all-gathers with the
  // input gradients' matmuls but leaves the reduce-scatters of summed gradients whole: half of the
  // collectives (two of each, the same bytes) exposed, the other half costing their slowdown.
  const double comm_back = (exposed[0].backward - alone[0].backward).to_us();
  const double torch_back = (hidden[0].backward - alone[0].backward).to_us();
  CHECK(torch_back > 0.5 * comm_back + 0.19 * 0.5 * comm_back * 0.9);
  CHECK(torch_back < 0.5 * comm_back + 0.3 * 0.5 * comm_back);
  // Transformer Engine's (framework megatron) hides backward's as it does forward's.
  auto megatron_sets = [](std::vector<std::string> sets) {
    sets.push_back("framework=megatron");
    sets.push_back("model.loss=eager");  // the cross entropy torch's, as `alone`'s: only the collectives differ
    return sets;
  };
  auto megatron = [&](std::vector<std::string> sets) { return with(megatron_sets(std::move(sets))); };
  // Megatron-LM's own plan over free links: it pads the vocabulary (128256 to 128512 at tensor 4),
  // so its head computes more than `alone`'s.
  auto megatron_alone = [&](std::vector<std::string> sets) {
    plan::Scenario s = test::scenario_from(kLlama, megatron_sets(std::move(sets)));
    s.hardware.nccl.reset();
    s.hardware.node_link = {"free", std::numeric_limits<double>::infinity(), 0.0};
    return sim::stage_costs(plan::resolve_plan(s));
  };
  const auto te_alone = megatron_alone(tp);
  const auto te_exposed = megatron(tp), te_hidden = megatron(overlapped);
  // Without tp_comm_overlap, Megatron's column-parallel linears (Q, K and V; up; the head) still run
  // their backward reduce-scatters and the re-gathers of their inputs beside their own GEMMs
  // (async_op=True): of a block's two gathers and two reduce-scatters only the row-parallel
  // linears' two gathers stay whole; the reduce-scatters and as many re-gathers (the same bytes:
  // what comm_back is made of) cost their slowdown, x 0.19. The head's one reduce-scatter turns into
  // the two hidden ones. So about 0.5 + 0.19 of comm_back, a little less; the embedding's backward
  // all-gather stays whole under both, one of comm_back's 18 collectives of the same bytes (4 blocks'
  // 4, the head's and the embedding's), so 0.31 of its 1/18 more.
  const double te_comm = (te_exposed[0].backward - te_alone[0].backward).to_us();
  CHECK(te_comm > 0.5 * comm_back + 0.19 * comm_back * 0.8);
  CHECK(te_comm < 0.5 * comm_back + 0.19 * comm_back + 0.31 * comm_back / 18);
  CHECK((te_exposed[0].forward - te_alone[0].forward).to_us() == Approx(comm).epsilon(0.01));  // forward as before
  CHECK((te_hidden[0].backward - te_alone[0].backward).to_us() < 0.3 * comm_back);
  // Without sequence parallelism a block's backward has only its column-parallel linears' all-reduces
  // of their input gradients (and the head's one), which Megatron runs beside the weight gradients'
  // GEMMs (async_op=True): covered here, they cost their slowdown, x 0.19 of what they take between
  // the kernels (torch's DTensor: framework pytorch). Forward's all-reduces stay whole.
  const std::vector<std::string> plain_tp = {"parallel.tensor=4"};
  plan::Scenario plain_free = test::scenario_from(kLlama, plain_tp);
  plain_free.hardware.nccl.reset();
  plain_free.hardware.node_link = {"free", std::numeric_limits<double>::infinity(), 0.0};
  const auto plain_alone = sim::stage_costs(plan::resolve_plan(plain_free));
  const double plain_back = (with(plain_tp)[0].backward - plain_alone[0].backward).to_us();
  REQUIRE(plain_back > 0);
  const auto plain_te_alone = megatron_alone(plain_tp);
  CHECK((megatron(plain_tp)[0].backward - plain_te_alone[0].backward).to_us() == Approx(0.19 * plain_back).epsilon(0.02));
  CHECK((megatron(plain_tp)[0].forward - plain_te_alone[0].forward).to_us() ==
        Approx((with(plain_tp)[0].forward - plain_alone[0].forward).to_us()).epsilon(0.01));
  // Megatron-LM overlaps only sequence parallelism's collectives.
  CHECK_THAT(test::parse_error(kLlama, {"parallel.tensor=4", "parallel.tp_comm_overlap=true"}), Catch::Contains("needs sequence_parallel: true"));
}
