#pragma once
// The search: every combination of the space's values that makes a valid plan, evaluated on a
// pool of threads, best lower bound first. A configuration whose lower bound is already above the
// K-th best step time found, and above the best of its own data x pipeline x tensor layout, can enter
// neither the top K nor be its layout's best: it is pruned without being simulated, so both are
// the same as an exhaustive search's. Configurations that do not fit device memory are never
// ranked.
#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "tune/enumerate.hpp"
#include "tune/evaluator.hpp"
#include "tune/space.hpp"

namespace parallax::tune {

enum class Objective { step, memory };

struct Progress {
  /// "listing" the space (once, total 0: its size is not known yet), "planning" every
  /// configuration, then "simulating" the promising ones
  const char* phase = "";
  size_t done = 0;   ///< configurations simulated or pruned
  size_t total = 0;
  double elapsed_s = 0;
  plan::Time best_step;  ///< best step time so far (0 before the first)
};

/// Runs work(i, t) for i in [0, n) on `threads` threads (t: the thread's number) until `stop()`
/// says so; the calling thread reports the count finished about 10 times a second meanwhile, and
/// once at the end. `work` must not throw.
void parallel_for(size_t n, int threads, const std::function<void(size_t, int)>& work, const std::function<bool()>& stop,
                  const std::function<void(size_t)>& report);

struct SearchOptions {
  Objective objective = Objective::step;
  size_t max_configs = 0;   ///< simulate at most this many (0: no limit)
  double time_limit_s = 0;  ///< stop after this long (0: no limit)
  int top = 10;             ///< K
  int threads = 0;          ///< 0: one per core
  bool prune = true;        ///< false: simulate every configuration (for checking the pruning)
  std::function<void(const Progress&)> progress;  ///< called about 10 times a second
  const std::atomic<bool>* cancel = nullptr;      ///< set (e.g. by Ctrl-C) to stop with the best so far
};

struct SearchResult {
  Evaluation baseline;          ///< the scenario as given
  Evaluation defaults;          ///< PyTorch's defaults: chunks = pipeline, 25 MB buckets, even split
  /// The top K distinct predictions that fit, best first: configurations with the same step time
  /// and peak memory are one row, the first found, with the others in its `equivalents`.
  std::vector<Evaluation> ranked;
  std::vector<Evaluation> pareto;  ///< step time against peak memory, fastest first
  /// The best of each data x pipeline x tensor layout, best first: real runs of different layouts guard
  /// against the prediction's largest errors, which lie between layouts rather than within one.
  std::vector<Evaluation> layout_best;
  size_t combinations = 0;      ///< valid configurations in the space (in its sample, below)
  /// The space was sampled, one combination in this many (a space past kEnumerationCap); 1: all.
  size_t sampled_one_in = 1;
  size_t invalid = 0;           ///< combinations the scenario rules reject
  /// Valid combinations of the space itself (fitting memory or not), before the scenario as given
  /// and PyTorch's defaults join them: 0 when every searched value made an invalid plan.
  size_t valid_in_space = 0;
  std::string invalid_example;  ///< one such reason
  size_t evaluated = 0;         ///< simulated
  size_t pruned = 0;            ///< skipped by the lower bound
  size_t over_memory = 0;       ///< do not fit device memory
  double wall_s = 0;
  std::string stopped;          ///< why the search ended early ("" when it covered the space)
};


/// The most configurations search() lists before it samples the space (enumerate's Sample): about
/// half a gigabyte of them, and more than a 120 s search plans.
constexpr size_t kEnumerationCap = 4'000'000;

SearchResult search(Evaluator& evaluator, const Space& space, const SearchOptions& options);

/// A ranked row's equivalents as what differs from the row: "also: first_bucket_mb=4; precision=fp16"
/// (at most `most`, then "+N more"), or "" when it has none.
std::string also_text(const Evaluation& row, size_t most = 3);

}  // namespace parallax::tune
