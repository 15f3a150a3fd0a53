#include "cli/output.hpp"


#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "plan/error.hpp"

namespace parallax::cli {

void write_file_atomically(const std::string& path, const std::string& text) {
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
  std::filesystem::rename(tmp, path);
}

void require_output_folder(const std::string& path) {
  const std::filesystem::path p(path);
  if (!path.empty() && p.has_parent_path() && !std::filesystem::is_directory(p.parent_path()))
    throw plan::InputError(plan::Location{path}, "cannot write the trace here: the folder does not exist");
}

std::string fmt(const char* format, double value) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, value);
  return buf;
}


}  // namespace parallax::cli
