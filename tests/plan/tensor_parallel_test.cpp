// Tensor parallelism, recompute choices and the memory rule against hand-worked figures from
// Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models",
// arXiv 2205.05198, Table 2) and Megatron-LM's bytes per parameter (docs/distrib_optimizer.md).
#include <cmath>
#include <set>

#include <catch2/catch.hpp>

#include "plan/cost.hpp"
#include "plan/memory.hpp"
#include "plan/plan.hpp"
#include "sim/cost_model.hpp"
#include "tests/test_util.hpp"

using namespace parallax;

namespace {

// The paper's GPT block: pre-norm, a GELU MLP, dropout 0.1 (its masks are in the count).
plan::BlockForm gpt_block() {
  plan::BlockForm f;
  f.decoder = true;
  f.mlp = plan::Mlp::gelu;
  f.dropout = 0.1;
  return f;
}

// The 22B model of the paper's Table 3: a = 64, h = 6144, s = 2048, TP 8, fp16.
const plan::Layer kLayer = plan::make_encoder("layers.0", 6144, 64, 4 * 6144, 2048, false, gpt_block());

plan::ParallelSpec spec(int tensor, bool sp, plan::Recompute r) {
  plan::ParallelSpec p;
  p.precision = plan::Precision::fp16;
  p.tensor = tensor;
  p.sequence_parallel = sp;
  p.activation_checkpointing = r;
  return p;
}

}  // namespace

TEST_CASE("plan::memory: activations per layer are Korthikanti et al.'s Table 2", "[plan][tensor]") {
  const double s = 2048, h = 6144, a = 64, t = 8, b = 1;
  const double sbh = s * b * h, scores = 5 * a * s / h;
  using R = plan::Recompute;
  // No parallelism: sbh(34 + 5as/h), eq. 1.
  CHECK(plan::full_activation_bytes(kLayer, spec(1, false, R::none)) == Approx(sbh * (34 + scores)));
  // Tensor parallel: sbh(10 + 24/t + 5as/(ht)), eq. 2.
  CHECK(plan::full_activation_bytes(kLayer, spec(8, false, R::none)) == Approx(sbh * (10 + 24 / t + scores / t)));
  // Tensor + sequence parallel: sbh/t (34 + 5as/h), eq. 4.
  CHECK(plan::full_activation_bytes(kLayer, spec(8, true, R::none)) == Approx(sbh / t * (34 + scores)));
  // Selective recompute: sbh(10 + 24/t), and with sequence parallelism 34 sbh / t.
  CHECK(plan::kept_activation_bytes(kLayer, spec(8, false, R::selective)) == Approx(sbh * (10 + 24 / t)));
  CHECK(plan::kept_activation_bytes(kLayer, spec(8, true, R::selective)) == Approx(34 * sbh / t));
  // Full recompute keeps the layer's input: 2 sbh ("full activation recomputation").
  CHECK(plan::kept_activation_bytes(kLayer, spec(8, false, R::layer)) == Approx(2 * sbh));
}

TEST_CASE("plan::cost: a tensor-parallel encoder all-reduces twice each way, or gathers and scatters", "[plan][tensor]") {
  using R = plan::Recompute;
  // Micro-batch 4: one collective moves the block's output, 4 x 2048 x 6144 fp16 values.
  const plan::TensorTraffic ar = plan::tensor_traffic(kLayer, spec(8, false, R::none), 4);
  CHECK(ar.bytes == 4.0 * 2048 * 6144 * 2);
  CHECK(ar.forward_all_reduce == 2);
  CHECK(ar.backward_all_reduce == 2);
  CHECK(ar.forward_all_gather + ar.forward_reduce_scatter + ar.backward_all_gather + ar.backward_reduce_scatter == 0);
  const plan::TensorTraffic sp = plan::tensor_traffic(kLayer, spec(8, true, R::none), 4);
  CHECK(sp.forward_all_reduce + sp.backward_all_reduce == 0);
  CHECK(sp.forward_all_gather == 2);
  CHECK(sp.forward_reduce_scatter == 2);
  CHECK(sp.backward_all_gather == 2);
  CHECK(sp.backward_reduce_scatter == 2);
  CHECK(plan::tensor_traffic(kLayer, spec(1, false, R::none), 4).bytes == 0);  // nothing without TP
}

