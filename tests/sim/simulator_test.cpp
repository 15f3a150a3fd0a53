#include <catch2/catch.hpp>
#include <sstream>

#include "plan/scenario.hpp"
#include "plan/yaml_reader.hpp"
#include "sim/metrics.hpp"
#include "sim/simulator.hpp"
#include "tests/test_util.hpp"
#include "timeline/trace_writer.hpp"

using namespace parallax;
using schedule::ActionKind;
using sim::Time;

namespace {

sim::Metrics simulate(const plan::Plan& p, sim::SimRun* out = nullptr) {
  sim::SimRun run = sim::simulate(p);
  sim::Metrics m = sim::compute_metrics(p, run);
  if (out) *out = std::move(run);
  return m;
}

// A profile whose only cost is the link: one node of `devices`, or `devices` nodes of one.
std::string link_profile(int devices, bool across_nodes, double gb_per_s, double latency_us) {
  const std::string link = "{name: l, bandwidth_gb_per_s: " + std::to_string(gb_per_s) +
                           ", latency_us: " + std::to_string(latency_us) + "}";
  return "hardware:\n"
         "  device: {memory_gb: 80, memory_bandwidth_gb_per_s: .inf, peak_tflops: {fp32: 100}, efficiency: 1}\n"
         "  node: {devices: " + std::to_string(across_nodes ? 1 : devices) + ", link: " + link + "}\n"
         "  network: {name: net, nics_per_node: 1, bandwidth_gb_per_s: " + std::to_string(gb_per_s) +
         ", latency_us: " + std::to_string(latency_us) + "}\n";
}

const timeline::TimelineEvent& find(const sim::SimRun& run, int rank, const std::string& id) {
  for (const auto& e : run.timeline.events)
    if (e.rank == rank && e.action.id() == id) return e;
  FAIL("no event " << id << " on rank " << rank);
  return run.timeline.events.front();
}

}  // namespace

TEST_CASE("sim: with free communication, GPipe and 1F1B bubbles are (p-1)/(m+p-1)", "[sim]") {
  for (const std::string schedule : {"gpipe", "1f1b"}) {
    for (int p : {1, 2, 3, 4, 8}) {
      for (int m : {1, 2, 3, 5, 8, 16}) {
        INFO(schedule << " p=" << p << " m=" << m);
        const auto metrics = simulate(test::plan_from(test::synthetic_scenario(p * 2, p, m, schedule)));
        const double expected = static_cast<double>(p - 1) / (m + p - 1);
        for (const auto& r : metrics.ranks) CHECK(r.bubble_fraction == Approx(expected).margin(1e-9));
        // Uniform stages: no imbalance, and the textbook's figure is the simulated one.
        CHECK(metrics.imbalance_fraction == Approx(0).margin(1e-9));
        const auto kind = schedule == "gpipe" ? schedule::ScheduleKind::gpipe : schedule::ScheduleKind::one_f_one_b;
        CHECK(schedule::textbook_bubble_fraction(kind, p, 1, m).value() == Approx(expected).margin(1e-12));
      }
    }
  }
}

TEST_CASE("sim: with free communication, interleaved 1F1B's bubble is (p-1)/(v*m+p-1)", "[sim]") {
  // The formula holds once the pipeline can be filled: m >= p (Narayanan et al. 2021).
  for (int p : {2, 3, 4}) {
    for (int v : {2, 3, 4}) {
      for (int m : {4, 6, 8, 12, 16}) {
        if (m < p || m % std::max(1, m / p) != 0) continue;
        INFO("p=" << p << " v=" << v << " m=" << m);
        const auto metrics =
            simulate(test::plan_from(test::synthetic_scenario(p * v, p, m, "interleaved-1f1b", v)));
        const double expected = static_cast<double>(p - 1) / (v * m + p - 1);
        for (const auto& r : metrics.ranks) CHECK(r.bubble_fraction == Approx(expected).margin(1e-9));
        CHECK(metrics.imbalance_fraction == Approx(0).margin(1e-9));
        CHECK(schedule::textbook_bubble_fraction(schedule::ScheduleKind::interleaved_1f1b, p, v, m).value() ==
              Approx(expected).margin(1e-12));
      }
    }
  }
}

