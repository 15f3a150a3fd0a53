#pragma once
// Splitting the layer list into pipeline stages.
#include <cstdint>
#include <string>
#include <vector>

#include "plan/scenario.hpp"

namespace parallax::plan {

/// The contiguous split of `costs` into `stages` non-empty parts that minimises the largest
/// part's sum, computed exactly by dynamic programming over (stages used, layers covered).
/// Returns the layer count of each part. Requires 1 <= stages <= costs.size().
std::vector<int> balanced_partition(const std::vector<int64_t>& costs, int stages);

/// A partition from layers per stage (a `parallel.partition_len` list); an empty list is "balanced".
PartitionLen partition_of(const std::vector<int>& lens);

/// A partition as YAML text: "balanced", "5" or "[4, 6]".
std::string partition_text(const PartitionLen& p);
/// One number for every stage as the list it means over `stages` stages (the form the tuner's
/// space uses); a list or "balanced" as it is.
PartitionLen listed(const PartitionLen& p, int stages);
/// `parallel.partition_len` as a scenario or a flag gives it; InputError at the field otherwise.
PartitionLen read_partition(const Field& field);

/// The largest part's sum for a split given as layer counts.
int64_t bottleneck(const std::vector<int64_t>& costs, const std::vector<int>& lens);

}  // namespace parallax::plan
