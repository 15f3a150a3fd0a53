// Positions in a trace's text and type-checked field accessors (timeline/trace_json.hpp).
#include "timeline/trace_json.hpp"

#include <algorithm>
#include <cmath>

namespace parallax::timeline::detail {

// ---- Positions. nlohmann::json keeps none, so an event's place is found again in the text
// (only when something is reported, so a plain scan is fast enough).

plan::Location position(const std::string& name, const std::string& text, size_t byte) {
  int line = 1, column = 1;
  for (size_t i = 0; i < byte && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return {name, line, column};
}

// First byte of the JSON value, past whitespace and a UTF-8 byte order mark.
size_t value_start(const std::string& text) {
  const size_t from = text.rfind("\xEF\xBB\xBF", 0) == 0 ? 3 : 0;
  return text.find_first_not_of(kSpace, from);
}

// The closing quote of the string whose opening quote is at `open` (text.size() if none).
size_t string_end(const std::string& text, size_t open) {
  for (size_t i = open + 1; i < text.size(); ++i) {
    if (text[i] == '\\') ++i;
    else if (text[i] == '"') return i;
  }
  return text.size();
}

// Where the value of the root object's (last) `key` starts, if anywhere.
size_t root_value_at(const std::string& text, const std::string& key) {
  const std::string quoted = "\"" + key + "\"";
  size_t found = std::string::npos;
  int depth = 0;
  bool key_next = false;
  for (size_t i = value_start(text); i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"') {
      const size_t end = string_end(text, i);
      if (depth == 1 && key_next && text.compare(i, end + 1 - i, quoted) == 0)
        found = text.find_first_not_of(" \t\r\n:", end + 1);
      key_next = false;
      i = end;
    } else if (c == '{' || c == '[') {
      key_next = ++depth == 1 && c == '{';
    } else if (c == '}' || c == ']') {
      --depth;
    } else if (c == ',') {
      key_next = depth == 1;
    }
  }
  return found;
}

// The '[' of the event list: the root array, or the root object's "traceEvents" value.
size_t event_list_at(const std::string& text) {
  const size_t root = value_start(text);
  if (root == std::string::npos || text[root] == '[') return root;
  const size_t list = root_value_at(text, "traceEvents");
  return list != std::string::npos && text[list] == '[' ? list : std::string::npos;
}

// Byte offset of element `index` of the list opening at `list`.
size_t element_at(const std::string& text, size_t list, size_t index) {
  size_t count = 0;
  int depth = 0;
  bool next = true;  // the next non-space byte starts an element
  for (size_t i = list + 1; i < text.size(); ++i) {
    const char c = text[i];
    if (next && !std::strchr(kSpace, c)) {
      if (count++ == index) return i;
      next = false;
    }
    if (c == '"') i = string_end(text, i);
    else if (c == '{' || c == '[') ++depth;
    else if ((c == '}' || c == ']') && depth-- == 0) break;
    else if (c == ',' && depth == 0) next = true;
  }
  return std::string::npos;
}

// ---- Fields. Every accessor checks the type first: nlohmann throws its own exceptions (or,
// for numbers cast out of range, does undefined things) on values of the wrong kind.

const json* field(const json& e, const char* key) {
  const auto it = e.find(key);
  return it == e.end() ? nullptr : &*it;
}

std::string text_of(const json& e, const char* key) {
  const json* v = field(e, key);
  return v && v->is_string() ? v->get<std::string>() : "";
}

// Ids are numbers or strings ("tid": "PyTorch Profiler", "pid": "CPU functions"): either way,
// as text. Only numbers are dumped: dump() of a nested value recurses as deep as it goes.
std::string id_of(const json& e, const char* key) {
  const json* v = field(e, key);
  if (!v) return "0";
  if (v->is_string()) return v->get<std::string>();
  return v->is_number() ? v->dump() : "?";
}

const json& args_of(const json& e) {
  static const json empty = json::object();
  const json* v = field(e, "args");
  return v && v->is_object() ? *v : empty;
}

// An integer value (a whole float counts), or nothing.
std::optional<int64_t> integer(const json& v) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    return u <= static_cast<uint64_t>(INT64_MAX) ? std::optional<int64_t>(static_cast<int64_t>(u)) : std::nullopt;
  }
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && std::abs(d) < 9e15 && d == std::floor(d)) return static_cast<int64_t>(d);
  }
  return std::nullopt;
}

// An integer field of `e` (pid, tid) into *out; false when absent or not an integer.
bool int_key(const json& e, const char* key, int64_t* out) {
  const json* v = field(e, key);
  if (!v) return false;
  const auto n = integer(*v);
  if (n) *out = n.value();
  return n.has_value();
}

// A time field (microseconds) in nanoseconds; nothing when absent or not a number.
std::optional<int64_t> micros(const json& e, const char* key, const Source& src, size_t index) {
  const json* v = field(e, key);
  if (!v || !v->is_number()) return std::nullopt;
  const double us = v->get<double>();
  if (!std::isfinite(us) || std::abs(us) > kMaxMicros)
    src.fail(index, std::string(key) + " is out of range (microseconds, at most 4e15 either side of zero)");
  return std::llround(us * 1000.0);
}

Span complete_span(const json& e, const Source& src, size_t i, const char* needs) {
  const auto ts = micros(e, "ts", src, i), dur = micros(e, "dur", src, i);
  if (!ts || !dur) src.fail(i, needs);
  if (*dur < 0) src.fail(i, "dur is negative");
  return {*ts, *ts + *dur};
}

}  // namespace parallax::timeline::detail
