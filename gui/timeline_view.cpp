#include "gui/timeline_view.hpp"

#include <QFontMetrics>
#include <QKeyEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QToolTip>
#include <QWheelEvent>
#include <algorithm>
#include <cmath>

namespace parallax::gui {
namespace {

// A "nice" tick step (1, 2 or 5 times a power of ten) giving ticks about `px` pixels apart.
double tick_step(double ns_per_px, double px) {
  const double raw = ns_per_px * px;
  const double p10 = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p10 >= raw) return m * p10;
  return 10 * p10;
}

QString time_label(double ns, double step) {
  if (step >= 1e6) return QString::number(ns / 1e6, 'f', step >= 1e7 ? 0 : 1) + " ms";
  if (step >= 1e3) return QString::number(ns / 1e3, 'f', step >= 1e4 ? 0 : 1) + " µs";
  return QString::number(ns, 'f', 0) + " ns";
}

}  // namespace

TimelineView::TimelineView(QWidget* parent) : QWidget(parent) {
  setFocusPolicy(Qt::StrongFocus);
  setMouseTracking(true);
  setAutoFillBackground(true);
  setMinimumSize(400, 200);
}

QColor TimelineView::color_of(BarKind kind) {
  switch (kind) {
    case BarKind::forward: return QColor(66, 133, 244);
    case BarKind::backward: return QColor(52, 168, 83);
    case BarKind::send: return QColor(251, 140, 0);
    case BarKind::recv: return QColor(171, 71, 188);
    case BarKind::allreduce: return QColor(229, 57, 53);
    case BarKind::optim: return QColor(120, 120, 120);
    case BarKind::kernel: return QColor(0, 150, 136);
    case BarKind::device_comm: return QColor(141, 110, 99);
    case BarKind::memcpy: return QColor(255, 193, 7);
    case BarKind::host: return QColor(144, 164, 174);
  }
  return Qt::gray;
}

void TimelineView::model_changed(bool refit) {
  if (selected_ >= static_cast<int>(model_.bars().size())) selected_ = -1;
  // Wide enough for the longest row label (a profiler trace's "rank 0 trace: cpu thread 4037
  // (python3.8)"), so that rows of two threads do not read alike; the time axis keeps two thirds.
  // (Measured for the longest labels by characters only: a plan of 16,384 ranks has 50,000 rows.)
  size_t most = 0;
  for (const auto& row : model_.rows()) most = std::max(most, row.label.size());
  int longest = 0;
  const QFontMetrics metrics(font());
  for (const auto& row : model_.rows())
    if (row.label.size() + 4 >= most) longest = std::max(longest, metrics.horizontalAdvance(QString::fromStdString(row.label)));
  label_px_ = longest;
  if (refit) {
    selected_ = -1;
    fit_first_view();
  }
  update();
}

void TimelineView::fit_first_view() {
  // A profiler trace opened without a run of the plan is what the user came to look at: all of
  // it, not the prediction's step at its start.
  if (model_.has(Layer::imported) && !model_.has(Layer::measured)) fit_all();
  else fit_step();
}

void TimelineView::fit_step() {
  axis_.width_px = std::max(width() - gutter(), 1);
  auto [t0, t1] = model_.step_range();
  axis_.fit(t0, t1);
  update();
}

void TimelineView::fit_all() {
  axis_.width_px = std::max(width() - gutter(), 1);
  auto [t0, t1] = model_.extent();
  axis_.fit(t0, t1);
  update();
}

void TimelineView::set_critical_path(bool on) {
  if (critical_ == on) return;
  critical_ = on;
  emit critical_path_toggled(on);
  update();
}

void TimelineView::select(int bar) {
  selected_ = bar;
  emit selection_changed(bar >= 0 ? QString::fromStdString(model_.describe(bar)) : QString());
  update();
}

std::vector<DrawItem> TimelineView::visible_items() const {
  const int first = scroll_y_ / kRowHeight;
  const int last = (scroll_y_ + height() - kRuler - kLegend) / kRowHeight;
  return model_.layout(axis_, first, last);
}

void TimelineView::resizeEvent(QResizeEvent*) {
  const bool first = axis_.width_px <= 1;
  axis_.width_px = std::max(width() - gutter(), 1);
  if (first) fit_step();
}

void TimelineView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), QColor(250, 250, 250));
  if (model_.rows().empty()) {
    p.setPen(Qt::darkGray);
    p.drawText(rect(), Qt::AlignCenter, "No timeline yet: open a scenario or a trace.");
    return;
  }
  paint_rows(p);
  paint_ruler(p);
  paint_legend(p);
}

