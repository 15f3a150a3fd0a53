#include "gui/tune_view.hpp"

#include <QChart>
#include <QChartView>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QLineSeries>
#include <QProgressBar>
#include <QPushButton>
#include <QScatterSeries>
#include <QSplitter>
#include <QTableWidget>
#include <QVBoxLayout>
#include <QValueAxis>
#include <QtConcurrent/QtConcurrentRun>
#include <algorithm>
#include <cmath>

#include "gui/tune_cells.hpp"
#include "plan/trainer_rules.hpp"

namespace parallax::gui {

using namespace tune_cells;

namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr int kTop = 10;

QString seconds_text(double s) {
  return s < 10 ? QString::number(s, 'f', 1) + " s" : QString::number(std::lround(s)) + " s";
}

}  // namespace

TuneView::TuneView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  auto* bar = new QHBoxLayout;
  start_ = new QPushButton("Start");
  start_->setToolTip(
      "Search chunks, schedule, partition_len, bucket sizes, ... on the simulator, from the knobs "
      "as they are");
  cancel_ = new QPushButton("Cancel");
  validate_ = new QPushButton("Validate top 3 for real");
  validate_->setToolTip(
      "Run three of the ranked configurations on this machine, as `parallax tune --validate 3` "
      "picks them: predicted against measured");
  progress_ = new QProgressBar;
  progress_->setTextVisible(true);
  progress_->setRange(0, 1);
  progress_->setValue(0);
  bar->addWidget(start_);
  bar->addWidget(cancel_);
  bar->addWidget(progress_, 1);
  bar->addWidget(validate_);
  layout->addLayout(bar);
  status_ = new QLabel("Press Start to search the configurations of the current plan.");
  status_->setWordWrap(true);
  summary_ = new QLabel;
  summary_->setWordWrap(true);
  summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  layout->addWidget(status_);
  layout->addWidget(summary_);

  table_ = new QTableWidget(0, kColumns);
  table_->setHorizontalHeaderLabels(
      {"#", "what changed", "step (ms)", "samples/s", "peak memory (MiB)", "measured (ms)"});
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table_->horizontalHeader()->setSectionResizeMode(kChanged, QHeaderView::Stretch);
  table_->verticalHeader()->hide();
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::SingleSelection);
  table_->setToolTip("Click a row to load its configuration into the knobs");

  chart_ = new QChartView;
  chart_->setRenderHint(QPainter::Antialiasing);
  chart_->setMinimumHeight(200);

  validation_table_ = new QTableWidget(0, 4);
  validation_table_->setHorizontalHeaderLabels(
      {"validated for real", "predicted (ms)", "measured (ms)", "error"});
  validation_table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  validation_table_->horizontalHeader()->setSectionResizeMode(0, QHeaderView::Stretch);
  validation_table_->verticalHeader()->hide();
  validation_table_->hide();

  auto* split = new QSplitter(Qt::Vertical);
  split->addWidget(table_);
  split->addWidget(chart_);
  split->addWidget(validation_table_);
  split->setStretchFactor(0, 3);
  split->setStretchFactor(1, 2);
  layout->addWidget(split, 1);

  connect(start_, &QPushButton::clicked, this, [this] {
    if (session_) start(*session_);
  });
  connect(cancel_, &QPushButton::clicked, this, &TuneView::cancel);
  connect(validate_, &QPushButton::clicked, this, [this] { validate(3); });
  connect(table_, &QTableWidget::cellClicked, this, [this](int row, int) { choose(row); });
  connect(&watcher_, &QFutureWatcher<TuneOutcome>::finished, this, &TuneView::on_finished);
  connect(&validation_, &QFutureWatcher<ValidationOutcome>::finished, this, &TuneView::on_validation_finished);
  show_chart();
  update_buttons();
}

TuneView::~TuneView() {
  if (cancel_flag_) cancel_flag_->store(true);
  watcher_.waitForFinished();
  if (validation_cancel_) validation_cancel_->store(true);  // the run in progress is terminated
  validation_.waitForFinished();
}

