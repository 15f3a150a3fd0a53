// Mixture-of-experts models and expert parallelism (model.experts, parallel.expert) against what
// can be worked by hand: a MoE block's parameters and FLOPs, the bytes of its all-to-alls, the
// experts' share of a rank's memory, a balanced router's load imbalance, and the all-to-alls'
// time on a link of known speed; Megatron-core's rules (experts divide over the expert group,
// the group inside data x context) as exit-2 errors; the tuner searching the expert degree.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <set>

#include "plan/cost.hpp"
#include "plan/executable.hpp"
#include "plan/hf_config.hpp"
#include "plan/memory.hpp"
#include "plan/plan.hpp"
#include "sim/cost_model.hpp"
#include "sim/simulator.hpp"
#include "tests/test_util.hpp"
#include "tune/search.hpp"

using namespace parallax;

namespace {

// A small Mixtral-shaped model: 4 blocks of hidden 64, 8 experts of width 96, top-2.
const std::string kSmall =
    "model: {preset: transformer, layers: 4, hidden: 64, heads: 4, ffn: 128, mlp: swiglu, norm: rmsnorm, positions: rope, "
    "bias: false, seq_len: 32, vocab: 256, experts: 8, experts_per_token: 2, expert_ffn: 96}\n"
    "data: {batch_size: 4}\n"
    "parallel: {data: 4, chunks: 2, precision: bf16}\n"
    "optimizer: {kind: adamw, lr: 0.001}\n"
    "hardware: h100-nvlink-ib\n";

}  // namespace

TEST_CASE("moe: a block's parameters and FLOPs, counted by hand", "[plan][moe]") {
  const plan::Scenario s = test::scenario_from(kSmall, {"parallel.expert=4"});
  const plan::Layer& block = s.layers[1];
  REQUIRE(block.shape.moe.on());
  const int64_t h = 64, e = 8, f = 96;
  // Q, K, V, O (no grouped-query heads here), the router's gate, three grouped expert matrices,
  // and the two RMSNorm scales.
  const int64_t attention = 4 * h * h, router = e * h, experts = 3 * e * f * h, norms = 2 * h;
  CHECK(block.param_count() == attention + router + experts + norms);
  CHECK(block.expert_param_count(1, 1) == experts);
  // Each of 4 expert ranks holds 2 of the 8 experts; the rest of the block is whole on every rank.
  CHECK(block.param_count(1, 4) == attention + router + experts / 4 + norms);
  CHECK(block.expert_param_count(1, 4) == experts / 4);
  // A token passes its top-2 experts (3 matrices of 2 f h FLOPs each) and the router's gate.
  const double sq = 32;
  CHECK(block.flops_per_sample == Approx(sq * (4.0 * h * h + 4.0 * h * h + 2 * 3 * h * (2 * f) + 2.0 * h * e) + 4 * sq * sq * h));
  // A shared expert adds one more expert's width to every token.
  const plan::Layer shared = test::scenario_from(kSmall, {"model.shared_experts=1"}).layers[1];
  CHECK(shared.param_count() == block.param_count() + 3 * f * h);
  CHECK(shared.flops_per_sample == Approx(block.flops_per_sample + sq * 2 * 3 * h * f));
}

TEST_CASE("moe: moe_layers picks the MoE blocks as DeepSeek and Llama 4 do", "[plan][moe]") {
  auto moe_blocks = [](const std::vector<std::string>& sets) {
    std::vector<int> out;
    const plan::Scenario s = test::scenario_from(kSmall, sets);
    for (size_t l = 0; l < s.layers.size(); ++l)
      if (s.layers[l].shape.moe.on()) out.push_back(static_cast<int>(l) - 1);  // block index (layer 0 is the embedding)
    return out;
  };
  CHECK(moe_blocks({}) == std::vector<int>{0, 1, 2, 3});
  CHECK(moe_blocks({"model.moe_layers={first_dense: 1}"}) == std::vector<int>{1, 2, 3});  // first_k_dense_replace 1
  CHECK(moe_blocks({"model.moe_layers={every: 2}"}) == std::vector<int>{1, 3});           // interleave_moe_layer_step 2
  const plan::Scenario s = test::scenario_from(kSmall, {"model.moe_layers={first_dense: 1}"});
  CHECK(s.layers[1].param_count() == 4 * 64 * 64 + 3 * 128 * 64 + 2 * 64);  // a dense SwiGLU block of ffn 128
}

