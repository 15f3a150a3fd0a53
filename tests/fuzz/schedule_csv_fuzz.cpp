// libFuzzer target: PyTorch pipelining's schedule CSV, read, lowered and validated as `parallax
// plan` does with `schedule: x.csv`. The first line gives the plan's shape, "pipeline virtual
// chunks grad_accumulation data" (small numbers, clamped); the rest is the CSV. Only CsvError may
// come out of reading; lowering and validation must not throw at all.
#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>

#include "schedule/csv.hpp"
#include "schedule/schedule.hpp"
#include "schedule/validate.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace parallax::schedule;
  const std::string text(reinterpret_cast<const char*>(data), size);
  const size_t eol = std::min(text.find('\n'), text.size());
  std::istringstream shape(text.substr(0, eol));
  int pipeline = 2, virtual_stages = 1, chunks = 4, accumulation = 1, data_parallel = 1;
  shape >> pipeline >> virtual_stages >> chunks >> accumulation >> data_parallel;
  pipeline = std::clamp(pipeline, 1, 8);
  virtual_stages = std::clamp(virtual_stages, 1, 4);
  chunks = std::clamp(chunks, 1, 16);
  accumulation = std::clamp(accumulation, 1, 3);
  const std::vector<int> buckets = data_parallel > 1 ? std::vector<int>(pipeline * virtual_stages, 2) : std::vector<int>{};
  ComputeOrder order;
  try {
    order = parse_schedule_csv(text.substr(std::min(eol + 1, text.size())), "fuzz.csv", pipeline,
                               pipeline * virtual_stages, chunks);
  } catch (const CsvError&) {
    return 0;
  }
  const Schedule s = lower(order, ScheduleKind::csv, pipeline, virtual_stages, chunks, accumulation, buckets);
  validate_schedule(s);
  return 0;
}
