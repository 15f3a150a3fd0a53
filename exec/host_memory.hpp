#pragma once
// A CPU rank's memory as the operating system sees it: the resident set now and its peak, and the
// allocator setting that makes the peak mean what training held at once.
#include <cstdint>

namespace parallax::exec {

/// The process's resident set size now (/proc/self/statm), in bytes.
int64_t resident_bytes();
/// Its peak so far (getrusage), in bytes: a rank's measured memory is the peak less the size
/// before its stages were built. Ranks keep the memory they free (keep_freed_memory), so the peak
/// holds what training held at once.
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
