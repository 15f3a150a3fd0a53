// libFuzzer target: a scenario file with --set overrides. Lines "#set key=value" (YAML comments,
// so the file still parses) are applied as overrides in order. An InputError is the parser doing
// its job; anything else escaping, a crash or a sanitizer report is a finding.
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "plan/error.hpp"
#include "plan/scenario.hpp"
#include "plan/yaml_reader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace parallax::plan;
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> sets;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);)
    if (line.rfind("#set ", 0) == 0) sets.push_back(line.substr(5));
  try {
    // A folder that does not exist: relative paths in the input (hardware: x.yaml) read nothing.
    YamlDocument doc = YamlDocument::from_text(text, "fuzz.yaml", "/nonexistent-parallax-fuzz");
    for (const auto& s : sets) doc.apply_override(s);
    parse_scenario(doc);
  } catch (const InputError&) {
  }
  return 0;
}
