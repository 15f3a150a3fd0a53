#pragma once
// The Tune tab: tune::search over the default space of the scenario with the knobs as they are,
// on a worker thread (Qt Concurrent) with progress, phase and ETA, cancellable through the
// search's atomic flag. It shows the top K (what changed, predicted step time, samples/s, peak
// memory) and a chart of step time against peak memory with the Pareto frontier; clicking a row
// loads its configuration into the knobs. "Validate top 3 for real" runs
// `parallax tune SCENARIO --set ... --validate 3 --json` as a child process (the GUI never links
// the executor) and shows predicted against measured per validated configuration.
#include <QFutureWatcher>
#include <QProcess>
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

/// One configuration `parallax tune --validate` ran for real.
struct ValidatedRow {
  plan::Overrides overrides;  ///< against the scenario with the knobs applied, in the JSON's order
  plan::Time predicted_step, measured_step;  ///< 0 where the JSON has none
};

/// The `validated[]` array of `parallax tune --json` output; InputError-free: `error` says what is
/// wrong when the text is not such a JSON object.
std::vector<ValidatedRow> parse_validated(const QByteArray& json, QString* error);

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

  /// The arguments `parallax tune` gets to validate the top `count` of the session's knobs.
  static QStringList validate_arguments(const ScenarioSource& source, const std::vector<std::string>& sets,
                                        int count);
  /// Starts `parallax tune ... --validate count --json`; false when it cannot start.
  bool validate(int count = 3);
  bool validating() const { return process_ && process_->state() != QProcess::NotRunning; }
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
  void read_validation_progress();
  void on_validation_finished(int code, QProcess::ExitStatus status);
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
  std::string phase_;
  double phase_start_s_ = 0;

  std::unique_ptr<QProcess> process_;
  QByteArray validation_stdout_;
  QString validation_last_line_;
  bool validation_cancelled_ = false;
  int validation_count_ = 0;
  std::vector<ValidatedRow> validated_;
};

}  // namespace parallax::gui
