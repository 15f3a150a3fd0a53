// The tuner's engine: step-only simulation against the full one, the lower bound against the
// simulated step, pruned search against exhaustive search, memory fit, and the overrides and
// written file reproducing a pick.
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "sim/cost_model.hpp"
#include "sim/metrics.hpp"
#include "sim/simulator.hpp"
#include "tests/test_util.hpp"
#include "timeline/metrics.hpp"
#include "plan/trainer_export.hpp"
#include "plan/trainer_rules.hpp"
#include "tune/enumerate.hpp"
#include "tune/pick.hpp"
#include "tune/search.hpp"

using namespace parallax;

namespace {

std::string source(const std::string& rel) { return std::string(PARALLAX_SOURCE_DIR) + "/" + rel; }

double full_step_ms(const plan::Plan& p) { return sim::simulate(p).step_time.to_ms(); }

// The configurations of the scenario's default space, as the search lists them.
std::vector<plan::Settings> default_configs(tune::Evaluator& ev) {
  size_t invalid = 0;
  std::string why;
  return tune::enumerate(ev, tune::default_space(ev.base()), &invalid, &why);
}

}  // namespace

TEST_CASE("tune: step-only simulation gives exactly the full simulation's step time and memory", "[tune]") {
  // Multi-node layouts with alike replicas (folded) in both rank orders, pipelines across nodes,
  // DDP over several nodes, interleaving, checkpointing, tensor parallelism, a calibrated-style CPU
  // host, and layouts that are not alike.
  struct Case {
    std::string file;
    std::vector<std::string> sets;
    bool plain = false;  // without the profile's nccl section: the plain ring/hierarchical model
  };
  const std::vector<Case> cases = {
      {"scenarios/gpipe-1b-4xA100.yaml", {"parallel.data=8", "parallel.pipeline=2", "parallel.schedule=1f1b"}},
      {"scenarios/gpipe-1b-4xA100.yaml", {"parallel.data=4", "parallel.pipeline=16", "parallel.chunks=16"}},
      {"scenarios/gpipe-1b-4xA100.yaml",
       {"parallel.rank_order=tp-pp-dp", "parallel.data=6", "parallel.pipeline=4", "parallel.schedule=interleaved-1f1b",
        "parallel.virtual=2", "parallel.activation_checkpointing=true"}},
      {"scenarios/gpipe-1b-4xA100.yaml",
       {"parallel.data=4", "parallel.pipeline=4", "parallel.schedule=interleaved-1f1b", "parallel.virtual=2",
        "parallel.chunks=8", "parallel.tensor=2"}},
      {"scenarios/gpipe-1b-4xA100.yaml", {"parallel.data=5", "parallel.pipeline=3", "parallel.bucket_cap_mb=5"}},
      {"scenarios/ddp-transformer-accum-4xA100.yaml", {"parallel.data=16"}},
      // Context parallelism: its ranks are replicas to the simulator, in either rank order.
      {"scenarios/llama-3.1-70b-64xH100.yaml", {"parallel.data=1", "parallel.context=2"}},
      {"scenarios/llama-3.1-70b-64xH100.yaml",
       {"parallel.context=2", "parallel.tensor=4", "parallel.rank_order=tp-pp-dp"}},
      {"scenarios/mlp-fashion-mnist-ddp4.yaml", {}},
      {"scenarios/accuracy/mlp-ddp2.yaml", {"parallel.bucket_cap_mb=0.25"}},
      {"scenarios/mlp-fashion-mnist-pipeline2.yaml", {"parallel.chunks=16"}},
      // The plain model's hierarchical all-reduce (several members per node) and its ring across
      // one member per node, on nodes of 4 T4s.
      {"scenarios/gpipe-1b-4xA100.yaml",
       {"hardware=t4-pcie", "parallel.rank_order=tp-pp-dp", "parallel.precision=fp16", "parallel.data=6",
        "parallel.pipeline=2", "parallel.bucket_cap_mb=10"},
       true},
      {"scenarios/gpipe-1b-4xA100.yaml",
       {"hardware=t4-pcie", "parallel.precision=fp16", "parallel.data=3", "parallel.pipeline=8", "parallel.chunks=8"}, true},
  };
  int folded = 0;
  for (const auto& c : cases) {
    plan::Scenario s = plan::load_scenario(source(c.file), c.sets);
    if (c.plain) s.hardware.nccl.reset();
    const plan::Plan p = plan::resolve_plan(s);
    const sim::SimRun full = sim::simulate(p);
    sim::SimOptions o;
    o.step_only = true;
    const sim::SimRun quick = sim::simulate(p, o);
    INFO(c.file << " " << plan::join(c.sets) << " (" << p.world_size << " ranks)");
    CHECK(quick.step_time.count_ns() == timeline::step_times(full.timeline, 0).step_time.count_ns());
    CHECK(quick.peak_memory == full.peak_memory);
    CHECK(quick.timeline.events.empty());
    folded += quick.folded;
  }
  CHECK(folded >= 7);  // the fast path was taken where replicas are alike
}

TEST_CASE("tune: the lower bound never exceeds the simulated step time", "[tune]") {
  for (const char* file : {"scenarios/gpipe-transformer-2xT4.yaml", "scenarios/accuracy/mlp-interleaved.yaml",
                           "scenarios/mlp-fashion-mnist-ddp4.yaml"}) {
    const plan::Scenario s = plan::load_scenario(source(file), {});
    tune::Evaluator ev(s);
    const auto configs = default_configs(ev);
    REQUIRE(configs.size() > 50);
    for (size_t i = 0; i < configs.size(); i += 7) {
      const tune::Evaluation e = ev.evaluate(configs[i]);
      INFO(file << ": " << plan::describe(plan::overrides(plan::settings_of(s), configs[i])));
      CHECK(e.lower_bound.to_ms() <= e.step.to_ms() * (1 + 1e-12));
      CHECK(e.lower_bound.to_ms() > 0.3 * e.step.to_ms());  // and is not trivially loose
    }
  }
}

