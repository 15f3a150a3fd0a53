#pragma once
// Reading YAML with places. A YamlDocument is one parsed file (or built-in text) plus the --set
// overrides applied to it; a Field is one value in it with its key path ("parallel.chunks"), so
// every error can say where the value came from: file:line:column for values in the file, the
// flag itself for values that came from --set. The typed readers below are the only way the
// scenario and hardware parsers look at values, so every type error reads the same.
#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include "plan/error.hpp"

namespace parallax::plan {

class YamlDocument {
 public:
  /// Parses a file; a missing file or a YAML syntax error is an InputError.
  static YamlDocument from_file(const std::string& path);
  /// Parses text that did not come from a file (built-in scenarios and profiles).
  static YamlDocument from_text(const std::string& text, const std::string& display_name,
                                const std::string& base_dir = ".");

  /// Applies "key.path=value" (value is YAML: 8, [5, 5], balanced, {a: 1}).
  void apply_override(const std::string& assignment);

  const YAML::Node& root() const { return root_; }
  const std::string& file() const { return file_; }
  /// Folder that relative paths inside the document are resolved against.
  const std::string& base_dir() const { return base_dir_; }
  /// The --set flag that set `path` or one of its parents, or "" when it came from the file.
  std::string override_for(const std::string& path) const;
  /// override_for(path), else a --set flag that set a key below `path` (which may have made it).
  std::string override_within(const std::string& path) const;

 private:
  YAML::Node root_;
  std::string file_;
  std::string base_dir_;
  std::map<std::string, std::string> overrides_;  // key path -> the whole --set flag
};

/// One value of a document: the node (possibly absent), its key path and its place.
class Field {
 public:
  Field(const YamlDocument& doc, YAML::Node node, std::string path, YAML::Mark mark);
  static Field root(const YamlDocument& doc);

  bool present() const { return node_.IsDefined() && !node_.IsNull(); }
  /// The child under `key`; absent children keep the parent's place for "missing" errors.
  Field operator[](const std::string& key) const;
  /// Elements of a sequence (the caller checks is_sequence first).
  std::vector<Field> elements() const;

  const YAML::Node& node() const { return node_; }
  const std::string& path() const { return path_; }
  const YamlDocument& doc() const { return *doc_; }
  Location where() const;
  /// A path this field gives: a value from a --set flag is relative to the working directory, a
  /// value in the file to the file's folder.
  std::string resolve_path(const std::string& path) const;
  /// An InputError at this field's place.
  [[noreturn]] void fail(const std::string& message) const;

  bool is_map() const { return node_.IsMap(); }
  bool is_sequence() const { return node_.IsSequence(); }
  bool is_scalar() const { return node_.IsScalar(); }

 private:
  const YamlDocument* doc_;
  YAML::Node node_;
  std::string path_;
  YAML::Mark mark_;
};

/// Requires a map whose keys are all in `allowed`; the error names the allowed keys. `deeper`:
/// full paths of keys further down ("parallel.precision"), offered where an unknown key is the
/// last part of one (a top-level `precision:` is parallel.precision misplaced).
void expect_keys(const Field& map, const std::vector<std::string>& allowed, const std::vector<std::string>& deeper = {});
/// Requires the key to be present.
Field require(const Field& map, const std::string& key);

int64_t to_int(const Field& f, int64_t min = std::numeric_limits<int64_t>::min(),
               int64_t max = std::numeric_limits<int64_t>::max());
/// Accepts .inf; rejects NaN.
double to_number(const Field& f, double min = -std::numeric_limits<double>::infinity());
bool to_bool(const Field& f);
std::string to_text(const Field& f);
std::string to_choice(const Field& f, const std::vector<std::string>& choices);

int64_t int_or(const Field& map, const std::string& key, int64_t fallback, int64_t min,
               int64_t max = std::numeric_limits<int64_t>::max());
double number_or(const Field& map, const std::string& key, double fallback, double min);
/// As to_number and number_or, refusing .inf too: for a scenario's sizes, rates and times, where
/// infinity is no value (a bucket cap of .inf had made every tensor a bucket). A hardware profile
/// takes .inf where it means unbounded (the ideal profile's bandwidths).
double to_finite_number(const Field& f, double min = -std::numeric_limits<double>::infinity());
double finite_number_or(const Field& map, const std::string& key, double fallback, double min);
bool bool_or(const Field& map, const std::string& key, bool fallback);
std::string string_or(const Field& map, const std::string& key, const std::string& fallback);

/// "a, b, c" for messages.
std::string join(const std::vector<std::string>& items, const std::string& sep = ", ");

}  // namespace parallax::plan