bool TuneView::start(const PlanSession& session) {
  session_ = &session;
  if (running()) {
    cancel_flag_->store(true);
    watcher_.waitForFinished();
  }
  if (validating()) {  // its rows belong to the search being replaced
    validation_cancel_->store(true);
    validation_.waitForFinished();
  }
  ++generation_;
  source_ = session.source();
  base_knobs_ = session.knobs();
  base_sets_ = session.overrides();
  std::shared_ptr<tune::Evaluator> evaluator;
  try {
    evaluator = std::make_shared<tune::Evaluator>(with_knobs(*session.scenario(), base_knobs_));
  } catch (const plan::InputError& e) {
    status_->setText("Nothing to tune: the knobs have no valid scenario (" +
                     QString::fromStdString(e.what()) + ").");
    return false;
  }
  base_config_ = evaluator->given();
  base_scenario_ = evaluator->base();
  const tune::Space space = tune::default_space(evaluator->base());
  result_.reset();
  validated_.clear();
  table_->setRowCount(0);
  validation_table_->setRowCount(0);
  validation_table_->hide();
  summary_->clear();
  show_chart();
  phase_.clear();
  phase_start_s_ = 0;
  progress_->setRange(0, 0);  // busy until the first report
  // A trainer's job is searched over what that trainer runs (plan/trainer_rules.hpp), as `parallax tune`.
  const QString trainer = plan::has_trainer_rules(space.trainer)
                              ? QString(", only what %1 runs").arg(plan::trainer_name(space.trainer))
                              : QString();
  status_->setText(QString("Searching the configurations of %1 on %2 ranks%3 …")
                       .arg(QString::fromStdString(evaluator->base().name))
                       .arg(space.world)
                       .arg(trainer));

  cancel_flag_ = std::make_shared<std::atomic<bool>>(false);
  tune::SearchOptions options;
  options.top = kTop;
  options.cancel = cancel_flag_.get();
  const uint64_t generation = generation_;
  // Reported from the search's thread; shown on the GUI thread.
  options.progress = [this, generation](const tune::Progress& p) {
    QMetaObject::invokeMethod(
        this, [this, generation, p] { on_progress(generation, p); }, Qt::QueuedConnection);
  };
  searching_ = true;
  watcher_.setFuture(QtConcurrent::run([evaluator, space, options, flag = cancel_flag_] {
    TuneOutcome o;
    try {
      o.result = tune::search(*evaluator, space, options);
    } catch (const plan::InputError& e) {
      o.error = e.what();
    } catch (const std::exception& e) {
      o.error = std::string("the search failed: ") + e.what();
    }
    return o;
  }));
  update_buttons();
  return true;
}

void TuneView::cancel() {
  if (running()) {
    cancel_flag_->store(true);
    status_->setText("Cancelling: the best configurations simulated so far will be shown …");
  }
  if (validating()) {
    validation_cancel_->store(true);  // fit::run_picks terminates the run in progress
    status_->setText("Cancelling the validation …");
  }
}

void TuneView::wait_finished() {
  watcher_.waitForFinished();
  on_finished();
}

void TuneView::on_progress(uint64_t generation, const tune::Progress& p) {
  if (generation != generation_ || !running()) return;  // a report of a search that is over
  if (phase_ != p.phase) phase_ = p.phase, phase_start_s_ = p.elapsed_s;
  const int total = static_cast<int>(std::max<size_t>(p.total, 1));
  progress_->setRange(0, total);
  progress_->setValue(static_cast<int>(std::min(p.done, p.total)));
  progress_->setFormat(QString::fromStdString(phase_) + " %p%");
  if (p.total == 0) {  // listing: the space's size is what it finds
    progress_->setRange(0, 0);  // busy
    status_->setText(QString("listing the space · %1").arg(seconds_text(p.elapsed_s)));
    return;
  }
  QString text = QString("%1 %2 of %3 configurations · %4")
                     .arg(QString::fromStdString(phase_))
                     .arg(p.done)
                     .arg(p.total)
                     .arg(seconds_text(p.elapsed_s));
  // The rate of this phase so far; pruned configurations are fast, so this is an upper bound.
  const double in_phase = p.elapsed_s - phase_start_s_;
  if (p.done > 0 && p.done < p.total && in_phase > 0)
    text += " · ETA " + seconds_text(in_phase * static_cast<double>(p.total - p.done) /
                                     static_cast<double>(p.done));
  if (p.best_step > plan::Time()) text += " · best " + ms_text(p.best_step) + " ms";
  status_->setText(text);
}

