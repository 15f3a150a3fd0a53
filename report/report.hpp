#pragma once
// The HTML report: one self-contained page (inline CSS, JS and data, no network) that shows a
// predicted timeline, and when given the measured one of the same plan, lays the measured actions
// inside their predicted outlines, with the step time and its error, bubble per stage, exposed
// communication per rank, memory per rank against the device, link bandwidth, per-kind errors,
// the critical path, and a tuner's ranked table and Pareto chart.
//
// The numbers are computed here, in C++, with the same definitions as `parallax simulate` and
// `parallax compare` (timeline/metrics, timeline/compare); the page only draws them. The data
// goes into the page as one JSON object (see report_data), the timeline as columns of integers so
// that a 1,024-rank prediction stays a few megabytes.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "timeline/timeline.hpp"

namespace parallax::report {

/// What one report shows.
struct ReportInput {
  timeline::Timeline predicted;                ///< from the simulator (or a trace of it)
  std::optional<timeline::Timeline> measured;  ///< a measured run of the same plan, when there is one
  /// Indices into predicted.events, first to last; empty when unknown (e.g. read from a trace).
  std::vector<int32_t> critical_path;
  nlohmann::json tune;  ///< the object `parallax tune --json` prints, or null
  std::string title;    ///< heading; the scenario name when empty
  /// What the command warned of about the pair (cli::check_same_job): the page shows each, as
  /// does a few-steps statistic, so that a page sent on carries compare's caveats.
  std::vector<std::string> warnings;
};

/// The data the page draws (embedded in it as JSON): summary, ranks, stages, kinds, worst, memory,
/// links, critical_path, timeline {predicted, measured}, tune.
nlohmann::json report_data(const ReportInput& input);

/// The most characters of data a page embeds: Chromium's V8 parses at most 2^29 - 24 in one string
/// (v8::String::kMaxLength), less room for the page around it.
constexpr size_t kMaxEmbeddedChars = (size_t{1} << 29) - 24 - (size_t{1} << 20);

/// The whole page: inline CSS and JS, the data embedded; opens from file:// with no network.
/// Throws std::runtime_error when the data exceeds `max_chars` (the page would open blank).
std::string render_html(const ReportInput& input, size_t max_chars = kMaxEmbeddedChars);

/// What keeps `tune` from being the output of `parallax tune --json` as the page draws it ("" when
/// nothing): an object with a non-empty `ranked` list, and a `best`, a `baseline` and every ranked
/// and Pareto row each `{overrides: {...}, predicted_step_ms, peak_memory_mb}`.
std::string tune_result_problem(const nlohmann::json& tune);
bool is_tune_result(const nlohmann::json& tune);

}  // namespace parallax::report
