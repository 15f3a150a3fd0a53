#pragma once
// A PlanSession is what the GUI is looking at: a scenario and the knob values applied to it, the
// prediction for them, and any traces opened beside it (a measured run, a predicted trace from a
// file, PyTorch profiler traces).
//
// Every knob change re-simulates in the background (Qt Concurrent), so the window never waits on
// the simulator. Changes that arrive while a simulation runs are coalesced: when it finishes, only
// the newest knob values are simulated next, and results of superseded values are dropped. A
// failed combination leaves the last good prediction on screen and reports the knob at fault.
#include <QFutureWatcher>
#include <QObject>
#include <QString>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gui/knobs.hpp"
#include "plan/plan.hpp"
#include "plan/yaml_reader.hpp"
#include "sim/metrics.hpp"
#include "sim/simulator.hpp"
#include "timeline/compare.hpp"
#include "timeline/trace_reader.hpp"

namespace parallax::gui {

/// Where a scenario comes from: read once when opened (evaluations then set knob values on copies
/// of the parsed scenario), and again to save it or to run it for real with --set overrides.
struct ScenarioSource {
  std::string path;               ///< "" for the built-in default scenario
  std::vector<std::string> sets;  ///< --set overrides given on the command line, applied first
  std::string display_name;       ///< the name errors use ("(built-in) scenarios/...")

  /// The document with `sets`, then `overrides`, applied; InputError when it cannot be read.
  plan::YamlDocument document(const std::vector<std::string>& overrides) const;
};

struct Prediction {
  plan::Plan plan;
  sim::SimRun run;
  sim::Metrics metrics;
};

/// Resolves and simulates a scenario; InputError for a bad combination.
std::shared_ptr<const Prediction> predict(const plan::Scenario& scenario, bool link_samples = true);

/// `base` (a parsed scenario) with the knob values set and checked in memory, as the scenario
/// reader checks a file; InputError with the key of the knob at fault.
plan::Scenario with_knobs(const plan::Scenario& base, const KnobValues& knobs);

/// The outcome of one background evaluation.
struct Evaluation {
  uint64_t generation = 0;
  std::shared_ptr<const Prediction> prediction;  ///< null when the knobs were rejected
  std::string error_knob;                        ///< knob key the error is about, if any
  std::string error;                             ///< "where: message"
};

class PlanSession : public QObject {
  Q_OBJECT
 public:
  explicit PlanSession(QObject* parent = nullptr);
  ~PlanSession() override;

  /// Opens a scenario ("" = built-in default) with --set overrides; InputError when it is bad.
  /// Re-simulates.
  void open_scenario(const std::string& path, const std::vector<std::string>& sets = {});
  const ScenarioSource& source() const { return source_; }
  /// The scenario as opened (null before one is); knob values are set on copies of it.
  const std::shared_ptr<const plan::Scenario>& scenario() const { return scenario_; }
  /// The knob values of the scenario as opened, and the name of its own hardware profile.
  const KnobValues& scenario_knobs() const { return file_knobs_; }
  const std::string& scenario_hardware() const { return file_hardware_; }
  const KnobValues& knobs() const { return knobs_; }
  /// The `--set` values that give the current knobs from the scenario as opened.
  std::vector<std::string> overrides() const { return knobs_.overrides(file_knobs_.settings); }
  /// Applies knob values; simulation follows in the background.
  void set_knobs(const KnobValues& knobs);
  /// Blocks until no simulation is running or pending (screenshots, tests).
  void wait_idle();
  bool busy() const { return running_; }

  /// The prediction for the current knobs (or the last good one); may be null before the first.
  std::shared_ptr<const Prediction> prediction() const { return prediction_; }
  /// Why the current knobs were rejected ("" when they were not), and the knob at fault.
  const std::string& error() const { return error_; }
  const std::string& error_knob() const { return error_knob_; }

  /// Opens a trace file of any kind; InputError when it cannot be read. Returns its kind:
  /// "measured", "predicted", or the format of another trace ("kineto", "pytorch-legacy", "chrome").
  std::string open_trace(const std::string& path);
  const std::optional<timeline::Timeline>& measured() const { return measured_; }
  /// A predicted trace opened from a file; shown until the knobs change.
  const std::optional<timeline::Timeline>& predicted_from_file() const { return predicted_file_; }
  const std::vector<timeline::LoadedTrace>& imported() const { return imported_; }
  void clear_traces();

  /// The predicted timeline on screen: from the file if one was opened, else the simulation's.
  const timeline::Timeline* predicted_timeline() const;
  /// The measured steps, and the one shown (by default timeline::representative_step: the step
  /// closest to the measured step statistic).
  std::vector<int> measured_steps() const;
  int measured_step() const { return measured_step_; }
  void set_measured_step(int step);
  /// Predicted against measured; null without a measured trace, or with one of another job size.
  const std::optional<timeline::CompareReport>& comparison() const { return comparison_; }
  /// Why the measured trace may not be a run of the plan shown ("" when nothing says so): another
  /// scenario's name, another number of ranks, actions on one side only. `parallax compare` warns
  /// or exits 2 on the same.
  const std::string& trace_mismatch() const { return mismatch_; }

  /// Writes the scenario with the knobs applied as YAML; InputError when it cannot.
  void save_scenario(const std::string& path) const;

 signals:
  void predicted_changed();
  void prediction_failed(QString knob, QString message);
  void traces_changed();
  void busy_changed(bool busy);

 private:
  void start_evaluation();
  void on_evaluated();
  void update_comparison();

  ScenarioSource source_;
  std::shared_ptr<const plan::Scenario> scenario_;  ///< as opened; evaluations set knobs on copies
  KnobValues file_knobs_;
  std::string file_hardware_;
  KnobValues knobs_;
  uint64_t generation_ = 0;
  bool running_ = false;
  bool pending_ = false;
  QFutureWatcher<Evaluation> watcher_;
  std::shared_ptr<const Prediction> prediction_;
  std::string error_, error_knob_;
  std::optional<timeline::Timeline> measured_, predicted_file_;
  std::vector<timeline::LoadedTrace> imported_;
  int measured_step_ = -1;
  std::optional<timeline::CompareReport> comparison_;
  std::string mismatch_;
};

}  // namespace parallax::gui