TEST_CASE("tune: DDP's bucket knobs change neither memory nor the lower bound (the search plans their variants once)",
          "[tune]") {
  // search() plans the first of each run of bucket variants and copies its memory and bound to the
  // others; this holds that to what planning each variant gives. Data-parallel layouts of a GPU
  // job (tensor parallelism, interleaving, checkpointing, bf16) and of a CPU MLP.
  for (const char* file : {"scenarios/gpipe-1b-4xA100.yaml", "scenarios/mlp-fashion-mnist-ddp4.yaml"}) {
    const plan::Scenario s = plan::load_scenario(source(file), {});
    tune::Evaluator ev(s);
    size_t checked = 0;
    const auto configs = default_configs(ev);
    for (size_t i = 0; i < configs.size(); i += 97) {
      plan::Settings c = configs[i];
      if (c.data < 2) continue;
      const tune::Evaluation first = ev.bound(c);
      for (double cap : {0.25, 25.0, 400.0})
        for (double first_mb : {1.0, 4.0}) {
          c.bucket_cap_mb = cap;
          c.first_bucket_mb = first_mb;
          const tune::Evaluation e = ev.bound(c);
          INFO(file << ": " << plan::describe(plan::overrides(plan::settings_of(s), c)));
          CHECK(e.peak_memory == first.peak_memory);
          CHECK(e.lower_bound.count_ns() == first.lower_bound.count_ns());
          CHECK(e.fits == first.fits);
          // And the first variant's plan rebucketed is this one's (search() simulates it so).
          plan::Plan shared = ev.plan_of(configs[i]);
          ev.rebucket(&shared, c);
          const plan::Plan own = ev.plan_of(c);
          REQUIRE(shared.stages.size() == own.stages.size());
          for (size_t st = 0; st < own.stages.size(); ++st) {
            REQUIRE(shared.stages[st].buckets.size() == own.stages[st].buckets.size());
            for (size_t b = 0; b < own.stages[st].buckets.size(); ++b)
              CHECK(shared.stages[st].buckets[b].bytes == own.stages[st].buckets[b].bytes);
          }
          CHECK(shared.schedule.ranks == own.schedule.ranks);
          // bound() plans for the bound only (plan::PlanDetail::bound): the same memory.
          int64_t whole_peak = 0;
          for (const auto& r : own.ranks) whole_peak = std::max(whole_peak, r.memory.total());
          CHECK(e.peak_memory == whole_peak);
          CHECK(ev.step_of(shared, c).count_ns() == ev.step_of(own, c).count_ns());
        }
      ++checked;
    }
    INFO(file);
    CHECK(checked >= 10);
  }
}

TEST_CASE("tune: the bucket floor never exceeds the simulated step time, and tells bucket sizes apart", "[tune]") {
  // sim::reduction_floor over the default spaces of GPU jobs on NCCL (every schedule kind,
  // interleaving, tensor parallelism, sharding) and of a CPU MLP on Gloo, each configuration with
  // buckets from one whole buffer to many small ones.
  size_t checked = 0, raised = 0, configurations = 0, told_apart = 0;
  for (const char* file : {"scenarios/gpipe-1b-4xA100.yaml", "scenarios/llama-3.1-70b-64xH100.yaml",
                           "scenarios/mlp-fashion-mnist-ddp4.yaml"}) {
    const plan::Scenario s = plan::load_scenario(source(file), {});
    tune::Evaluator ev(s);
    const auto configs = default_configs(ev);
    // About 100 configurations spread over each space (the 70B job's holds a million).
    for (size_t i = 0; i < configs.size(); i += std::max<size_t>(1, configs.size() / 100)) {
      plan::Settings c = configs[i];
      if (c.replicas() < 2) continue;
      std::set<int64_t> floors;
      for (double cap : {0.25, 25.0, 4000.0}) {
        c.bucket_cap_mb = cap;
        c.first_bucket_mb = std::min(cap, 1.0);
        plan::Plan p;
        try {
          p = ev.plan_of(c);
        } catch (const plan::InputError&) {
          continue;
        }
        const tune::Evaluation e = ev.bound(c);
        const plan::Time floor = ev.bucket_bound(p, c, e.lower_bound), step = ev.step_of(p, c);
        INFO(file << ": " << plan::describe(plan::overrides(plan::settings_of(s), c)) << ": floor " << floor.to_ms()
                  << " ms, bound " << e.lower_bound.to_ms() << " ms, step " << step.to_ms() << " ms");
        CHECK(floor.count_ns() <= step.count_ns());
        ++checked;
        raised += floor > e.lower_bound;
        floors.insert(floor.count_ns());
      }
      configurations += !floors.empty();
      told_apart += floors.size() > 1;
    }
  }
  INFO(raised << " of " << checked << " raised above the lower bound; " << told_apart << " of " << configurations
              << " configurations with floors that differ by bucket size");
  CHECK(checked >= 300);
  // It has a say in a good share of them (a quarter on this commit), as a floor of 0 would not.
  CHECK(raised * 5 >= checked);
  CHECK(told_apart >= 10);  // 25 of 286 on this commit
}

TEST_CASE("tune: with one stage, one micro-batch and one bucket, the bucket floor is the step", "[tune]") {
  // Nothing overlaps there: the forward, the backward, the bucket's all-reduce alone on its links
  // and the optimizer step run one after another, so the floor is exact. Within one node (NVLink)
  // and across nodes (the NICs).
  for (int data : {4, 16}) {
    const plan::Scenario s = plan::load_scenario(
        source("scenarios/gpipe-1b-4xA100.yaml"),
        {"parallel.data=" + std::to_string(data), "parallel.pipeline=1", "parallel.chunks=1", "parallel.bucket_cap_mb=100000",
         "parallel.first_bucket_mb=100000"});
    const plan::Plan p = plan::resolve_plan(s);
    REQUIRE(p.stages.size() == 1);
    REQUIRE(p.stages[0].buckets.size() == 1);
    const plan::Time floor = sim::reduction_floor(p, sim::stage_costs(p)), step = sim::simulate(p).step_time;
    INFO("data " << data << ": floor " << floor.to_ms() << " ms, step " << step.to_ms() << " ms");
    CHECK(std::abs(floor.to_ms() - step.to_ms()) <= 1e-6 * step.to_ms());
  }
}