void TuneView::on_finished() {
  if (!searching_ || !watcher_.isFinished())
    return;  // handled by wait_finished(), or a stale signal
  searching_ = false;
  const TuneOutcome outcome = watcher_.result();
  progress_->setRange(0, 1);
  progress_->setValue(1);
  progress_->setFormat("%p%");
  update_buttons();
  if (!outcome.result) {
    progress_->setValue(0);
    status_->setText("The search could not run: " + QString::fromStdString(outcome.error));
    return;
  }
  result_ = outcome.result;
  const tune::SearchResult& r = *result_;
  QString status = r.stopped.empty() ? "Search finished"
                                     : "Search stopped (" + QString::fromStdString(r.stopped) +
                                           "): the best simulated so far";
  status += QString(" in %1. Click a row or a point to load it into the knobs.")
                .arg(seconds_text(r.wall_s));
  status_->setText(status);
  show_result();
  update_buttons();
}

void TuneView::show_result() {
  const tune::SearchResult& r = *result_;
  auto vs = [](const tune::Evaluation& e, plan::Time best) {
    if (!e.simulated()) return QString("not a valid plan here");
    QString s = ms_text(e.step) + " ms";
    // As the command line says it: the best's speed-up, e.step / best (2.01x, not "50% faster").
    if (best > plan::Time() && e.step > best) s += QString(" (the best is %1x as fast)").arg(e.step / best, 0, 'f', 2);
    // A plan that does not fit could not run: its speed-up is no choice a user had.
    if (!e.fits) s += QString(", does not fit: %1 GiB at its fullest rank").arg(static_cast<double>(e.peak_memory) / (1 << 30), 0, 'f', 1);
    return s;
  };
  const plan::Time best = r.ranked.empty() ? plan::Time() : r.ranked.front().step;
  QString text = QString(
                     "%1 configurations (%2 combinations invalid for this scenario), %3 simulated, "
                     "%4 pruned by the "
                     "lower bound, %5 over device memory.<br>As given: %6 · PyTorch defaults: %7")
                     .arg(r.combinations)
                     .arg(r.invalid)
                     .arg(r.evaluated)
                     .arg(r.pruned)
                     .arg(r.over_memory)
                     .arg(vs(r.baseline, best), vs(r.defaults, best));
  summary_->setText(text);

  table_->setRowCount(static_cast<int>(r.ranked.size()));
  for (int row = 0; row < static_cast<int>(r.ranked.size()); ++row) {
    const tune::Evaluation& e = r.ranked[row];
    const std::string also = tune::also_text(e);  // the same prediction, other knobs with no effect
    const QString changed = QString::fromStdString(plan::describe(overrides_of(row)) + (also.empty() ? "" : "  (" + also + ")"));
    table_->setItem(row, kRank, item(QString::number(row + 1)));
    auto* what = item(changed, Qt::AlignLeft | Qt::AlignVCenter);
    what->setToolTip(QString::fromStdString(plan::describe(overrides_of(row)) +
                                            (also.empty() ? "" : "\n" + tune::also_text(e, e.equivalents.size()))));
    table_->setItem(row, kChanged, what);
    table_->setItem(row, kStep, item(ms_text(e.step)));
    table_->setItem(row, kSamples,
                    item(QString::number(e.config.global_batch() / (e.step.to_ms() / 1000), 'f', 0)));
    table_->setItem(row, kMemory, item(QString::number(e.peak_memory / kMiB, 'f', 1)));
    table_->setItem(row, kMeasured, item(""));
  }
  table_->resizeColumnToContents(kRank);
  show_chart();
}