TEST_CASE("plan::layers: tensor parallelism splits the linears and the vocabulary, not the norms", "[plan][tensor]") {
  const int64_t h = 6144, f = 4 * h;
  // Column-parallel QKV (weight and bias) and linear1, row-parallel out_proj and linear2 (weights
  // only): (3h^2 + 3h + h^2 + h f + f + f h) / 8; whole: out_proj and linear2 biases, two norms.
  const int64_t split = 3 * h * h + 3 * h + h * h + h * f + f + f * h;
  const int64_t whole = h + h + 4 * h;
  CHECK(kLayer.param_count() == split + whole);
  CHECK(kLayer.param_count(8) == split / 8 + whole);
  const plan::Layer embed = plan::make_embedding("embed", 51200, h, 2048);
  CHECK(embed.param_count(8) == 51200 * h / 8 + 2048 * h);  // vocab-parallel tokens, whole positions
}

TEST_CASE("plan::memory: Megatron's mixed precision keeps 18 bytes a parameter with Adam, 6 + 12/d sharded",
          "[plan][tensor]") {
  const std::string yaml =
      "model: {preset: transformer, layers: 2, hidden: 64, heads: 4, seq_len: 16, vocab: 128}\n"
      "optimizer: {kind: adam}\nhardware: a100-nvlink-ib\n"
      "parallel: {data: 4, tensor: 2, precision: bf16, master_weights: true}\n";
  const auto p = test::plan_from(yaml);
  const auto& m = p.ranks[0].memory;
  const int64_t params = p.stages[0].param_count;
  CHECK(m.params + m.gradients + m.optimizer + m.buckets == 18 * params);
  const auto sharded = test::plan_from(yaml, {"parallel.shard=optimizer"});
  const auto& d = sharded.ranks[0].memory;
  CHECK(d.params + d.gradients == 6 * params);
  CHECK(d.optimizer == (12 * params + 3) / 4);
  // torch.autocast instead: fp32 parameters and gradients, Adam's two states, DDP's bucket copy.
  const auto autocast = test::plan_from(yaml, {"parallel.master_weights=false"});
  const auto& a = autocast.ranks[0].memory;
  CHECK(a.params + a.gradients + a.optimizer + a.buckets == 20 * params);
}

