#include "plan/buckets.hpp"

#include <cmath>

namespace parallax::plan {

std::vector<std::vector<int>> assign_buckets(const std::vector<int64_t>& tensor_bytes,
                                             int64_t first_bucket_bytes, int64_t bucket_cap_bytes) {
  std::vector<std::vector<int>> buckets;
  std::vector<int> open;
  int64_t open_bytes = 0;
  for (int i = 0; i < static_cast<int>(tensor_bytes.size()); ++i) {
    open.push_back(i);
    open_bytes += tensor_bytes[i];
    const int64_t cap = buckets.empty() ? first_bucket_bytes : bucket_cap_bytes;
    if (open_bytes >= cap) {
      buckets.push_back(std::move(open));
      open.clear();
      open_bytes = 0;
    }
  }
  if (!open.empty()) buckets.push_back(std::move(open));
  return buckets;
}

// Python truncates: int(bucket_cap_mb * 1024 * 1024).
int64_t mib_to_bytes(double mb) { return static_cast<int64_t>(mb * 1024.0 * 1024.0); }

}  // namespace parallax::plan