TEST_CASE("sim: a slower last stage: 1F1B's fill and drain is its idle, the rest of each bubble imbalance", "[sim]") {
  // Stages of 2, 2, ..., 3 uniform layers (each F + B taking t a layer). The last stage computes
  // without a break once its first input arrives: step = (p-1)(2t) + m(3t), of which it idles
  // the (p-1)(2t) of filling and draining the others; each other rank also waits out m x t more.
  for (int p : {2, 4}) {
    for (int m : {4, 8}) {
      INFO("p=" << p << " m=" << m);
      std::string lengths;
      for (int s = 0; s < p; ++s) lengths += (s ? ", " : "") + std::string(s == p - 1 ? "3" : "2");
      const auto plan = test::plan_from("model: {preset: synthetic, layers: " + std::to_string(2 * p + 1) +
                                        ", fwd_us_per_sample: 10, params_mb: 1, activation_mb: 1}\n"
                                        "data: {batch_size: " + std::to_string(2 * m) + "}\n"
                                        "parallel: {pipeline: " + std::to_string(p) + ", chunks: " + std::to_string(m) +
                                        ", schedule: 1f1b, partition_len: [" + lengths + "]}\nhardware: ideal\n");
      const auto metrics = simulate(plan);
      const double step = (p - 1) * 2.0 + m * 3.0;  // in t
      REQUIRE(metrics.ranks.size() == static_cast<size_t>(p));
      for (const auto& r : metrics.ranks) {
        CHECK(r.bubble_fraction - r.imbalance_fraction == Approx((p - 1) * 2.0 / step).margin(1e-9));
        CHECK(r.imbalance_fraction == Approx(r.rank == p - 1 ? 0.0 : m / step).margin(1e-9));
      }
      CHECK(schedule::textbook_bubble_fraction(schedule::ScheduleKind::one_f_one_b, p, 1, m) ==
            Approx(static_cast<double>(p - 1) / (m + p - 1)));
    }
  }
}

TEST_CASE("sim: Megatron-LM's interleaved 1F1B on NCCL waits for an input just before its compute: (p-1)/(v*m+p-1)", "[sim]") {
  // Megatron-core waits for a forward's input in pp_pre_forward, for a backward's just before it
  // (schedules.py, overlap_p2p_comm). torch's lowered list posts the next micro-batch's receive
  // before the current forward; a rank that waited there idled a forward's length each time the
  // backward is not twice the forward (1.54 here): 7.2% at p 4, v 5, m 64 where the formula gives 0.93%.
  for (int p : {2, 4}) {
    for (int m : {8, 16, 64}) {
      const int v = 5;
      INFO("p=" << p << " v=" << v << " m=" << m);
      const auto plan = test::plan_from(
          "model: {preset: synthetic, layers: " + std::to_string(p * v * 4) +
          ", fwd_us_per_sample: 4500, fwd_us_fixed: 0, bwd_ratio: 1.54, params_mb: 4, activation_mb: 0.01}\n"
          "data: {batch_size: " + std::to_string(m) + "}\n"
          "parallel: {pipeline: " + std::to_string(p) + ", virtual: " + std::to_string(v) + ", partition_len: 4, chunks: " +
          std::to_string(m) + ", schedule: interleaved-1f1b, p2p: megatron}\n" +
          link_profile(p, false, 1e6, 0) + "  collectives: nccl\n");
      const double expected = static_cast<double>(p - 1) / (v * m + p - 1);
      for (const auto& r : simulate(plan).ranks) CHECK(r.bubble_fraction == Approx(expected).epsilon(0.02));
    }
  }
}

