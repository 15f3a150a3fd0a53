#pragma once
// What `parallax plan` and `parallax schedule` print: human text for people, one JSON object for
// scripts (the shapes are documented in docs/cli.md; `plan --json` is the plan summary a trace
// carries, timeline/plan_summary.hpp).
#include <nlohmann/json.hpp>
#include <string>

#include "plan/plan.hpp"

namespace parallax::cli {

std::string plan_text(const plan::Plan& plan);

/// The profile's errors on published runs (`published_check`), the lines `plan` and `simulate`
/// print after the figures they qualify; empty when it has none (or was calibrated or fitted).
/// Their JSON is timeline::published_check_json's.
/// The "published" lines of `plan` and `simulate`: how the profile's predictions held on published
/// runs. A plan of a trainer whose runs the profile has none of (a torchtitan job on a profile
/// checked on Megatron-LM's) also gets how that trainer's runs held on the built-in profiles they
/// ran on.
std::string published_check_text(const plan::Scenario& s);

/// For a pipeline on GPUs left at PyTorch's semantics, the line that says a Megatron-LM or NeMo job
/// wants `framework: megatron` (its point-to-point moves the bubble several-fold); else "".
std::string framework_hint(const plan::Scenario& s);

/// For a profile fitted to runs at another precision than the plan's, the line that says what of
/// the fit applies (its layer factors do not; its optimizer, all-reduce and kernel ones do); else "".
std::string fitted_precision_line(const plan::Scenario& s);

nlohmann::json schedule_json(const plan::Plan& plan);
std::string schedule_text(const plan::Plan& plan);

/// "12.5 MiB", "1.20 GiB", "512 B".
std::string format_bytes(int64_t bytes);

}  // namespace parallax::cli
