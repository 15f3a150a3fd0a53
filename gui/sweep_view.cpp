#include "gui/sweep_view.hpp"

#include <algorithm>

#include <QComboBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QMouseEvent>
#include <QPainter>
#include <QProgressBar>
#include <QPromise>
#include <QPushButton>
#include <QToolTip>
#include <QVBoxLayout>
#include <QtConcurrent/QtConcurrentRun>
#include <cmath>
#include <memory>

namespace parallax::gui {

/// Paints a SweepGrid: rows are chunks, columns the other knob; colour from fastest (green) to
/// slowest (red) on a log scale, so a few slow corners do not wash out the differences that matter.
class Heatmap : public QWidget {
 public:
  explicit Heatmap(SweepView* owner) : QWidget(owner), owner_(owner) {
    setMouseTracking(true);
    setMinimumSize(400, 260);
  }
  int current = -1;

 protected:
  static constexpr int kLeft = 90, kTop = 30, kBottom = 60;

  QRectF cell_rect(int row, int col) const {
    const SweepGrid& g = owner_->grid();
    const double w = (width() - kLeft - 10.0) / std::max(g.columns(), 1);
    const double h = (height() - kTop - kBottom + 0.0) / std::max(g.rows(), 1);
    return QRectF(kLeft + col * w, kTop + row * h, w, h);
  }

  int cell_at(QPointF p) const {
    const SweepGrid& g = owner_->grid();
    for (int r = 0; r < g.rows(); ++r)
      for (int c = 0; c < g.columns(); ++c)
        if (cell_rect(r, c).contains(p)) return r * g.columns() + c;
    return -1;
  }

  void paintEvent(QPaintEvent*) override {
    QPainter p(this);
    p.fillRect(rect(), Qt::white);
    const SweepGrid& g = owner_->grid();
    if (g.cells.empty()) {
      p.drawText(rect(), Qt::AlignCenter, "Press Run to sweep the current plan.");
      return;
    }
    double lo = INFINITY, hi = -INFINITY;
    for (const auto& c : g.cells)
      if (c.valid() && c.fits) lo = std::min(lo, c.step.to_ms()), hi = std::max(hi, c.step.to_ms());
    const int best = g.best();
    QFont small = font();
    small.setPointSizeF(font().pointSizeF() * 0.9);
    for (int r = 0; r < g.rows(); ++r) {
      for (int col = 0; col < g.columns(); ++col) {
        const int i = r * g.columns() + col;
        const SweepCell& c = g.cells[i];
        const QRectF rc = cell_rect(r, col).adjusted(1, 1, -1, -1);
        QColor fill(235, 235, 235);
        if (c.valid() && !c.fits) fill = QColor(200, 200, 200);  // grey: no colour ranks what cannot train
        else if (c.valid()) {
          const double f = hi > lo ? std::log(c.step.to_ms() / lo) / std::log(hi / lo) : 0;
          fill = QColor::fromHsvF((1 - f) * 0.33, 0.55, 0.95);  // green (fast) to red (slow)
        }
        p.fillRect(rc, fill);
        p.setPen(Qt::black);
        p.setFont(small);
        QString text = !c.done ? "…" : !c.valid() ? "invalid" : QString::number(c.step.to_ms(), 'f', c.step.to_ms() < 10 ? 2 : 1);
        if (c.valid() && !c.fits) text += " ✗ mem";
        if (i == best) text = "★ " + text;
        p.drawText(rc, Qt::AlignCenter, text);
        if (i == best) {
          p.setPen(QPen(Qt::black, 3));
          p.drawRect(rc.adjusted(1.5, 1.5, -1.5, -1.5));
        }
        if (i == current) {
          p.setPen(QPen(QColor(21, 101, 192), 2, Qt::DashLine));
          p.drawRect(rc.adjusted(4, 4, -4, -4));
        }
      }
    }
    p.setFont(font());
    p.setPen(Qt::black);
    for (int r = 0; r < g.rows(); ++r)
      p.drawText(QRectF(0, cell_rect(r, 0).top(), kLeft - 6, cell_rect(r, 0).height()), Qt::AlignRight | Qt::AlignVCenter,
                 QString::fromStdString(g.y.values[r]));
    for (int col = 0; col < g.columns(); ++col) {
      const QRectF rc = cell_rect(g.rows() - 1, col);
      p.drawText(QRectF(rc.left(), rc.bottom() + 2, rc.width(), 20), Qt::AlignCenter,
                 p.fontMetrics().elidedText(QString::fromStdString(g.x.label(col)), Qt::ElideRight, static_cast<int>(rc.width())));
    }
    p.drawText(QRectF(kLeft, height() - 30, width() - kLeft, 20), Qt::AlignCenter,
               QString::fromStdString(g.x.key) + "  (cells: predicted step time, ms; grey ✗ mem: does not fit device memory)");
    p.save();
    p.translate(14, kTop + (height() - kTop - kBottom) / 2.0);
    p.rotate(-90);
    p.drawText(QRectF(-80, -10, 160, 20), Qt::AlignCenter, "parallel.chunks");
    p.restore();
    if (best >= 0)
      p.drawText(QRectF(kLeft, 4, width() - kLeft, 22), Qt::AlignLeft | Qt::AlignVCenter,
                 QString("★ best: chunks %1, %2 = %3 → %4 ms  (click a cell to load it)")
                     .arg(QString::fromStdString(g.y.values[best / g.columns()]), QString::fromStdString(g.x.key),
                          QString::fromStdString(g.x.values[best % g.columns()]))
                     .arg(g.cells[best].step.to_ms(), 0, 'f', 2));
    else if (std::any_of(g.cells.begin(), g.cells.end(), [](const SweepCell& c) { return c.valid(); }))
      p.drawText(QRectF(kLeft, 4, width() - kLeft, 22), Qt::AlignLeft | Qt::AlignVCenter,
                 "none of these configurations fits device memory");
  }