TEST_CASE("moe: all-to-all bytes per rank, worked by hand for a top-2 case", "[plan][moe]") {
  const plan::Scenario s = test::scenario_from(kSmall, {"parallel.expert=4"});
  const plan::Layer& block = s.layers[1];
  // A micro-batch of 2 samples: 64 tokens, each sent to its 2 experts as 64 bf16 values; with
  // experts spread evenly over 4 ranks, 3 / 4 of the copies leave the rank: 64 x 2 x 64 x 2 x 3/4.
  const plan::ExpertTraffic x = plan::expert_traffic(block, s.parallel, 2);
  CHECK(x.all_to_all_bytes == Approx(64.0 * 2 * 64 * 2 * 3 / 4));
  CHECK(x.forward == 2);   // dispatch and combine
  CHECK(x.backward == 2);  // their gradients
  CHECK(x.tensor_bytes == 0);
  // Sequence parallelism over 2 tensor ranks: each dispatches its own half of the tokens, and the
  // routed tokens (64 x 2 copies) are gathered over the pair before the experts.
  const plan::Scenario tp = test::scenario_from(kSmall, {"parallel.expert=4", "parallel.tensor=2", "parallel.sequence_parallel=true"});
  const plan::ExpertTraffic y = plan::expert_traffic(tp.layers[1], tp.parallel, 2);
  CHECK(y.all_to_all_bytes == Approx(32.0 * 2 * 64 * 2 * 3 / 4));
  CHECK(y.tensor_bytes == Approx(64.0 * 2 * 64 * 2));
  // One expert rank: no all-to-all; dense layers: none either.
  CHECK(plan::expert_traffic(block, test::scenario_from(kSmall).parallel, 2).forward == 0);
  CHECK(plan::expert_traffic(s.layers[0], s.parallel, 2).all_to_all_bytes == 0);
}

TEST_CASE("moe: whole experts (expert_tensor 1) under tensor parallelism", "[plan][moe]") {
  // 4 replicas x 2 tensor ranks: with experts whole, the expert group of 8 spans them all and each
  // rank dispatches its own half of the 64 tokens; nothing is gathered over the tensor group.
  const plan::Scenario s = test::scenario_from(kSmall, {"parallel.tensor=2", "parallel.sequence_parallel=true", "parallel.expert=8",
                                                        "parallel.expert_tensor=1"});
  const plan::ExpertTraffic x = plan::expert_traffic(s.layers[1], s.parallel, 2);
  CHECK(x.all_to_all_bytes == Approx(32.0 * 2 * 64 * 2 * 7 / 8));
  CHECK(x.tensor_bytes == 0);
  CHECK(plan::expert_rank_tokens(s.layers[1], s.parallel, 2) == Approx(32));
  // One expert a rank, whole: 3 x 96 x 64; the rest of the block split over the pair as before.
  CHECK(s.layers[1].expert_param_count(2, 8, 1) == 3 * 96 * 64);
  CHECK(s.parallel.expert_replicas() == 1);
  // Split over the pair instead, the expert group must lie inside the 4 replicas.
  CHECK_THAT(test::parse_error(kSmall, {"parallel.tensor=2", "parallel.sequence_parallel=true", "parallel.expert=8"}),
             Catch::Contains("does not divide data x context = 4") && Catch::Contains("with expert_tensor 1"));
}

TEST_CASE("moe: heads wider than hidden / heads (Qwen3's head_dim)", "[plan][moe][hf]") {
  const plan::HfModel qwen = plan::read_hf_config(PARALLAX_SOURCE_DIR "/scenarios/models/qwen3-30b-a3b.json", 4096);
  CHECK(qwen.shape.form.head_dim == 128);
  CHECK(qwen.shape.moe.experts == 128);
  CHECK(qwen.shape.moe.top_k == 8);
  CHECK(qwen.shape.moe.ffn == 768);
  const std::vector<plan::Layer> layers = plan::make_transformer(qwen.shape);
  const plan::Layer& block = layers[1];
  // Q: hidden 2,048 to 32 heads of 128; K and V: to 4 heads of 128; O: 4,096 back to 2,048.
  CHECK(block.params[0].shape == std::vector<int64_t>{4096, 2048});
  CHECK(block.params[1].shape == std::vector<int64_t>{512, 2048});
  CHECK(block.params[3].shape == std::vector<int64_t>{2048, 4096});
  int64_t params = 0;
  for (const auto& l : layers) params += l.param_count();
  CHECK(params == 30532110336 + 48 * 256);  // Qwen3-30B-A3B's 30.5B: 48 blocks' q_norm and k_norm (128 each) included
  CHECK(qwen.shape.form.qk_norm);
  CHECK(block.params[4].name == "layers.0.self_attn.q_norm.weight");
  CHECK(block.params[5].name == "layers.0.self_attn.k_norm.weight");
  CHECK(block.params[5].shape == std::vector<int64_t>{128});
  // Attention's FLOPs follow the query heads' width: 4 s^2 x 4,096 for the scores and values.
  const double s = 4096, h = 2048, q = 4096, kv = 512;
  CHECK(block.flops_per_sample == Approx(s * (4 * h * q + 4 * h * kv + 2 * 3 * h * (8 * 768) + 2 * h * 128) + 4 * s * s * q));
  // The executor builds heads of any width.
  const std::string wide = "model: {preset: transformer, layers: 2, hidden: 64, heads: 4, head_dim: 32, seq_len: 32, vocab: 256}\nhardware: ideal\n";
  CHECK(test::scenario_from(wide).layers[1].params[0].shape == std::vector<int64_t>{128, 64});
  CHECK_NOTHROW(plan::check_executable(test::scenario_from(wide)));
}

