#pragma once
// A hardware profile: one kind of node (devices per node and the link between them) and the
// network between nodes. Profiles ship in scenarios/hardware/ and are built into the binary, so
// `hardware: a100-nvlink-ib` works from any folder; a scenario may also give a path or a map.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "plan/calibration.hpp"
#include "plan/fitted.hpp"
#include "plan/precision.hpp"
#include "plan/yaml_reader.hpp"
#include "schedule/schedule.hpp"

namespace parallax::plan {

struct Link {
  std::string name;
  double bandwidth_gb_per_s = 0;  ///< per direction; GB = 1e9 bytes; may be +inf (free)
  double latency_us = 0;
};

/// Where the executor runs a rank: the host CPU, or the CUDA GPU at the rank's LOCAL_RANK.
enum class DeviceKind { cpu, cuda };
const char* name(DeviceKind kind);

/// Measured GEMMs on a grid of shapes: C[m, n] = A[m, k] B[k, n] at every (m, n, k) of the three
/// axes, `tflops` achieved, m outermost, then n, then k. Between the axes' values it is
/// interpolated on (log2 m, log2 n, log2 k), trilinearly; beyond their ends it holds the end.
struct GemmGrid {
  std::vector<double> m, n, k;  ///< increasing
  std::vector<double> tflops;   ///< m.size() x n.size() x k.size()
  double at(double m, double n, double k) const;
};

/// `device.compute`: a compute model that knows shapes (docs/simulator.md, Compute on a GPU). A
/// GEMM of m x n x k runs at the larger of its FLOP time at peak x its efficiency and its memory
/// time; memory-bound kernels (norms, softmax, dropout, activations) move their bytes at memory
/// bandwidth x memory_efficiency. The GEMM efficiency comes from a grid of measured shapes per
/// precision (`gemm`), or else from a curve by the GEMM's size (`gemm_efficiency`). A table a
/// measurement can fill: `parallax calibrate` on a GPU is to write the same keys.
struct ComputeModel {
  /// (GFLOP of one GEMM call, fraction of the dense peak it reaches), sizes increasing;
  /// interpolated on log2(size), held flat beyond the ends. Empty when every covered precision
  /// has its own grid.
  std::vector<std::pair<double, double>> gemm_efficiency;
  /// Measured GEMMs per precision (`gemm: {bf16: {m: [...], n: [...], k: [...], tflops: [...]}}`);
  /// a precision listed here takes its efficiency from its grid, others from the curve.
  std::map<Precision, GemmGrid> gemm;
  double memory_efficiency = 1;  ///< fraction of memory bandwidth a memory-bound kernel reaches
  /// Flash attention's forward and backward, as fractions of the dense 16-bit peak (its own FLOPs).
  double flash_forward_efficiency = 0.5, flash_backward_efficiency = 0.4;
  /// FlashAttention-2's (`model.attention: flash2`) where the profile states them; absent, the
  /// flash figures above stand in.
  std::optional<double> flash2_forward_efficiency, flash2_backward_efficiency;
  /// Flash attention's rate by the sequence length one call attends over, as a fraction of the
  /// figures above (a long sequence's without a causal mask): (tokens, fraction) points,
  /// interpolated on log2(tokens) and held beyond the ends; `full` without a mask, `causal` with
  /// one. Empty: the figures at every length. flash2's: FlashAttention-2's, else flash's.
  struct BySequence {
    std::vector<std::pair<double, double>> full, causal;
  };
  BySequence flash_by_sequence, flash2_by_sequence;
  /// The fraction of the flash figure a call of `tokens` queries and keys reaches.
  double flash_sequence_fraction(bool flash2, bool causal, double tokens) const;
  /// The precisions the figures were measured at (`precisions:`, default the 16-bit tensor-core
  /// ones); layers at another precision keep the plain roofline.
  std::vector<Precision> precisions = {Precision::bf16, Precision::fp16};
  /// `sustained_tflops`: per precision, the most any GEMM holds once the device runs at its power
  /// limit, as a training step keeps it: a ceiling on the grid or the curve, which may come from
  /// short bursts or, for fp8, from another precision. A precision without one has no ceiling.
  std::map<Precision, double> sustained_tflops;
  /// `clock_fraction`: already applied to the rates above when read; kept to say so (plan's text).
  double clock_fraction = 1;
  /// The fraction of `peak_tflops` (the device's dense peak at `p`) that one m x n x k GEMM
  /// reaches: from the precision's grid when it has one, else from the size curve; at most the
  /// precision's sustained rate.
  double gemm_fraction(Precision p, double m, double n, double k, double peak_tflops) const;
  bool covers(Precision p) const;
};

struct Device {
  std::string name;
  DeviceKind kind = DeviceKind::cpu;  ///< `device.kind`; the simulator does not use it
  double memory_gb = 0;  ///< device memory; as on datasheets, "GB" of memory means GiB (2^30 bytes)
  double memory_bandwidth_gb_per_s = 0;
  std::map<Precision, double> peak_tflops;  ///< dense peak per precision it supports
  double efficiency = 0.5;                  ///< fraction of peak that layers reach
  double layer_overhead_us = 0;             ///< fixed cost of one layer call (launches)
  /// The shape-aware model; absent: every layer at peak x efficiency (the FLOP roofline).
  std::optional<ComputeModel> compute;

