#pragma once
// The timeline: one row per rank and lane, predicted and measured actions drawn together
// (measured filled, predicted as an outline of the same colour, so a bar that sticks out of its
// outline is an action that took longer than predicted). Zoom with the wheel or W/S, pan by
// dragging or A/D, F fits the step, 0 shows everything, C highlights the critical path, a click
// selects an action and highlights its micro-batch on every rank.
#include <QWidget>
#include <algorithm>

#include "gui/timeline_model.hpp"

class QPainter;

namespace parallax::gui {

class TimelineView : public QWidget {
  Q_OBJECT
 public:
  explicit TimelineView(QWidget* parent = nullptr);

  TimelineModel& model() { return model_; }
  const TimeAxis& axis() const { return axis_; }
  /// Call after changing the model; `refit` shows the whole step again.
  void model_changed(bool refit);
  void fit_step();
  void fit_all();
  /// What a newly opened timeline shows: the step (fit_step), or all of a profiler trace opened
  /// without a run (fit_all).
  void fit_first_view();
  void set_critical_path(bool on);
  /// What a row's rank stands for, said in the legend ("" for a rank a GPU): under tensor
  /// parallelism a timeline rank is a tensor group, whose GPUs run alike.
  void set_rank_note(const QString& note) { rank_note_ = note; update(); }
  bool critical_path() const { return critical_; }
  void select(int bar);
  int selected() const { return selected_; }
  /// The bars the next paint draws (for tests).
  std::vector<DrawItem> visible_items() const;
  /// The colour a bar kind is drawn in.
  static QColor color_of(BarKind kind);

  static constexpr int kMinGutter = 170;  ///< row labels: at least, and wider for longer labels (up to a third of the view)
  int label_px_ = 0;                     ///< the longest row label's width, set as the rows change
  int gutter() const { return std::clamp(label_px_ + 16, kMinGutter, std::max(kMinGutter, width() / 3)); }
  static constexpr int kRuler = 26;    ///< time axis on top
  static constexpr int kRowHeight = 20;
  static constexpr int kLegend = 22;   ///< colours of the bar kinds, at the bottom

 signals:
  void selection_changed(QString description);
  void critical_path_toggled(bool on);

 protected:
  void paintEvent(QPaintEvent*) override;
  void resizeEvent(QResizeEvent*) override;
  void wheelEvent(QWheelEvent*) override;
  void mousePressEvent(QMouseEvent*) override;
  void mouseMoveEvent(QMouseEvent*) override;
  void mouseReleaseEvent(QMouseEvent*) override;
  void keyPressEvent(QKeyEvent*) override;
  QSize sizeHint() const override { return {1000, 500}; }

 private:
  int row_at(int y) const;
  int bar_under(QPoint p) const;
  void paint_ruler(QPainter& p);
  void paint_rows(QPainter& p);
  void paint_legend(QPainter& p);
  void paint_bar(QPainter& p, const DrawItem& item);
  void scroll_rows(int dy_px);

  TimelineModel model_;
  TimeAxis axis_;
  int scroll_y_ = 0;  ///< pixels of rows scrolled off the top
  bool critical_ = false;
  QString rank_note_;
  int selected_ = -1;
  QPoint press_at_;
  QPoint last_drag_;
  bool dragging_ = false;
};

}  // namespace parallax::gui
