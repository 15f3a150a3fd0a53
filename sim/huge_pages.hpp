#pragma once
// Transparent huge pages for the simulator's large, write-once buffers (the timeline, the
// dependency graph, the rendezvous table). They are filled front to back once per simulation,
// and on the VMs Parallax is benchmarked on a first touch of a 4 KiB page costs microseconds:
// at 1,024 ranks the faults took a third of simulate's time (docs/simulator.md, Speed). Asking
// the kernel for 2 MiB pages on the untouched range cuts the faults 512-fold. Linux only; a hint
// the kernel may ignore (transparent_hugepage=never), never a change in results.
#include <cstddef>
#include <cstdint>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

namespace parallax::sim {

/// Advises huge pages for the whole 2 MiB-aligned pages inside [p, p + bytes).
inline void advise_huge_pages(const void* p, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  constexpr uintptr_t kHuge = uintptr_t{2} << 20;
  const auto begin = (reinterpret_cast<uintptr_t>(p) + kHuge - 1) & ~(kHuge - 1);
  const auto end = (reinterpret_cast<uintptr_t>(p) + bytes) & ~(kHuge - 1);
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
#else
  (void)p;
  (void)bytes;
#endif
}

/// Reserves room for `n` elements of `v` and advises huge pages for the part not yet written.
template <typename T>
void reserve_huge(std::vector<T>& v, size_t n) {
  v.reserve(n);
  advise_huge_pages(v.data() + v.size(), (v.capacity() - v.size()) * sizeof(T));
}

}  // namespace parallax::sim