TEST_CASE("moe: a balanced router's imbalance, a stated one, and a capacity factor's cap", "[plan][moe]") {
  const plan::Scenario s = test::scenario_from(kSmall, {"parallel.expert=4"});
  // 64 tokens x top-2 = 128 copies per rank on average; the largest of 4 near-binomial counts is
  // sqrt(2 ln 4 x 128 x 3/4) above it.
  const double n = 128;
  CHECK(plan::expert_load_imbalance(s.layers[1], s.parallel, 2) == Approx(1 + std::sqrt(2 * std::log(4.0) * 0.75 / n)));
  CHECK(plan::expert_load_imbalance(s.layers[1], test::scenario_from(kSmall).parallel, 2) == 1);  // one rank holds them all
  const plan::Scenario stated = test::scenario_from(kSmall, {"parallel.expert=4", "model.expert_imbalance=1.5"});
  CHECK(plan::expert_load_imbalance(stated.layers[1], stated.parallel, 2) == 1.5);
  const plan::Scenario capped = test::scenario_from(kSmall, {"parallel.expert=4", "model.expert_imbalance=1.5", "model.capacity_factor=1.25"});
  CHECK(plan::expert_load_imbalance(capped.layers[1], capped.parallel, 2) == 1.25);
}

TEST_CASE("moe: each rank keeps its experts' share of parameters, gradients and optimizer state", "[plan][moe]") {
  const std::vector<std::string> zero1 = {"parallel.shard=optimizer"};
  const plan::Plan whole = test::plan_from(kSmall, zero1);
  auto with = [&](std::vector<std::string> sets) {
    sets.insert(sets.end(), zero1.begin(), zero1.end());
    return test::plan_from(kSmall, sets);
  };
  const plan::Plan split = with({"parallel.expert=4"});
  int64_t experts = 0;
  for (const auto& l : whole.scenario.layers) experts += l.expert_param_count(1, 1);
  REQUIRE(experts == 4 * 3 * 8 * 96 * 64);
  const plan::MemoryEstimate& a = whole.ranks[0].memory;
  const plan::MemoryEstimate& b = split.ranks[0].memory;
  // fp32 parameters and gradients (torch.autocast): 3 / 4 of the experts leave each rank.
  CHECK(a.params - b.params == experts * 3 / 4 * 4);
  CHECK(a.gradients - b.gradients == experts * 3 / 4 * 4);
  // Adam's two fp32 states: the dense part over the 4 replicas; the experts over the replicas
  // holding the same ones, 4 / 4 = 1 here, so each rank keeps its quarter of the experts whole.
  const int64_t params = whole.stages[0].param_count, dense = params - experts;
  CHECK(a.optimizer == (params * 8 + 3) / 4);
  CHECK(b.optimizer == (dense * 8 + 3) / 4 + experts / 4 * 8);
  // The expert gradients go to no DDP bucket when no other replica holds the same experts.
  int64_t bucketed = 0;
  for (const auto& bucket : split.stages[0].buckets) bucketed += bucket.bytes;
  CHECK(bucketed == dense * 4);
}

TEST_CASE("moe: the all-to-alls take their bytes over the link, and DualPipeV hides them", "[sim][moe]") {
  // Free links against a node link of 1 GB/s without latency: forward grows by the two
  // all-to-alls of each of the 4 MoE blocks, each the busiest rank's bytes over the link (its 3
  // peers share the node, each over its own path in NVLink's switch).
  const std::vector<std::string> ep = {"parallel.expert=4"};
  plan::Scenario free_links = test::scenario_from(kSmall, ep), slow = free_links;
  free_links.hardware.nccl.reset();
  slow.hardware.nccl.reset();
  free_links.hardware.node_link = {"free", std::numeric_limits<double>::infinity(), 0.0};
  slow.hardware.node_link = {"slow", 1.0, 0.0};
  const plan::Plan fast_plan = plan::resolve_plan(free_links), slow_plan = plan::resolve_plan(slow);
  const auto fast = sim::stage_costs(fast_plan), slowed = sim::stage_costs(slow_plan);
  const int mb = fast_plan.microbatch_size;
  const plan::ExpertTraffic x = plan::expert_traffic(slow.layers[1], slow.parallel, mb);
  const double one_us = x.all_to_all_bytes * x.imbalance / 1e3;  // 1 GB/s: 1e3 bytes a microsecond
  CHECK((slowed[0].forward - fast[0].forward).to_us() == Approx(4 * 2 * one_us).epsilon(1e-3));
  CHECK((slowed[0].backward - fast[0].backward).to_us() == Approx(4 * 2 * one_us).epsilon(1e-3));
  CHECK(slowed[0].all_to_all_forward.to_us() == Approx(4 * 2 * one_us).epsilon(1e-3));

}