TEST_CASE("sim: a lone ring all-reduce takes 2(n-1)/n * S/B + 2(n-1) * latency", "[sim]") {
  // One synthetic layer of 64 MiB: one bucket of S bytes, all-reduced by n replicas.
  for (bool across_nodes : {false, true}) {
    for (int n : {2, 3, 4, 8}) {
      INFO("n=" << n << (across_nodes ? " across nodes" : " inside a node"));
      const double gbps = 12.5, latency_us = 3;
      const auto p = test::plan_from(
          "model: {preset: synthetic, layers: 1, fwd_us_per_sample: 1, params_mb: 64}\n"
          "parallel: {data: " + std::to_string(n) + ", first_bucket_mb: 1000}\n" +
          link_profile(n, across_nodes, gbps, latency_us));
      sim::SimRun run;
      simulate(p, &run);
      const auto& ar = find(run, 0, "0ALLREDUCE0");
      CHECK(ar.algorithm == timeline::Algorithm::ring);
      const double S = 64.0 * 1024 * 1024;
      const double expected_ns = 2.0 * (n - 1) / n * S / gbps + 2.0 * (n - 1) * latency_us * 1000;
      CHECK(static_cast<double>((ar.end - ar.start).count_ns()) == Approx(expected_ns).margin(2));
    }
  }
}

TEST_CASE("sim: groups spanning nodes with several members each all-reduce hierarchically", "[sim]") {
  // 2 devices per node, 4 replicas: 2 nodes x 2 members. Reduce inside (S), ring across the two
  // leaders (2(N-1)/N * S = S), broadcast inside (S): 3 * S/B + latencies (k-1), 2(N-1), (k-1).
  const auto p = test::plan_from(
      "model: {preset: synthetic, layers: 1, fwd_us_per_sample: 1, params_mb: 16}\n"
      "parallel: {data: 4, first_bucket_mb: 1000}\n"
      "hardware:\n"
      "  device: {memory_gb: 80, memory_bandwidth_gb_per_s: .inf, peak_tflops: {fp32: 100}}\n"
      "  node: {devices: 2, link: {bandwidth_gb_per_s: 100, latency_us: 1}}\n"
      "  network: {nics_per_node: 1, bandwidth_gb_per_s: 10, latency_us: 5}\n");
  sim::SimRun run;
  simulate(p, &run);
  const auto& ar = find(run, 3, "0ALLREDUCE0");
  CHECK(ar.algorithm == timeline::Algorithm::hierarchical);
  const double S = 16.0 * 1024 * 1024;
  const double expected_ns = S / 100 + 1000 + S / 10 + 2 * 5000 + S / 100 + 1000;
  CHECK(static_cast<double>((ar.end - ar.start).count_ns()) == Approx(expected_ns).margin(3));
}

TEST_CASE("sim: a pipeline send that overlaps an all-reduce on the same link slows both", "[sim]") {
  // Two replicas of a 2-stage pipeline on one node of 4 devices, ranked tp-dp-pp: stage 0 on
  // ranks 0 and 1, stage 1 on 2 and 3. Stage 1's bucket all-reduce (ranks 2 and 3) starts after
  // its last backward and shares rank 2's up port with rank 2's last gradient send to rank 0.
  // Compare with the same plan where the all-reduce is free of sends: one replica's send alone,
  // and the all-reduce alone (no pipeline).
  const std::string model =
      "model: {preset: synthetic, layers: 2, fwd_us_per_sample: 1, params_mb: 64, activation_mb: 16}\n"
      "data: {batch_size: 2}\n";
  const std::string profile = link_profile(4, false, 10, 0);
  const auto both = test::plan_from(model + "parallel: {data: 2, pipeline: 2, chunks: 1, first_bucket_mb: 1000}\n" + profile);
  sim::SimRun run;
  simulate(both, &run);
  const auto& send = find(run, 2, "1SEND_B0");
  const auto& ar = find(run, 2, "1ALLREDUCE0");
  REQUIRE(ar.start < send.end);  // they overlap

  sim::SimRun alone_send_run;
  simulate(test::plan_from(model + "parallel: {data: 1, pipeline: 2, chunks: 1}\n" + profile), &alone_send_run);
  const auto& alone_send = find(alone_send_run, 1, "1SEND_B0");
  CHECK((send.end - send.start) > (alone_send.end - alone_send.start));

  // Alone, the ring all-reduce of S over 2 ranks moves S at 10 GB/s.
  const double S = 64.0 * 1024 * 1024;
  CHECK(static_cast<double>((ar.end - ar.start).count_ns()) > S / 10 + 1);

  // Bytes moved on rank 2's up port: the send and the all-reduce's share, nothing lost.
  double up_bytes = 0;
  for (const auto& l : run.links)
    if (l.name == "node0/dev2 l up") up_bytes = l.bytes;
  CHECK(up_bytes == Approx(static_cast<double>(send.bytes) + S).epsilon(1e-9));
}