TEST_CASE("plan::Plan: ranks are placed as Megatron-LM places them (tp-dp-pp), or tp-pp-dp when asked", "[plan][tensor]") {
  // Megatron-LM's initialize_model_parallel docstring (megatron/core/parallel_state.py): 16 GPUs,
  // tensor 2, pipeline 4 (so data 2) give the data-parallel groups [g0, g2], [g1, g3], [g4, g6],
  // ... and the pipeline groups [g0, g4, g8, g12], [g1, g5, g9, g13], [g2, g6, g10, g14],
  // [g3, g7, g11, g15].
  const std::string yaml =
      "model: {preset: transformer, layers: 8, hidden: 64, heads: 4, seq_len: 16, vocab: 128}\n"
      "parallel: {data: 2, pipeline: 4, tensor: 2}\nhardware: a100-nvlink-ib\n";
  const auto p = test::plan_from(yaml);
  REQUIRE(p.world_size == 16);
  // Each rank's group: the ranks that share its place on the other two axes.
  auto members = [&](const plan::Plan& plan, auto same_group) {
    std::set<std::vector<int>> out;
    for (const auto& a : plan.ranks) {
      std::vector<int> group;
      for (const auto& b : plan.ranks)
        if (same_group(a, b)) group.push_back(b.rank);
      out.insert(group);
    }
    return out;
  };
  const auto data_groups = members(p, [](const plan::RankPlan& a, const plan::RankPlan& b) {
    return a.pipeline_rank == b.pipeline_rank && a.tensor_rank == b.tensor_rank;
  });
  const auto pipeline_groups = members(p, [](const plan::RankPlan& a, const plan::RankPlan& b) {
    return a.replica == b.replica && a.tensor_rank == b.tensor_rank;
  });
  CHECK(data_groups == std::set<std::vector<int>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}, {8, 10}, {9, 11}, {12, 14}, {13, 15}});
  CHECK(pipeline_groups == std::set<std::vector<int>>{{0, 4, 8, 12}, {1, 5, 9, 13}, {2, 6, 10, 14}, {3, 7, 11, 15}});
  for (const auto& q : p.ranks) {
    CHECK(plan::rank_of(p.scenario.parallel, plan::placement_of(p.scenario.parallel, q.rank)) == q.rank);
    CHECK(q.node == p.ranks[q.rank - q.tensor_rank].node);  // 8 GPUs a node: a tensor group never straddles two
  }
  // tp-pp-dp: a replica's stages next to each other, its pipeline group [0, 2, 4, 6].
  const auto replica_major = test::plan_from(yaml, {"parallel.rank_order=tp-pp-dp"});
  const auto& r = replica_major.ranks[11];  // (1 x 4 + 1) x 2 + 1
  CHECK(r.replica == 1);
  CHECK(r.pipeline_rank == 1);
  CHECK(r.tensor_rank == 1);
  CHECK(plan::group_of(replica_major.scenario.parallel, 1, 1) == 5);
  CHECK(plan::group_of(p.scenario.parallel, 1, 1) == 3);  // (1 x 2 + 1)
}

TEST_CASE("plan::scenario: tensor parallelism that does not divide the heads, or leaves the node, is refused at its key",
          "[plan][tensor]") {
  const std::string yaml =
      "model: {preset: transformer, layers: 2, hidden: 96, heads: 6, seq_len: 16, vocab: 128}\nhardware: a100-nvlink-ib\n";
  auto key_of = [&](const std::vector<std::string>& sets) {
    try {
      test::plan_from(yaml, sets);
    } catch (const plan::InputError& e) {
      return e.key() + ": " + e.message();
    }
    return std::string("accepted");
  };
  CHECK_THAT(key_of({"parallel.tensor=4"}), Catch::StartsWith("parallel.tensor: ") && Catch::Contains("6 attention heads"));
  CHECK_THAT(key_of({"parallel.tensor=16", "model.heads=16", "model.hidden=96"}),
             Catch::StartsWith("parallel.tensor: ") && Catch::Contains("node"));
  CHECK(key_of({"parallel.tensor=16", "model.heads=16", "parallel.tensor_across_nodes=true"}) == "accepted");
  CHECK_THAT(key_of({"parallel.sequence_parallel=true"}), Catch::StartsWith("parallel.sequence_parallel: "));
  CHECK(key_of({"parallel.tensor=2", "parallel.sequence_parallel=true"}) == "accepted");
}

TEST_CASE("plan::memory: layer recompute keeps less than none and holds one layer during backward", "[plan][tensor]") {
  const std::string yaml =
      "model: {preset: transformer, layers: 8, hidden: 64, heads: 4, seq_len: 32, vocab: 128}\n"
      "parallel: {chunks: 1}\ndata: {batch_size: 2}\nhardware: a100-nvlink-ib\n";
  const auto none = test::plan_from(yaml), layer = test::plan_from(yaml, {"parallel.activation_checkpointing=layer"});
  const auto stage = test::plan_from(yaml, {"parallel.activation_checkpointing=stage"});
  auto held = [](const plan::Plan& p) { return p.ranks[0].memory.activations + p.ranks[0].memory.recompute; };
  CHECK(layer.ranks[0].memory.activations < none.ranks[0].memory.activations);
  CHECK(stage.ranks[0].memory.activations < layer.ranks[0].memory.activations);  // stage keeps 1 input, layer 8
  CHECK(held(layer) < held(stage));  // but stage recomputes 8 blocks at once, layer one
  CHECK(held(layer) < held(none));
  CHECK(layer.ranks[0].memory.recompute == plan::recompute_bytes(layer, layer.stages[0]));
  // Without recompute, backward's transient is the loss's: torch's cross entropy, fp32 (2 x 32 x 128 logits x 8 bytes).
  CHECK(none.ranks[0].memory.recompute == 2 * 32 * 128 * 8);
}