TEST_CASE("moe: DeepEP sends a token over the NICs once per node and over NVLink once per GPU, worked by hand", "[sim][moe]") {
  // 8 experts over 2 nodes, top-2: a token misses the other node's 4 experts with chance
  // (4/8)(3/7) = 3/14, so it crosses 11/14 of a time, where NCCL sends its 2 x 1/2 copies bound
  // there: 11/14 of NCCL's bytes.
  CHECK(sim::remote_copies_per_group(8, 2, 2) == Approx(11.0 / 14));
  CHECK(sim::remote_copies_per_group(8, 2, 1) == 1.0);
  // DeepSeek-V3's 256 experts over 8 nodes, top-8, without its node limit: the other 7 nodes
  // each missed with chance C(224, 8) / C(256, 8).
  double missed = 1;
  for (int i = 0; i < 8; ++i) missed *= (224.0 - i) / (256.0 - i);
  CHECK(sim::remote_copies_per_group(256, 8, 8) == Approx(7 * (1 - missed) / (8 * 7.0 / 8)));
  // Expert 4 over two nodes of two GPUs, one NIC each at 1 GB/s, NVLink free: the all-to-all is
  // the NIC's bytes, 11/14 of them under DeepEP.
  plan::Scenario nccl = test::scenario_from(kSmall, {"parallel.expert=4"});
  nccl.hardware.nccl.reset();
  nccl.hardware.devices_per_node = nccl.hardware.nics_per_node = 2;
  nccl.hardware.node_link = {"free", std::numeric_limits<double>::infinity(), 0.0};
  nccl.hardware.network = plan::Link{"nic", 1.0, 0.0};
  plan::Scenario deepep = nccl;
  deepep.parallel.moe_token_dispatcher = plan::TokenDispatcher::deepep;
  const plan::Plan a = plan::resolve_plan(nccl), b = plan::resolve_plan(deepep);
  const plan::ExpertTraffic x = plan::expert_traffic(nccl.layers[1], nccl.parallel, a.microbatch_size);
  const double nic_us = x.all_to_all_bytes * x.imbalance / 3 * 2 / 1e3;  // 2 of its 3 peers on the other node
  CHECK(sim::stage_costs(a)[0].all_to_all_forward.to_us() == Approx(4 * 2 * nic_us).epsilon(1e-3));
  CHECK(sim::stage_costs(b)[0].all_to_all_forward.to_us() == Approx(4 * 2 * nic_us * 11 / 14).epsilon(1e-3));
  // One node, NVLink at 1 GB/s: nothing crosses a NIC, and DeepEP sends a token once to each of the
  // other 3 GPUs holding any of its 2 experts (2 of the 8 each): each missed with chance (6/8)(5/7) =
  // 15/28, so 3 x 13/28 = 39/28 sends a token where NCCL sends its 2 x 3/4 copies bound for them:
  // 13/14 of NCCL's NVLink bytes.
  CHECK(sim::remote_copies_per_group(8, 2, 4) == Approx(13.0 / 14));
  plan::Scenario one_node = deepep;
  one_node.hardware.devices_per_node = 8;
  one_node.hardware.node_link = {"slow", 1.0, 0.0};
  plan::Scenario one_node_nccl = nccl;
  one_node_nccl.hardware.devices_per_node = 8;
  one_node_nccl.hardware.node_link = one_node.hardware.node_link;
  const double nvlink_us = x.all_to_all_bytes * x.imbalance / 1e3;  // all 3 peers over NVLink
  CHECK(sim::stage_costs(plan::resolve_plan(one_node_nccl))[0].all_to_all_forward.to_us() == Approx(4 * 2 * nvlink_us).epsilon(1e-3));
  CHECK(sim::stage_costs(plan::resolve_plan(one_node))[0].all_to_all_forward.to_us() == Approx(4 * 2 * nvlink_us * 13 / 14).epsilon(1e-3));
  // `plan` says which dispatcher moves the tokens.
  const auto r = test::run_parallax("plan scenarios/mlp-fashion-mnist-ddp2.yaml --set 'model={preset: transformer, layers: 2, hidden: 64, "
                                    "heads: 4, seq_len: 32, vocab: 256, experts: 8}' --set parallel.expert=2 "
                                    "--set parallel.moe_token_dispatcher=deepep",
                                    "cd " PARALLAX_SOURCE_DIR " &&");
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("sent per rank (by DeepEP"));
}

TEST_CASE("moe: DualPipeV hides one micro-batch's all-to-alls behind another's compute", "[sim][moe]") {
  // All 8 experts for every token, so that the all-to-alls outweigh the pipeline's sends and the
  // gradients' all-reduce on the same link; the link's speed is set so that a stage's all-to-alls
  // take about half its forward's compute. 1F1B can hide none of them; DualPipeV's overlapped
  // F and B hide most, at the compute slowdown beside communication (0.19 on h100-nvlink-ib).
  plan::Scenario s = test::scenario_from(kSmall, {"parallel.expert=4", "model.experts_per_token=8", "model.seq_len=256",
                                                  "parallel.pipeline=2", "data.batch_size=8", "parallel.chunks=8", "parallel.schedule=1f1b"});
  s.hardware.nccl.reset();
  plan::Scenario free_links = s;
  free_links.hardware.node_link = {"free", std::numeric_limits<double>::infinity(), 0.0};
  const auto alone = sim::stage_costs(plan::resolve_plan(free_links));
  const plan::Plan one_plan = plan::resolve_plan(s);
  const plan::ExpertTraffic x = plan::expert_traffic(s.layers[1], s.parallel, one_plan.microbatch_size);
  const double stage_bytes = 2 * 2 * x.all_to_all_bytes * x.imbalance;  // two MoE blocks a stage, two all-to-alls each
  const double gb_per_s = stage_bytes / (0.5 * alone[1].forward.to_us() * 1e3);
  plan::Scenario slow = s;
  slow.hardware.node_link = {"slow", gb_per_s, 0.0};
  auto step_ms = [](plan::Scenario sc, bool dualpipe) {
    if (dualpipe) {
      sc.parallel.schedule = schedule::ScheduleKind::dualpipev;
      sc.parallel.virtual_stages = 2;
    }
    plan::check_scenario(sc);
    return sim::simulate(plan::resolve_plan(sc)).step_time.to_ms();
  };
  const double one_f_one_b = step_ms(slow, false) - step_ms(free_links, false);
  const double dualpipe = step_ms(slow, true) - step_ms(free_links, true);
  INFO("the all-to-alls add " << one_f_one_b << " ms to 1f1b's step, " << dualpipe << " ms to dualpipev's");
  REQUIRE(one_f_one_b > 0);
  CHECK(dualpipe < 0.75 * one_f_one_b);
  CHECK(sim::stage_costs(plan::resolve_plan(slow))[1].all_to_all_forward > plan::Time());
}