TEST_CASE("sim: GPipe's peak activation memory grows with chunks, 1F1B's stays at p micro-batches", "[sim]") {
  // 8 layers of 1 MiB activations per sample over 4 stages, micro-batches of 2: 4 MiB each. The
  // ideal profile runs Gloo's rules: a rank keeps receives posted ahead, twice its most
  // micro-batches in flight (schedule::receive_window), each a 2 MiB buffer, topped up as the rank
  // takes one at its RECV and held until the compute that uses it. GPipe has m in flight, so all
  // of rank 0's m output-gradient buffers wait for its backwards. 1F1B's rank 0 has 4 in flight:
  // 8 buffers posted and the one taken, 9 (all m when fewer). Its last rank has 1 in flight: one
  // micro-batch's activations and 2 input buffers posted, whatever m.
  // A stage's 2 layers hold 1 MiB of parameters each: 2 MiB of gradients, which the optimizer step
  // frees and the step's first backward makes (zero_grad(set_to_none)), so they count only at a
  // peak after it: 1F1B's, where a forward follows a backward, on rank 0 only once the window
  // refills what that backward's buffer freed (m > 9; with fewer, all m are posted at the start and
  // the buffer freed equals the gradients made); never GPipe's, whose m in flight come first.
  // Every backward after the first adds a 1 MiB gradient made anew.
  const int64_t MiB = 1024 * 1024, per_mb = 4 * MiB, buffer = 2 * MiB, grads = 2 * MiB, anew = MiB;
  for (int m : {4, 8, 16, 32}) {
    const auto g = test::plan_from(test::synthetic_scenario(8, 4, m, "gpipe"));
    const auto o = test::plan_from(test::synthetic_scenario(8, 4, m, "1f1b"));
    const auto& gm = g.ranks[0].memory;
    const int64_t static_bytes = gm.params + gm.optimizer + gm.buckets;
    const auto gmet = simulate(g), omet = simulate(o);
    INFO("m=" << m);
    CHECK(gm.gradients == grads);
    CHECK(gmet.ranks[0].peak_memory - static_bytes == m * per_mb + m * buffer + anew);
    CHECK(omet.ranks[0].peak_memory - static_bytes ==
          std::min(m, 4) * per_mb + std::min(m, 2 * 4 + 1) * buffer + (m > 2 * 4 + 1 ? grads : 0) + anew);
    CHECK(gmet.ranks[3].peak_memory - static_bytes == m * per_mb + anew);
    CHECK(omet.ranks[3].peak_memory - static_bytes == per_mb + 2 * buffer + grads + anew);
    // The plan's estimate walks the same actions.
    for (int r = 0; r < 4; ++r) {
      CHECK(gmet.ranks[r].peak_memory == g.ranks[r].memory.total());
      CHECK(omet.ranks[r].peak_memory == o.ranks[r].memory.total());
    }
  }
}

