// libFuzzer target: a hardware profile (device, links, measured layers, calibration). Only
// InputError may come out.
#include <cstdint>
#include <string>

#include "plan/error.hpp"
#include "plan/hardware.hpp"
#include "plan/yaml_reader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace parallax::plan;
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const YamlDocument doc = YamlDocument::from_text(text, "fuzz.yaml", "/nonexistent-parallax-fuzz");
    parse_hardware(Field::root(doc));
  } catch (const InputError&) {
  }
  return 0;
}
