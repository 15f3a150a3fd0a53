#pragma once
// How fast this host runs LibTorch's small operators right now.
//
// The shared VMs Parallax is measured on switch between speeds on their own, for seconds to
// minutes at a time: with nothing else running in the VM, a transformer encoder layer's forward
// takes 260-280 us in one state and 400-530 us in the other, a 384x384 linear layer 66 vs 86 us
// (docs/accuracy.md). A run or a calibration that lands in one state cannot be compared with
// figures taken in the other. The executor times this probe before every step and calibrate
// before every measured sample, so each figure says which state it was taken in.
namespace parallax::exec {

/// The reference operator's time (us): the lower of two softmaxes over 8x32x32 floats, ~13 us on
/// an idle Zen 3 core. Small and L1-resident on purpose: it costs ~0.3% of a 10 ms step, and like
/// the layers it measures LibTorch's dispatch and the core's speed rather than memory bandwidth.
double host_probe_us();

}  // namespace parallax::exec
