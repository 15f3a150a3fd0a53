#pragma once
// Errors in what the user gave us (scenario files, profiles, schedules, flags). They carry the
// place — file:line:column, or the --set flag that introduced the value — and a sentence the user
// can act on. The CLI turns them into exit code 2; nothing is printed on stdout before that.
#include <stdexcept>
#include <string>

namespace parallax::plan {

/// Where a value came from. line and column are 1-based; 0 means "not known".
struct Location {
  std::string file;
  int line = 0;
  int column = 0;

  /// "file:line:column", "file:line", or "file" as far as known.
  std::string str() const;
};

class InputError : public std::runtime_error {
 public:
  /// `key`: the scenario key the value belongs to ("parallel.chunks"), when there is one, so that
  /// the GUI can show the message under its knob without reading the text.
  InputError(Location where, const std::string& message, std::string key = "");
  const Location& where() const { return where_; }
  const std::string& message() const { return message_; }
  const std::string& key() const { return key_; }

 private:
  Location where_;
  std::string message_;
  std::string key_;
};

/// A figure the scenario's and its profile's numbers lead to that is beyond what Parallax counts in
/// (a duration past days, bytes past exabytes): one of those numbers is out of scale. Bad input
/// without one place to name: the CLI exits 2 with it, the tuner leaves the plan out.
class OutOfScale : public std::range_error {
 public:
  using std::range_error::range_error;
};

}  // namespace parallax::plan