void TuneView::show_chart() {
  auto* chart = new QChart;
  chart->setAnimationOptions(QChart::NoAnimation);
  chart->setTitle("Predicted step time against peak memory (the fullest rank's)");
  chart->legend()->setAlignment(Qt::AlignBottom);
  chart->setMargins(QMargins(4, 4, 4, 4));
  QChart* old = chart_->chart();
  chart_->setChart(chart);
  delete old;
  if (!result_) return;
  const tune::SearchResult& r = *result_;
  double x0 = INFINITY, x1 = -INFINITY, y0 = INFINITY, y1 = -INFINITY;
  auto add = [&](auto* series, const std::vector<tune::Evaluation>& points) {
    for (const auto& e : points) {
      if (!e.simulated()) continue;
      const double x = e.peak_memory / kMiB;
      series->append(x, e.step.to_ms());
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, e.step.to_ms()),
      y1 = std::max(y1, e.step.to_ms());
    }
    chart->addSeries(series);
    return series;
  };
  auto scatter = [](const QString& name, QColor color, double size,
                    QScatterSeries::MarkerShape shape) {
    auto* s = new QScatterSeries;
    s->setName(name);
    s->setColor(color);
    s->setBorderColor(color.darker(140));
    s->setMarkerSize(size);
    s->setMarkerShape(shape);
    return s;
  };
  auto* frontier = new QLineSeries;
  frontier->setName("Pareto frontier");
  frontier->setColor(QColor(239, 108, 0));
  add(frontier, r.pareto);
  auto* top = add(scatter(QString("top %1").arg(r.ranked.size()), QColor(30, 136, 229), 10,
                          QScatterSeries::MarkerShapeCircle),
                  r.ranked);
  auto* pareto =
      add(scatter("on the frontier", QColor(239, 108, 0), 8, QScatterSeries::MarkerShapeCircle),
          r.pareto);
  add(scatter("as given", QColor(33, 33, 33), 12, QScatterSeries::MarkerShapeRectangle),
      {r.baseline});
  add(scatter("PyTorch defaults", QColor(67, 160, 71), 12, QScatterSeries::MarkerShapeTriangle),
      {r.defaults});
  auto* x = new QValueAxis;
  x->setTitleText("peak memory (MiB)");
  auto* y = new QValueAxis;
  y->setTitleText("step time (ms)");
  if (x1 >= x0) {
    const double dx = std::max((x1 - x0) * 0.08, x1 * 0.02 + 1e-3),
                 dy = std::max((y1 - y0) * 0.08, y1 * 0.02 + 1e-3);
    x->setRange(std::max(0.0, x0 - dx), x1 + dx);
    y->setRange(std::max(0.0, y0 - dy), y1 + dy);
  }
  chart->addAxis(x, Qt::AlignBottom);
  chart->addAxis(y, Qt::AlignLeft);
  for (QAbstractSeries* s : chart->series()) s->attachAxis(x), s->attachAxis(y);
  // A click on a point loads the nearest configuration of that series.
  auto clickable = [this](QScatterSeries* series, std::vector<tune::Evaluation> points) {
    connect(series, &QScatterSeries::clicked, this, [this, points](const QPointF& at) {
      const tune::Evaluation* near = nullptr;
      double best = INFINITY;
      for (const auto& e : points) {
        const double d = std::hypot((e.peak_memory / kMiB - at.x()) / std::max(1.0, at.x()),
                                    (e.step.to_ms() - at.y()) / std::max(1e-9, at.y()));
        if (d < best) best = d, near = &e;
      }
      if (near) emit configuration_chosen(KnobValues{near->config, base_knobs_.hardware});
    });
  };
  clickable(top, r.ranked);
  clickable(pareto, r.pareto);
}

plan::Overrides TuneView::overrides_of(int row) const {
  return result_->ranked.at(row).changes;
}

KnobValues TuneView::knobs_of(int row) const {
  return KnobValues{result_->ranked.at(row).config, base_knobs_.hardware};
}

void TuneView::choose(int row) {
  if (!result_ || row < 0 || row >= static_cast<int>(result_->ranked.size())) return;
  table_->selectRow(row);
  emit configuration_chosen(knobs_of(row));
}

void TuneView::update_buttons() {
  start_->setEnabled(!running() && !validating());
  cancel_->setEnabled(running() || validating());
  validate_->setEnabled(result_ && !result_->ranked.empty() && !running() && !validating());
}

QString TuneView::status() const { return status_->text(); }

}  // namespace parallax::gui
