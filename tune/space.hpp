#pragma once
// The search space: the values each knob may take. The default comes from the scenario (what its
// layers, batch and device allow); `--search KEY=V1,V2,...` replaces a knob's values and `--fix KEY`
// keeps the scenario's. Combinations are formed by the search (tune/search.hpp); the global batch
// (data x batch_size x grad_accumulation) never changes, so batch_size follows data and
// grad_accumulation.
#include <string>
#include <vector>

#include "plan/scenario.hpp"
#include "tune/config.hpp"

namespace parallax::tune {

struct Space {
  int world = 1;                       ///< ranks: data x pipeline
  std::vector<int> data;               ///< replicas (each paired with pipeline = world / data)
  std::vector<int> pipeline;
  std::vector<plan::ScheduleKind> schedules;
  std::vector<int> virtual_stages;     ///< for interleaved-1f1b (others use 1)
  std::vector<int> chunks;             ///< empty: every divisor of the configuration's batch_size
  /// Explicit splits, each one a list of layers per stage; empty: the balanced split of each
  /// setting plus its neighbours (one layer moved across one boundary).
  std::vector<std::vector<int>> partitions;
  std::vector<double> bucket_caps;     ///< MiB; searched only with data > 1
  std::vector<double> first_buckets;   ///< MiB; searched only with data > 1
  std::vector<int> accumulations;      ///< grad_accumulation values
  std::vector<bool> checkpointing;
  std::vector<plan::Precision> precisions;
};

/// Every key --search and --fix accept ("parallel.chunks", ...).
const std::vector<std::string>& search_keys();

/// The default space of a scenario over `world` ranks (0: the scenario's own world size).
Space default_space(const plan::Scenario& scenario, int world = 0);

/// `--search KEY=V1,V2,...` (values as YAML scalars; partition lists in brackets: [4, 6]).
/// InputError naming the flag for an unknown key or a value of the wrong kind.
void search(Space* space, const std::string& assignment);

/// `--fix KEY`: the scenario's own value only.
void fix(Space* space, const plan::Scenario& scenario, const std::string& key);

/// Every divisor of n, ascending.
std::vector<int> divisors(int n);

/// partition_len as text: "[4, 6]" -> {4, 6}, "balanced" -> {}; InputError naming `flag` otherwise.
std::vector<int> parse_partition(const std::string& flag, const std::string& text);

/// "2,4,[1,3],8" -> 2 | 4 | [1,3] | 8: commas inside brackets belong to the value.
std::vector<std::string> split_values(const std::string& text);

}  // namespace parallax::tune
