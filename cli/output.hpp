#pragma once
// Files the commands write, and small formatting shared by their reports.
#include <string>

namespace parallax::cli {

/// Writes `text` to `path` through a temporary file and a rename, so a failure never leaves a
/// half-written file behind. A `path` that names a folder is bad input (exit 2), nothing written.
void write_file_atomically(const std::string& path, const std::string& text);
/// Bad input (exit 2) when `path` is set and names a folder, or its folder does not exist or takes
/// no new file; checked before work starts.
void require_output_folder(const std::string& path);
/// printf-style formatting of one number.
std::string fmt(const char* format, double value);

}  // namespace parallax::cli
