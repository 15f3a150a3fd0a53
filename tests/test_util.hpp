#pragma once
// Small helpers shared by the tests.
#include <string>
#include <vector>

#include "plan/plan.hpp"
#include "plan/scenario.hpp"
#include "plan/yaml_reader.hpp"

namespace parallax::test {

/// Parses scenario text as if it were the file "test.yaml".
inline plan::Scenario scenario_from(const std::string& yaml, const std::vector<std::string>& sets = {}) {
  auto doc = plan::YamlDocument::from_text(yaml, "test.yaml");
  for (const auto& s : sets) doc.apply_override(s);
  return plan::parse_scenario(doc);
}

inline plan::Plan plan_from(const std::string& yaml, const std::vector<std::string>& sets = {}) {
  return plan::resolve_plan(scenario_from(yaml, sets));
}

/// The message of the InputError that parsing `yaml` raises ("" if none).
inline std::string parse_error(const std::string& yaml, const std::vector<std::string>& sets = {}) {
  try {
    plan::resolve_plan(scenario_from(yaml, sets));
  } catch (const plan::InputError& e) {
    return e.what();
  }
  return "";
}

/// Uniform synthetic layers on free communication: the textbook pipeline.
inline std::string synthetic_scenario(int layers, int pipeline, int chunks, const std::string& schedule,
                                      int virtual_stages = 1) {
  return "model: {preset: synthetic, layers: " + std::to_string(layers) +
         ", fwd_us_per_sample: 10, params_mb: 1, activation_mb: 1}\n"
         "data: {batch_size: " + std::to_string(chunks * 2) + "}\n"
         "parallel: {pipeline: " + std::to_string(pipeline) + ", virtual: " + std::to_string(virtual_stages) +
         ", chunks: " + std::to_string(chunks) + ", schedule: " + schedule + "}\n"
         "hardware: ideal\n";
}

}  // namespace parallax::test
