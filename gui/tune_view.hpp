#pragma once
// The Tune tab: tune::search over the default space of the scenario with the knobs as they are,
// on a worker thread (Qt Concurrent) with progress, phase and ETA, cancellable through the
// search's atomic flag. It shows the top K (what changed, predicted step time, samples/s, peak
// memory) and a chart of step time against peak memory with the Pareto frontier; clicking a row
// loads its configuration into the knobs. "Validate top 3 for real" runs three of the ranked
// configurations as `parallax tune --validate 3` would pick them (fit/tune_picks.hpp, on a worker
// thread; each run is `parallax run` in a child process, so the GUI never links the executor) and
// shows predicted against measured per validated configuration.
#include <QFutureWatcher>
#include <QWidget>
#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gui/plan_session.hpp"
#include "tune/search.hpp"

class QChartView;
class QLabel;
class QProgressBar;
class QPushButton;
class QTableWidget;

namespace parallax::gui {

/// One ranked configuration run for real.
struct ValidatedRow {
  int ranked_row = -1;        ///< in the ranked table; -1: its layout's best, below the top K
  plan::Overrides overrides;  ///< against the knobs the search started from
  plan::Time predicted_step, measured_step;
};

/// What a validation gives back to the GUI thread.
struct ValidationOutcome {
  uint64_t search = 0;  ///< the search (TuneView's generation) whose rows were validated
  std::vector<ValidatedRow> rows;
  std::string error;  ///< why a run failed (the rows before it are kept)
};

/// What a search gives back to the GUI thread.
struct TuneOutcome {
  std::optional<tune::SearchResult> result;
  std::string error;  ///< why the search could not run
};

class TuneView : public QWidget {
  Q_OBJECT
 public:
  explicit TuneView(QWidget* parent = nullptr);
  ~TuneView() override;

  /// The session the Start button tunes.
  void set_session(const PlanSession* session) { session_ = session; }
  /// Starts a search of the session's scenario with its knobs (cancelling one that runs); false
  /// (with the reason in the status line) when the knobs have no valid plan.
  bool start(const PlanSession& session);
  /// Stops the search (the best so far is shown) or the validation run.
  void cancel();
  /// Blocks until the running search is done and shown (screenshots, tests).
  void wait_finished();
  bool running() const { return watcher_.isRunning(); }
  const std::optional<tune::SearchResult>& result() const { return result_; }
  /// The overrides of a ranked configuration against the knobs the search started from.
  plan::Overrides overrides_of(int row) const;
  /// A ranked configuration as knob values (the hardware as the knobs had it).
  KnobValues knobs_of(int row) const;
  /// Loads a ranked configuration into the knobs (a click on its row).
  void choose(int row);

  /// Runs `count` of the ranked configurations for real, as `parallax tune --validate count`
  /// picks them; false when it cannot start (no search shown, one running, no parallax binary).
  bool validate(int count = 3);
  bool validating() const { return validation_.isRunning(); }
  /// The --set values each validation run gets before its configuration's own: the source's and
  /// those giving the knobs the search started from.
  std::vector<std::string> validation_sets() const;
  const std::vector<ValidatedRow>& validated() const { return validated_; }

  QTableWidget* table() const { return table_; }
  QTableWidget* validation_table() const { return validation_table_; }
  QString status() const;

 signals:
  void configuration_chosen(parallax::gui::KnobValues knobs);
  /// ok: the validation finished and its rows are shown; otherwise `message` says why not.
  void validation_finished(bool ok, QString message);

 private:
  void on_progress(uint64_t generation, const tune::Progress& progress);
  void on_finished();
  void show_result();
  void show_chart();
  void on_validation_progress(uint64_t generation, int started, int count, const QString& what);
  void on_validation_finished();
  void show_validation();
  void update_buttons();

  QPushButton* start_;
  QPushButton* cancel_;
  QPushButton* validate_;
  QProgressBar* progress_;
  QLabel* status_;
  QLabel* summary_;
  QTableWidget* table_;
  QChartView* chart_;
  QTableWidget* validation_table_;

  const PlanSession* session_ = nullptr;
  uint64_t generation_ = 0;
  std::shared_ptr<std::atomic<bool>> cancel_flag_;
  QFutureWatcher<TuneOutcome> watcher_;
  bool searching_ = false;  ///< a search started whose result is not shown yet
  std::optional<tune::SearchResult> result_;
  ScenarioSource source_;  ///< what the shown result was searched on
  KnobValues base_knobs_;
  std::vector<std::string> base_sets_;  ///< the --set values that give base_knobs_ from the file
  plan::Settings base_config_;  ///< the knobs as parsed: the overrides are against it
  std::optional<plan::Scenario> base_scenario_;  ///< the scenario searched, the knobs applied
  std::string phase_;
  double phase_start_s_ = 0;

  QFutureWatcher<ValidationOutcome> validation_;
  std::shared_ptr<std::atomic<bool>> validation_cancel_;
  uint64_t validation_generation_ = 0;
  std::vector<ValidatedRow> validated_;
};

}  // namespace parallax::gui
