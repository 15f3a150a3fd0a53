// libFuzzer target: trace text of any kind (Parallax's, Kineto's, the legacy profiler's, any
// Chrome trace, in object or array form). Only InputError may come out.
#include <cstdint>
#include <string>

#include "plan/error.hpp"
#include "timeline/trace_reader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    parallax::timeline::parse_trace(text, "fuzz.json");
  } catch (const parallax::plan::InputError&) {
  }
  return 0;
}
