#pragma once
// Files the commands write, and small formatting shared by their reports.
#include <string>

namespace parallax::cli {

/// Writes `text` to `path` through a temporary file and a rename, so a failure never leaves a
/// half-written file behind.
void write_file_atomically(const std::string& path, const std::string& text);
/// Bad input (exit 2) when `path` is set and its folder does not exist; checked before work starts.
void require_output_folder(const std::string& path);
/// Removes a folder of the command's own making and everything in it, quietly (what is left
/// stays). std::filesystem::remove_all does the same, but pip's libtorch exports its own copy,
/// and a binary built on a GPU machine (GCC 13.3, binutils 2.42) bound its calls to that copy,
/// which crashed (a jump to address 0); the link-order fix of cmake/torch.cmake did not hold
/// there.
void remove_tree(const std::string& path);
/// printf-style formatting of one number.
std::string fmt(const char* format, double value);

}  // namespace parallax::cli