  int64_t memory_bytes() const;
  /// Whether a rank needing `bytes` at its fullest fits: the one rule of "fits" that plan,
  /// simulate, export, the report and the tuner apply.
  bool holds(int64_t bytes) const { return bytes <= memory_bytes(); }
};

/// A layer cost measured on the device (by `parallax calibrate`), preferred over the FLOP estimate.
/// It applies to the layer called `layer`, or to every layer of kind `kind`.
struct MeasuredLayerCost {
  std::string layer;
  std::string kind;
  double fwd_us_fixed = 0;
  double fwd_us_per_sample = 0;
  double bwd_us_fixed = 0;
  double bwd_us_per_sample = 0;
};

/// How the GPUs' collective library (NCCL) runs all-reduce: the inputs of NCCL's own tuning model
/// (src/graph/tuning.cc). Absent from a profile, all-reduce is the plain ring / hierarchical model.
struct NcclConfig {
  /// The row of NCCL's tables (compute capability 7, 8, 9, 10 and beyond).
  enum class Generation { volta, ampere, hopper, blackwell };
  Generation generation = Generation::ampere;
  int nvlinks = 0;    ///< NVLinks per GPU into the node's NVSwitch fabric; 0: GPUs meet over PCIe
  int channels = 16;  ///< NCCL channels of a collective (NCCL_DEBUG=INFO prints "N coll channels")
  bool nvls = false;  ///< NVLink SHARP: the NVSwitch reduces (Hopper and Blackwell NVSwitch systems)
  enum class Cpu { intel, amd };
  Cpu cpu = Cpu::intel;  ///< host CPU vendor: NCCL's LL cap and network post overhead across nodes depend on it
  std::string algorithm = "auto";  ///< auto | ring | tree | nvls | hierarchical, as NCCL_ALGO forces one
  std::string protocol = "auto";   ///< auto | ll | ll128 | simple, as NCCL_PROTO forces one
  /// How many times longer an all-reduce takes than NCCL's tuning model says, by message size:
  /// (MiB, factor) points in increasing size, interpolated on log2(size) and held flat beyond the
  /// ends. Empty: the model's time as it is. NCCL picks its algorithm by the model; this only
  /// stretches the time the choice takes (docs/simulator.md, Checked against measurements).
  std::vector<std::pair<double, double>> stretch_by_size;
  double stretch(double bytes) const;
  bool operator==(const NcclConfig&) const = default;
};

/// How compute and communication on one device slow each other down (docs/simulator.md,
/// Interference). 1 is no effect: the CPU host, whose calibration measures sharing in its own way,
/// and the ideal machine.
struct Interference {
  /// Compute runs this many times slower while a communication kernel (an all-reduce, or an NCCL
  /// send or receive) runs on its device: the kernels share the SMs.
  double compute = 1.0;
  /// The device's ports into its node fabric carry this many times less while memory-bound compute
  /// runs on it: both draw on its memory bandwidth.
  double communication = 1.0;
  /// Compute runs this many times slower while another rank of its node computes: ranks that
  /// share a CPU's cores (and caches). 1 for GPUs, each with its own; `parallax calibrate`
  /// measures it on a CPU host.
  double shared_cores = 1.0;
};

/// How the shipped profile's predictions came out against one group of published runs (a bench in
/// bench/ of the repository, e.g. bench/published_h100.sh): `published_check:` in the profile, in
/// percent of the published step (predicted / published - 1). Read by no prediction: `plan` and
/// `simulate` print it beside theirs, so that a plan says how far its step time held elsewhere.
struct PublishedCheck {
  std::string runs_of;         ///< whose runs, e.g. "Megatron-LM and NeMo"
  std::string bench;           ///< the script that predicts them, e.g. bench/published_h100.sh
  int rows = 0;                ///< how many published runs
  double mean_error = 0;       ///< mean of the signed errors, %
  double mean_absolute_error = 0;
  double worst = 0;            ///< the error furthest from 0, with its sign, %
  std::string results;         ///< the committed folder of the bench's raw output
};

/// "Megatron-LM and NeMo, 21 runs: mean error -10.6%, mean absolute 14.8%, worst +33.6%", as
/// `plan`, `simulate` and the GUI print one entry.
std::string describe(const PublishedCheck& check);

struct HardwareProfile {
  std::string name;
  std::string source;  ///< the file (or built-in name) it was read from
  Device device;
  int devices_per_node = 1;
  Link node_link;               ///< between devices inside a node
  std::optional<Link> network;  ///< between nodes; absent for single-node machines
  int nics_per_node = 1;
  std::optional<int> max_nodes;  ///< cap on nodes, from the profile or the scenario
  /// `collectives:` in the profile; gloo when absent, so profiles written before the key behave as before.
  schedule::Collectives collectives = schedule::Collectives::gloo;
  std::vector<MeasuredLayerCost> measured_layers;
  /// GPU collectives as NCCL runs them; absent on CPU hosts and the ideal machine.
  std::optional<NcclConfig> nccl;
  Interference interference;  ///< `interference:` in the profile
  /// Costs measured on this machine by `parallax calibrate`; preferred over every estimate.
  std::optional<Calibration> calibration;
  /// Factors fitted from a job's measured runs (`parallax calibrate --from-trace`), over
  /// whatever the rest of the profile says.
  std::optional<FittedCosts> fitted;
  /// The shipped profile's errors on published runs; a profile calibrated or fitted from it
  /// predicts otherwise, so `published_checks()` leaves them out there.
  std::vector<PublishedCheck> published_check;

