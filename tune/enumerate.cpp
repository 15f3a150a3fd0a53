#include "tune/enumerate.hpp"

#include <algorithm>
#include <array>
#include <functional>
#include <map>
#include <random>

#include "plan/memory.hpp"
#include "plan/search_defaults.hpp"
#include "plan/trainer_rules.hpp"

namespace parallax::tune {
namespace {

// The balanced split and every split one layer away from it at one boundary.
// Beyond kManyStages stages, only the first and the last boundary move, and the two around the
// stage the layer costs load most: the others fall between runs of a transformer's identical
// blocks, where a move lengthens one stage by a block, and a 3,072-GPU job's 2 x (stages - 1)
// variants of each configuration would be most of its space. (The Llama 3.1 70B job's fastest
// split moved one block off its most loaded stage, at boundary 13 of 16: 2026-12-06.)
constexpr int kManyStages = 8;

// The stage of `split` whose layers weigh the most, as the balanced split weighs them.
size_t most_loaded_stage(Evaluator& ev, const plan::Settings& c, const plan::PartitionLen& split) {
  const auto& costs = ev.layer_costs(c, c.batch_size / c.chunks);
  size_t most = 0, layer = 0;
  int64_t heaviest = -1;
  for (size_t st = 0; st < split.lens.size(); ++st) {
    int64_t sum = 0;
    for (int i = 0; i < split.lens[st] && layer < costs.size(); ++i, ++layer) sum += balance_weight(costs[layer]);
    if (sum > heaviest) heaviest = sum, most = st;
  }
  return most;
}

std::vector<plan::PartitionLen> partitions_around(Evaluator& ev, const plan::Settings& c) {
  std::vector<plan::PartitionLen> out = {{}};  // balanced
  if (c.stages() < 2) return out;
  const plan::PartitionLen balanced = ev.balanced_split(c);
  const size_t last = balanced.lens.size() - 2;
  const size_t loaded = c.stages() > kManyStages ? most_loaded_stage(ev, c, balanced) : 0;
  for (size_t b = 0; b + 1 < balanced.lens.size(); ++b) {
    // Boundary b lies between stages b and b + 1.
    const bool around_loaded = b == loaded || b + 1 == loaded;
    if (c.stages() > kManyStages && b != 0 && b != last && !around_loaded) continue;
    for (int dir : {-1, +1}) {
      plan::PartitionLen s = balanced;
      s.lens[b] += dir;
      s.lens[b + 1] -= dir;
      if (s.lens[b] >= 1 && s.lens[b + 1] >= 1) out.push_back(s);
    }
  }
  return out;
}

// What a configuration's most loaded pipeline rank holds before any activation: its share of the
// parameters with their gradients, optimizer state and DDP buckets (at least the average share).
// Above the device's memory no split, bucket size or schedule can make it fit.
int64_t static_memory_floor(const plan::Scenario& s, const std::array<int64_t, 3>& params_on_rank) {
  const int p = s.parallel.pipeline;
  // The average rank's share of the embedding's and output layer's, which hold no fp8 copies.
  return plan::sharded_state_bytes(s, params_on_rank[0] / p, params_on_rank[1] / p, params_on_rank[2] / p).total();
}

// A configuration that repeats another the space holds: sharding with nothing to shard (one
// replica), a shard group without sharding, or one spanning all of data (shard_group 0); whole
// experts (expert_tensor 1) without tensor parallelism, which splits none anyway; parameters kept
// gathered after forward (reshard_after_forward false) without FSDP's sharding of them.
bool repeats_another(const Space& sp, const plan::Settings& c) {
  auto holds = [&](const char* key, const plan::KnobValue& v) {
    const auto& values = sp.of(key);
    return std::find(values.begin(), values.end(), v) != values.end();
  };
  if (c.expert_tensor == 1 && c.tensor == 1 && holds("parallel.expert_tensor", 0)) return true;
  const bool unsharded = holds("parallel.shard", std::string("none"));
  if (c.shard != plan::Shard::none && c.replicas() == 1 && unsharded) return true;
  if (!c.reshard_after_forward && c.shard != plan::Shard::full && holds("parallel.reshard_after_forward", true)) return true;
  const bool whole = holds("parallel.shard_group", 0);
  return c.shard_group != 0 && whole && (c.shard == plan::Shard::none || c.shard_group == c.data);
}

// The tuned knobs the space gives values to that the enumeration does not couple (the table's
// Coupling::crossed): each is crossed with the rest freely.
std::vector<const plan::Knob*> free_knobs(const Space& sp) {
  std::vector<const plan::Knob*> free;
  for (const plan::Knob& k : plan::knobs())
    if (k.tuned() && k.coupling == plan::Coupling::crossed && !sp.of(k.key).empty()) free.push_back(&k);
  return free;
}

// Calls `each` with `c` set to every combination of the free knobs' values (the table's last
// knob varies slowest).
void cross_free_knobs(const std::vector<const plan::Knob*>& free, const Space& sp, plan::Settings c,
                      const std::function<void(const plan::Settings&)>& each) {
  std::function<void(size_t)> level = [&](size_t n) {
    if (n == 0) return each(c);
    const plan::Knob& k = *free[n - 1];
    for (const auto& v : sp.of(k.key)) {
      k.set(c, v);
      level(n - 1);
    }
  };
  level(free.size());
}

// The stages per rank a schedule is searched at: the space's for the looped multi-stage ones
// (and one, ZB-H1, for interleaved-zero-bubble), two for the V-shaped ones, else one.
std::vector<int> stage_counts(schedule::ScheduleKind kind, const std::vector<int>& virtual_values) {
  switch (kind) {
    case schedule::ScheduleKind::interleaved_1f1b:
    case schedule::ScheduleKind::looped_bfs: return virtual_values;
    case schedule::ScheduleKind::interleaved_zero_bubble: {
      std::vector<int> v = {1};
      for (int x : virtual_values)
        if (x != 1) v.push_back(x);
      return v;
    }
    case schedule::ScheduleKind::zbv_zero_bubble:
    case schedule::ScheduleKind::dualpipev: return {2};
    default: return {1};
  }
}

}  // namespace

std::vector<plan::Settings> enumerate(Evaluator& ev, const Space& sp, size_t* invalid, std::string* invalid_example,
                                      size_t* over_memory, bool bucket_variants, Sample* sample) {
  const plan::Scenario& base = ev.base();
  const plan::Settings& given = ev.given();
  const int global = given.global_batch();
  plan::Scenario scratch = base;  // knobs are set on it to check them, nothing is copied per try
  // The rules that reject most of a large space's crossed combinations, checked here without
  // plan::check_scenario's exception (which says the same, too slowly for hundreds of millions):
  // sequence parallelism without tensor parallelism, and a MoE model's experts that do not divide
  // over the expert degree, or the degree over the ranks it lies in (with tensor > 1, sequence
  // parallelism required).
  const plan::Layer* moe = plan::first_moe_layer(base.layers);
  // The example said when nothing is valid is the failure of the combination that got furthest
  // through the checks below (the batch's split, the layout, the crossed rules, the rest of the
  // scenario's, the trainer's): the first failure met is mostly an early one, a combination the
  // user's restriction did not aim at (chunks 1 for a --search of DualPipeV, whose every
  // combination with enough chunks the trainer refuses).
  enum Stage { batch_split, layout_rules, crossed_rules, scenario_rules, trainer_rules };
  int example_stage = -1;
  auto note = [&](Stage stage, const std::string& why) {
    if (static_cast<int>(stage) <= example_stage) return;
    example_stage = stage;
    *invalid_example = why;
  };
  auto plainly_invalid = [&](const plan::Settings& c) {
    std::string why;
    if (c.sequence_parallel && c.tensor == 1) why = "sequence_parallel needs tensor > 1";
    else if (c.expert > 1 && !moe) why = "expert " + std::to_string(c.expert) + " needs a mixture-of-experts model; this one has no experts";
    else if (c.expert > 1 && moe->shape.moe.experts % c.expert != 0)
      why = "expert " + std::to_string(c.expert) + " does not divide the model's " + std::to_string(moe->shape.moe.experts) + " experts";
    else if (c.expert > 1 && (c.tensor * c.replicas() / c.expert_tensor_ways()) % c.expert != 0)
      why = "expert " + std::to_string(c.expert) + " does not divide the ranks its experts lie over";
    else if (c.expert > 1 && c.tensor > 1 && !c.sequence_parallel)
      why = "expert parallelism with tensor > 1 needs sequence_parallel";
    if (why.empty()) return false;
    ++*invalid;
    note(crossed_rules, why);
    return true;
  };
  // Whether `c` passes `check`, one of plan::check_scenario's halves (the first failure's message
  // is the example). The layout's rules are checked once per layout (below); a configuration then
  // needs only the rest.
  auto passes = [&](const plan::Settings& c, void (*check)(const plan::Scenario&)) {
    try {
      plan::apply(c, &scratch);
      check(scratch);
      return true;
    } catch (const plan::InputError& e) {
      note(check == plan::check_layout ? layout_rules : scenario_rules, e.message());
      return false;
    }
  };
  // What the scenario's trainer runs (Space::trainer), on `scratch` as passes() left it.
  auto trainer_runs = [&] {
    const auto refusal = plan::trainer_refusal(scratch, sp.trainer);
    if (refusal) note(trainer_rules, refusal->why + "; --any-trainer also searches what the trainer does not run");
    return !refusal;
  };
  auto valid = [&](const plan::Settings& c) {
    if (passes(c, plan::check_beyond_layout) && trainer_runs()) return true;
    ++*invalid;
    return false;
  };
  const plan::Knob& schedule = plan::knob("parallel.schedule");
  const auto& schedules = sp.of("parallel.schedule");
  const bool has_1f1b = std::count(schedules.begin(), schedules.end(), plan::KnobValue(std::string("1f1b"))) > 0;
  const std::vector<int> data = sp.ints("parallel.data"), tensors = sp.ints("parallel.tensor");
  // The space's lists, typed once rather than per configuration.
  const std::vector<const plan::Knob*> free = free_knobs(sp);
  const std::vector<int> virtual_values = sp.ints("parallel.virtual");
  std::vector<plan::PartitionLen> given_splits;  // empty: around each configuration's balanced split
  for (const auto& split : sp.of("parallel.partition_len")) given_splits.push_back(std::get<plan::PartitionLen>(split));
  const std::vector<std::pair<double, double>> buckets = sp.bucket_grid();
  const plan::Device& device = base.hardware.device;
  // A rank's parameters and, of them, its experts', by tensor, expert and expert tensor degree.
  // By degree: a rank's parameters, its experts', and its embedding's and output layer's.
  std::map<std::tuple<int, int, int>, std::array<int64_t, 3>> params_by_degree;
  auto params_on = [&](const plan::Settings& c) {
    const int t = c.tensor, e = c.expert, et = c.expert_tensor_ways();
    auto [it, fresh] = params_by_degree.try_emplace({t, e, et}, std::array<int64_t, 3>{0, 0, 0});
    if (fresh)
      for (const auto& l : base.layers) {
        it->second[0] += l.param_count(t, e, et);
        it->second[1] += l.expert_param_count(t, e, et);
        it->second[2] += plan::params_without_fp8_copies(l, t, e, et);
      }
    return it->second;
  };
  std::vector<plan::Settings> out;
  // Sampling past the cap (Sample): a combination is looked at with chance 1 / one_in.
  std::mt19937_64 rng(61);
  auto sampled_out = [&] { return sample && sample->one_in > 1 && rng() % sample->one_in != 0; };
  // Asked every 4,096 combinations looked at (a check costs about a microsecond): once true, the
  // rest of the space is passed over.
  size_t looked_at = 0;
  bool stopped = false;
  auto stopping = [&] {
    if (!stopped && sample && sample->stop && (++looked_at & 4095) == 0) stopped = sample->stop();
    return stopped;
  };
  auto thin_past_cap = [&] {
    if (!sample || sample->cap == 0 || out.size() <= sample->cap) return;
    std::vector<plan::Settings> kept;
    kept.reserve(out.size() / 2 + 1);
    for (plan::Settings& c : out)
      if (rng() % 2 == 0) kept.push_back(std::move(c));
    out = std::move(kept);
    sample->one_in *= 2;
    *invalid /= 2;  // the counts so far, as if counted at the new rate
    if (over_memory) *over_memory /= 2;
  };
  const std::vector<int> contexts = sp.of("parallel.context").empty() ? std::vector<int>{given.context} : sp.ints("parallel.context");
  for (int t : tensors.empty() ? std::vector<int>{1} : tensors)
  for (int cp : contexts)
  for (int p : sp.ints("parallel.pipeline")) {
    if (sp.world % (p * t * cp) != 0 || !std::count(data.begin(), data.end(), sp.world / (p * t * cp))) continue;
    const int d = sp.world / (p * t * cp);
    for (int ga : sp.ints("parallel.grad_accumulation")) {
      if (global % (d * ga) != 0) {
        ++*invalid;
        note(batch_split, "the global batch of " + std::to_string(global) + " does not split into data " + std::to_string(d) +
                              " x grad_accumulation " + std::to_string(ga));
        continue;
      }
      const int batch = global / (d * ga);
      for (const plan::KnobValue& kind_value : schedules) {
        plan::Settings layout = given;
        schedule.set(layout, kind_value);
        const schedule::ScheduleKind kind = layout.schedule;
        // One pipeline rank: 1F1B runs each micro-batch's forward and backward in turn, GPipe's
        // step time with one micro-batch's activations held instead of all (what the trainers do
        // without a pipeline), so GPipe is searched there only where the space has no 1F1B; the
        // schedules of several stages per rank or split backwards have no bubble to fill.
        const bool several_stages = kind != schedule::ScheduleKind::gpipe && kind != schedule::ScheduleKind::one_f_one_b;
        if (p == 1 && (several_stages || (kind == schedule::ScheduleKind::gpipe && has_1f1b))) continue;
        const std::vector<int> virtuals = stage_counts(kind, virtual_values);
        const std::vector<int> chunk_counts = sp.of("parallel.chunks").empty() ? plan::divisors(batch) : sp.ints("parallel.chunks");
        for (int v : virtuals)
          for (int chunks : chunk_counts) {
            layout.data = d;
            layout.pipeline = p;
            layout.tensor = t;
            layout.context = cp;
            layout.virtual_stages = v;
            layout.chunks = chunks;
            layout.batch_size = batch;
            layout.grad_accumulation = ga;
            layout.partition_len = {};
            if (!passes(layout, plan::check_layout)) {
              // Every combination of the crossed knobs fails alike: counted as they would be one
              // by one (sampled, repeats left out), without checking each (a 3,072-GPU job's
              // space has hundreds of thousands of them).
              cross_free_knobs(free, sp, layout, [&](const plan::Settings& c) {
                if (!stopping() && !sampled_out() && !repeats_another(sp, c)) ++*invalid;
              });
              continue;
            }
            cross_free_knobs(free, sp, layout, [&](plan::Settings c) {
              if (stopping() || sampled_out()) return;
              if (repeats_another(sp, c) || plainly_invalid(c) || !valid(c)) return;
              if (over_memory && !device.holds(static_memory_floor(scratch, params_on(c)))) {
                ++*over_memory;  // once, without its split and bucket variants
                return;
              }
              const std::vector<plan::PartitionLen> splits = given_splits.empty() ? partitions_around(ev, c) : given_splits;
              for (const auto& split : splits) {
                c.partition_len = split;
                if (split.mode != plan::PartitionLen::Mode::balanced && !valid(c)) continue;
                // No DDP, a layer a bucket (sharded gradients), one bucket after the backward or
                // Megatron-core's buckets: the bucket knobs change nothing.
                if (!bucket_variants || !c.bucket_caps_apply()) {
                  out.push_back(c);
                  continue;
                }
                for (const auto& [cap, first] : buckets) {
                  c.bucket_cap_mb = cap;
                  c.first_bucket_mb = first;
                  out.push_back(c);
                }
              }
              thin_past_cap();
            });
          }
      }
    }
  }
  return out;
}

}  // namespace parallax::tune
