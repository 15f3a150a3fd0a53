#pragma once
// A CPU rank's memory: the bytes its live tensors hold (counted as LibTorch allocates and frees
// them) with their peak, the peak resident set as the operating system sees it, and the allocator
// setting that keeps freed memory in the process.
#include <cstdint>

namespace parallax::exec {

/// From here on, counts the bytes of every CPU tensor the process allocates until it is freed, by
/// putting a counting allocator in front of LibTorch's CPU allocator (idempotent). Tensors that
/// exist before are not counted. run_rank calls it first.
///
/// Why count ourselves: LibTorch keeps no statistics for the CPU (its DefaultCPUAllocator reports
/// to the profiler only while one records memory, per thread), and the resident set is no stand-in:
/// with malloc's arenas per thread and the memory it keeps (keep_freed_memory), its peak also holds
/// the allocator's fragmentation. With torch 2.11 the last stage of a 2-stage 1F1B pipeline measured
/// 94 MB of peak resident size at 4 micro-batches and 150 MB at 32 (CI, 2026-11-27), though the
/// tensors it held at once did not grow. On a GPU the CUDA caching allocator counts (gpu.hpp).
void count_tensor_memory();
/// The bytes CPU tensors allocated since count_tensor_memory hold now.
int64_t tensor_bytes();
/// Their peak since the last reset_peak_tensor_bytes (or since counting began).
int64_t peak_tensor_bytes();
/// Starts a new peak at what is held now.
void reset_peak_tensor_bytes();

/// The process's peak resident set size so far (getrusage), in bytes.
int64_t peak_resident_bytes();

/// Makes the C library keep the memory a rank frees instead of handing it back to the kernel, as
/// PyTorch's CPU performance guide advises (there by preloading jemalloc or tcmalloc). LibTorch's
/// CPU allocator is plain malloc: with glibc's defaults, large blocks (from 128 KiB) are mmap'd and
/// unmapped again and a freed heap top is trimmed, so each step page-faults its activations back
/// in. On the VMs this runs on that tripled the step time of a small transformer and made it jump
/// between 4 and 28 ms per micro-batch. A user's own GLIBC_TUNABLES malloc setting wins. run_rank
/// and calibration call it.
void keep_freed_memory();

}  // namespace parallax::exec