TEST_CASE("plan: layer recompute re-runs the blocks and keeps the embedding's and the head's activations", "[plan][tensor]") {
  // As torch.utils.checkpoint around each block (torchtitan, Megatron-LM's full recompute).
  const std::string yaml =
      "model: {preset: transformer, layers: 8, hidden: 64, heads: 4, seq_len: 32, vocab: 128}\n"
      "parallel: {chunks: 1}\ndata: {batch_size: 2}\nhardware: a100-nvlink-ib\n";
  const auto none = test::plan_from(yaml), layer = test::plan_from(yaml, {"parallel.activation_checkpointing=layer"});
  // fp32, micro-batch 2: a block keeps its input, s x h x 4 bytes a sample (8 x 2 x 8,192); the head
  // its norm's and projection's inputs and the fp32 softmax, s(2h + vocab) x 4 (2 x 32,768); the
  // embedding its token ids (2 x 256).
  const int64_t blocks = 8 * 2 * 32 * 64 * 4, head = 2 * 32 * (2 * 64 + 128) * 4, embedding = 2 * 2 * 32 * 4;
  CHECK(layer.ranks[0].memory.activations == blocks + head + embedding);
  // Backward first frees the head's (its backward runs on its kept graph), then holds one block's
  // whole activations at a time; the loss's gradient (2 x 32 x 128 logits x 8 bytes) is larger here.
  const int64_t block_full = (none.ranks[0].memory.activations - head - embedding) / 8;
  CHECK(layer.ranks[0].memory.recompute == std::max<int64_t>(block_full - head, 2 * 32 * 128 * 8));
  // Backward adds the blocks' forwards, not the head's or the embedding's.
  const auto& s = none.scenario;
  const double head_fwd = plan::estimate_layer_cost(s.layers.back(), s.hardware, s.parallel, 2).forward.to_us();
  const double embed_fwd = plan::estimate_layer_cost(s.layers.front(), s.hardware, s.parallel, 2, false).forward.to_us();
  const auto n = sim::stage_costs(none)[0], l = sim::stage_costs(layer)[0];
  CHECK((l.backward - n.backward).to_us() == Approx(n.forward.to_us() - head_fwd - embed_fwd).epsilon(1e-9));
}

TEST_CASE("plan::cost: with device.compute a GEMM runs at the efficiency of its size, split over tensor ranks",
          "[plan][tensor]") {
  plan::HardwareProfile hw;
  hw.device.peak_tflops = {{plan::Precision::fp32, 100.0}, {plan::Precision::bf16, 100.0}};
  hw.device.memory_bandwidth_gb_per_s = 1000;
  plan::ComputeModel c;
  c.gemm_efficiency = {{1, 0.5}, {1000, 0.8}};  // (GFLOP, fraction of peak)
  hw.device.compute = c;
  const plan::Layer fc = plan::make_linear("fc", 4096, 4096, /*relu=*/false, /*bias=*/false);
  plan::ParallelSpec p;
  p.precision = plan::Precision::bf16;
  const double flops = 2.0 * 4096 * 4096 * 4096;  // micro-batch 4096
  // log-linear between the table's points: 0.5 + 0.3 x log(137.4 GFLOP) / log(1000 GFLOP)
  const double eff = 0.5 + 0.3 * std::log2(flops / 1e9) / std::log2(1000.0);
  const double us = flops / (100e12 * eff) * 1e6;
  const plan::LayerCost cost = plan::estimate_layer_cost(fc, hw, p, 4096);
  CHECK(cost.forward.to_us() == Approx(us).epsilon(1e-6));
  CHECK(cost.backward.to_us() == Approx(2 * us).epsilon(1e-6));  // input and weight gradients
  CHECK_FALSE(cost.forward_memory_bound);
  // Held flat beyond the ends: 2 x 1e5^3 FLOPs = 2e6 GFLOP, 2 x 50^3 = 2.5e-4 GFLOP.
  CHECK(hw.device.compute->gemm_fraction(plan::Precision::bf16, 1e5, 1e5, 1e5, 100) == 0.8);
  CHECK(hw.device.compute->gemm_fraction(plan::Precision::bf16, 50, 50, 50, 100) == 0.5);
}