  void mouseMoveEvent(QMouseEvent* e) override {
    const int i = cell_at(e->position());
    const SweepGrid& g = owner_->grid();
    if (i < 0) return QToolTip::hideText();
    const SweepCell& c = g.cells[i];
    QString text = QString("chunks %1, %2 = %3\n").arg(QString::fromStdString(g.y.values[i / g.columns()]),
                                                        QString::fromStdString(g.x.key),
                                                        QString::fromStdString(g.x.values[i % g.columns()]));
    text += !c.done ? "not simulated yet" : !c.valid() ? QString::fromStdString(c.error)
                                                                  : QString("predicted step time %1 ms").arg(c.step.to_ms(), 0, 'f', 3);
    if (c.valid())
      text += QString("\npeak memory %1 GiB%2").arg(static_cast<double>(c.peak_memory) / (1 << 30), 0, 'f', 2).arg(c.fits ? "" : ": does not fit");
    QToolTip::showText(e->globalPosition().toPoint(), text, this);
  }

  void mouseReleaseEvent(QMouseEvent* e) override {
    const int i = cell_at(e->position());
    if (i >= 0 && owner_->grid().cells[i].valid()) owner_->chosen(i);
  }

 private:
  SweepView* owner_;
};

SweepView::SweepView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  kind_ = new QComboBox;
  kind_->addItem("chunks × bucket_cap_mb");
  kind_->addItem("chunks × partition_len");
  run_ = new QPushButton("Run sweep");
  cancel_ = new QPushButton("Cancel");
  cancel_->setEnabled(false);
  progress_ = new QProgressBar;
  progress_->setTextVisible(true);
  status_ = new QLabel;
  bar->addWidget(kind_);
  bar->addWidget(run_);
  bar->addWidget(cancel_);
  bar->addWidget(progress_, 1);
  layout->addLayout(bar);
  layout->addWidget(status_);
  heatmap_ = new Heatmap(this);
  layout->addWidget(heatmap_, 1);
  connect(run_, &QPushButton::clicked, this, [this] {
    if (session_) start(*session_);
  });
  connect(cancel_, &QPushButton::clicked, this, &SweepView::cancel);
  connect(&watcher_, &QFutureWatcher<std::pair<int, SweepCell>>::resultReadyAt, this, &SweepView::on_result);
  connect(&watcher_, &QFutureWatcher<std::pair<int, SweepCell>>::progressValueChanged, progress_,
          &QProgressBar::setValue);
  connect(&watcher_, &QFutureWatcher<std::pair<int, SweepCell>>::finished, this, &SweepView::on_finished);
}

