#pragma once
// What the executor runs, as a rule over scenarios: `parallax run` and calibrate refuse the rest
// before anything starts, and tune --validate, the GUI's validation and calibrate's choice of
// scenarios leave it out. Here, not in exec/, so that the modules without LibTorch (tune, fit,
// gui) can ask too.
#include "plan/knobs.hpp"
#include "plan/scenario.hpp"

namespace parallax::plan {

/// InputError, naming the key, when the executor cannot run `scenario`: synthetic layers, what is
/// predict-only (tensor parallelism, selective recompute, ...), fp16 on a CPU, a data source
/// that does not fit the model.
void check_executable(const Scenario& scenario);

/// Whether check_executable accepts `scenario`.
bool executable(const Scenario& scenario);
/// Whether it accepts `base` with the knob values `settings` (a tuner's configuration).
bool executable(const Scenario& base, const Settings& settings);

}  // namespace parallax::plan
