#pragma once
// DDP gradient buckets in PyTorch's steady state (Reducer::rebuild_buckets after the first
// iteration, compute_bucket_assignment_by_size): tensors in gradient-ready order are added to the
// open bucket; once its size reaches its cap it closes (so it may overshoot by the last tensor);
// the first bucket's cap is first_bucket_mb, every later one's bucket_cap_mb; tensors are never
// split; a bucket still open at the end is closed as is. MiB = 1024 * 1024 bytes.
#include <cstdint>
#include <vector>

namespace parallax::plan {

/// Groups tensors (given as byte sizes in gradient-ready order) into buckets; returns, per
/// bucket, the positions of its tensors in that order.
std::vector<std::vector<int>> assign_buckets(const std::vector<int64_t>& tensor_bytes,
                                             int64_t first_bucket_bytes, int64_t bucket_cap_bytes);

/// Bytes of `mb` MiB, as DDP computes int(bucket_cap_mb * 1024 * 1024).
int64_t mib_to_bytes(double mb);

}  // namespace parallax::plan
