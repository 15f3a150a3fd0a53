#include "tune/search.hpp"

#include <algorithm>
#include <tuple>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <random>
#include <thread>

#include "plan/search_defaults.hpp"
#include "plan/trainer_rules.hpp"


namespace parallax::tune {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Ranking keys, compared as pairs: the objective first, the other quantity second (step times
// in ns, memory in bytes).
using Key = std::pair<int64_t, int64_t>;
Key key_of(const Evaluation& e, Objective o) {
  const int64_t step = e.step.count_ns();
  return o == Objective::step ? Key{step, e.peak_memory} : Key{e.peak_memory, step};
}
// The smallest key the configuration could still reach once simulated.
Key floor_of(const Evaluation& e, Objective o) {
  const int64_t bound = e.lower_bound.count_ns();
  return o == Objective::step ? Key{bound, 0} : Key{e.peak_memory, bound};
}

// Whether two configurations differ in DDP's bucket knobs at most.
bool same_but_buckets(plan::Settings a, const plan::Settings& b) {
  a.bucket_cap_mb = b.bucket_cap_mb;
  a.first_bucket_mb = b.first_bucket_mb;
  return a == b;
}

// For each configuration, the one whose plan gives its memory and lower bound: DDP's bucket knobs
// change neither (the buckets are a flat copy of the gradients whatever their size, and the bound
// counts no communication; tested in tune_test), and enumerate() lists a configuration's bucket
// variants one after another. So the first of each run is planned and the rest copy it: on a
// data-parallel job's default space, 18 bucket variants (9 sizes x 2 first buckets) share one plan.
std::vector<size_t> planned_as(const std::vector<plan::Settings>& configs) {
  std::vector<size_t> as(configs.size());
  for (size_t i = 0; i < configs.size(); ++i)
    as[i] = i > 0 && same_but_buckets(configs[i], configs[as[i - 1]]) ? as[i - 1] : i;
  return as;
}

// The search's rows from what was simulated: the top K distinct keys (equal keys are one row,
// the others its equivalents), each layout's best, and the Pareto frontier.
void rank(std::vector<Evaluation> done, Objective objective, size_t top, SearchResult* r) {
  std::sort(done.begin(), done.end(), [&](const Evaluation& a, const Evaluation& b) {
    return std::pair(key_of(a, objective), a.index) < std::pair(key_of(b, objective), b.index);
  });
  // The same prediction to within the simulator's rounding: two schedules that play the same step
  // can end a nanosecond apart (interleaved 1F1B and looped BFS at one micro-batch a round).
  constexpr int64_t kSameStepNs = 100;
  for (const Evaluation& e : done) {
    auto same = std::find_if(r->ranked.begin(), r->ranked.end(), [&](const Evaluation& row) {
      return std::abs((row.step - e.step).count_ns()) <= kSameStepNs && row.peak_memory == e.peak_memory;
    });
    if (same != r->ranked.end()) same->equivalents.push_back(e.config);
    else if (r->ranked.size() < top) r->ranked.push_back(e);
  }
  for (const auto& e : done)
    if (std::none_of(r->layout_best.begin(), r->layout_best.end(), [&](const Evaluation& b) {
          return b.config.data == e.config.data && b.config.context == e.config.context && b.config.pipeline == e.config.pipeline &&
                 b.config.tensor == e.config.tensor;
        }))
      r->layout_best.push_back(e);
  // Pareto frontier over what was simulated: fastest first, each smaller than all faster ones.
  std::sort(done.begin(), done.end(), [](const Evaluation& a, const Evaluation& b) {
    return std::tuple(a.step, a.peak_memory, a.index) < std::tuple(b.step, b.peak_memory, b.index);
  });
  for (const auto& e : done)
    if (r->pareto.empty() || e.peak_memory < r->pareto.back().peak_memory) r->pareto.push_back(e);
}

// Each returned row's overrides against the scenario as given, computed once here for the CLI,
// the GUI and the runs of --validate.
void label_changes(const plan::Settings& given, SearchResult* r) {
  for (Evaluation* e : {&r->baseline, &r->defaults}) e->changes = plan::overrides(given, e->config);
  for (auto* rows : {&r->ranked, &r->pareto, &r->layout_best})
    for (Evaluation& e : *rows) e.changes = plan::overrides(given, e.config);
}

// Whether the scenario's trainer (Space::trainer) runs `config`.
bool trainer_runs(const plan::Scenario& base, const plan::Settings& config, plan::Framework trainer) {
  plan::Scenario s = base;
  plan::apply(config, &s);
  return !plan::trainer_refusal(s, trainer);
}

}  // namespace

void parallel_for(size_t n, int threads, const std::function<void(size_t, int)>& work, const std::function<bool()>& stop,
                  const std::function<void(size_t)>& report) {
  std::atomic<size_t> next{0}, finished{0};
  std::mutex m;
  std::condition_variable all_done;
  int running = threads;
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (size_t i; !stop() && (i = next.fetch_add(1)) < n;) {
        work(i, t);
        ++finished;
      }
      std::lock_guard<std::mutex> lock(m);
      if (--running == 0) all_done.notify_one();
    });
  {
    std::unique_lock<std::mutex> lock(m);
    while (!all_done.wait_for(lock, std::chrono::milliseconds(100), [&] { return running == 0; })) {
      lock.unlock();
      report(finished.load());
      lock.lock();
    }
  }
  for (auto& t : pool) t.join();
  report(finished.load());
}

