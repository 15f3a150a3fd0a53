#include "exec/host_memory.hpp"

#include <c10/core/CPUAllocator.h>
#include <c10/core/alignment.h>
#include <malloc.h>
#include <sys/resource.h>

#include <atomic>
#include <cstdlib>
#include <limits>
#include <memory>
#include <new>
#include <string>

#include "exec/torch_compat.hpp"

namespace parallax::exec {

namespace {

std::atomic<int64_t> live_bytes{0};
std::atomic<int64_t> peak_bytes{0};

// Each block starts with a header that holds the inner allocator's DataPtr (which frees the block)
// and the size asked for; the tensor's data follows it. The DataPtr handed to LibTorch carries the
// data pointer as its own context, as LibTorch's DefaultCPUAllocator does: Allocator::raw_allocate
// asserts get() == get_context() (oneDNN's bf16 kernels on AVX512-BF16 CPUs allocate through it),
// and 2.x's copy-on-write storage treats any other DataPtr as foreign. A header rather than a side
// table keyed by the pointer: no lock on every allocation of every rank thread.
struct Header {
  c10::DataPtr inner;
  int64_t bytes;
};
// The data after the header stays as aligned as the inner allocator's block (64 bytes, LibTorch's
// CPU alignment, on both lines), so vectorized kernels see the alignment they expect.
constexpr size_t kHeaderBytes = 64;
static_assert(sizeof(Header) <= kHeaderBytes && kHeaderBytes % c10::gAlignment == 0);

Header* header_of(void* data) { return reinterpret_cast<Header*>(static_cast<char*>(data) - kHeaderBytes); }

void count(int64_t bytes) {
  const int64_t now = live_bytes.fetch_add(bytes, std::memory_order_relaxed) + bytes;
  int64_t peak = peak_bytes.load(std::memory_order_relaxed);
  while (now > peak && !peak_bytes.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
}

void release(void* data) {
  if (data == nullptr) return;  // an empty allocation (allocate_bytes(0))
  Header* header = header_of(data);
  live_bytes.fetch_sub(header->bytes, std::memory_order_relaxed);
  const c10::DataPtr inner = std::move(header->inner);
  header->~Header();
}  // `inner` frees the block through the inner allocator's deleter here

class CountingAllocator final : public AllocatorBase {
 public:
  explicit CountingAllocator(c10::Allocator* inner) : inner_(inner) {}

  c10::DataPtr allocate_bytes(size_t n) const override {
    // Zero bytes get no block, as from LibTorch's own CPU allocator (a null data pointer).
    if (n == 0) return {nullptr, nullptr, &release, c10::Device(c10::DeviceType::CPU)};
    c10::DataPtr inner = inner_->allocate(n + kHeaderBytes);
    const c10::Device device = inner.device();
    char* block = static_cast<char*>(inner.get());
    void* data = block + kHeaderBytes;
    new (block) Header{std::move(inner), static_cast<int64_t>(n)};
    count(static_cast<int64_t>(n));
    return {data, data, &release, device};
  }

  // What raw_deallocate calls on raw_allocate's pointers (LibTorch's default is none, which its
  // raw_deallocate asserts against).
  c10::DeleterFnPtr raw_deleter() const override { return &release; }

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
