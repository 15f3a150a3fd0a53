#include "exec/host_memory.hpp"

#include <c10/core/CPUAllocator.h>
#include <malloc.h>
#include <sys/resource.h>

#include <atomic>
#include <cstdlib>
#include <limits>
#include <memory>
#include <string>

#include "exec/torch_compat.hpp"

namespace parallax::exec {

namespace {

std::atomic<int64_t> live_bytes{0};
std::atomic<int64_t> peak_bytes{0};

// Each allocation keeps the inner allocator's DataPtr (which frees it) and its size.
struct Counted {
  c10::DataPtr inner;
  int64_t bytes;
};

void release(void* context) {
  auto* block = static_cast<Counted*>(context);
  live_bytes.fetch_sub(block->bytes, std::memory_order_relaxed);
  delete block;  // frees the memory through the inner allocator's deleter
}

class CountingAllocator final : public AllocatorBase {
 public:
  explicit CountingAllocator(c10::Allocator* inner) : inner_(inner) {}

  c10::DataPtr allocate_bytes(size_t n) const override {
    auto block = std::make_unique<Counted>(Counted{inner_->allocate(n), static_cast<int64_t>(n)});
    void* data = block->inner.get();
    const c10::Device device = block->inner.device();
    const int64_t now = live_bytes.fetch_add(block->bytes, std::memory_order_relaxed) + block->bytes;
    int64_t peak = peak_bytes.load(std::memory_order_relaxed);
    while (now > peak && !peak_bytes.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
    }
    return {data, block.release(), &release, device};
  }

 private:
  c10::Allocator* inner_;
};

}  // namespace

void count_tensor_memory() {
  // Never destroyed: tensors may outlive any scope this could be tied to.
  static auto* counting = new CountingAllocator(c10::GetCPUAllocator());
  // Above the priority LibTorch registers its default with (0), so a later default cannot replace it.
  c10::SetCPUAllocator(counting, /*priority=*/1);
}

int64_t tensor_bytes() { return live_bytes.load(std::memory_order_relaxed); }

int64_t peak_tensor_bytes() { return peak_bytes.load(std::memory_order_relaxed); }

void reset_peak_tensor_bytes() { peak_bytes.store(tensor_bytes(), std::memory_order_relaxed); }

int64_t peak_resident_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

void keep_freed_memory() {
  if (const char* t = std::getenv("GLIBC_TUNABLES"); t && std::string(t).find("glibc.malloc.") != std::string::npos) return;
  mallopt(M_MMAP_THRESHOLD, 32 << 20);  // glibc's upper limit on 64-bit; larger blocks are still mmap'd
  mallopt(M_TRIM_THRESHOLD, std::numeric_limits<int>::max());
  mallopt(M_TOP_PAD, 16 << 20);  // grow the heap in 16 MiB steps rather than per request
}

}  // namespace parallax::exec