TEST_CASE("moe: combined 1F1B hides each steady-state pair's all-to-alls, worked by hand", "[sim][moe]") {
  // One stage (pipeline 1), 8 micro-batches, experts on a 100 GB/s node link: the all-to-alls
  // (about 8 us a micro-batch) are short of each piece of compute they run beside, so in each
  // of the 7 steady-state pairs both micro-batches' exchanges hide whole, at the slowdown communication brings to the
  // compute beside it (interference.compute). The first forward's and the last backward's stay
  // exposed. The two steps then differ by 7 x (forward's + backward's all-to-alls) x
  // (2 - interference.compute); the gradients' all-reduce and the optimizer are alike in both.
  plan::Scenario s = test::scenario_from(kSmall, {"parallel.expert=4", "model.seq_len=256", "data.batch_size=8", "parallel.chunks=8",
                                                  "parallel.schedule=1f1b"});
  s.hardware.nccl.reset();
  s.hardware.node_link = {"slow", 100.0, 0.0};
  plan::Scenario overlapped = s;
  overlapped.parallel.overlap_moe_expert_parallel_comm = true;
  plan::check_scenario(overlapped);
  const plan::Plan plain_plan = plan::resolve_plan(s), overlapped_plan = plan::resolve_plan(overlapped);
  const sim::StageCost c = sim::stage_costs(plain_plan)[0];
  const double comm_ms = (c.all_to_all_forward + c.all_to_all_backward).to_ms();
  INFO("all-to-alls " << comm_ms << " ms a micro-batch; forward " << c.forward.to_ms() << " ms, backward " << c.backward.to_ms() << " ms");
  REQUIRE(c.all_to_all_forward.to_us() > 2);
  // Each phase of a pair: a dispatch or a combine (half a pass's all-to-alls) beside a piece of
  // the other pass's compute (sim/compute.cpp), each piece longer than its communication here.
  const plan::Time forward_half = c.all_to_all_forward.scaled(0.5), backward_half = c.all_to_all_backward.scaled(0.5);
  REQUIRE(c.expert_forward > plan::Time());
  REQUIRE(backward_half < c.forward - c.all_to_all_forward - c.expert_forward);  // the forward's attention
  REQUIRE(forward_half < c.expert_backward);
  REQUIRE(backward_half < c.expert_forward);
  REQUIRE(forward_half < c.backward - c.all_to_all_backward - c.expert_backward);  // the backward's attention
  const double saved = sim::simulate(plain_plan).step_time.to_ms() - sim::simulate(overlapped_plan).step_time.to_ms();
  CHECK(saved == Approx(7 * comm_ms * (2 - s.hardware.interference.compute)).epsilon(1e-3));
  // One more micro-batch's activations in flight: 1F1B on one stage holds one, combined 1F1B two.
  // A link 10x slower: each dispatch now outlasts the other pass's experts it runs beside, though
  // the pair's compute as a whole still outlasts its all-to-alls. What a phase's communication has
  // over its compute is exposed, the rest hidden as above.
  plan::Scenario slower = s, slower_overlapped = overlapped;
  slower.hardware.node_link.bandwidth_gb_per_s = slower_overlapped.hardware.node_link.bandwidth_gb_per_s = 10.0;
  const plan::Plan slower_plan = plan::resolve_plan(slower), slower_overlapped_plan = plan::resolve_plan(slower_overlapped);
  const sim::StageCost d = sim::stage_costs(slower_plan)[0];
  const double fh = d.all_to_all_forward.to_ms() / 2, bh = d.all_to_all_backward.to_ms() / 2;
  const double attention_f = (d.forward - d.all_to_all_forward - d.expert_forward).to_ms(), experts_f = d.expert_forward.to_ms();
  const double attention_b = (d.backward - d.all_to_all_backward - d.expert_backward).to_ms(), experts_b = d.expert_backward.to_ms();
  INFO("dispatch " << fh << " / " << bh << " ms; attention " << attention_f << " / " << attention_b << " ms, experts " << experts_f << " / "
                   << experts_b << " ms (forward / backward)");
  REQUIRE(2 * (fh + bh) < attention_f + experts_f + attention_b + experts_b);
  REQUIRE(fh > experts_b);
  const double exposed = std::max(0.0, bh - attention_f) + (fh - experts_b) + std::max(0.0, bh - experts_f) + std::max(0.0, fh - attention_b);
  const double slower_saved = sim::simulate(slower_plan).step_time.to_ms() - sim::simulate(slower_overlapped_plan).step_time.to_ms();
  CHECK(slower_saved == Approx(7 * (2 * (fh + bh) - exposed) * (2 - s.hardware.interference.compute)).epsilon(1e-3));
  CHECK(plain_plan.ranks[0].memory.peak_inflight == 1);
  CHECK(overlapped_plan.ranks[0].memory.peak_inflight == 2);
  CHECK(overlapped_plan.ranks[0].memory.activations == 2 * plain_plan.ranks[0].memory.activations);
}