SweepView::~SweepView() {
  watcher_.cancel();
  watcher_.waitForFinished();
}

void SweepView::start(const PlanSession& session) {
  session_ = &session;
  start(kind_->currentIndex() == 0 ? SweepKind::chunks_by_bucket_cap : SweepKind::chunks_by_partition_len, session);
}

void SweepView::start(SweepKind kind, const PlanSession& session) {
  session_ = &session;
  kind_->setCurrentIndex(kind == SweepKind::chunks_by_bucket_cap ? 0 : 1);
  cancel();
  const auto prediction = session.prediction();
  if (!prediction) {
    status_->setText("Nothing to sweep: the knobs have no valid plan yet.");
    return;
  }
  base_ = session.knobs();
  grid_ = make_sweep(kind, prediction->plan, base_);
  heatmap_->current = grid_.cell_of(base_);
  const int total = static_cast<int>(grid_.cells.size());
  progress_->setRange(0, total);
  progress_->setValue(0);
  status_->setText(QString("Simulating %1 configurations of %2 …").arg(total).arg(QString::fromStdString(prediction->plan.scenario.name)));
  note_.clear();
  if (kind == SweepKind::chunks_by_bucket_cap && base_.settings.data == 1)
    note_ = " bucket_cap_mb has no effect here: there is no data parallelism (data = 1).";
  if (kind == SweepKind::chunks_by_partition_len && base_.settings.stages() == 1)
    note_ = " partition_len has no effect here: there is one stage.";
  run_->setEnabled(false);
  cancel_->setEnabled(true);
  const std::shared_ptr<const plan::Scenario> scenario = session.scenario();
  const SweepGrid grid = grid_;
  const KnobValues base = base_;
  watcher_.setFuture(QtConcurrent::run([scenario, grid, base](QPromise<std::pair<int, SweepCell>>& promise) {
    promise.setProgressRange(0, static_cast<int>(grid.cells.size()));
    // One parse for the whole sweep; each cell is a typed configuration of it.
    std::unique_ptr<tune::Evaluator> evaluator;
    plan::Settings given;
    SweepCell rejected;
    rejected.done = true;
    try {
      evaluator = std::make_unique<tune::Evaluator>(with_knobs(*scenario, base));
      given = evaluator->given();
    } catch (const plan::InputError& e) {
      rejected.error = e.what();
    }
    for (int i = 0; i < static_cast<int>(grid.cells.size()); ++i) {
      if (promise.isCanceled()) return;
      promise.addResult(std::make_pair(i, evaluator ? evaluate_cell(*evaluator, grid.config_of(i, given)) : rejected));
      promise.setProgressValue(i + 1);
    }
  }));
  heatmap_->update();
}

void SweepView::cancel() {
  if (!watcher_.isRunning()) return;
  watcher_.cancel();
  watcher_.waitForFinished();
  status_->setText("Sweep cancelled.");
}

void SweepView::wait_finished() {
  watcher_.waitForFinished();
  // Results arrive as queued signals; take the ones not delivered yet directly.
  for (int i = 0; i < watcher_.future().resultCount(); ++i) {
    const auto& [index, cell] = watcher_.future().resultAt(i);
    grid_.cells[index] = cell;
  }
  on_finished();
}

void SweepView::on_result(int index) {
  const auto& [cell_index, cell] = watcher_.future().resultAt(index);
  if (cell_index < static_cast<int>(grid_.cells.size())) grid_.cells[cell_index] = cell;
  heatmap_->update();
}

void SweepView::on_finished() {
  run_->setEnabled(true);
  cancel_->setEnabled(false);
  int done = 0, invalid = 0;
  for (const auto& c : grid_.cells) done += c.done, invalid += c.done && !c.valid();
  if (done == static_cast<int>(grid_.cells.size()))
    status_->setText(QString("%1 configurations simulated (%2 invalid for this scenario).").arg(done).arg(invalid) + note_);
  heatmap_->update();
}

void SweepView::set_current(const KnobValues& knobs) {
  heatmap_->current = grid_.cells.empty() ? -1 : grid_.cell_of(knobs);
  heatmap_->update();
}

void SweepView::chosen(int cell) { emit configuration_chosen(grid_.knobs_of(cell, base_)); }

}  // namespace parallax::gui
