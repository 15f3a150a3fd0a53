#include "plan/yaml_reader.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace parallax::plan {
namespace {

Location location_of(const std::string& file, const YAML::Mark& mark) {
  if (mark.is_null()) return Location{file, 0, 0};
  return Location{file, mark.line + 1, mark.column + 1};
}

// yaml-cpp keeps both entries of a key written twice in one map and answers lookups with the first,
// where most YAML tools keep the last: either way one of the two values is silently dropped, so a
// repeated key is bad input, named at its second place.
void refuse_duplicate_keys(const YAML::Node& node, const std::string& file, const std::string& path) {
  if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i) refuse_duplicate_keys(node[i], file, path + "[" + std::to_string(i) + "]");
    return;
  }
  if (!node.IsMap()) return;
  std::map<std::string, YAML::Mark> seen;
  for (const auto& entry : node) {
    if (!entry.first.IsScalar()) continue;
    const std::string key = entry.first.Scalar();
    const std::string here = path.empty() ? key : path + "." + key;
    if (const auto [first, fresh] = seen.emplace(key, entry.first.Mark()); !fresh) {
      const Location at = location_of(file, first->second);
      throw InputError(location_of(file, entry.first.Mark()),
                       "'" + here + "' is given twice (first at line " + std::to_string(at.line) + "): keep one");
    }
    refuse_duplicate_keys(entry.second, file, here);
  }
}

// YAML::Load reads the first document of several and drops the rest without a word. Found in the
// text rather than with YAML::LoadAll, which runs out of memory on some malformed input (the fuzz
// target found one): a line starting `---` or `...` at column 0 is a document marker wherever it
// stands (YAML 1.2, 9.1.4): content after one that follows content is a second document.
void refuse_second_document(const std::string& text, const std::string& file) {
  std::istringstream lines(text);
  std::string line;
  bool content = false;
  int marker_after_content = 0;  // its line; 0: none yet
  std::string marker_text;
  for (int n = 1; std::getline(lines, line); ++n) {
    const bool marker = (line.rfind("---", 0) == 0 || line.rfind("...", 0) == 0) &&
                        (line.size() == 3 || line[3] == ' ' || line[3] == '\t' || line[3] == '\r');
    if (marker) {
      if (content && !marker_after_content) marker_after_content = n, marker_text = line.substr(0, 3);
      continue;
    }
    const size_t first = line.find_first_not_of(" \t\r");
    if (first == std::string::npos || line[first] == '#' || line[first] == '%') continue;
    if (marker_after_content)
      throw InputError(Location{file, marker_after_content, 1}, "a second YAML document ('" + marker_text + "' after the first's keys): "
                                                                "a file holds one; put its keys in the first, or in a file of their own");
    content = true;
  }
}

YAML::Node parse_text(const std::string& text, const std::string& file) {
  refuse_second_document(text, file);
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::ParserException& e) {
    throw InputError(location_of(file, e.mark), "YAML syntax error: " + e.msg);
  }
  refuse_duplicate_keys(root, file, "");
  return root;
}

// Edit distance for "did you mean" hints on misspelt keys.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string scalar_text(const Field& f) {
  if (!f.present()) return "nothing";
  if (f.is_map()) return "a map";
  if (f.is_sequence()) return "a list";
  return "'" + f.node().Scalar() + "'";
}

}  // namespace

std::string join(const std::vector<std::string>& items, const std::string& sep) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? sep : "") + items[i];
  return out;
}

YamlDocument YamlDocument::from_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw InputError(Location{path}, "is a folder, not a YAML file");
  std::ifstream in(path);
  if (!in) throw InputError(Location{path}, "cannot open file (does it exist and is it readable?)");
  std::stringstream text;
  text << in.rdbuf();
  std::filesystem::path dir = std::filesystem::path(path).parent_path();
  return from_text(text.str(), path, dir.empty() ? "." : dir.string());
}

YamlDocument YamlDocument::from_text(const std::string& text, const std::string& display_name,
                                     const std::string& base_dir) {
  YamlDocument doc;
  doc.file_ = display_name;
  doc.base_dir_ = base_dir;
  doc.root_ = parse_text(text, display_name);
  if (!doc.root_.IsDefined() || doc.root_.IsNull()) doc.root_ = YAML::Node(YAML::NodeType::Map);
  if (!doc.root_.IsMap()) throw InputError(Location{display_name, 1, 1}, "expected a YAML map at the top");
  return doc;
}

