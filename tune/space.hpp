#pragma once
// The search space: the values each tuned knob (plan/knobs.hpp) may take. The default is the knob
// table's (its search_default: what the scenario's layers, batch and device allow); `--search KEY=V1,V2,...` replaces a
// knob's values, read as the knob table reads them, and `--fix KEY` keeps the scenario's.
// Combinations are formed by the search (tune/search.hpp); the global batch (data x batch_size x
// grad_accumulation) never changes, so batch_size follows data and grad_accumulation.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "plan/knobs.hpp"

namespace parallax::tune {

struct Space {
  int world = 1;  ///< ranks: data x pipeline x tensor
  /// Each tuned knob's values, by key. Two lists mean "as the scenario allows" when empty:
  /// parallel.chunks (every divisor of the configuration's batch_size) and parallel.partition_len
  /// (the balanced split of each setting plus its neighbours, one layer moved across one
  /// boundary). The enumeration takes the (data, pipeline, tensor) whose product is the world.
  std::map<std::string, std::vector<plan::KnobValue>> values;
  /// The trainer whose parallel rules every configuration must pass (plan/trainer_rules.hpp): the
  /// scenario's framework, so that a Megatron-LM or torchtitan job is tuned to what its trainer
  /// runs (and `parallax export` takes the pick); PyTorch (`tune --any-trainer`) refuses nothing.
  plan::Framework trainer = plan::Framework::pytorch;

  const std::vector<plan::KnobValue>& of(const std::string& key) const;
  /// The values of an integer knob.
  std::vector<int> ints(const std::string& key) const;
  /// DDP's bucket knobs as the space lists them: (bucket_cap_mb, first_bucket_mb).
  std::vector<std::pair<double, double>> bucket_grid() const;
};

/// Every key --search and --fix accept ("parallel.chunks", ...): the table's tuned knobs.
std::vector<std::string> search_keys();

/// The default space of a scenario over `world` ranks (0: the scenario's own world size).
Space default_space(const plan::Scenario& scenario, int world = 0);

/// `--search KEY=V1,V2,...` (values as YAML scalars; partition lists in brackets: [4, 6]).
/// InputError naming the flag for an unknown key or a value of the wrong kind.
void search(Space* space, const std::string& assignment);

/// `--fix KEY`: the scenario's own value only.
void fix(Space* space, const plan::Settings& given, const std::string& key);

/// "2,4,[1,3],8" -> 2 | 4 | [1,3] | 8: commas inside brackets belong to the value.
std::vector<std::string> split_values(const std::string& text);

}  // namespace parallax::tune
