#pragma once
// The desktop app's window: knobs on the left; the step time above three views (timeline,
// metrics, sweep, tune); a toolbar to open and save scenarios, open traces and run the plan for real.
#include <QMainWindow>

#include "gui/knob_panel.hpp"
#include "gui/metrics_view.hpp"
#include "gui/plan_session.hpp"
#include "gui/run_panel.hpp"
#include "gui/sweep_view.hpp"
#include "gui/timeline_view.hpp"
#include "gui/tune_view.hpp"

class QComboBox;
class QLabel;
class QProgressBar;
class QSpinBox;
class QTabWidget;
class QAction;

namespace parallax::gui {

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);

  /// Opens a scenario and shows its prediction; InputError when it is bad.
  void open_scenario(const std::string& path, const std::vector<std::string>& sets = {});
  /// Opens a trace beside the prediction; InputError when it cannot be read.
  /// Opens a trace and returns its kind: "measured", "predicted", or another tool's format.
  std::string open_trace(const std::string& path);
  /// Shows "timeline", "metrics", "sweep" or "tune"; false for another name.
  bool show_view(const QString& view);

  PlanSession& session() { return session_; }
  KnobPanel* knob_panel() { return knobs_; }
  TimelineView* timeline() { return timeline_; }
  MetricsView* metrics() { return metrics_; }
  SweepView* sweep() { return sweep_; }
  TuneView* tune() { return tune_; }
  /// The step time as shown above the views.
  QString step_time_shown() const;

 private:
  void build_toolbar();
  void refresh(bool refit);
  void on_predicted();
  void on_knobs(const KnobValues& knobs);
  void load_knobs(const KnobValues& knobs);
  void on_run_finished(bool ok, const QString& trace, const QString& message);
  void choose_scenario();
  void save_scenario();
  void choose_trace();
  void start_run();
  void update_steps();

  PlanSession session_;
  RealRun run_;
  KnobPanel* knobs_;
  QLabel* scenario_label_;
  QLabel* step_time_;
  QTabWidget* tabs_;
  TimelineView* timeline_;
  QComboBox* measured_step_;
  MetricsView* metrics_;
  SweepView* sweep_;
  TuneView* tune_;
  QSpinBox* run_steps_;
  QAction* run_action_;
  QAction* cancel_action_;
  QAction* critical_action_;
  QProgressBar* run_progress_;
  QLabel* busy_;
};

}  // namespace parallax::gui