TEST_CASE("plan::GemmGrid: trilinear on log2 sizes, the measured figure at a measured shape, held at the ends",
          "[plan][tensor]") {
  plan::GemmGrid g;
  g.m = {1024, 4096}, g.n = {1024, 4096}, g.k = {1024, 4096};
  // m outermost, then n, then k: the corner (4096, 4096, 4096) is last.
  g.tflops = {100, 200, 300, 400, 500, 600, 700, 800};
  CHECK(g.at(1024, 1024, 1024) == Approx(100));
  CHECK(g.at(4096, 1024, 4096) == Approx(600));
  CHECK(g.at(1e6, 1e6, 1e6) == Approx(800));  // held at the far corner
  CHECK(g.at(10, 10, 10) == Approx(100));
  // Halfway in log2 along k only (2048 = 1024 x 2^1 of 2^2): between 100 and 200.
  CHECK(g.at(1024, 1024, 2048) == Approx(150));
  // Halfway on every axis: the mean of the eight corners.
  CHECK(g.at(2048, 2048, 2048) == Approx(450));
  // Beyond the m end, halfway on n: between (4096, 1024, 1024) = 500 and (4096, 4096, 1024) = 700.
  CHECK(g.at(65536, 2048, 1024) == Approx(600));

  // A precision with a grid takes it; its forward and its two backward GEMMs by their own shapes.
  plan::HardwareProfile hw;
  hw.device.peak_tflops = {{plan::Precision::fp32, 1000.0}, {plan::Precision::bf16, 1000.0}};
  hw.device.memory_bandwidth_gb_per_s = 1e9;  // no memory term
  plan::ComputeModel c;
  c.gemm[plan::Precision::bf16] = g;
  hw.device.compute = c;
  CHECK(c.gemm_fraction(plan::Precision::bf16, 4096, 4096, 4096, 1000) == Approx(0.8));
  // Y[m=4096, n=1024] = X[4096, k=4096] W: forward (4096, 1024, 4096) = 600 TFLOP/s; dX (4096, 4096,
  // 1024) = 700; dW (4096, 1024, 4096) = 600.
  const plan::Layer fc = plan::make_linear("fc", /*in=*/4096, /*out=*/1024, /*relu=*/false, /*bias=*/false);
  plan::ParallelSpec p;
  p.precision = plan::Precision::bf16;
  const double flops = 2.0 * 4096 * 1024 * 4096;  // Time counts whole nanoseconds: epsilon 1e-4
  const plan::LayerCost cost = plan::estimate_layer_cost(fc, hw, p, 4096);
  CHECK(cost.forward.to_us() == Approx(flops / 600e12 * 1e6).epsilon(1e-4));
  CHECK(cost.backward.to_us() == Approx(flops / 700e12 * 1e6 + flops / 600e12 * 1e6).epsilon(1e-4));
  CHECK(cost.backward_weight.to_us() == Approx(flops / 600e12 * 1e6).epsilon(1e-4));
}
