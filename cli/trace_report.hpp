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

/// A Parallax trace of `kind` ("predicted": simulate -o; "measured": run -o) read for `command`;
/// another format or kind is bad input (exit 2) naming the file and what it holds. `role` is how
/// the command's help names the argument ("--predicted", "MEASURED").
timeline::LoadedTrace read_trace_of_kind(const std::string& path, const std::string& kind, const std::string& command,
                                         const std::string& role);

/// A prediction and a run to set side by side are of one job: the same number of ranks and the
/// same plan (bad input, exit 2, naming `measured_path`, when not). Returns what only warns (another
/// scenario name, another device, a rank with no actions), each a sentence without "warning: ",
/// for compare's stderr and the report's page alike.
std::vector<std::string> check_same_job(const timeline::Timeline& predicted, const timeline::Timeline& measured,
                                        const std::string& measured_path);

nlohmann::json compare_json(const timeline::CompareReport& r);
std::string compare_text(const timeline::CompareReport& r);

}  // namespace parallax::cli