TEST_CASE("moe: selective recompute of the norms and the experts' activation (--recompute-modules layernorm moe_act)", "[plan][moe]") {
  // A MoE block of kSmall in bf16 (2 bytes an element), one tensor rank: recomputing the norms drops
  // their two outputs (s x h each), recomputing moe_act the routed experts' activation output (s x
  // top_k x expert_ffn): 32 x 64 x 2 x 2 + 32 x 2 x 96 x 2 = 8,192 + 12,288 bytes a sample.
  const plan::Scenario core = test::scenario_from(kSmall, {"parallel.activation_checkpointing=selective"});
  const plan::Scenario more = test::scenario_from(kSmall, {"parallel.activation_checkpointing=selective",
                                                           "parallel.recompute_modules=[core_attn, layernorm, moe_act]"});
  const plan::Layer& block = core.layers[1];
  REQUIRE(block.shape.moe.on());
  CHECK(plan::full_activation_bytes(block, core.parallel) - plan::full_activation_bytes(block, more.parallel) == Approx(8192 + 12288));
  // The norms alone.
  const plan::Scenario norms = test::scenario_from(kSmall, {"parallel.activation_checkpointing=selective", "parallel.recompute_modules=[core_attn, layernorm]"});
  CHECK(plan::full_activation_bytes(block, core.parallel) - plan::full_activation_bytes(block, norms.parallel) == Approx(8192));
  // Backward re-runs them: more recompute time than attention's core alone, and no more than the forward.
  const plan::LayerCost c = plan::estimate_layer_cost(block, core.hardware, core.parallel, 1);
  const plan::LayerCost m = plan::estimate_layer_cost(block, more.hardware, more.parallel, 1);
  CHECK(m.recompute > c.recompute);
  CHECK(m.recompute < m.forward);
  // The rules: modules need selective recompute; moe_act needs MoE blocks.
  CHECK_THAT(test::parse_error(kSmall, {"parallel.recompute_modules=[layernorm]"}), Catch::Contains("needs activation_checkpointing: selective"));
  CHECK_THAT(test::parse_error(kSmall, {"model={preset: transformer, layers: 2, hidden: 64, heads: 4, seq_len: 32, vocab: 256}",
                                        "parallel.activation_checkpointing=selective", "parallel.recompute_modules=moe_act"}),
             Catch::Contains("no MoE blocks"));
  CHECK_THAT(test::parse_error(kSmall, {"parallel.activation_checkpointing=selective", "parallel.recompute_modules=[shared_experts]"}),
             Catch::Contains("parallel.recompute_modules"));
}

TEST_CASE("moe: the router's weights on the experts' activation keep no expert outputs (Megatron-core's weighted SwiGLU)", "[plan][moe]") {
  // A MoE block of kSmall: the experts' outputs are top_k x hidden values a token at the compute
  // type, 32 tokens x 2 x 64 x e bytes a sample; weighting the activation keeps none of them.
  const plan::Scenario output = test::scenario_from(kSmall, {"parallel.expert=4"});
  const plan::Scenario activation = test::scenario_from(kSmall, {"parallel.expert=4", "model.expert_weighting=activation"});
  const double e = plan::activation_bytes(output.parallel.precision);
  CHECK(plan::full_activation_bytes(output.layers[1], output.parallel) - plan::full_activation_bytes(activation.layers[1], activation.parallel) ==
        Approx(32 * 2 * 64 * e));
  // framework: megatron weights the activation, as Megatron-core has since 2025-04, and says so.
  const plan::Scenario megatron = test::scenario_from(kSmall, {"parallel.expert=4", "framework=megatron"});
  CHECK(megatron.layers[1].shape.moe.weighted_activation);
  CHECK(std::find(megatron.framework_set.begin(), megatron.framework_set.end(), "model.expert_weighting=activation") != megatron.framework_set.end());
  CHECK_FALSE(test::scenario_from(kSmall, {"parallel.expert=4", "framework=megatron", "model.expert_weighting=output"})
                  .layers[1].shape.moe.weighted_activation);
  // The executor weights outputs: activation is predict-only, at the key.
  CHECK_THROWS_WITH(plan::check_executable(activation), Catch::Contains("model.expert_weighting"));
  CHECK_THAT(test::parse_error(kSmall, {"model.expert_weighting=input"}), Catch::Contains("output | activation"));
}