void YamlDocument::apply_override(const std::string& assignment) {
  const std::string flag = "--set " + assignment;
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0)
    throw InputError(Location{flag}, "expected key.path=value, e.g. --set parallel.chunks=8");
  const std::string path = assignment.substr(0, eq);
  const std::string text = assignment.substr(eq + 1);
  // An empty value would parse as YAML's null and leave the key at its default: a shell variable
  // that was never set (--set parallel.data=$DP) would plan another job without a word. So would
  // whatever else YAML reads as null (~, null, a lone # comment).
  const std::string keep = " (to keep the scenario's or the default value, leave out this --set)";
  if (text.find_first_not_of(" \t") == std::string::npos)
    throw InputError(Location{flag}, "no value after '=' for '" + path + "'" + keep);
  const YAML::Node value = parse_text(text, flag);
  if (value.IsNull()) throw InputError(Location{flag}, "'" + text + "' is YAML's null, no value for '" + path + "'" + keep);

  std::vector<std::string> keys;
  std::stringstream ss(path);
  for (std::string key; std::getline(ss, key, '.');) {
    if (key.empty()) throw InputError(Location{flag}, "empty key in '" + path + "'");
    keys.push_back(key);
  }
  // yaml-cpp nodes are handles: reset() rebinds `cur` without writing into the tree.
  YAML::Node cur = root_;
  std::string walked;
  for (size_t i = 0; i + 1 < keys.size(); ++i) {
    walked += (i ? "." : "") + keys[i];
    YAML::Node next = cur[keys[i]];
    if (!next.IsDefined() || next.IsNull()) {
      cur[keys[i]] = YAML::Node(YAML::NodeType::Map);
      next = cur[keys[i]];
    } else if (!next.IsMap()) {
      throw InputError(Location{flag}, "'" + walked + "' is not a map, so it has no key '" +
                                           keys[i + 1] + "'");
    }
    cur.reset(next);
  }
  cur[keys.back()] = value;
  overrides_[path] = flag;
}

std::string YamlDocument::override_within(const std::string& path) const {
  if (std::string flag = override_for(path); !flag.empty()) return flag;
  for (const auto& [key, flag] : overrides_)
    if (key.size() > path.size() && key.compare(0, path.size(), path) == 0 && key[path.size()] == '.') return flag;
  return "";
}

std::string YamlDocument::override_for(const std::string& path) const {
  // The longest overridden prefix wins: --set model={...} covers model.layers too.
  std::string best;
  size_t best_len = 0;
  for (const auto& [key, flag] : overrides_) {
    // A list's elements are KEY[i]: --set parallel.partition_len=[...] covers parallel.partition_len[0].
    const bool prefix = path == key || (path.size() > key.size() && path.compare(0, key.size(), key) == 0 &&
                                        (path[key.size()] == '.' || path[key.size()] == '['));
    if (prefix && key.size() >= best_len) {
      best = flag;
      best_len = key.size();
    }
  }
  return best;
}

Field::Field(const YamlDocument& doc, YAML::Node node, std::string path, YAML::Mark mark)
    : doc_(&doc), node_(std::move(node)), path_(std::move(path)), mark_(mark) {}

Field Field::root(const YamlDocument& doc) { return Field(doc, doc.root(), "", doc.root().Mark()); }

Field Field::operator[](const std::string& key) const {
  const std::string child_path = path_.empty() ? key : path_ + "." + key;
  if (!node_.IsMap()) return Field(*doc_, YAML::Node(YAML::NodeType::Undefined), child_path, mark_);
  YAML::Node child = node_[key];
  // A missing key gives yaml-cpp's "zombie" node, on which every type query throws InvalidNode
  // (found by fuzzing: `model: {}` ended in "invalid node", exit 1); keep a valid undefined node.
  if (!child.IsDefined()) return Field(*doc_, YAML::Node(YAML::NodeType::Undefined), child_path, mark_);
  return Field(*doc_, child, child_path, child.Mark());
}

std::vector<Field> Field::elements() const {
  std::vector<Field> out;
  size_t i = 0;
  for (const auto& item : node_) {
    out.emplace_back(*doc_, item, path_ + "[" + std::to_string(i++) + "]", item.Mark());
  }
  return out;
}

Location Field::where() const {
  const std::string flag = doc_->override_for(path_);
  if (!flag.empty()) return Location{flag};
  return location_of(doc_->file(), mark_);
}

std::string Field::resolve_path(const std::string& path) const {
  std::filesystem::path p(path);
  if (p.is_relative() && doc_->override_for(path_).empty()) p = std::filesystem::path(doc_->base_dir()) / p;
  return p.string();
}

void Field::fail(const std::string& message) const { throw InputError(where(), message, path_); }

namespace {
// How a message names a map: by its key path, or the document's top level (a scenario, a profile,
// a Hugging Face config: the location before the message names the file).
std::string map_name(const Field& map) { return map.path().empty() ? "the top level" : "'" + map.path() + "'"; }
std::string in_map(const Field& map) { return map.path().empty() ? "at the top level" : "in " + map_name(map); }
}  // namespace

