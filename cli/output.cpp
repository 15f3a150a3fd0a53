#include "cli/output.hpp"


#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "plan/error.hpp"

namespace parallax::cli {

namespace {
// A path that names a folder (an existing one, or one written with a trailing slash) cannot be
// written as a file: bad input, before anything is written.
void refuse_folder(const std::string& path) {
  if (!path.empty() && (path.back() == '/' || std::filesystem::is_directory(path)))
    throw plan::InputError(plan::Location{path}, "is a folder: name the file to write");
}
}  // namespace

void write_file_atomically(const std::string& path, const std::string& text) {
  refuse_folder(path);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    if (!out) throw plan::InputError(plan::Location{path}, "cannot write here (does the folder exist?)");
    out << text;
    if (!out.flush()) {
      std::remove(tmp.c_str());
      throw std::runtime_error("writing " + path + " failed");
    }
  }
  std::error_code failed;
  std::filesystem::rename(tmp, path, failed);
  if (failed) {
    std::remove(tmp.c_str());
    throw plan::InputError(plan::Location{path}, "cannot write here: " + failed.message());
  }
}

namespace {
// The path that names the same file as `path` does, to tell two names of one file; a path the
// filesystem cannot resolve (a pipe given as /dev/fd/63, whose link names "pipe:[N]") is its own.
std::string same_file_key(const std::string& path) {
  std::error_code ec;
  const std::string canonical = std::filesystem::weakly_canonical(path, ec).string();
  return ec ? path : canonical;
}
}  // namespace

void refuse_given_twice(std::set<std::string>* seen, const std::string& path, const std::string& why) {
  if (!seen->insert(same_file_key(path)).second)
    throw plan::InputError(plan::Location{path}, "given twice: " + why);
}

void require_output_folder(const std::string& path, const std::vector<std::string>& inputs) {
  refuse_folder(path);
  if (path.empty()) return;
  for (const auto& input : inputs)
    if (!input.empty() && same_file_key(input) == same_file_key(path))
      throw plan::InputError(plan::Location{path}, "the command also reads or writes " + std::filesystem::path(input).lexically_normal().string() +
                                                       ": the output would replace it; write it elsewhere");
  const std::filesystem::path p(path);
  const std::filesystem::path folder = p.has_parent_path() ? p.parent_path() : std::filesystem::path(".");
  if (!std::filesystem::is_directory(folder))
    throw plan::InputError(plan::Location{path}, "cannot write here: the folder does not exist");
  // Written there now, as the atomic write will (its .tmp beside the file), so that a folder one
  // cannot write in fails before minutes of work rather than after: access(2) would not do, as
  // root passes it on read-only and virtual file systems (/proc).
  const std::string probe = path + ".tmp";
  const bool existed = std::filesystem::exists(probe);
  if (!std::ofstream(probe, std::ios::app))
    throw plan::InputError(plan::Location{path}, "cannot write here: a file cannot be created in " + folder.string());
  if (!existed) std::remove(probe.c_str());
}

std::string fmt(const char* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}

std::string counted(long long n, const std::string& noun, const std::string& plural) {
  return std::to_string(n) + " " + (n == 1 ? noun : plural.empty() ? noun + "s" : plural);
}


}  // namespace parallax::cli
