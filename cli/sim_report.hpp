#pragma once
// What `parallax simulate` prints and writes.
#include <nlohmann/json.hpp>
#include <string>

#include "plan/plan.hpp"
#include "sim/metrics.hpp"

namespace parallax::cli {

nlohmann::json simulate_json(const plan::Plan& plan, const sim::SimRun& run, const sim::Metrics& m);
std::string simulate_text(const plan::Plan& plan, const sim::SimRun& run, const sim::Metrics& m);
/// The predicted timeline with link bandwidth counters, ready for write_chrome_trace.
timeline::Timeline predicted_timeline(const plan::Plan& plan, const sim::SimRun& run);

}  // namespace parallax::cli
