#pragma once
// `parallax calibrate`: measures this machine (exec/calibrate.hpp) and writes a hardware profile
// with a `calibration:` section that `hardware: FILE` or `--set hardware=FILE` then uses.
#include <string>
#include <vector>

namespace parallax::cli {

struct CalibrateArgs {
  std::vector<std::string> scenarios;  ///< empty: the default set (default_calibration_scenarios)
  std::string output;                  ///< empty: parallax-out/calibrated-<host>.yaml
  std::string base = "cpu-host";       ///< profile whose device and network the output keeps
  bool quick = false;
  /// On a GPU: time the device and the host's launches apart (exec::CalibrateOptions::launch).
  bool launch = false;
  /// On a GPU: measure the compute tables (exec/compute_tables.hpp) instead of layers.
  bool tables = false;
  /// With --tables: the GEMM grid's axes (m, n and k alike); empty: exec::TablesOptions's.
  std::vector<int64_t> sizes;
  /// Precisions to measure every layer at besides each scenario's own ("fp32", "bf16"), so that
  /// plans swept or tuned to another precision are costed from measurements too.
  std::vector<std::string> precisions;
  /// Scenarios whose models run the in-run probes instead of the measured scenarios' (their
  /// layers are measured too), so that an accuracy set's own models never run during calibration.
  std::vector<std::string> probe_with;
  /// What if: measured traces of one configuration of a job (the scenario with `sets`); a
  /// profile fitted to them is written instead of measuring the machine (fit/from_trace.hpp).
  std::vector<std::string> from_traces;
  std::vector<std::string> sets;

  /// The `parallax calibrate` command line that measures with these arguments: what the launcher
  /// starts the two ranks with.
  std::vector<std::string> command_line() const;
};

/// `parallax calibrate --from-trace`: the fit, its report, and the fitted profile written.
int calibrate_from_traces(const CalibrateArgs& args);

/// The default set: the built-in default scenario, then every scenarios/*.yaml on hardware
/// cpu-host and every scenarios/accuracy/*.yaml under the current folder ("" is the built-in).
/// `warn`: say on stderr when there is no scenarios/ folder (the launcher says it, its ranks not).
std::vector<std::string> default_calibration_scenarios(bool warn = true);
/// Where calibrate writes by default, one file per machine (by host name).
std::string default_calibration_path();

/// The text of a profile: a built-in one by name, or a file.
std::string profile_text(const std::string& profile);

/// Measures this machine (or with from_traces, fits: calibrate_from_traces).
int calibrate_command(const CalibrateArgs& args);

}  // namespace parallax::cli