  /// What `plan` and `simulate` print: `published_check`, unless a calibration or a fit changed
  /// the predictions it describes.
  const std::vector<PublishedCheck>& published_checks() const {
    static const std::vector<PublishedCheck> none;
    return calibration || fitted ? none : published_check;
  }

  /// Nodes a plan of `ranks` ranks uses.
  int nodes_for(int ranks) const { return (ranks + devices_per_node - 1) / devices_per_node; }
};

/// Parses a profile map (a whole profile file, or a scenario's inline `hardware:` map).
HardwareProfile parse_hardware(const Field& map);

/// Resolves a scenario's `hardware:` value: a built-in profile name, a path to a .yaml file
/// (relative to the scenario's folder), an inline profile map, or {profile: NAME, nodes: N}.
HardwareProfile resolve_hardware(const Field& value);

/// Whether a scenario's `hardware: NAME` names a profile file (a path, or a .yaml/.yml name) rather
/// than a built-in profile: the one rule resolve_hardware and `tune -o`'s rewriting of relative paths
/// both follow.
bool names_hardware_file(const std::string& name);

/// Names of the profiles built into the binary (from scenarios/hardware/).
std::vector<std::string> builtin_hardware_names();
/// Text of a built-in profile, or nullptr.
const char* builtin_hardware_text(const std::string& name);

}  // namespace parallax::plan