TEST_CASE("tune: pruned search ranks the same top K as exhaustive search", "[tune]") {
  for (const char* file : {"scenarios/accuracy/mlp-pipeline2.yaml", "scenarios/mlp-fashion-mnist-ddp4.yaml",
                           "scenarios/gpipe-transformer-2xT4.yaml"}) {
    const plan::Scenario s = plan::load_scenario(source(file), {});
    tune::Evaluator ev(s);
    const tune::Space space = tune::default_space(s);
    tune::SearchOptions o;
    o.top = 5;
    o.prune = false;
    const auto all = tune::search(ev, space, o);
    o.prune = true;
    const auto pruned = tune::search(ev, space, o);
    INFO(file);
    CHECK(all.pruned == 0);
    CHECK(all.evaluated == all.combinations - all.over_memory);
    CHECK(pruned.pruned > 0);
    CHECK(pruned.evaluated < all.evaluated);
    REQUIRE(pruned.ranked.size() == all.ranked.size());
    for (size_t i = 0; i < all.ranked.size(); ++i) {
      CHECK(pruned.ranked[i].step.to_ms() == all.ranked[i].step.to_ms());
      CHECK(pruned.ranked[i].config == all.ranked[i].config);
    }
    // And the best of each data x pipeline layout (what --validate runs besides the top).
    REQUIRE(pruned.layout_best.size() == all.layout_best.size());
    CHECK(all.layout_best.size() >= 2);
    for (size_t i = 0; i < all.layout_best.size(); ++i) CHECK(pruned.layout_best[i].config == all.layout_best[i].config);
    // The global batch is never changed.
    for (const auto& e : all.ranked) CHECK(e.config.global_batch() == plan::settings_of(s).global_batch());
  }
}

TEST_CASE("tune: one ranked row per distinct prediction, the same predictions listed as its equivalents", "[tune]") {
  const plan::Scenario s = plan::load_scenario(source("scenarios/mlp-fashion-mnist-ddp4.yaml"), {});
  tune::Evaluator ev(s);
  tune::SearchOptions o;
  o.top = 5;
  o.prune = false;
  const auto r = tune::search(ev, tune::default_space(s), o);
  REQUIRE(r.ranked.size() == 5);
  size_t equivalents = 0;
  for (size_t i = 0; i < r.ranked.size(); ++i) {
    const tune::Evaluation& row = r.ranked[i];
    // The same prediction: the same memory and a step within 100 ns (the simulator's rounding).
    auto same = [](const tune::Evaluation& a, const tune::Evaluation& b) {
      return std::abs((a.step - b.step).count_ns()) <= 100 && a.peak_memory == b.peak_memory;
    };
    for (size_t j = 0; j < i; ++j) CHECK_FALSE(same(r.ranked[j], row));
    for (const plan::Settings& c : row.equivalents) {  // simulated again, independently of the search
      const tune::Evaluation e = ev.evaluate(c);
      CHECK(same(e, row));
      CHECK(e.peak_memory == row.peak_memory);
      CHECK_FALSE(c == row.config);
      ++equivalents;
    }
  }
  CHECK(equivalents > 0);  // 4 replicas, first_bucket_mb 1 or 4: some buckets change nothing
  CHECK_THAT(tune::also_text(r.ranked[0], 1), Catch::StartsWith("also: "));
}

TEST_CASE("tune: each row a search returns carries its changes, which --set back into the scenario reproduce it",
          "[tune]") {
  const std::string file = source("scenarios/mlp-fashion-mnist-ddp4.yaml");
  const plan::Scenario s = plan::load_scenario(file, {});
  tune::Evaluator ev(s);
  tune::SearchOptions o;
  o.top = 4;
  const auto r = tune::search(ev, tune::default_space(s), o);
  CHECK(r.baseline.changes.empty());  // the scenario as given changes nothing
  std::vector<const tune::Evaluation*> rows{&r.defaults};
  for (const auto* list : {&r.ranked, &r.pareto, &r.layout_best})
    for (const auto& e : *list) rows.push_back(&e);
  REQUIRE(rows.size() > 4);
  for (const tune::Evaluation* e : rows) {
    INFO(plan::describe(e->changes));
    CHECK(plan::settings_of(plan::load_scenario(file, plan::set_flags(e->changes))) == e->config);
  }
  CHECK_FALSE(r.ranked.front().changes.empty());  // the default space beats the file as given here
}

TEST_CASE("tune: a configuration that does not fit device memory is never picked", "[tune]") {
  // The 1.1B model with Adam needs ~18 GB of parameters, gradients and optimizer state: on 16 GB
  // T4s the pure data-parallel layouts (the fastest unconstrained) do not fit.
  const plan::Scenario s = plan::load_scenario(source("scenarios/gpipe-1b-4xA100.yaml"),
                                               {"hardware=t4-pcie", "parallel.precision=fp16"});
  tune::Evaluator ev(s);
  tune::Space space = tune::default_space(s);
  tune::search(&space, "parallel.activation_checkpointing=false");
  const auto r = tune::search(ev, space, {});
  REQUIRE(!r.ranked.empty());
  CHECK(r.over_memory > 0);
  for (const auto& e : r.ranked) CHECK(e.fits);
  CHECK(r.ranked.front().config.pipeline > 1);
  plan::Settings ddp = r.ranked.front().config;
  ddp.data = 4;
  ddp.pipeline = 1;
  ddp.virtual_stages = 1;
  ddp.schedule = schedule::ScheduleKind::gpipe;
  ddp.partition_len = {};
  ddp.chunks = 1;
  ddp.batch_size = s.data.batch_size / 4;
  const tune::Evaluation faster = ev.evaluate(ddp);
  CHECK_FALSE(faster.fits);
  CHECK(faster.step.to_ms() < r.ranked.front().step.to_ms());  // faster, but it would not fit
}