std::string also_text(const Evaluation& row, size_t most) {
  if (row.equivalents.empty()) return "";
  std::string s = "also: ";
  for (size_t i = 0; i < row.equivalents.size() && i < most; ++i)
    s += (i ? "; " : "") + plan::describe(plan::overrides(row.config, row.equivalents[i]));
  if (row.equivalents.size() > most) s += "; +" + std::to_string(row.equivalents.size() - most) + " more";
  return s;
}

SearchResult search(Evaluator& ev, const Space& sp, const SearchOptions& opt) {
  const auto t0 = Clock::now();
  SearchResult r;
  r.baseline = ev.evaluate(ev.given());
  try {
    r.defaults = ev.evaluate(plan::pytorch_defaults(ev.base(), ev.given()));
  } catch (const plan::InputError&) {
    r.defaults.config = plan::pytorch_defaults(ev.base(), ev.given());  // not a valid plan here: not simulated
  }
  size_t over_static_memory = 0;
  // Bucket variants are not listed but simulated in turn below: they share their configuration's
  // plan, memory and bound, and on a large job's space listing them would be most of its memory.
  // A space past the cap is sampled uniformly as it is enumerated (enumerate's Sample): its
  // checks cost about a microsecond a combination, and a MoE job's expert degrees crossed with
  // the rest reach hundreds of millions.
  std::atomic<bool> out_of_time{false};
  auto stop = [&] {
    if (opt.cancel && opt.cancel->load()) return true;
    if (opt.time_limit_s > 0 && !out_of_time && seconds_since(t0) > opt.time_limit_s) out_of_time = true;
    return out_of_time.load();
  };
  if (opt.progress) opt.progress(Progress{"listing", 0, 0, seconds_since(t0), plan::Time()});  // seconds on a large space
  Sample sample{kEnumerationCap, 1, stop};
  std::vector<plan::Settings> configs = enumerate(ev, sp, &r.invalid, &r.invalid_example, &over_static_memory, false, &sample);
  r.sampled_one_in = sample.one_in;
  const bool listing_cut = stop();  // the counts below are then of the part listed
  const size_t enumerated = configs.size();
  r.valid_in_space = enumerated + over_static_memory;
  // The scenario as given and PyTorch's defaults compete too, even where the space misses them:
  // where they are plans of the space's world (--world) and, for a trainer's job, ones it runs.
  const auto competes = [&](const Evaluation& e) {
    const plan::Settings& c = e.config;
    return e.simulated() && c.world_size() == sp.world && trainer_runs(ev.base(), c, sp.trainer);
  };
  for (const Evaluation* e : {&r.baseline, &r.defaults}) {
    if (!competes(*e)) continue;
    plan::Settings c = e->config;
    c.partition_len = plan::listed(c.partition_len, c.stages());
    if (c.partition_len == ev.balanced_split(c)) c.partition_len = {};  // the same plan
    if (std::find(configs.begin(), configs.end(), c) == configs.end()) configs.push_back(e->config);
  }
  const std::vector<std::pair<double, double>> grid = sp.bucket_grid();
  const size_t stride = std::max<size_t>(1, grid.size());  // an evaluation's index: config x stride + variant
  // Where the bucket knobs change nothing (ParallelSpec::bucket_caps_apply), one variant.
  auto bucketed = [&](size_t i) {
    return i < enumerated && configs[i].bucket_caps_apply() && !grid.empty();
  };
  auto variants = [&](size_t i) { return bucketed(i) ? grid.size() : size_t{1}; };
  r.combinations = over_static_memory;
  for (size_t i = 0; i < configs.size(); ++i) r.combinations += variants(i);
  r.over_memory = over_static_memory;

  const int threads = opt.threads > 0 ? opt.threads : std::max(1u, std::thread::hardware_concurrency());
  std::mutex mutex;
  std::set<Key> best;  // the K best distinct simulated keys so far (equal keys are one ranked row)
  std::map<std::tuple<int, int, int, int>, Key> layout_best;  // the best key so far of each data x context x pipeline x tensor
  auto report = [&](const char* phase, size_t done, size_t total) {
    if (!opt.progress) return;
    Progress p;
    p.phase = phase;
    p.done = done;
    p.total = total;
    p.elapsed_s = seconds_since(t0);
    std::lock_guard<std::mutex> lock(mutex);
    if (!best.empty())
      p.best_step = plan::Time::ns(opt.objective == Objective::step ? best.begin()->first : best.begin()->second);
    opt.progress(p);
  };

  // 1. Plan every configuration: memory, fit and lower bound (once for its bucket variants).
  std::vector<Evaluation> bounds(configs.size());
  enum : char { untried, planned, unplannable };
  std::vector<char> state(configs.size(), untried);
  const std::vector<size_t> as = planned_as(configs);
  std::vector<size_t> firsts;
  for (size_t i = 0; i < configs.size(); ++i)
    if (as[i] == i) firsts.push_back(i);
  // In a fixed shuffled order, so that planning cut short by the time limit has sampled the whole
  // space rather than its first layouts. Planning takes at most two thirds of the limit: the rest
  // simulates the promising ones, lowest bound first (the 405B job's took 4 s after 30 s of
  // planning at a half, 2026-12-06).
  std::shuffle(firsts.begin(), firsts.end(), std::mt19937(55));
  std::atomic<size_t> planned_count{0};
  auto stop_planning = [&] { return stop() || (opt.time_limit_s > 0 && seconds_since(t0) > opt.time_limit_s * 2 / 3); };
  parallel_for(
      firsts.size(), threads,
      [&](size_t k, int) {
        const size_t i = firsts[k];
        ++planned_count;
        try {
          bounds[i] = ev.bound(configs[i]);
        } catch (const plan::InputError&) {
          state[i] = unplannable;  // the scenario rules passed it, resolving the plan did not
          return;
        } catch (const plan::OutOfScale&) {
          state[i] = unplannable;  // an action beyond days (a whole batch on a few devices): not a plan to rank
          return;
        }
        state[i] = planned;
      },
      stop_planning, [&](size_t done) { report("planning", done, firsts.size()); });
  const bool planned_part = planned_count < firsts.size() && !stop();
  size_t unplannable_count = 0;
  for (size_t i = 0; i < configs.size(); ++i) {
    state[i] = state[as[i]];
    if (state[i] == unplannable) unplannable_count += variants(i);
    if (state[i] != planned) continue;
    if (as[i] != i) {
      bounds[i] = bounds[as[i]];
      bounds[i].config = configs[i];
    }
    bounds[i].index = i;
  }

  // 2. Simulate those that fit, most promising first, until the rest cannot enter the top K.
  r.invalid += unplannable_count;
  r.combinations -= unplannable_count;
  std::vector<std::pair<size_t, uint32_t>> order;  // (configuration, bucket variant)
  for (size_t i = 0; i < configs.size(); ++i) {
    if (state[i] != planned) continue;
    if (!bounds[i].fits) {
      r.over_memory += variants(i);
      continue;
    }
    for (size_t v = 0; v < variants(i); ++v) order.emplace_back(i, static_cast<uint32_t>(v));
  }
  std::sort(order.begin(), order.end(), [&](const auto& a, const auto& b) {
    return std::tuple(floor_of(bounds[a.first], opt.objective), a.first, a.second) <
           std::tuple(floor_of(bounds[b.first], opt.objective), b.first, b.second);
  });
  std::vector<Evaluation> done;  // what was simulated
  const size_t top = static_cast<size_t>(std::max(1, opt.top));
  std::atomic<size_t> simulated{0}, pruned{0};
  std::atomic<bool> hit_max{false};
  // Whether a configuration whose step time cannot go below e's floor can still enter the top K
  // or improve its layout's best (under the lock).
  auto prunable = [&](const Evaluation& e) {
    const Key floor = floor_of(e, opt.objective);
    const auto layout = layout_best.find({e.config.data, e.config.context, e.config.pipeline, e.config.tensor});
    return best.size() >= top && floor > *std::prev(best.end()) && layout != layout_best.end() && floor > layout->second;
  };
  // Each thread keeps the plan it simulated last: a configuration's bucket variants, one after
  // another in `order`, rebucket it (plan::rebucket) instead of planning it again, and their own
  // floor (the reduction of their buckets, sim::reduction_floor) prunes those that cannot win.
  // It keeps NCCL's choices too, for the floors and simulations of every plan it takes.
  struct Kept {
    size_t config = SIZE_MAX;
    std::optional<plan::Plan> plan;
    std::optional<sim::NcclChoices> nccl;
  };
  std::vector<Kept> kept(static_cast<size_t>(threads));
  if (const auto& nccl = ev.base().hardware.nccl)
    for (Kept& k : kept) k.nccl.emplace(*nccl);
  parallel_for(
      order.size(), threads,
      [&](size_t k, int t) {
        const auto [i, variant] = order[k];
        Evaluation e = bounds[i];
        if (bucketed(i)) {
          e.config.bucket_cap_mb = grid[variant].first;
          e.config.first_bucket_mb = grid[variant].second;
        }
        if (opt.prune) {
          std::lock_guard<std::mutex> lock(mutex);
          if (prunable(e)) {
            ++pruned;
            return;
          }
        }
        Kept& mine = kept[static_cast<size_t>(t)];
        if (mine.config != i) {
          mine.plan = ev.plan_of(e.config);
          mine.config = i;
        } else {
          ev.rebucket(&*mine.plan, e.config);
        }
        if (opt.prune && bucketed(i)) {
          Evaluation floor = e;
          floor.lower_bound = ev.bucket_bound(*mine.plan, e.config, e.lower_bound, mine.nccl ? &*mine.nccl : nullptr);
          std::lock_guard<std::mutex> lock(mutex);
          if (prunable(floor)) {
            ++pruned;
            return;
          }
        }
        if (opt.max_configs && simulated.fetch_add(1) >= opt.max_configs) {
          hit_max = true;
          return;
        }
        if (!opt.max_configs) ++simulated;
        try {
          e.step = ev.step_of(*mine.plan, e.config, mine.nccl ? &*mine.nccl : nullptr);
        } catch (const plan::OutOfScale&) {
          return;  // as the planning above: a step beyond days is no candidate (and a throw here would end the process)
        }
        e.index = i * stride + variant;
        std::lock_guard<std::mutex> lock(mutex);
        done.push_back(e);
        const Key key = key_of(e, opt.objective);
        best.insert(key);
        auto [layout, fresh] = layout_best.try_emplace(std::make_tuple(e.config.data, e.config.context, e.config.pipeline, e.config.tensor), key);
        if (!fresh) layout->second = std::min(layout->second, key);
        if (best.size() > top) best.erase(std::prev(best.end()));
      },
      [&] { return stop() || hit_max.load(); }, [&](size_t done) { report("simulating", done, order.size()); });

  r.evaluated = done.size();
  r.pruned = pruned;
  // Stopped early, the scenario as given and PyTorch's defaults (simulated first) still compete.
  for (const Evaluation* e : {&r.baseline, &r.defaults})
    if (competes(*e) && e->fits &&
        std::none_of(done.begin(), done.end(), [&](const Evaluation& d) { return d.config == e->config; })) {
      done.push_back(*e);
      done.back().index = configs.size() * stride;  // after every enumerated one in ties
    }
  rank(std::move(done), opt.objective, top, &r);
  if (listing_cut)
    r.stopped = std::string(opt.cancel && opt.cancel->load() ? "interrupted" : "time limit") +
                " while listing the space: nothing planned, and the counts are of the part listed";
  else if (opt.cancel && opt.cancel->load()) r.stopped = "interrupted";
  else if (out_of_time) r.stopped = "time limit";
  else if (planned_part)
    r.stopped = "time limit: planned " + std::to_string(planned_count.load()) + " of " + std::to_string(firsts.size()) +
                " configurations (a random sample), simulated the promising ones";
  else if (hit_max) r.stopped = "max-configs";
  label_changes(ev.given(), &r);
  r.wall_s = seconds_since(t0);
  return r;
}

}  // namespace parallax::tune
