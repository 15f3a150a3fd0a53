#pragma once
// A compute model (`device.compute`) written back as YAML, put into a profile's text, and set
// beside another figure by figure. `parallax calibrate --tables` measures the tables on a GPU
// (exec/compute_tables.hpp) and writes them here in the very keys the shipped profiles carry, so
// that a measured table and a published one read alike and a user can diff them.
#include <string>
#include <vector>

#include "plan/hardware.hpp"

namespace parallax::plan {

/// `v` to `digits` decimals, as the tables' notes and comparisons print their figures.
std::string fixed(double v, int digits);

/// The GPU chip a device's name names ("H100" in "NVIDIA H100 80GB SXM5" and "NVIDIA H100 80GB
/// HBM3", "A100" in "NVIDIA A100-SXM4-80GB", "GH200", "T4"): its first word of one to three
/// capitals then digits, between spaces or dashes; "" when it has none.
std::string gpu_chip(const std::string& device_name);

/// `compute:` with its keys, indented to sit under `device:` (two spaces), each GEMM grid one
/// line of k figures per (m, n) as the shipped profiles write them. `notes` become comment lines
/// above the keys. Writes what `c` holds: grids, memory_efficiency, the flash figures, their
/// by-sequence curves, sustained_tflops where present, and precisions.
std::string compute_yaml(const ComputeModel& c, const std::vector<std::string>& notes);

/// `base_text` (a hardware profile's YAML) with its `device.compute` block replaced by
/// `compute_block` (as compute_yaml writes it), or the block added at the end of `device:` when
/// the base has none. logic_error when the text has no top-level `device:` block map.
std::string with_compute_block(const std::string& base_text, const std::string& compute_block);

/// Lines that set `measured` beside `shipped` figure by figure: per precision both grids cover,
/// measured / shipped over their common shapes (mean, range, the shapes at either end); memory
/// efficiency; flash attention's forward and backward, and their by-sequence fractions.
std::vector<std::string> compare_compute(const ComputeModel& measured, const ComputeModel& shipped);

}  // namespace parallax::plan
