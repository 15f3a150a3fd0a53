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
// 2. both ranks time Gloo's send call, send/recv (ping-pong, half the round trip less the send
//    call) and all-reduce over message sizes;
// 3. both ranks run the probe plans for real, one after the other, with the runtime of `parallax
//    run`; their traces go back to the caller, which compares them with the simulator to get the
//    in-run factors.
// Each figure of 1 is the 20th percentile of repeated runs after a warm-up (timeline::undisturbed: the cost alone, unmoved
// by bursts of interference), each of 2 the median. exec/calibrate.cpp decides what to measure
// and in which order; the measuring itself (repeats, clocks, data, optimizer, Gloo) is in
// exec/measuring.hpp.
//
// On a GPU (CalibrateOptions::device) it runs as one rank and measures step 1 alone, timed with
// CUDA events.
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "exec/comm.hpp"
#include "exec/runtime.hpp"
#include "plan/calibration.hpp"
#include "plan/plan.hpp"

namespace parallax::exec {

struct CalibrateOptions {
  bool quick = false;  ///< only the micro-batch sizes the plans use, fewer repeats
  /// Every layer is also measured at these precisions, besides its plan's own.
  std::vector<plan::Precision> precisions;
  /// Receives one line per measurement (rank 0).
  std::function<void(const std::string&)> progress;
  /// Run for real after the measurements, on both ranks (world size 2), in order.
  std::vector<plan::Plan> probes;
  /// Where to measure. A GPU is measured by one rank alone (world size 1) with CUDA events: its
  /// layers, losses, optimizer steps and copies; no Gloo, no shared cores, no probes (the links
  /// stay the base profile's).
  torch::Device device = torch::kCPU;
  /// On a GPU: also time each layer's and optimizer step's kernels with the device kept busy
  /// ahead (their device time) and the host's time to launch them (`calibrate --launch`).
  bool launch = false;
};

/// What rank 0 ends with.
struct CalibrationRun {
  plan::Calibration calibration;
  std::vector<std::vector<RankResult>> probes;  ///< per probe, every rank's result of its run
  /// Without --quick, each signature's plan::pass_difference between the two passes over the
  /// layers; empty with --quick (one pass).
  std::map<std::string, double> pass_differences;
  /// Rank 0's warnings while it measured (other programs busy on the machine), for the profile's header.
  std::vector<std::string> warnings;
};

/// One line on CalibrationRun::pass_differences: the median and the worst, with its signature.
std::string pass_summary(const std::map<std::string, double>& differences);

/// Micro-batch sizes to measure for plans whose micro-batches are `used`: powers of two up to
/// the largest batch, plus the sizes used (quick: the sizes used and their neighbours' halves).
std::vector<int> calibration_sizes(const std::vector<int>& used, int largest_batch, bool quick);

/// Runs on every rank of the calibration job (world size 2). Rank 0 returns the calibration.
std::optional<CalibrationRun> calibrate_rank(const std::vector<plan::Plan>& plans, const LaunchInfo& launch,
                                           const CalibrateOptions& options);

}  // namespace parallax::exec
