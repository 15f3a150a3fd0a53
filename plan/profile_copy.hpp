#pragma once
// Writing a profile made from another: its own text, renamed, with comments first. Shared by
// `parallax calibrate` (a `calibration:` section after it) and `calibrate --from-trace` (a
// `fitted:` section), which append their section to what this returns.
#include <string>
#include <vector>

namespace parallax::plan {

/// `base_text` (a hardware profile's YAML) with its top-level name set to `name` and `header` as
/// comment lines first. logic_error when the base has a top-level `section:` already (callers
/// refuse such a base as bad input before).
std::string renamed_profile_text(const std::string& base_text, const std::string& name,
                                 const std::vector<std::string>& header, const std::string& section);

/// `text` without its top-level `published_check:` list and the comment lines right above it: a
/// profile whose figures are measured rather than the shipped ones predicts otherwise than the
/// published errors it lists.
std::string without_published_check(const std::string& text);

}  // namespace parallax::plan
