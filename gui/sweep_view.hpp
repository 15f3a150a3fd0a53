#pragma once
// The sweep tab: a heatmap of predicted step time over chunks x bucket_cap_mb or chunks x
// partition_len, simulated in the background on the tuner's evaluator with progress (Qt Concurrent, a QPromise per sweep,
// cancellable). The best cell is marked with a star and the knobs' own cell outlined; clicking a
// cell loads its configuration into the knobs.
#include <QFutureWatcher>
#include <QWidget>

#include "gui/sweep.hpp"

class QComboBox;
class QLabel;
class QProgressBar;
class QPushButton;

namespace parallax::gui {

class Heatmap;

class SweepView : public QWidget {
  Q_OBJECT
 public:
  explicit SweepView(QWidget* parent = nullptr);
  ~SweepView() override;

  /// The session the Run button sweeps.
  void set_session(const PlanSession* session) { session_ = session; }
  /// Starts a sweep of the session's current plan (cancelling one that runs).
  void start(const PlanSession& session);
  void start(SweepKind kind, const PlanSession& session);
  void cancel();
  /// Blocks until the running sweep is done (screenshots, tests).
  void wait_finished();
  bool running() const { return watcher_.isRunning(); }
  const SweepGrid& grid() const { return grid_; }
  /// Marks the knobs' own cell.
  void set_current(const KnobValues& knobs);

 /// Loads the configuration of a cell into the knobs (a click on the heatmap).
  void chosen(int cell);

 signals:
  void configuration_chosen(parallax::gui::KnobValues knobs);

 private:
  void on_result(int index);
  void on_finished();

  QComboBox* kind_;
  QPushButton* run_;
  QPushButton* cancel_;
  QProgressBar* progress_;
  QLabel* status_;
  Heatmap* heatmap_;
  SweepGrid grid_;
  KnobValues base_;
  QString note_;  ///< why the sweep may show nothing interesting
  const PlanSession* session_ = nullptr;
  QFutureWatcher<std::pair<int, SweepCell>> watcher_;
};

}  // namespace parallax::gui