void TimelineView::paint_ruler(QPainter& p) {
  p.fillRect(QRect(0, 0, width(), kRuler), QColor(236, 239, 241));
  p.setPen(QColor(90, 90, 90));
  const double step = tick_step(axis_.ns_per_px, 110);
  const double first = std::ceil(axis_.start_ns / step) * step;
  for (double t = first; t <= axis_.end_ns(); t += step) {
    const int x = gutter() + static_cast<int>(axis_.x_of(t));
    p.drawLine(x, kRuler - 6, x, kRuler);
    p.drawText(x + 3, kRuler - 9, time_label(t, step));
  }
  // The step's bounds, dashed across every row.
  auto [s0, s1] = model_.step_range();
  QPen dashed(QColor(80, 80, 80), 1, Qt::DashLine);
  p.setPen(dashed);
  for (int64_t t : {s0, s1}) {
    const double x = gutter() + axis_.x_of(static_cast<double>(t));
    if (x >= gutter() && x <= width()) p.drawLine(QPointF(x, kRuler), QPointF(x, height()));
  }
}

void TimelineView::paint_legend(QPainter& p) {
  const int y = height() - kLegend;
  p.fillRect(QRect(0, y, width(), kLegend), QColor(236, 239, 241));
  int x = 8;
  p.setPen(QColor(40, 40, 40));
  for (int k = 0; k < kBarKindCount; ++k) {
    if (model_.count(static_cast<BarKind>(k)) == 0) continue;
    p.fillRect(QRect(x, y + 5, 12, kLegend - 10), color_of(static_cast<BarKind>(k)));
    const QString text = name(static_cast<BarKind>(k));
    p.drawText(QRect(x + 16, y, 200, kLegend), Qt::AlignVCenter | Qt::AlignLeft, text);
    x += 16 + p.fontMetrics().horizontalAdvance(text) + 14;
  }
  QString layers = model_.has(Layer::measured) && model_.has(Layer::predicted) ? "measured filled, predicted outlined"
                   : model_.has(Layer::measured)                               ? "measured"
                                                                               : "predicted";
  if (model_.has(Layer::imported)) layers += ", PyTorch trace rows marked 'trace:'";
  if (critical_) layers += " · critical path in red";
  if (!rank_note_.isEmpty()) layers += " · " + rank_note_;
  p.drawText(QRect(x, y, width() - x - 8, kLegend), Qt::AlignVCenter | Qt::AlignRight,
             p.fontMetrics().elidedText(layers, Qt::ElideRight, std::max(0, width() - x - 8)));
}

void TimelineView::paint_rows(QPainter& p) {
  const auto& rows = model_.rows();
  p.save();
  p.setClipRect(QRect(0, kRuler, width(), height() - kRuler - kLegend));
  const int first = scroll_y_ / kRowHeight;
  const int last = std::min<int>(rows.size() - 1, (scroll_y_ + height() - kRuler - kLegend) / kRowHeight);
  for (int r = first; r <= last; ++r) {
    const int y = kRuler + r * kRowHeight - scroll_y_;
    const bool new_rank = r == 0 || rows[r].rank != rows[r - 1].rank;
    p.fillRect(QRect(0, y, width(), kRowHeight), rows[r].rank % 2 ? QColor(244, 246, 248) : QColor(252, 252, 252));
    if (new_rank) {
      p.setPen(QColor(200, 200, 200));
      p.drawLine(0, y, width(), y);
    }
    p.setPen(QColor(40, 40, 40));
    p.drawText(QRect(6, y, gutter() - 10, kRowHeight), Qt::AlignVCenter | Qt::AlignLeft,
               p.fontMetrics().elidedText(QString::fromStdString(rows[r].label), Qt::ElideMiddle, gutter() - 10));
  }
  p.setClipRect(QRect(gutter(), kRuler, width() - gutter(), height() - kRuler - kLegend));
  p.translate(gutter(), 0);
  for (const DrawItem& item : model_.layout(axis_, first, last)) paint_bar(p, item);
  p.restore();
  p.setPen(QColor(200, 200, 200));
  p.drawLine(gutter(), kRuler, gutter(), height());
}

