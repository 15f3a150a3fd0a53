#include "profiler/cupti_tracer.hpp"

#include <cupti_activity.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "profiler/host_tracer.hpp"

namespace parallax::profiler {
namespace {

constexpr size_t kBufferBytes = 4 << 20;  // per CUPTI buffer
constexpr int kCudaSuccess = 0;

// Completed buffers, waiting for flush() (CUPTI calls back from its own thread).
std::mutex completed_mu;
std::vector<std::pair<uint8_t*, size_t>> completed;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  std::lock_guard<std::mutex> lock(completed_mu);
  completed.emplace_back(buffer, valid);
}

template <class F>
F symbol(void* lib, const char* name) {
  return reinterpret_cast<F>(dlsym(lib, name));
}

}  // namespace

struct CuptiTracer::Api {
  void* lib = nullptr;
  CUptiResult (*enable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*disable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc) = nullptr;
  CUptiResult (*flush_all)(uint32_t) = nullptr;
  CUptiResult (*next_record)(uint8_t*, size_t, CUpti_Activity**) = nullptr;
  CUptiResult (*push_external)(CUpti_ExternalCorrelationKind, uint64_t) = nullptr;
  CUptiResult (*pop_external)(CUpti_ExternalCorrelationKind, uint64_t*) = nullptr;
  CUptiResult (*timestamp)(uint64_t*) = nullptr;
  ~Api() {
    if (lib) dlclose(lib);
  }
};

std::string cupti_unavailable_reason() {
  void* driver = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!driver) return "no CUDA driver on this machine (libcuda.so.1 not found)";
  auto init = symbol<int (*)(unsigned)>(driver, "cuInit");
  auto count = symbol<int (*)(int*)>(driver, "cuDeviceGetCount");
  int devices = 0;
  std::string reason;
  if (!init || !count || init(0) != kCudaSuccess || count(&devices) != kCudaSuccess || devices == 0)
    reason = "no CUDA device visible to the driver";
  dlclose(driver);
  return reason;
}

std::unique_ptr<CuptiTracer> CuptiTracer::start(bool quiet) {
  auto say = [quiet](const std::string& why) {
    if (!quiet) std::fprintf(stderr, "CUPTI: %s; GPU activity is not traced, host timing carries on\n", why.c_str());
  };
  if (const std::string why = cupti_unavailable_reason(); !why.empty()) {
    say(why);
    return nullptr;
  }
  auto api = std::make_unique<Api>();
  // The copy LibTorch itself loaded (pip's torch 2.x links libcupti.so.13 from its nvidia
  // packages; Kineto uses it): two copies in one process would each keep their own activity
  // state. RTLD_NOLOAD finds a loaded one without loading anything; only then a fresh dlopen.
  for (const char* name : {"libcupti.so.13", "libcupti.so.12", "libcupti.so"})
    if (!api->lib) api->lib = dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  if (!api->lib) api->lib = dlopen("libcupti.so", RTLD_NOW | RTLD_LOCAL);
  if (!api->lib) api->lib = dlopen("libcupti.so.13", RTLD_NOW | RTLD_LOCAL);
  if (!api->lib) {
    say("libcupti.so not found (add the CUDA toolkit's lib folder to LD_LIBRARY_PATH)");
    return nullptr;
  }
  api->enable = symbol<decltype(api->enable)>(api->lib, "cuptiActivityEnable");
  api->disable = symbol<decltype(api->disable)>(api->lib, "cuptiActivityDisable");
  api->register_callbacks = symbol<decltype(api->register_callbacks)>(api->lib, "cuptiActivityRegisterCallbacks");
  api->flush_all = symbol<decltype(api->flush_all)>(api->lib, "cuptiActivityFlushAll");
  api->next_record = symbol<decltype(api->next_record)>(api->lib, "cuptiActivityGetNextRecord");
  api->push_external = symbol<decltype(api->push_external)>(api->lib, "cuptiActivityPushExternalCorrelationId");
  api->pop_external = symbol<decltype(api->pop_external)>(api->lib, "cuptiActivityPopExternalCorrelationId");
  api->timestamp = symbol<decltype(api->timestamp)>(api->lib, "cuptiGetTimestamp");
  if (!api->enable || !api->register_callbacks || !api->flush_all || !api->next_record || !api->push_external ||
      !api->pop_external || !api->timestamp) {
    say("libcupti.so lacks the activity API this build expects");
    return nullptr;
  }
  if (api->register_callbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS) {
    say("cuptiActivityRegisterCallbacks failed");
    return nullptr;
  }
  for (CUpti_ActivityKind k : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
                               CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION}) {
    if (api->enable(k) != CUPTI_SUCCESS) {
      say("cuptiActivityEnable failed");
      return nullptr;
    }
  }
  return std::unique_ptr<CuptiTracer>(new CuptiTracer(std::move(api)));
}

CuptiTracer::CuptiTracer(std::unique_ptr<Api> api) : api_(std::move(api)) {
  uint64_t gpu = 0;
  api_->timestamp(&gpu);
  cupti_to_host_ns_ = now_ns() - static_cast<int64_t>(gpu);
}

CuptiTracer::~CuptiTracer() {
  api_->flush_all(0);
  for (CUpti_ActivityKind k : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY, CUPTI_ACTIVITY_KIND_MEMSET,
                               CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION})
    if (api_->disable) api_->disable(k);
  std::lock_guard<std::mutex> lock(completed_mu);
  for (auto& [buffer, size] : completed) std::free(buffer);
  completed.clear();
}

void CuptiTracer::push(uint64_t external_id) { api_->push_external(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, external_id); }

void CuptiTracer::pop() {
  uint64_t last = 0;
  api_->pop_external(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0, &last);
}

ParsedActivity CuptiTracer::flush() {
  api_->flush_all(0);
  std::vector<std::pair<uint8_t*, size_t>> buffers;
  {
    std::lock_guard<std::mutex> lock(completed_mu);
    buffers.swap(completed);
  }
  std::vector<const void*> records;
  for (auto& [buffer, valid] : buffers) {
    CUpti_Activity* record = nullptr;
    while (api_->next_record(buffer, valid, &record) == CUPTI_SUCCESS) records.push_back(record);
  }
  ParsedActivity parsed = parse_activity_records(records);
  for (auto& [buffer, valid] : buffers) std::free(buffer);
  return parsed;
}

}  // namespace parallax::profiler
