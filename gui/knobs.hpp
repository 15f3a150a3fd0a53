#pragma once
// What the knob panel holds: the values of the knob table (plan/knobs.hpp) and the hardware
// profile chosen. The GUI sets them typed on the parsed scenario and re-checks it in memory; an
// error carries the key of the knob it is about (plan::InputError::key). The `--set` overrides
// below are only for what leaves the process: a saved file and "Run for real".
#include <string>
#include <vector>

#include "plan/knobs.hpp"

namespace parallax::gui {

struct KnobValues {
  plan::Settings settings;
  std::string hardware;  ///< a built-in profile name; empty keeps the scenario's own

  /// The `--set` values that turn a scenario with `file` values into these: one per knob that
  /// differs, in the table's order, and "hardware=NAME" when one is chosen.
  std::vector<std::string> overrides(const plan::Settings& file) const;
  bool operator==(const KnobValues&) const = default;
};

/// The knob key an error is about, for the panel: the error's own key when it is a knob's (or
/// "hardware"), else "" (shown under all knobs).
std::string knob_of_error(const plan::InputError& error);

}  // namespace parallax::gui
