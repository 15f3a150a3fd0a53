#pragma once
// `parallax calibrate --tables`: the compute model's tables (`device.compute`, docs/simulator.md,
// "Compute on a GPU that knows shapes") measured on the device at hand, in LibTorch, rather than
// taken from publications: GEMMs over a grid of shapes per precision, memory-bound kernels, and
// flash attention forward and backward by sequence length with and without a causal mask.
//
// On a GPU each GEMM shape is timed as a CUDA graph of back-to-back calls (the device's own time,
// as the published grids were measured, without the host's launches, which the simulator charges
// apart), attention and the memory-bound kernels between CUDA events. On the CPU the same
// measurements run with a steady clock: only tests use that, with small shapes.
#include <torch/torch.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "plan/hardware.hpp"

namespace parallax::exec {

struct TablesOptions {
  torch::Device device = torch::kCPU;
  /// The GEMM grid's axes (m, n and k alike), and the precisions timed over it.
  std::vector<int64_t> sizes = {256, 512, 1024, 2048, 4096};
  std::vector<plan::Precision> precisions = {plan::Precision::bf16, plan::Precision::fp16, plan::Precision::fp8};
  /// Flash attention: sequence lengths, with batch x sequence = `attention_tokens` (as the
  /// FlashAttention papers' benchmarks keep 16k tokens), `heads` of `head_dim`, in bf16 (fp32 on
  /// the CPU). The longest sequence without a mask is the efficiencies' reference.
  std::vector<int64_t> sequences = {512, 1024, 2048, 4096, 8192, 16384};
  int64_t attention_tokens = 16384, heads = 16, head_dim = 128;
  /// Elements of the memory-bound kernels' input (bf16): 2^28, 512 MiB, far beyond any cache.
  int64_t memory_elements = int64_t{1} << 28;
  /// Device time each figure is measured over, at least (the shortest GEMMs repeat to fill it).
  double seconds_per_figure = 0.02;
  std::function<void(const std::string&)> progress;
};

struct MeasuredTables {
  /// Filled as the profile reads it: a grid per measured precision, memory_efficiency, flash_* (the
  /// backend scaled_dot_product_attention picks by itself) and flash2_* (its FlashAttention-2
  /// kernel alone, where the build has it), with their by-sequence fractions.
  plan::ComputeModel compute;
  /// What each figure came from, for the profile's comments: the kernels' GB/s, the attention
  /// backends, whether GEMMs were timed as CUDA graphs, and any figure held at the peak.
  std::vector<std::string> notes;
};

/// Measures the tables on `options.device` against `device`'s dense peaks and memory bandwidth
/// (the profile the tables will sit in). invalid_argument when `device` lacks a peak at a
/// precision asked for.
MeasuredTables measure_compute_tables(const TablesOptions& options, const plan::Device& device);

}  // namespace parallax::exec
