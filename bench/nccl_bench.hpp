#pragma once
// The NCCL model against measurements, for parallax_sim_bench: published all-reduce bus
// bandwidths, and the shared Kineto traces of a 128-GPU NCCL job (their NCCL kernels against
// prediction, and compute kernels slowed inside NCCL kernels). Prints figures.
#include <string>

namespace parallax::bench {

/// The published all-reduce figures of `path` (bench/data/nccl_allreduce_published.csv) against
/// the NCCL model's.
void bench_published(const std::string& path);
/// The Kineto traces under `dir` (../shared/fixtures/kineto).
void bench_kineto(const std::string& dir);

}  // namespace parallax::bench
