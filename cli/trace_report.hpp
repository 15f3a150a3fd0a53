#pragma once
// What `parallax trace` and `parallax compare` print.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "timeline/compare.hpp"
#include "timeline/trace_reader.hpp"

namespace parallax::cli {

/// Summary of one or more trace files of one job (merged by rank).
nlohmann::json trace_summary_json(const std::vector<timeline::LoadedTrace>& traces);
std::string trace_summary_text(const nlohmann::json& summary);

nlohmann::json compare_json(const timeline::CompareReport& r);
std::string compare_text(const timeline::CompareReport& r);

}  // namespace parallax::cli
