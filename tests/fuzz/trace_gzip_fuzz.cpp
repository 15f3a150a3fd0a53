// libFuzzer target: a gzipped trace as PyTorch writes them (.json.gz), decompressed and read.
// Only InputError may come out.
#include <cstdint>
#include <string>

#include "plan/error.hpp"
#include "timeline/trace_reader.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  try {
    parallax::timeline::parse_trace(parallax::timeline::gunzip(bytes, "fuzz.json.gz"), "fuzz.json.gz");
  } catch (const parallax::plan::InputError&) {
  }
  return 0;
}
