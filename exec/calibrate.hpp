#pragma once
// `parallax calibrate`: measures this machine with the executor's own code and returns the
// `calibration:` section of a hardware profile (plan/calibration.hpp).
//
// It runs as a local job of two ranks, the layout `parallax run` uses for two-rank plans (one
// process per rank, the same LibTorch threads per rank, Gloo over loopback):
// 1. rank 0 times every distinct layer signature of the given plans with the executor's modules
//    (forward, forward under no_grad, backward with and without the input gradient) over
//    micro-batch sizes, and the loss, data loading, the optimizer step and memory copies, while
//    the other rank waits idle on the store;
// 2. both ranks compute at once and rank 0 times again: the ratio is the interference factor;
// 3. both ranks time Gloo send/recv (ping-pong, half the round trip) and all-reduce over
//    message sizes, fitted to latency + bytes / bandwidth.
// Each figure is the median of repeated runs after a warm-up.
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "exec/comm.hpp"
#include "plan/calibration.hpp"
#include "plan/plan.hpp"

namespace parallax::exec {

struct CalibrateOptions {
  bool quick = false;  ///< only the micro-batch sizes the plans use, fewer repeats
  /// Receives one line per measurement (rank 0).
  std::function<void(const std::string&)> progress;
};

/// Micro-batch sizes to measure for plans whose micro-batches are `used`: powers of two up to
/// the largest batch, plus the sizes used (quick: the sizes used and their neighbours' halves).
std::vector<int> calibration_sizes(const std::vector<int>& used, int largest_batch, bool quick);

/// Runs on every rank of the calibration job (world size 2). Rank 0 returns the calibration.
std::optional<plan::Calibration> calibrate_rank(const std::vector<plan::Plan>& plans, const LaunchInfo& launch,
                                                const CalibrateOptions& options);

}  // namespace parallax::exec
