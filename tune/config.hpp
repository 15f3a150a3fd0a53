#pragma once
// One configuration the tuner looks at: the plan's knobs as typed values. A Config is applied to
// a copy of the parsed scenario (no YAML, no string overrides per configuration), and turned back
// into the `--set` overrides that make `parallax run SCENARIO --set k=v ...` run exactly it.
#include <string>
#include <utility>
#include <vector>

#include "plan/scenario.hpp"

namespace parallax::tune {

struct Config {
  int data = 1;
  int pipeline = 1;
  int virtual_stages = 1;
  plan::ScheduleKind schedule = plan::ScheduleKind::gpipe;
  int chunks = 1;
  std::vector<int> partition;  ///< layers per stage; empty: "balanced"
  double bucket_cap_mb = 25;
  double first_bucket_mb = 1;
  int batch_size = 32;  ///< per replica; data x batch_size x grad_accumulation stays the global batch
  int grad_accumulation = 1;
  bool activation_checkpointing = false;
  plan::Precision precision = plan::Precision::fp32;

  int stages() const { return pipeline * virtual_stages; }
  int world_size() const { return data * pipeline; }
  int global_batch() const { return data * batch_size * grad_accumulation; }
  bool operator==(const Config&) const = default;
};

/// The knobs of a parsed scenario (an explicit partition_len as its list).
Config config_of(const plan::Scenario& scenario);

/// Sets the knobs on `scenario` (its other values stay), without checking them.
void apply(const Config& config, plan::Scenario* scenario);

/// `base` with the knobs set, checked as the scenario parser checks a file (InputError).
plan::Scenario with_config(const plan::Scenario& base, const Config& config);

/// (`--set` key, YAML value) for each knob where `config` differs from `base`, in a fixed order:
/// {"parallel.chunks", "8"}, {"parallel.partition_len", "[5, 7]"}, ...
using Overrides = std::vector<std::pair<std::string, std::string>>;
Overrides overrides(const Config& base, const Config& config);

/// "chunks=8, schedule=1f1b" (keys without their section), or "as given" when none.
std::string describe(const Overrides& overrides);

/// A number as the overrides write it ("25", "0.5").
std::string number_text(double v);

}  // namespace parallax::tune
