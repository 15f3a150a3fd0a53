#include "plan/error.hpp"

namespace parallax::plan {

std::string Location::str() const {
  std::string s = file.empty() ? std::string("<input>") : file;
  // append() rather than ":" + ..., which trips GCC 12's false -Wrestrict warning.
  if (line > 0) {
    s.append(":").append(std::to_string(line));
    if (column > 0) s.append(":").append(std::to_string(column));
  }
  return s;
}

InputError::InputError(Location where, const std::string& message, std::string key)
    : std::runtime_error(where.str() + ": " + message),
      where_(std::move(where)),
      message_(message),
      key_(std::move(key)) {}

}  // namespace parallax::plan