TEST_CASE("moe: selective recompute of the whole MoE layer (--recompute-modules moe)", "[plan][moe]") {
  // Megatron-core checkpoints MoELayer.forward from its input: backward re-runs the router, the
  // dispatch, the experts and the combine. A MoE block of kSmall in bf16, one tensor rank, drops all
  // the layer keeps a token: the dispatched copies and the experts' outputs (top_k x h each, 2 x 64
  // x 2 bytes), the experts' gate and up (2 x 192 x 2) and down input (192 x 2) at top_k x
  // expert_ffn = 192 wide, and the router's fp32 probabilities (8 x 4): 32 x (256 + 256 + 768 +
  // 384 + 32) = 54,272 bytes a sample; the activation output (moe_act's) is among them.
  const plan::Scenario core = test::scenario_from(kSmall, {"parallel.expert=4", "parallel.activation_checkpointing=selective"});
  const plan::Scenario act = test::scenario_from(kSmall, {"parallel.expert=4", "parallel.activation_checkpointing=selective",
                                                          "parallel.recompute_modules=[core_attn, moe_act]"});
  const plan::Scenario moe = test::scenario_from(kSmall, {"parallel.expert=4", "parallel.activation_checkpointing=selective",
                                                          "parallel.recompute_modules=[core_attn, moe]"});
  CHECK(moe.parallel.recompute_modules == (plan::kRecomputeCoreAttn | plan::kRecomputeMoe));  // "moe" is not moe_act
  const plan::Layer& block = core.layers[1];
  CHECK(plan::full_activation_bytes(block, core.parallel) - plan::full_activation_bytes(block, moe.parallel) == Approx(54272));
  const plan::Scenario both = test::scenario_from(kSmall, {"parallel.expert=4", "parallel.activation_checkpointing=selective",
                                                           "parallel.recompute_modules=[core_attn, moe_act, moe]"});
  CHECK(plan::full_activation_bytes(block, both.parallel) == Approx(plan::full_activation_bytes(block, moe.parallel)));
  // Backward re-runs the layer's forward, the activation function's kernel among it, but not attention.
  const plan::LayerCost c = plan::estimate_layer_cost(block, core.hardware, core.parallel, 1);
  const plan::LayerCost a = plan::estimate_layer_cost(block, act.hardware, act.parallel, 1);
  const plan::LayerCost m = plan::estimate_layer_cost(block, moe.hardware, moe.parallel, 1);
  CHECK(m.recompute > a.recompute);
  CHECK(m.recompute - c.recompute > m.expert_forward);  // the experts, and the router's gate and scores besides
  CHECK(m.recompute < m.forward);
  // And its dispatch and combine again: four all-to-alls in backward, where two were.
  CHECK(plan::expert_traffic(block, core.parallel, 1).backward == 2);
  CHECK(plan::expert_traffic(block, moe.parallel, 1).backward == 4);
  CHECK(plan::expert_traffic(block, moe.parallel, 1).forward == 2);
  const sim::StageCost plain = sim::stage_costs(plan::resolve_plan(act))[0], again = sim::stage_costs(plan::resolve_plan(moe))[0];
  CHECK(again.all_to_all_backward.to_us() == Approx(2 * plain.all_to_all_backward.to_us()));
  CHECK(again.all_to_all_forward == plain.all_to_all_forward);
  CHECK_THAT(test::parse_error(kSmall, {"model={preset: transformer, layers: 2, hidden: 64, heads: 4, seq_len: 32, vocab: 256}",
                                        "parallel.activation_checkpointing=selective", "parallel.recompute_modules=[moe]"}),
             Catch::Contains("moe recomputes a MoE block's MoE layer") && Catch::Contains("no MoE blocks"));
}

TEST_CASE("moe: Megatron-core's rules exit 2 at the key, and what the executor refuses", "[plan][moe]") {
  CHECK_THAT(test::parse_error(kSmall, {"parallel.expert=3"}),
             Catch::Contains("8 experts of each MoE block do not divide over parallel.expert = 3") && Catch::Contains("parallel.expert"));
  CHECK_THAT(test::parse_error(kSmall, {"parallel.data=2", "parallel.expert=4", "data.batch_size=4"}),
             Catch::Contains("does not divide data x context = 2"));
  CHECK_THAT(test::parse_error(kSmall, {"parallel.expert=4", "parallel.tensor=2"}), Catch::Contains("needs sequence_parallel: true"));
  CHECK_THAT(test::parse_error(kSmall, {"model.experts=0", "parallel.expert=2"}), Catch::Contains("model.experts"));
  CHECK_THAT(test::parse_error(kSmall, {"model.experts_per_token=9"}), Catch::Contains("at most 'model.experts' (8)"));
  CHECK_THAT(test::parse_error(kSmall, {"parallel.overlap_moe_expert_parallel_comm=true", "parallel.schedule=1f1b"}),
             Catch::Contains("needs parallel.expert > 1"));
  CHECK_THAT(test::parse_error(kSmall, {"model={preset: transformer, layers: 2, hidden: 64, heads: 4, seq_len: 32, vocab: 256}",
                                        "parallel.overlap_moe_expert_parallel_comm=true", "parallel.schedule=1f1b"}),
             Catch::Contains("needs parallel.expert > 1"));  // a dense model has no all-to-alls to hide
  CHECK_THAT(test::parse_error(kSmall, {"parallel.expert=2", "parallel.overlap_moe_expert_parallel_comm=true"}),
             Catch::Contains("schedule 1f1b with pipeline 1, or interleaved-1f1b with virtual > 1") && Catch::Contains("schedule gpipe"));
  CHECK_THAT(test::parse_error(kSmall, {"parallel.expert=2", "parallel.overlap_moe_expert_parallel_comm=true", "parallel.pipeline=2",
                                        "parallel.schedule=1f1b"}),
             Catch::Contains("pipeline 2, virtual 1"));
  // The executor routes dropless and runs experts unsharded (parallel.shard with expert > 1 is predict-only).
  CHECK_NOTHROW(plan::check_executable(test::scenario_from(kSmall, {"parallel.expert=4"})));
  CHECK_THROWS_WITH(plan::check_executable(test::scenario_from(kSmall, {"model.capacity_factor=1.25"})),
                    Catch::Contains("capacity factor") && Catch::Contains("predict-only"));
  CHECK_THROWS_WITH(plan::check_executable(test::scenario_from(kSmall, {"parallel.expert=2", "parallel.shard=optimizer"})),
                    Catch::Contains("expert parallelism with parallel.shard") && Catch::Contains("predict-only"));
  // From the command line: exit 2, the flag named, nothing printed to stdout.
  const auto r = test::run_parallax("simulate scenarios/mlp-fashion-mnist-ddp2.yaml --set 'model={preset: transformer, layers: 2, hidden: 64, "
                                    "heads: 4, seq_len: 32, vocab: 256, experts: 8}' --set parallel.expert=3",
                                    "cd " PARALLAX_SOURCE_DIR " &&", true);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("--set parallel.expert=3") && Catch::Contains("do not divide"));
}