TEST_CASE("sim: a plan that does not fit its devices still simulates, flagged", "[sim]") {
  const auto p = test::plan_from(test::synthetic_scenario(8, 2, 4, "gpipe"),
                                 {"model.params_mb=4000", "hardware=t4-pcie"});
  const auto m = simulate(p);
  CHECK_FALSE(m.fits);
  CHECK(m.step_time > Time());
}

TEST_CASE("sim: gradient accumulation communicates only on the last mini-batch", "[sim]") {
  const auto p = test::plan_from(test::synthetic_scenario(4, 2, 2, "1f1b"),
                                 {"parallel.data=2", "parallel.grad_accumulation=3", "hardware=a100-nvlink-ib"});
  sim::SimRun run;
  simulate(p, &run);
  Time last_backward, first_allreduce = Time::seconds(1e6);
  for (const auto& e : run.timeline.events) {
    if (e.rank != 0) continue;
    if (e.action.kind == ActionKind::B && e.action.mb == 5) last_backward = e.end;  // last mini-batch's last
    if (e.action.kind == ActionKind::ALLREDUCE) first_allreduce = std::min(first_allreduce, e.start);
    if (e.action.kind == ActionKind::ALLREDUCE) CHECK(e.bytes > 0);
  }
  // The first bucket becomes ready inside the last backward of micro-batch 5 (round 3 of 3).
  const auto& b5 = find(run, 0, "0B5");
  CHECK(first_allreduce >= b5.start);
  CHECK(first_allreduce <= last_backward);
  // OPTIM waits for every bucket.
  const auto& optim = find(run, 0, "0OPTIM");
  for (const auto& e : run.timeline.events)
    if (e.rank == 0 && e.action.kind == ActionKind::ALLREDUCE) CHECK(e.end <= optim.start);
}

TEST_CASE("sim: the critical path runs from the first action to the one that ends the step", "[sim]") {
  const auto p = test::plan_from(test::synthetic_scenario(8, 4, 8, "1f1b"));
  sim::SimRun run;
  const auto m = simulate(p, &run);
  REQUIRE(!m.critical_path.empty());
  const auto& first = run.timeline.events[m.critical_path.front()];
  const auto& last = run.timeline.events[m.critical_path.back()];
  CHECK(first.start == Time());
  CHECK(first.action.id() == "0F0");
  CHECK(last.end == m.step_time);
  // With free communication the compute on the path adds up to the step time.
  Time compute;
  for (int32_t i : m.critical_path)
    if (run.timeline.events[i].lane == timeline::Lane::compute) compute += run.timeline.events[i].end - run.timeline.events[i].start;
  CHECK(compute == m.step_time);
}

TEST_CASE("sim: the same scenario gives a byte-identical trace", "[sim]") {
  auto trace = [] {
    const auto p = test::plan_from(test::synthetic_scenario(8, 4, 8, "1f1b"), {"parallel.data=2", "hardware=a100-nvlink-ib"});
    std::ostringstream out;
    timeline::write_chrome_trace(sim::simulate(p).timeline, out);
    return out.str();
  };
  const std::string a = trace(), b = trace();
  CHECK(a.size() > 1000);
  CHECK(a == b);
}