TEST_CASE("tune: the rank order is searched when asked for, and the faster one picked", "[tune]") {
  // 16 A100s on two nodes, data 4 x pipeline 4: under tp-dp-pp each stage's all-reduce stays in a
  // node (its 4 replicas on neighbouring devices), under tp-pp-dp it crosses the network.
  const plan::Scenario s = plan::load_scenario(source("scenarios/gpipe-1b-4xA100.yaml"), {"parallel.data=4", "parallel.schedule=1f1b"});
  tune::Evaluator ev(s);
  tune::Space space = tune::default_space(s);
  CHECK(space.of("parallel.rank_order").size() == 1);  // not searched unless asked
  for (const char* fixed : {"parallel.data=4", "parallel.pipeline=4", "parallel.tensor=1", "parallel.schedule=1f1b",
                            "parallel.chunks=8", "parallel.precision=bf16", "parallel.activation_checkpointing=false",
                            "parallel.bucket_cap_mb=25", "parallel.first_bucket_mb=1", "parallel.partition_len=balanced",
                            "parallel.sequence_parallel=false", "parallel.shard=none", "parallel.rank_order=tp-dp-pp,tp-pp-dp"})
    tune::search(&space, fixed);
  const auto r = tune::search(ev, space, {});
  // The ranked rows also hold PyTorch's defaults (chunks = pipeline, an even split) as a reference.
  REQUIRE(r.ranked.size() >= 2);
  CHECK(r.ranked[0].config.rank_order == plan::RankOrder::tensor_data_pipeline);
  CHECK(r.ranked[1].config.rank_order == plan::RankOrder::tensor_pipeline_data);
  CHECK(r.ranked[1].config.chunks == r.ranked[0].config.chunks);
  CHECK(r.ranked[0].step.to_ms() < r.ranked[1].step.to_ms());
}

TEST_CASE("tune: the overrides of a configuration plan it exactly as the typed knobs do", "[tune]") {
  const std::string file = source("scenarios/gpipe-1b-4xA100.yaml");
  const plan::Scenario s = plan::load_scenario(file, {});
  tune::Evaluator ev(s);
  size_t invalid = 0;
  std::string why;
  const auto configs = tune::enumerate(ev, tune::default_space(s), &invalid, &why);
  for (size_t i = 0; i < configs.size(); i += configs.size() / 25) {
    std::vector<std::string> sets;
    for (const auto& [k, v] : plan::overrides(plan::settings_of(s), configs[i])) sets.push_back(k + "=" + v);
    const plan::Plan from_file = plan::resolve_plan(plan::load_scenario(file, sets));
    INFO(plan::join(sets));
    CHECK(from_file.partition == ev.plan_of(configs[i]).partition);
    CHECK(full_step_ms(from_file) == ev.evaluate(configs[i]).step.to_ms());
  }
}

