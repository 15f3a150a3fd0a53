#pragma once
// The CUPTI tracer: GPU kernels (NCCL's included), memcpy and memset, recorded by CUPTI's activity
// API into buffers of a few MB, handed over when a buffer fills or at flush() (the end of each
// step), and tied to actions through external correlation ids (push() before an action launches
// its work, pop() after). libcupti and the CUDA driver are opened at run time, so the binary runs
// on machines without them: start() then says in one line why GPU activity is not traced, and
// returns nothing; the host tracer carries on.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "profiler/cupti_records.hpp"

namespace parallax::profiler {

class CuptiTracer {
 public:
  /// Starts tracing, or returns nullptr after writing one line to stderr saying why not.
  static std::unique_ptr<CuptiTracer> start(bool quiet = false);
  ~CuptiTracer();

  void push(uint64_t external_id);
  void pop();
  /// Flushes CUPTI's buffers and returns what they held since the last call.
  ParsedActivity flush();
  /// Host time minus CUPTI time, measured at start.
  int64_t cupti_to_host_ns() const { return cupti_to_host_ns_; }

  struct Api;  // the libcupti functions, looked up with dlsym

 private:
  explicit CuptiTracer(std::unique_ptr<Api> api);
  std::unique_ptr<Api> api_;
  int64_t cupti_to_host_ns_ = 0;
};

/// Why CUPTI cannot trace here ("" when it can): no driver, no device, no libcupti.
std::string cupti_unavailable_reason();

}  // namespace parallax::profiler