TEST_CASE("sim: a folded run (one replica played) gives every rank the full run's metrics", "[sim]") {
  // Replicas alike on the topology, in either rank order: multi-node 1F1B, interleaving with
  // checkpointing (its last rank sends to the first), tensor parallelism, DDP over several nodes,
  // and the plain (non-NCCL) hierarchical all-reduce. The full run plays every replica; its
  // per-rank numbers are the reference. Where replicas share a NIC for their sends, the
  // simulator must not fold.
  struct Case {
    std::string file;
    std::vector<std::string> sets;
    bool plain = false;
    bool alike = true;
  };
  const std::string root = PARALLAX_SOURCE_DIR;
  const std::vector<Case> cases = {
      // tp-dp-pp: each stage's 8 replicas fill a node; every send crosses nodes on its own NIC.
      {"scenarios/gpipe-1b-4xA100.yaml", {"parallel.data=8", "parallel.pipeline=2", "parallel.schedule=1f1b"}},
      // tp-dp-pp: a node holds two stages' replicas; sends 0->1 and 2->3 inside, 1->2 and 3->0 across.
      {"scenarios/gpipe-1b-4xA100.yaml",
       {"parallel.data=4", "parallel.pipeline=4", "parallel.schedule=interleaved-1f1b", "parallel.virtual=2",
        "parallel.activation_checkpointing=true", "parallel.chunks=8"}},
      {"scenarios/gpipe-1b-4xA100.yaml", {"parallel.data=4", "parallel.pipeline=2", "parallel.tensor=2", "parallel.schedule=1f1b"}},
      {"scenarios/gpipe-1b-4xA100.yaml",
       {"parallel.rank_order=tp-pp-dp", "parallel.data=8", "parallel.pipeline=2", "parallel.schedule=1f1b"}},
      {"scenarios/gpipe-1b-4xA100.yaml",
       {"parallel.rank_order=tp-pp-dp", "parallel.data=6", "parallel.pipeline=4", "parallel.schedule=interleaved-1f1b",
        "parallel.virtual=2", "parallel.activation_checkpointing=true"}},
      {"scenarios/ddp-transformer-accum-4xA100.yaml", {"parallel.data=16"}},
      {"scenarios/gpipe-1b-4xA100.yaml",
       {"hardware=t4-pcie", "parallel.rank_order=tp-pp-dp", "parallel.precision=fp16", "parallel.data=6",
        "parallel.pipeline=2", "parallel.bucket_cap_mb=10"},
       true},
      // Nodes of 4 T4s with one NIC: stage 0's 4 replicas send to stage 1's through it, together.
      {"scenarios/gpipe-1b-4xA100.yaml",
       {"hardware=t4-pcie", "parallel.precision=fp16", "parallel.data=4", "parallel.pipeline=2", "parallel.bucket_cap_mb=10"},
       true, false},
  };
  for (const auto& c : cases) {
    plan::Scenario s = plan::load_scenario(root + "/" + c.file, c.sets);
    if (c.plain) s.hardware.nccl.reset();
    const plan::Plan p = plan::resolve_plan(s);
    INFO(c.file << " " << plan::join(c.sets) << " (" << p.world_size << " ranks)");
    const sim::SimRun full_run = sim::simulate(p);
    sim::SimOptions o;
    o.fold_replicas = true;
    const sim::SimRun folded_run = sim::simulate(p, o);
    REQUIRE(folded_run.folded == c.alike);
    if (!c.alike) continue;
    CHECK(folded_run.played_ranks == p.scenario.parallel.pipeline);
    CHECK(folded_run.timeline.events.size() * p.scenario.parallel.data == full_run.timeline.events.size());
    const sim::Metrics full = sim::compute_metrics(p, full_run);
    const sim::Metrics folded = sim::compute_metrics(p, folded_run);
    CHECK(folded.step_time == full.step_time);
    CHECK(folded.bubble_fraction == Approx(full.bubble_fraction).epsilon(1e-12));
    REQUIRE(folded.ranks.size() == full.ranks.size());
    for (size_t r = 0; r < full.ranks.size(); ++r) {
      INFO("rank " << r);
      CHECK(folded.ranks[r].rank == full.ranks[r].rank);
      CHECK(folded.ranks[r].busy == full.ranks[r].busy);
      CHECK(folded.ranks[r].bubble == full.ranks[r].bubble);
      CHECK(folded.ranks[r].exposed_comm == full.ranks[r].exposed_comm);
      CHECK(folded.ranks[r].peak_memory == full.ranks[r].peak_memory);
    }
  }
}
