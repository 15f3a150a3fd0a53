#pragma once
// The numbers of docs/architecture.md's "The numbers every view shows" for the step on screen, predicted beside measured:
// step time, bubble fraction per stage, exposed communication per rank, memory per rank against
// the device's capacity, and the bandwidth of the busiest links over the step (Qt Charts).
#include <QLabel>
#include <QWidget>
#include <optional>

#include "gui/plan_session.hpp"

class QChartView;
class QChart;

namespace parallax::gui {

/// Bubble fraction per pipeline position: ranks holding the same stages, averaged over replicas.
struct StageBubbles {
  std::vector<std::string> labels;  ///< "stage 0", or "pp 0" when a pipeline rank holds several stages
  std::string axis;                 ///< "" or, when interleaved, "pipeline rank (pp 0 holds stages 0, 4, 8)"
  std::vector<double> predicted;
  std::vector<double> measured;     ///< empty without a measured trace
  /// The imbalance in each bar (timeline/metrics.hpp): waiting out the busiest rank's extra work.
  std::vector<double> predicted_imbalance, measured_imbalance;
};
StageBubbles stage_bubbles(const Prediction& prediction, const timeline::CompareReport* comparison);

/// A link's bandwidth (samples of GB/s, each holding until the next) as its mean over each of
/// `bins` equal spans of a step of `end_ms`: a span's bytes over its time.
std::vector<double> mean_per_bin(const std::vector<std::pair<plan::Time, double>>& samples, double end_ms, int bins);

/// "Step time 123.45 ms predicted, 130.00 ms measured (undisturbed: p20 of 29 steps; median 131.20
/// ms, 10% disturbed), error -5.0%".
/// The heading's step time: the comparison's (predicted against measured) where there is one, else
/// the predicted trace's opened from a file, else the knobs' prediction; with `mismatch`
/// (PlanSession::trace_mismatch) after it.
QString step_time_text(const Prediction* prediction, const timeline::CompareReport* comparison,
                       const timeline::Timeline* predicted_file = nullptr, const std::string& mismatch = "");

class MetricsView : public QWidget {
  Q_OBJECT
 public:
  explicit MetricsView(QWidget* parent = nullptr);
  void show_session(const PlanSession& session);
  QString summary_text() const { return summary_->text(); }

 private:
  void set_chart(QChartView* view, QChart* chart);
  QChart* bubble_chart(const Prediction& p, const timeline::CompareReport* c);
  QChart* exposed_chart(const Prediction& p, const timeline::CompareReport* c);
  QChart* memory_chart(const Prediction& p, const timeline::CompareReport* c);
  QChart* bandwidth_chart(const Prediction& p);

  QLabel* summary_;
  QChartView* bubbles_;
  QChartView* exposed_;
  QChartView* memory_;
  QChartView* bandwidth_;
};

}  // namespace parallax::gui