void TimelineView::paint_bar(QPainter& p, const DrawItem& item) {
  const TimelineBar& b = model_.bars()[item.bar];
  const int y = kRuler + item.row * kRowHeight - scroll_y_;
  QColor color = color_of(b.kind);
  const bool dim = (selected_ >= 0 && !model_.related(item.bar, selected_)) ||
                   (critical_ && !model_.on_critical_path(item.bar));
  if (dim) color.setAlpha(55);
  const bool outline = b.layer == Layer::predicted && model_.has(Layer::measured);
  QRectF r(item.x0, y + 2, item.x1 - item.x0, kRowHeight - 4);
  if (r.width() < 3 && !(critical_ && model_.on_critical_path(item.bar)) && item.bar != selected_) {
    // Too narrow for an outline or a label: one fill is all that shows (and much cheaper).
    if (b.layer == Layer::measured && model_.has(Layer::predicted)) r.adjust(0, 3, 0, -3);
    p.fillRect(r, outline ? color.darker(130) : color);
    return;
  }
  if (outline) {
    r.adjust(0.5, 0.5, -0.5, -0.5);
    p.setPen(QPen(color.darker(130), 1.6));
    p.setBrush(Qt::NoBrush);
  } else {
    if (b.layer == Layer::measured && model_.has(Layer::predicted)) r.adjust(0, 3, 0, -3);  // inside its outline
    p.setPen(r.width() > 4 ? QPen(color.darker(140), 0.8) : Qt::NoPen);
    p.setBrush(color);
  }
  p.drawRect(r);
  if (critical_ && model_.on_critical_path(item.bar)) {
    p.setPen(QPen(QColor(211, 47, 47), 2.4));
    p.setBrush(Qt::NoBrush);
    p.drawRect(r.adjusted(-1, -1, 1, 1));
  }
  if (item.bar == selected_ || (selected_ >= 0 && item.bar == model_.bars()[selected_].pair)) {
    p.setPen(QPen(Qt::black, 2));
    p.setBrush(Qt::NoBrush);
    p.drawRect(r.adjusted(-1, -1, 1, 1));
  }
  // Label with stage and micro-batch (the action id, e.g. 1F3) when it fits, else the micro-batch.
  if (!outline && r.width() > 14) {
    QString label = QString::fromStdString(model_.name_of(b));
    if (p.fontMetrics().horizontalAdvance(label) + 4 > r.width()) label = b.mb >= 0 ? QString::number(b.mb) : QString();
    if (!label.isEmpty() && p.fontMetrics().horizontalAdvance(label) + 4 <= r.width()) {
      p.setPen(dim ? QColor(0, 0, 0, 90) : QColor(255, 255, 255));
      p.drawText(r, Qt::AlignCenter, label);
    }
  }
}

int TimelineView::row_at(int y) const {
  if (y < kRuler) return -1;
  const int row = (y - kRuler + scroll_y_) / kRowHeight;
  return row < static_cast<int>(model_.rows().size()) ? row : -1;
}

int TimelineView::bar_under(QPoint pos) const {
  if (pos.x() < gutter()) return -1;
  return model_.bar_at(row_at(pos.y()), axis_.t_of(pos.x() - gutter()), 3 * axis_.ns_per_px);
}

void TimelineView::scroll_rows(int dy_px) {
  const int content = static_cast<int>(model_.rows().size()) * kRowHeight;
  scroll_y_ = std::clamp(scroll_y_ + dy_px, 0, std::max(0, content - (height() - kRuler - kLegend)));
  update();
}

void TimelineView::wheelEvent(QWheelEvent* e) {
  const double notches = e->angleDelta().y() / 120.0;
  if (e->modifiers() & Qt::ShiftModifier) {
    scroll_rows(static_cast<int>(-notches * 3 * kRowHeight));
  } else {
    axis_.zoom(std::pow(1.25, notches), e->position().x() - gutter());
    update();
  }
  e->accept();
}

void TimelineView::mousePressEvent(QMouseEvent* e) {
  press_at_ = last_drag_ = e->pos();
  dragging_ = false;
}

void TimelineView::mouseMoveEvent(QMouseEvent* e) {
  if (e->buttons() & Qt::LeftButton) {
    const QPoint d = e->pos() - last_drag_;
    if ((e->pos() - press_at_).manhattanLength() > 3) dragging_ = true;
    if (dragging_) {
      axis_.pan(d.x());
      scroll_rows(-d.y());
      last_drag_ = e->pos();
    }
    return;
  }
  const int bar = bar_under(e->pos());
  if (bar >= 0) QToolTip::showText(e->globalPosition().toPoint(), QString::fromStdString(model_.describe(bar)), this);
  else QToolTip::hideText();
}

void TimelineView::mouseReleaseEvent(QMouseEvent* e) {
  if (!dragging_ && e->button() == Qt::LeftButton) select(bar_under(e->pos()));
  dragging_ = false;
}

void TimelineView::keyPressEvent(QKeyEvent* e) {
  const double centre = axis_.width_px / 2.0;
  switch (e->key()) {
    case Qt::Key_W:
    case Qt::Key_Plus:
    case Qt::Key_Equal: axis_.zoom(1.5, centre); break;
    case Qt::Key_S:
    case Qt::Key_Minus: axis_.zoom(1 / 1.5, centre); break;
    case Qt::Key_A:
    case Qt::Key_Left: axis_.pan(axis_.width_px / 8.0); break;
    case Qt::Key_D:
    case Qt::Key_Right: axis_.pan(-axis_.width_px / 8.0); break;
    case Qt::Key_Up: scroll_rows(-kRowHeight); return;
    case Qt::Key_Down: scroll_rows(kRowHeight); return;
    case Qt::Key_F: fit_step(); return;
    case Qt::Key_0:
    case Qt::Key_Home: fit_all(); return;
    case Qt::Key_C: set_critical_path(!critical_); return;
    case Qt::Key_Escape: select(-1); return;
    default: QWidget::keyPressEvent(e); return;
  }
  update();
}

}  // namespace parallax::gui
