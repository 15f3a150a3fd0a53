#pragma once
// How fast this host runs LibTorch's small operators right now.
//
// The shared VMs Parallax is measured on switch between speeds on their own, for seconds to
// minutes at a time: with nothing else running in the VM, a transformer encoder layer's forward
// takes 260-280 us in one state and 400-530 us in the other, a 384x384 linear layer 66 vs 86 us
// (docs/accuracy.md). A run or a calibration that lands in one state cannot be compared with
// figures taken in the other. The executor times this probe before every step and calibrate
// before every measured sample, so each figure says which state it was taken in.
#include <string>

namespace parallax::exec {

/// The reference operator's time (us): the lower of two softmaxes over 8x32x32 floats, ~13 us on
/// an idle Zen 3 core. Small and L1-resident on purpose: it costs ~0.3% of a 10 ms step, and like
/// the layers it measures LibTorch's dispatch and the core's speed rather than memory bandwidth.
double host_probe_us();

/// How many threads of other programs were ready to run on this machine (running or waiting for a
/// core: state R in /proc), on average over `samples` readings `gap_ms` apart; this process's own
/// group (the local ranks and their launcher) left out. -1 where /proc cannot tell (not Linux).
/// Written here rather than read from /proc/loadavg: the load average lags by a minute and
/// counts the ranks themselves.
double other_runnable_threads(int samples = 20, int gap_ms = 25);

/// A warning when `others` (other_runnable_threads) would take a share of `cores` from what is
/// being measured (`what`, e.g. "Gloo's messages"); empty on an idle machine.
std::string busy_machine_warning(double others, int cores, const std::string& what);

}  // namespace parallax::exec