TEST_CASE("moe: Mixtral's and Qwen2-MoE's Hugging Face configs", "[plan][moe][hf]") {
  const plan::HfModel mixtral = plan::read_hf_config(PARALLAX_SOURCE_DIR "/scenarios/models/mixtral-8x7b.json", 4096);
  CHECK(mixtral.shape.moe.experts == 8);
  CHECK(mixtral.shape.moe.top_k == 2);
  CHECK(mixtral.shape.moe.ffn == 14336);
  CHECK(mixtral.shape.moe.shared == 0);
  int64_t params = 0;
  for (const auto& l : plan::make_transformer(mixtral.shape)) params += l.param_count();
  CHECK(params == 46702792704);  // Mixtral 8x7B's 46.7B parameters (Jiang et al. 2024)

  const auto dir = std::filesystem::temp_directory_path() / ("parallax-moe-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = (dir / "config.json").string();
  std::ofstream(path) << R"({"architectures": ["Qwen2MoeForCausalLM"], "hidden_act": "silu", "hidden_size": 2048,
    "intermediate_size": 5632, "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
    "num_attention_heads": 16, "num_key_value_heads": 16, "num_hidden_layers": 24, "num_experts": 60,
    "num_experts_per_tok": 4, "decoder_sparse_step": 1, "mlp_only_layers": [], "norm_topk_prob": false,
    "vocab_size": 151936, "max_position_embeddings": 8192, "tie_word_embeddings": false})";
  const plan::HfModel qwen = plan::read_hf_config(path, 4096);
  CHECK(qwen.shape.moe.experts == 60);
  CHECK(qwen.shape.moe.top_k == 4);
  CHECK(qwen.shape.moe.ffn == 1408);
  CHECK(qwen.shape.moe.shared == 4);  // one shared expert of 4 x 1408
  std::ofstream(path) << R"({"architectures": ["Qwen2MoeForCausalLM"], "hidden_act": "silu", "hidden_size": 2048,
    "intermediate_size": 5632, "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5000,
    "num_attention_heads": 16, "num_hidden_layers": 24, "num_experts": 60, "num_experts_per_tok": 4, "vocab_size": 151936})";
  CHECK_THROWS_WITH(plan::read_hf_config(path, 4096), Catch::Contains("not a whole number of moe_intermediate_size"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("tune: the expert degree is searched beside the layout", "[tune][moe]") {
  const plan::Scenario s = test::scenario_from(kSmall, {"parallel.data=8", "data.batch_size=4"});
  const tune::Space sp = tune::default_space(s, 8);
  CHECK(sp.ints("parallel.expert") == std::vector<int>{1, 2, 4, 8});
  tune::Evaluator ev(s);
  size_t invalid = 0;
  std::string why;
  const auto configs = tune::enumerate(ev, sp, &invalid, &why);
  std::set<int> experts;
  for (const auto& c : configs) {
    CHECK(8 % c.expert == 0);
    CHECK(c.tensor * c.replicas() / c.expert_tensor_ways() % c.expert == 0);
    experts.insert(c.expert);
  }
  CHECK(experts == std::set<int>{1, 2, 4, 8});
  // A dense model searches expert 1 only.
  const plan::Scenario dense = test::scenario_from(kSmall, {"model={preset: transformer, layers: 2, hidden: 64, heads: 4, seq_len: 32, vocab: 256}"});
  CHECK(tune::default_space(dense, 8).ints("parallel.expert") == std::vector<int>{1});
  // Combined 1F1B only when asked; then only where Megatron-core's rules let it run.
  CHECK(sp.of("parallel.overlap_moe_expert_parallel_comm") == std::vector<plan::KnobValue>{false});
  tune::Space asked = sp;
  tune::search(&asked, "parallel.overlap_moe_expert_parallel_comm=false,true");
  size_t overlapped = 0;
  for (const auto& c : tune::enumerate(ev, asked, &invalid, &why))
    if (c.overlap_moe_expert_parallel_comm) {
      ++overlapped;
      CHECK(c.expert > 1);
      CHECK((c.pipeline == 1 ? c.schedule == schedule::ScheduleKind::one_f_one_b || c.schedule == schedule::ScheduleKind::interleaved_1f1b
                             : c.schedule == schedule::ScheduleKind::interleaved_1f1b && c.virtual_stages > 1));
    }
  CHECK(overlapped > 0);
}