TEST_CASE("tune: bad --search and --fix get a clear message", "[tune]") {
  const plan::Scenario s = plan::load_scenario(source("scenarios/mlp-fashion-mnist-pipeline2.yaml"), {});
  tune::Space sp = tune::default_space(s);
  auto message = [&](const std::string& a) {
    try {
      tune::search(&sp, a);
    } catch (const plan::InputError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  CHECK_THAT(message("parallel.chunkz=4"), Catch::Contains("not a key the tuner searches"));
  CHECK_THAT(message("parallel.chunks=4,x"), Catch::Contains("--search parallel.chunks=4,x: 'parallel.chunks' must be"));
  CHECK_THAT(message("parallel.schedule=zigzag"), Catch::Contains("must be one of gpipe | 1f1b"));
  CHECK_THAT(message("parallel.schedule=mine.csv"), Catch::Contains("CSV schedule cannot be tuned"));
  CHECK_THAT(message("parallel.partition_len=[2,0]"), Catch::Contains("'parallel.partition_len[1]' must be"));
  CHECK_THAT(message("data.batch_size=4"), Catch::Contains("not a key the tuner searches"));
  CHECK_THAT(message("parallel.data=3"), Catch::Contains("does not divide the world"));
  CHECK_THAT(message("parallel.chunks"), Catch::Contains("expected KEY=V1,V2"));
  CHECK(message("parallel.partition_len=balanced,[1, 3],[2,2]").empty());
  CHECK(sp.of("parallel.partition_len").size() == 3);
  CHECK_THROWS_AS(tune::fix(&sp, plan::settings_of(s), "hardware"), plan::InputError);
}

TEST_CASE("tune: the command writes a scenario that reproduces its pick, bad flags exit 2", "[tune][cli]") {
  // Its own folder per process: two test runs at once (two checkouts) must not share it.
  const auto out = std::filesystem::temp_directory_path() / ("parallax-tune-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(out);
  const std::string best = (out / "best.yaml").string();
  const auto r = test::run_parallax("tune " + source("scenarios/gpipe-transformer-2xT4.yaml") +
                                    " --search parallel.chunks=2,4,8 --top 3 --json -o " + best);
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["ranked"].size() == 3);
  CHECK(j["configs_evaluated"].get<int>() + j["configs_pruned"].get<int>() + j["configs_over_memory"].get<int>() ==
        j["configs_total"].get<int>());
  const double pick = j["best"]["predicted_step_ms"];
  CHECK(pick == j["ranked"][0]["predicted_step_ms"].get<double>());
  CHECK(pick <= j["baseline"]["predicted_step_ms"].get<double>());
  // The file, read back by the scenario parser, simulates to the same step time.
  const plan::Plan p = plan::resolve_plan(plan::load_scenario(best, {}));
  CHECK(full_step_ms(p) == Approx(pick).epsilon(1e-9));
  // --set flags from the JSON's overrides run exactly the pick too.
  std::vector<std::string> sets;
  for (const auto& [k, v] : j["best"]["overrides"].items()) sets.push_back(k + "=" + v.get<std::string>());
  CHECK(full_step_ms(plan::resolve_plan(plan::load_scenario(source("scenarios/gpipe-transformer-2xT4.yaml"), sets))) ==
        Approx(pick).epsilon(1e-9));

  // A scenario naming its model's config by a path relative to its folder: the written file names
  // it relative to its own, so it loads from anywhere (the shipped Llama scenarios).
  const std::string llama = (out / "llama.yaml").string();
  const auto l = test::run_parallax("tune " + source("scenarios/llama-3.1-8b-64xH100-fsdp.yaml") + " --time-limit 1 --json -o " + llama);
  REQUIRE(l.code == 0);
  CHECK(full_step_ms(plan::resolve_plan(plan::load_scenario(llama, {}))) ==
        Approx(nlohmann::json::parse(l.out)["best"]["predicted_step_ms"].get<double>()).epsilon(1e-9));

  // The last line says what to do with the file: run it, or where the executor cannot train the
  // pick (tensor parallelism, here), predict it and launch it in its trainer.
  const auto text = test::run_parallax("tune " + source("scenarios/gpipe-transformer-2xT4.yaml") +
                                       " --set hardware=cpu-host --search parallel.chunks=2,4 -o " + best);
  REQUIRE(text.code == 0);
  CHECK_THAT(text.out, Catch::Contains("wrote " + best + "; run it with: parallax run " + best));
  // On GPUs this machine lacks (the T4s, where no GPU or no CUDA LibTorch is here): where to run it.
  const auto t4 = test::run_parallax("tune " + source("scenarios/gpipe-transformer-2xT4.yaml") + " --search parallel.chunks=2,4 -o " + best);
  REQUIRE(t4.code == 0);
  CHECK_THAT(t4.out, Catch::Contains("run it with: parallax run " + best) ||
                         Catch::Contains("run it with parallax run " + best + " where it can train (not here: hardware 't4-pcie' trains on CUDA GPUs"));
  const std::string seventy = (out / "seventy.yaml").string();
  const auto predict_only = test::run_parallax("tune " + source("scenarios/llama-3.1-70b-64xH100.yaml") + " --time-limit 1 -o " + seventy);
  REQUIRE(predict_only.code == 0);
  CHECK_THAT(predict_only.out, Catch::Contains("wrote " + seventy + "; parallax run cannot train it (") &&
                                   Catch::Contains("predict it with parallax simulate " + seventy) &&
                                   Catch::Contains("launch it with parallax export megatron " + seventy));
  CHECK_THAT(predict_only.out, !Catch::Contains("run it with: parallax run"));
  // A pick its trainer would refuse (DualPipeV under Megatron-LM, found with --any-trainer) is not
  // offered to its export.
  const auto any = test::run_parallax("tune " + source("scenarios/llama-3.1-70b-64xH100.yaml") +
                                      " --any-trainer --search parallel.schedule=dualpipev --time-limit 1 -o " + seventy);
  REQUIRE(any.code == 0);
  CHECK_THAT(any.out, Catch::Contains("predict it with parallax simulate " + seventy) && !Catch::Contains("parallax export"));
  std::filesystem::remove(seventy);

  // A profile named by {profile: FILE, nodes: N} relative to the scenario's folder: the written
  // file names it relative to its own folder, so it loads (it had kept the path as given).
  const auto job = out / "job", picks = out / "picks";
  std::filesystem::create_directories(job / "hw");
  std::filesystem::create_directories(picks);
  std::filesystem::copy_file(source("scenarios/hardware/t4-pcie.yaml"), job / "hw" / "t4.yaml",
                             std::filesystem::copy_options::overwrite_existing);
  {
    std::ifstream in(source("scenarios/gpipe-transformer-2xT4.yaml"));
    std::ofstream o(job / "s.yaml");
    for (std::string line; std::getline(in, line);)
      o << (line.rfind("hardware:", 0) == 0 ? "hardware: {profile: hw/t4.yaml, nodes: 1}" : line) << "\n";
  }
  const std::string picked = (picks / "out.yaml").string();
  const auto mapped = test::run_parallax("tune " + (job / "s.yaml").string() + " --search parallel.chunks=2,4 -o " + picked);
  REQUIRE(mapped.code == 0);
  CHECK_THAT(mapped.out, Catch::Contains("parallax run " + picked));
  CHECK_NOTHROW(plan::load_scenario(picked, {}));
  std::filesystem::remove_all(job);
  std::filesystem::remove_all(picks);

  std::filesystem::remove(best);
  const auto bad = test::run_parallax("tune --search parallel.chunks=0 -o " + best, "", true);
  CHECK(bad.code == 2);
  CHECK_THAT(bad.out, Catch::Contains("--search parallel.chunks=0"));
  CHECK_FALSE(std::filesystem::exists(best));
  // A search none of whose values makes a valid plan (neither 3 nor 5 divides the batch), and
  // counts that would read as "not given".
  const auto none = test::run_parallax("tune --search parallel.chunks=3,5", "", true);
  CHECK(none.code == 2);
  CHECK_THAT(none.out, Catch::Contains("none of the") && Catch::Contains("not divisible"));
  // A layout search whose values multiply to no plan of the world: none to rank, though the
  // scenario as given would be the table's one row.
  const auto no_layout = test::run_parallax("tune " + source("scenarios/mlp-fashion-mnist-ddp2.yaml") +
                                                " --fix parallel.data --search parallel.pipeline=2",
                                            "", true);
  CHECK(no_layout.code == 2);
  CHECK_THAT(no_layout.out, Catch::Contains("--search parallel.pipeline=2 --fix parallel.data: no data x context x pipeline x tensor"));
  for (const char* flag : {"--world 0", "--threads -1", "--time-limit -5", "--max-configs 0"}) CHECK(test::run_parallax(std::string("tune ") + flag).code == 2);
  CHECK(test::run_parallax("tune --objective speed").code == 2);
  CHECK(test::run_parallax("tune --fix parallel.colour").code == 2);
  std::filesystem::remove_all(out);
}

TEST_CASE("tune: with a calibrated profile the default space holds only the precisions it measured", "[tune]") {
  plan::Scenario s = plan::load_scenario(source("scenarios/mlp-fashion-mnist-pipeline2.yaml"), {});
  using plan::Precision;
  REQUIRE(s.hardware.device.peak_tflops.count(Precision::bf16));  // the device offers both
  REQUIRE(s.hardware.device.peak_tflops.count(Precision::fp32));
  auto calibrate_at = [&](std::vector<Precision> precisions) {
    plan::Calibration cal;
    for (Precision p : precisions)
      for (const plan::Layer& layer : s.layers) {
        plan::SignatureCost c;
        c.signature = plan::layer_signature(layer, p);
        cal.layers[c.signature] = c;
      }
    s.hardware.calibration = cal;
    std::vector<Precision> out;
    const tune::Space space = tune::default_space(s);
    for (const auto& v : space.of("parallel.precision"))
      out.push_back(*plan::precision_from_name(std::get<std::string>(v)));
    return out;
  };
  CHECK(calibrate_at({Precision::fp32}) == std::vector<Precision>{Precision::fp32});
  CHECK(calibrate_at({Precision::fp32, Precision::bf16}) == std::vector<Precision>{Precision::fp32, Precision::bf16});
  // A profile measured for other layers says nothing about this model: every precision stays.
  CHECK(calibrate_at({}).size() == 2);
}

// A profile fitted to fp32 runs (calibrate --from-trace): its layer factors apply at fp32 only, so
// bf16 would race unfitted costs against fitted ones; the tuner had picked bf16 at 2.3x on a
// fitted TorchRec job for that alone. The scenario's own precision competes as given.
TEST_CASE("tune: with a fitted profile the default space keeps the fitted precision and the scenario's", "[tune]") {
  plan::Scenario s = plan::load_scenario(source("scenarios/mlp-fashion-mnist-pipeline2.yaml"), {});
  REQUIRE(s.hardware.device.peak_tflops.size() >= 2);
  const auto searched = [&] {
    std::vector<std::string> out;
    const tune::Space space = tune::default_space(s);  // of() refers into it
    for (const auto& v : space.of("parallel.precision")) out.push_back(std::get<std::string>(v));
    return out;
  };
  CHECK(searched().size() == s.hardware.device.peak_tflops.size());
  s.hardware.fitted = plan::FittedCosts{};
  s.hardware.fitted->precision = "fp32";
  CHECK(searched() == std::vector<std::string>{"fp32"});
  s.parallel.precision = plan::Precision::bf16;
  CHECK(searched() == std::vector<std::string>{"fp32", "bf16"});
  s.hardware.fitted->precision = "";  // a profile written before fits named their precision
  CHECK(searched().size() == s.hardware.device.peak_tflops.size());
}

TEST_CASE("tune: one pipeline rank runs 1F1B, GPipe's time with one micro-batch held", "[tune]") {
  // A GPipe scenario: the layouts without a pipeline take 1F1B (each micro-batch's forward and
  // backward in turn, as the trainers run them), never GPipe's every activation at once.
  const plan::Scenario s = plan::load_scenario(source("scenarios/gpipe-1b-4xA100.yaml"), {});
  REQUIRE(s.parallel.schedule == schedule::ScheduleKind::gpipe);
  tune::Evaluator ev(s);
  size_t invalid = 0, unpipelined = 0;
  std::string example;
  for (const plan::Settings& c : tune::enumerate(ev, tune::default_space(s), &invalid, &example)) {
    if (c.pipeline != 1) continue;
    ++unpipelined;
    CHECK(c.schedule == schedule::ScheduleKind::one_f_one_b);
  }
  CHECK(unpipelined > 0);
}

TEST_CASE("tune: every tuned knob of the table is searched, as its coupling says", "[tune]") {
  // 16 A100s: a layout, a schedule, tensor parallelism and buckets all have room to vary. Each
  // tuned knob in turn keeps the values its table entry gives, and so do the layout and the
  // schedule's knobs (which derive each other's); every other knob is fixed to the scenario's. The
  // enumeration must then give at least two values of it.
  const plan::Scenario dense = plan::load_scenario(source("scenarios/gpipe-1b-4xA100.yaml"), {"parallel.data=4", "parallel.schedule=1f1b"});
  // The expert knobs vary only for a mixture-of-experts model: the same with 8 experts a block.
  const plan::Scenario moe = plan::load_scenario(source("scenarios/gpipe-1b-4xA100.yaml"),
                                                 {"parallel.data=4", "parallel.schedule=1f1b", "model.experts=8"});
  tune::Evaluator dense_ev(dense), moe_ev(moe);
  // One value by default here (searched only when asked, or, for context, sequences too short to
  // split by default): asked for two.
  const std::map<std::string, std::string> asked = {{"parallel.grad_accumulation", "1,2"},
                                                    {"parallel.rank_order", "tp-dp-pp,tp-pp-dp"},
                                                    {"parallel.context", "1,2"},
                                                    {"parallel.expert_tensor", "tensor,1"},
                                                    {"parallel.overlap_moe_expert_parallel_comm", "false,true"},
                                                    {"parallel.reshard_after_forward", "true,false"}};
  int tuned = 0;
  for (const plan::Knob& k : plan::knobs()) {
    if (!k.tuned()) continue;
    ++tuned;
    INFO(k.key);
    const bool expert_knob = k.key.rfind("parallel.expert", 0) == 0 || k.key == "parallel.overlap_moe_expert_parallel_comm";
    const plan::Scenario& s = expert_knob ? moe : dense;
    tune::Evaluator& ev = expert_knob ? moe_ev : dense_ev;
    tune::Space space = tune::default_space(s);
    for (const plan::Knob& other : plan::knobs()) {
      const bool kept = other.key == k.key || other.coupling == plan::Coupling::layout ||
                        other.coupling == plan::Coupling::schedule;
      if (other.tuned() && !kept) tune::fix(&space, plan::settings_of(s), other.key);
    }
    if (const auto it = asked.find(k.key); it != asked.end()) tune::search(&space, k.key + "=" + it->second);
    // A shard group differs from another only where something is sharded; a reshard only under FSDP.
    if (k.key == "parallel.shard_group" || k.key == "parallel.reshard_after_forward") tune::search(&space, "parallel.shard=full");
    // Combined 1F1B hides expert parallelism's all-to-alls: only with some.
    if (k.key == "parallel.overlap_moe_expert_parallel_comm") tune::search(&space, "parallel.expert=2");
    size_t invalid = 0;
    std::string example;
    std::set<std::string> seen;
    for (const plan::Settings& c : tune::enumerate(ev, space, &invalid, &example)) seen.insert(k.format(k.get(c)));
    CHECK(seen.size() >= 2);
  }
  CHECK(tuned == static_cast<int>(tune::search_keys().size()));
}

TEST_CASE("tune: the why's critical path names a split backward's halves as compute, not point-to-point", "[tune]") {
  // Zero-bubble 1F1B splits each backward into I (input gradients) and W (weight gradients); on
  // this compute-bound job they and the forwards make up the critical path, as simulate says.
  const plan::Scenario s = plan::load_scenario(source("scenarios/gpipe-1b-4xA100.yaml"),
                                               {"parallel.schedule=zbv-zero-bubble", "parallel.virtual=2"});
  tune::Evaluator ev(s);
  const std::string path = tune::detail_of(ev, plan::settings_of(s)).critical_path;
  INFO(path);
  CHECK_THAT(path, Catch::Contains("gradients"));
  CHECK_THAT(path, !Catch::Contains("point-to-point"));
}

TEST_CASE("tune: a row's imbalance is simulate's, and a balanced partition takes most of it away", "[tune]") {
  // Stage 0 holds the embedding and one block, the others 6-7 each: it waits out the rest.
  const std::string path = source("scenarios/gpipe-1b-4xA100.yaml");
  const plan::Scenario uneven = plan::load_scenario(path, {"parallel.partition_len=[2, 6, 7, 7]"});
  tune::Evaluator ev(uneven);
  const tune::Detail d = tune::detail_of(ev, plan::settings_of(uneven));
  const plan::Plan p = plan::resolve_plan(uneven);
  CHECK(d.imbalance == Approx(sim::compute_metrics(p, sim::simulate(p)).imbalance_fraction));
  CHECK(d.imbalance > 0.15);
  const plan::Scenario balanced = plan::load_scenario(path, {"parallel.partition_len=balanced"});
  CHECK(tune::detail_of(ev, plan::settings_of(balanced)).imbalance < d.imbalance / 2);
}

TEST_CASE("tune: a Megatron-LM or torchtitan job is tuned to what its trainer runs, and export takes the pick", "[tune]") {
  // The 70B job as Megatron-LM runs it, its layout left to the tuner over a node's tensor group.
  const plan::Scenario s = plan::load_scenario(source("scenarios/llama-3.1-70b-64xH100.yaml"), {});
  tune::Evaluator ev(s);
  tune::Space space = tune::default_space(s);
  CHECK(space.trainer == plan::Framework::megatron);
  for (const char* fixed : {"parallel.tensor=8", "parallel.context=1", "parallel.sequence_parallel=true", "parallel.precision=bf16",
                            "parallel.activation_checkpointing=selective", "parallel.shard=optimizer"})
    tune::search(&space, fixed);
  tune::SearchOptions o;
  o.top = 10;
  auto refused = [&](const tune::Evaluation& e, plan::Framework trainer) {
    plan::Scenario c = s;
    plan::apply(e.config, &c);
    return plan::trainer_refusal(c, trainer).has_value();
  };
  const auto megatron = tune::search(ev, space, o);
  REQUIRE(megatron.ranked.size() == 10);
  for (const auto& e : megatron.ranked) {
    INFO(plan::describe(e.changes));
    CHECK_FALSE(refused(e, plan::Framework::megatron));
    // What export writes for the pick, the trainer's own rules passed.
    plan::Scenario c = s;
    plan::apply(e.config, &c);
    CHECK_NOTHROW(plan::export_megatron(plan::resolve_plan(c)));
  }
  for (const auto& e : megatron.pareto) CHECK_FALSE(refused(e, plan::Framework::megatron));
  // Without the trainer's rules the same space ranks schedules Megatron-LM lacks (the zero-bubble
  // and V-shaped ones) ahead of them: the rules are what keeps them out.
  space.trainer = plan::Framework::pytorch;
  const auto any = tune::search(ev, space, o);
  CHECK(std::any_of(any.ranked.begin(), any.ranked.end(), [&](const tune::Evaluation& e) { return refused(e, plan::Framework::megatron); }));
  CHECK(any.ranked.front().step <= megatron.ranked.front().step);
  CHECK(any.combinations > megatron.combinations);
}

TEST_CASE("tune: the scenario as given competes only as a plan of the searched world that its trainer runs", "[tune]") {
  // --world 2 of a 4-GPU scenario: every ranked plan is of 2 ranks, the 4-rank one as given never.
  const plan::Scenario gpipe = plan::load_scenario(source("scenarios/gpipe-1b-4xA100.yaml"), {});
  tune::Evaluator ev(gpipe);
  tune::Space two = tune::default_space(gpipe, 2);
  tune::search(&two, "parallel.precision=bf16");
  tune::SearchOptions o;
  o.top = 50;
  const auto r = tune::search(ev, two, o);
  REQUIRE_FALSE(r.ranked.empty());
  for (const auto& e : r.ranked) CHECK(e.config.data * e.config.context * e.config.pipeline * e.config.tensor == 2);
  // A Megatron-LM job given with a schedule Megatron-LM lacks: the tuner ranks what export takes.
  const plan::Scenario dualpipe = plan::load_scenario(source("scenarios/llama-3.1-70b-64xH100.yaml"),
                                                      {"parallel.schedule=dualpipev", "parallel.virtual=2", "parallel.pipeline=8",
                                                       "parallel.data=1", "parallel.partition_len=balanced"});
  tune::Evaluator mev(dualpipe);
  tune::Space space = tune::default_space(dualpipe);
  for (const char* fixed : {"parallel.tensor=8", "parallel.context=1", "parallel.precision=bf16", "parallel.shard=optimizer",
                            "parallel.activation_checkpointing=selective"})
    tune::search(&space, fixed);
  o.top = 10;
  const auto m = tune::search(mev, space, o);
  REQUIRE(m.baseline.simulated());
  for (const auto& e : m.ranked) CHECK(e.config.schedule != schedule::ScheduleKind::dualpipev);
}

// Beyond 8 stages the search moves a layer at the first and last boundaries, and at the two around
// the stage the layer costs load most, where the fastest split of the 70B job lies.
TEST_CASE("tune: many stages' splits move a layer around the most loaded stage too", "[tune]") {
  const plan::Scenario s = plan::load_scenario(source("scenarios/llama-3.1-70b-64xH100.yaml"), {});
  tune::Evaluator ev(s);
  tune::Space space = tune::default_space(s);
  for (const char* fixed : {"parallel.tensor=8", "parallel.context=1", "parallel.pipeline=4", "parallel.virtual=5",
                            "parallel.schedule=interleaved-1f1b", "parallel.chunks=64", "parallel.precision=bf16",
                            "parallel.activation_checkpointing=false", "parallel.sequence_parallel=true", "parallel.shard=optimizer"})
    tune::search(&space, fixed);
  size_t invalid = 0;
  std::string example;
  size_t over = 0;
  const auto configs = tune::enumerate(ev, space, &invalid, &example, &over, false);
  REQUIRE_FALSE(configs.empty());
  const plan::Settings& any = configs.front();
  const plan::PartitionLen balanced = ev.balanced_split(any);
  REQUIRE(balanced.lens.size() == 20);
  // The stage the costs load most, as the enumeration finds it.
  const auto& costs = ev.layer_costs(any, any.batch_size / any.chunks);
  size_t layer = 0, loaded = 0;
  int64_t heaviest = -1;
  for (size_t st = 0; st < balanced.lens.size(); ++st) {
    int64_t sum = 0;
    for (int i = 0; i < balanced.lens[st]; ++i, ++layer)
      sum += (costs[layer].forward + costs[layer].backward + costs[layer].recompute).count_ns();
    if (sum > heaviest) heaviest = sum, loaded = st;
  }
  std::set<size_t> moved;  // boundaries a searched split moves
  for (const auto& c : configs)
    for (size_t b = 0; b + 1 < c.partition_len.lens.size(); ++b)
      if (c.partition_len.lens[b] != balanced.lens[b]) {
        moved.insert(b);
        break;
      }
  CHECK(moved.count(0));
  CHECK(moved.count(18));
  if (loaded > 0) CHECK(moved.count(loaded - 1));
  if (loaded < 19) CHECK(moved.count(loaded));
  CHECK(moved.size() <= 4);
}

TEST_CASE("tune: trainer rules are export's, key by key", "[tune][plan]") {
  const std::string file = source("scenarios/llama-3.1-70b-64xH100.yaml");
  struct Case {
    plan::Framework trainer;
    std::vector<std::string> sets;
    std::string key;  // the knob trainer_refusal names; export exits 2 there
  };
  const std::vector<Case> cases = {
      {plan::Framework::megatron, {"parallel.schedule=dualpipev", "parallel.virtual=2", "parallel.partition_len=balanced"}, "parallel.schedule"},
      {plan::Framework::megatron, {"parallel.chunks=6", "data.batch_size=6"}, "parallel.chunks"},  // 6 micro-batches over 4 stages, interleaved
      {plan::Framework::megatron, {"parallel.grad_accumulation=2"}, "parallel.grad_accumulation"},
      {plan::Framework::megatron, {"parallel.shard=full"}, "parallel.shard"},
      {plan::Framework::megatron, {"parallel.activation_checkpointing=selective_op"}, "parallel.activation_checkpointing"},
      {plan::Framework::torchtitan, {"parallel.shard=none"}, "parallel.data"},  // replicas beside tensor and pipeline without FSDP
      {plan::Framework::torchtitan, {"parallel.shard=full", "parallel.sequence_parallel=false"}, "parallel.sequence_parallel"},
      {plan::Framework::torchtitan, {"parallel.shard=full", "parallel.precision=fp16"}, "parallel.precision"},
      {plan::Framework::torchtitan, {"parallel.shard=full", "parallel.activation_checkpointing=stage"}, "parallel.activation_checkpointing"},
  };
  for (const auto& c : cases) {
    INFO(plan::join(c.sets, " "));
    const plan::Scenario s = plan::load_scenario(file, c.sets);
    const auto refusal = plan::trainer_refusal(s, c.trainer);
    REQUIRE(refusal);
    CHECK(refusal->key == c.key);
    const plan::Plan p = plan::resolve_plan(s);
    try {
      c.trainer == plan::Framework::megatron ? (void)plan::export_megatron(p) : (void)plan::export_torchtitan(p);
      FAIL("export took it");
    } catch (const plan::InputError& e) {
      CHECK(e.message() == refusal->why);
      CHECK(e.where().str() == s.where(c.key).str());  // a --set names its flag, a file's key its line
      CHECK_FALSE(e.where().str().empty());
    }
  }
  // The scenario as shipped runs on Megatron-LM; PyTorch's own engine refuses nothing here.
  const plan::Scenario shipped = plan::load_scenario(file, {});
  CHECK_FALSE(plan::trainer_refusal(shipped, plan::Framework::megatron));
  CHECK_FALSE(plan::trainer_refusal(plan::load_scenario(file, {"parallel.schedule=dualpipev", "parallel.virtual=2", "parallel.partition_len=balanced"}), plan::Framework::pytorch));
}

TEST_CASE("tune: an FSDP job weighs shard groups of a node and of 2, 4, ... nodes", "[tune]") {
  const plan::Scenario fsdp = plan::load_scenario(source("scenarios/llama-3.1-8b-64xH100-fsdp.yaml"), {});
  REQUIRE(fsdp.parallel.shard == plan::Shard::full);
  const auto groups = tune::default_space(fsdp).of("parallel.shard_group");
  CHECK(groups == std::vector<plan::KnobValue>{0, 8, 16, 32});  // all of data, a node, 2 and 4 nodes of the 64 GPUs
  // Without sharding there is no group to weigh beyond all of data and a node.
  const plan::Scenario ddp = plan::load_scenario(source("scenarios/llama-3.1-8b-64xH100-fsdp.yaml"), {"parallel.shard=none"});
  CHECK(tune::default_space(ddp).of("parallel.shard_group") == std::vector<plan::KnobValue>{0, 8});
}

// Ctrl-C (SearchOptions::cancel) reaches the listing of a space of millions: DeepSeek-V3's is
// listed in about ten seconds on these VMs, and a cancelled search ends within a few thousand
// combinations of it.
TEST_CASE("tune: a cancelled search stops while it lists the space, not after", "[tune]") {
  const plan::Scenario s = plan::load_scenario(source("scenarios/moe-671b-2048xH100.yaml"), {});
  tune::Evaluator ev(s);
  std::atomic<bool> cancel{true};
  tune::SearchOptions o;
  o.cancel = &cancel;
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = tune::search(ev, tune::default_space(s), o);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // It says where it stopped: its counts are of the part listed, not of the space.
  CHECK_THAT(r.stopped, Catch::StartsWith("interrupted while listing the space: nothing planned"));
  CHECK(r.ranked.empty());
  CHECK(seconds < 5.0);  // the whole listing alone took 10.7 s on this VM (2026-12-07); cancelled, under 1 s
}
