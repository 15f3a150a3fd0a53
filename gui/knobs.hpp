#pragma once
// The parallel settings a user turns in the GUI, as plain values. They are applied to the scenario
// as --set overrides (the same mechanism as the command line), so a bad combination is reported by
// the scenario parser itself, with the knob's key as its place, and a saved file or a "Run for
// real" child process sees exactly what the GUI simulated.
#include <string>
#include <vector>

#include "plan/scenario.hpp"
#include "tune/config.hpp"

namespace parallax::gui {

struct Knobs {
  int data = 1;
  int pipeline = 1;
  int virtual_stages = 1;
  std::string partition_len = "balanced";  ///< YAML: balanced, 5, or [4, 6]
  int chunks = 1;
  int batch_size = 32;  ///< data.batch_size, per replica; the tuner changes it with data at a fixed global batch
  std::string schedule = "gpipe";
  double bucket_cap_mb = 25;
  double first_bucket_mb = 1;
  int grad_accumulation = 1;
  std::string precision = "fp32";
  bool activation_checkpointing = false;
  std::string hardware;  ///< a built-in profile name; empty keeps the scenario's own

  /// The values a scenario holds (hardware left empty: "as in the scenario").
  static Knobs from(const plan::Scenario& scenario);
  /// "parallel.chunks=16", ... for every parallel knob and data.batch_size, and "hardware=NAME" when one is chosen.
  std::vector<std::string> overrides() const;
  bool operator==(const Knobs&) const = default;
};

/// A tuner's configuration as knob values, with `hardware` (the tuner does not change it).
Knobs knobs_of(const tune::Config& config, const std::string& hardware);

/// The scenario keys the knobs set, in panel order ("parallel.chunks", ..., "hardware").
const std::vector<std::string>& knob_keys();

/// The knob key an InputError is about, from its place ("--set parallel.chunks=7") or, for
/// values of the file, from the key its message names first; "" when none.
std::string knob_of_error(const std::string& where, const std::string& message);

/// A number as the knobs write it into YAML ("25", "0.5").
std::string number(double v);

/// partition_len as YAML text: "balanced", "5" or "[4, 6]".
std::string partition_len_text(const plan::PartitionLen& p);

}  // namespace parallax::gui
