#pragma once
// Files the commands write, and small formatting shared by their reports.
#include <set>
#include <string>
#include <vector>

namespace parallax::cli {

/// Writes `text` to `path` through a temporary file and a rename, so a failure never leaves a
/// half-written file behind. A `path` that names a folder is bad input (exit 2), nothing written.
void write_file_atomically(const std::string& path, const std::string& text);
/// Bad input (exit 2) when `path` is set and names a folder, or its folder does not exist or takes
/// no new file, or when it names one of the command's `inputs` (the scenario, a trace, a
/// checkpoint folder), which writing it would replace; checked before work starts.
void require_output_folder(const std::string& path, const std::vector<std::string>& inputs = {});
/// Bad input (exit 2, naming `path` and saying `why` it counts once) when `path` is a file already
/// in `seen` (by its canonical path: ./a.json and a.json are one); otherwise adds it.
void refuse_given_twice(std::set<std::string>* seen, const std::string& path, const std::string& why);
/// printf-style formatting of one number.
std::string fmt(const char* format, double value);
/// "1 stage", "3 stages": a count and its noun, plural unless 1 (`plural` where not noun + "s").
std::string counted(long long n, const std::string& noun, const std::string& plural = "");

}  // namespace parallax::cli