void expect_keys(const Field& map, const std::vector<std::string>& allowed, const std::vector<std::string>& deeper) {
  const std::string name = map_name(map);
  if (!map.is_map()) map.fail("expected " + name + " to be a map with keys: " + join(allowed));
  for (const auto& item : map.node()) {
    const std::string key = item.first.Scalar();
    if (std::find(allowed.begin(), allowed.end(), key) != allowed.end()) continue;
    std::string hint;
    for (const auto& a : allowed)
      if (edit_distance(key, a) <= 2) hint = " (did you mean '" + a + "'?)";
    for (const auto& d : deeper)
      if (hint.empty() && d.size() > key.size() && d.ends_with("." + key)) hint = " (did you mean '" + d + "'?)";
    const std::string path = map.path().empty() ? key : map.path() + "." + key;
    const std::string message = "unknown key '" + key + "' " + in_map(map) + hint + "; allowed: " + join(allowed);
    // A key no file has may come from a --set of one of its children (--set paralel.chunks=8).
    if (const std::string flag = map.doc().override_within(path); !flag.empty()) throw InputError(Location{flag}, message, path);
    Field(map.doc(), item.first, path, item.first.Mark()).fail(message);
  }
}

Field require(const Field& map, const std::string& key) {
  Field f = map[key];
  // A key written with no value (`layers:`, JSON's null) is there, at its own line: said so there.
  if (f.node().IsDefined() && f.node().IsNull()) f.fail("'" + f.path() + "' is empty (null); it needs a value");
  if (!f.present()) {
    map.fail("missing required key '" + key + "' " + in_map(map));
  }
  return f;
}

int64_t to_int(const Field& f, int64_t min, int64_t max) {
  int64_t v = 0;
  bool ok = f.is_scalar();
  if (ok) {
    try {
      v = f.node().as<int64_t>();
    } catch (const YAML::Exception&) {
      ok = false;
    }
  }
  std::string range = "an integer";
  if (min != std::numeric_limits<int64_t>::min()) range += " >= " + std::to_string(min);
  if (max != std::numeric_limits<int64_t>::max()) range += " and <= " + std::to_string(max);
  if (!ok) f.fail("'" + f.path() + "' must be " + range + ", got " + scalar_text(f));
  if (v < min || v > max) f.fail("'" + f.path() + "' must be " + range + ", got " + std::to_string(v));
  return v;
}

double to_number(const Field& f, double min) {
  double v = 0;
  bool ok = f.is_scalar();
  if (ok) {
    try {
      v = f.node().as<double>();
    } catch (const YAML::Exception&) {
      ok = false;
    }
  }
  if (!ok || std::isnan(v)) f.fail("'" + f.path() + "' must be a number, got " + scalar_text(f));
  if (v < min) {
    std::ostringstream m;
    m << "'" << f.path() << "' must be >= " << min << ", got " << v;
    f.fail(m.str());
  }
  return v;
}

bool to_bool(const Field& f) {
  if (f.is_scalar()) {
    try {
      return f.node().as<bool>();
    } catch (const YAML::Exception&) {
    }
  }
  f.fail("'" + f.path() + "' must be true or false, got " + scalar_text(f));
}

std::string to_text(const Field& f) {
  if (!f.is_scalar()) f.fail("'" + f.path() + "' must be a string, got " + scalar_text(f));
  return f.node().Scalar();
}

std::string to_choice(const Field& f, const std::vector<std::string>& choices) {
  const std::string v = f.is_scalar() ? f.node().Scalar() : "";
  if (std::find(choices.begin(), choices.end(), v) == choices.end() || !f.is_scalar())
    f.fail("'" + f.path() + "' must be one of " + join(choices, " | ") + ", got " + scalar_text(f));
  return v;
}

int64_t int_or(const Field& map, const std::string& key, int64_t fallback, int64_t min, int64_t max) {
  Field f = map[key];
  return f.present() ? to_int(f, min, max) : fallback;
}

double number_or(const Field& map, const std::string& key, double fallback, double min) {
  Field f = map[key];
  return f.present() ? to_number(f, min) : fallback;
}

double to_finite_number(const Field& f, double min) {
  const double v = to_number(f, min);
  if (!std::isfinite(v)) f.fail("'" + f.path() + "' must be a finite number, got " + scalar_text(f));
  return v;
}

double finite_number_or(const Field& map, const std::string& key, double fallback, double min) {
  Field f = map[key];
  return f.present() ? to_finite_number(f, min) : fallback;
}

bool bool_or(const Field& map, const std::string& key, bool fallback) {
  Field f = map[key];
  return f.present() ? to_bool(f) : fallback;
}

std::string string_or(const Field& map, const std::string& key, const std::string& fallback) {
  Field f = map[key];
  return f.present() ? to_text(f) : fallback;
}

}  // namespace parallax::plan
