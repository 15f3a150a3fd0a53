#include "gui/main_window.hpp"

#include <QAction>
#include <QComboBox>
#include <QDockWidget>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QLabel>
#include <QMessageBox>
#include <QProgressBar>
#include <QScrollArea>
#include <QSpinBox>
#include <QStatusBar>
#include <QTabWidget>
#include <QToolBar>
#include <QVBoxLayout>

namespace parallax::gui {

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle("Parallax");
  knobs_ = new KnobPanel;
  auto* dock = new QDockWidget("Plan", this);
  dock->setFeatures(QDockWidget::DockWidgetMovable | QDockWidget::DockWidgetFloatable);
  auto* scroll = new QScrollArea;
  scroll->setWidget(knobs_);
  scroll->setWidgetResizable(true);
  // A knob's name and its editor side by side, in a small window too (900x600 squeezed it to 90 px).
  scroll->setMinimumWidth(200);
  dock->setWidget(scroll);
  addDockWidget(Qt::LeftDockWidgetArea, dock);

  auto* central = new QWidget;
  auto* layout = new QVBoxLayout(central);
  scenario_label_ = new QLabel;
  step_time_ = new QLabel("Step time: —");
  QFont big = step_time_->font();
  big.setPointSizeF(big.pointSizeF() * 1.25);
  big.setBold(true);
  step_time_->setFont(big);
  // Long lines (a comparison, a warning, a path) wrap rather than widen the window past its size.
  step_time_->setWordWrap(true);
  scenario_label_->setWordWrap(true);
  layout->addWidget(scenario_label_);
  layout->addWidget(step_time_);
  tabs_ = new QTabWidget;
  layout->addWidget(tabs_, 1);
  setCentralWidget(central);

  // Timeline tab: its own small bar above the view.
  auto* timeline_tab = new QWidget;
  auto* tl = new QVBoxLayout(timeline_tab);
  auto* bar = new QHBoxLayout;
  timeline_ = new TimelineView;
  measured_step_ = new QComboBox;
  measured_step_->setToolTip("The measured optimizer step laid over the prediction");
  bar->addWidget(new QLabel("Measured step:"));
  bar->addWidget(measured_step_);
  auto* keys = new QLabel("wheel/W/S zoom · drag/A/D pan · F fit step · 0 fit all · C critical path · click selects a "
                          "micro-batch");
  keys->setWordWrap(true);
  keys->setAlignment(Qt::AlignRight | Qt::AlignVCenter);
  bar->addWidget(keys, 1);
  tl->addLayout(bar);
  tl->addWidget(timeline_, 1);
  tabs_->addTab(timeline_tab, "Timeline");
  metrics_ = new MetricsView;
  tabs_->addTab(metrics_, "Metrics");
  sweep_ = new SweepView;
  sweep_->set_session(&session_);
  tabs_->addTab(sweep_, "Sweep");
  tune_ = new TuneView;
  tune_->set_session(&session_);
  tabs_->addTab(tune_, "Tune");

  build_toolbar();
  busy_ = new QLabel;
  statusBar()->addPermanentWidget(busy_);

  connect(knobs_, &KnobPanel::knobs_changed, this, &MainWindow::on_knobs);
  connect(&session_, &PlanSession::predicted_changed, this, &MainWindow::on_predicted);
  connect(&session_, &PlanSession::prediction_failed, this, [this](const QString& knob, const QString& message) {
    knobs_->show_error(knob.toStdString(), message);
    statusBar()->showMessage("Not simulated: " + message, 8000);
  });
  connect(&session_, &PlanSession::traces_changed, this, [this] { refresh(false); });
  connect(&session_, &PlanSession::busy_changed, this,
          [this](bool busy) { busy_->setText(busy ? "simulating…" : ""); });
  connect(measured_step_, &QComboBox::activated, this,
          [this](int) { session_.set_measured_step(measured_step_->currentData().toInt()); });
  connect(timeline_, &TimelineView::selection_changed, this,
          [this](const QString& d) { statusBar()->showMessage(QString(d).replace('\n', "  ·  ")); });
  connect(sweep_, &SweepView::configuration_chosen, this, [this](const KnobValues& k) {
    load_knobs(k);
    tabs_->setCurrentIndex(0);
  });
  // The Tune tab stays in front: its table and chart are what the user compares against.
  connect(tune_, &TuneView::configuration_chosen, this, &MainWindow::load_knobs);
  connect(&run_, &RealRun::progress, this, [this](int step, int steps, const QString& line) {
    if (step >= 0) run_progress_->setRange(0, steps), run_progress_->setValue(step);
    statusBar()->showMessage(line);
  });
  connect(&run_, &RealRun::finished, this, &MainWindow::on_run_finished);
}

void MainWindow::build_toolbar() {
  QToolBar* tb = addToolBar("Main");
  tb->setMovable(false);
  auto add = [&](const QString& text, QKeySequence key, const QString& tip, auto slot) {
    QAction* a = tb->addAction(text, this, slot);
    a->setShortcut(key);
    a->setToolTip(tip + " (" + key.toString() + ")");
    return a;
  };
  add("Open scenario…", QKeySequence::Open, "Open a scenario YAML", &MainWindow::choose_scenario);
  add("Save scenario…", QKeySequence::Save, "Save the scenario with the knobs applied", &MainWindow::save_scenario);
  add("Open trace…", QKeySequence(Qt::CTRL | Qt::Key_T),
      "Open a trace: Parallax predicted or measured, or a PyTorch profiler trace (.json, .json.gz)", &MainWindow::choose_trace);
  tb->addSeparator();
  critical_action_ = tb->addAction("Critical path");
  critical_action_->setCheckable(true);
  critical_action_->setToolTip("Highlight the predicted critical path (C)");
  connect(critical_action_, &QAction::toggled, timeline_, &TimelineView::set_critical_path);
  connect(timeline_, &TimelineView::critical_path_toggled, critical_action_, &QAction::setChecked);
  tb->addAction("Fit step", timeline_, &TimelineView::fit_step)->setToolTip("Show the whole step (F)");
  tb->addSeparator();
  run_steps_ = new QSpinBox;
  run_steps_->setRange(1, 100000);
  run_steps_->setValue(4);
  run_steps_->setSuffix(" steps");
  run_steps_->setToolTip("Optimizer steps to run for real (the first is a warm-up)");
  run_action_ = add("Run for real", QKeySequence(Qt::CTRL | Qt::Key_R),
                    "Run this configuration with `parallax run` on this machine and overlay the measured trace",
                    &MainWindow::start_run);
  tb->addWidget(run_steps_);
  cancel_action_ = tb->addAction("Cancel", &run_, &RealRun::cancel);
  cancel_action_->setEnabled(false);
  run_progress_ = new QProgressBar;
  run_progress_->setMaximumWidth(220);
  run_progress_->setRange(0, 1);
  run_progress_->setValue(0);
  tb->addWidget(run_progress_);
}

void MainWindow::open_scenario(const std::string& path, const std::vector<std::string>& sets) {
  session_.open_scenario(path, sets);
  scenario_label_->setText("Scenario: " + QString::fromStdString(session_.source().display_name));
  knobs_->set_knobs(session_.knobs(), session_.scenario_hardware());
  knobs_->clear_errors();
}

std::string MainWindow::open_trace(const std::string& path) {
  const std::string kind = session_.open_trace(path);
  statusBar()->showMessage(QString::fromStdString("Opened " + kind + " trace " + path), 8000);
  if (kind == "measured") update_steps();
  refresh(true);
  return kind;
}

bool MainWindow::show_view(const QString& view) {
  const QStringList views = {"timeline", "metrics", "sweep", "tune"};
  const int i = views.indexOf(view);
  if (i < 0) return false;
  tabs_->setCurrentIndex(i);
  return true;
}

QString MainWindow::step_time_shown() const { return step_time_->text(); }

void MainWindow::on_knobs(const KnobValues& knobs) {
  knobs_->clear_errors();
  session_.set_knobs(knobs);
  sweep_->set_current(knobs);
}

void MainWindow::load_knobs(const KnobValues& knobs) {
  knobs_->set_knobs(knobs, "");
  on_knobs(knobs);
}

void MainWindow::on_predicted() {
  knobs_->clear_errors();
  refresh(false);
}

void MainWindow::refresh(bool refit) {
  const auto prediction = session_.prediction();
  const timeline::Timeline* predicted = session_.predicted_timeline();
  const bool simulated = prediction && predicted == &prediction->run.timeline;
  const bool was_empty = timeline_->model().rows().empty();
  timeline_->model().set_predicted(predicted, simulated ? prediction->metrics.critical_path : std::vector<int32_t>{});
  timeline_->model().set_measured(session_.measured() ? &*session_.measured() : nullptr, session_.measured_step());
  timeline_->model().set_imported(session_.imported());
  timeline_->model_changed(refit || was_empty);
  const int tensor = prediction ? prediction->plan.scenario.parallel.tensor : 1;
  timeline_->set_rank_note(tensor > 1 && simulated ? QString("a rank is a tensor group of %1 GPUs").arg(tensor) : QString());
  step_time_->setText(step_time_text(prediction.get(), session_.comparison() ? &*session_.comparison() : nullptr,
                                     simulated ? nullptr : predicted, session_.trace_mismatch()));
  metrics_->show_session(session_);
}

void MainWindow::update_steps() {
  measured_step_->clear();
  for (int s : session_.measured_steps()) measured_step_->addItem(QString("step %1").arg(s + 1), s);
  measured_step_->setCurrentIndex(measured_step_->findData(session_.measured_step()));
}

void MainWindow::choose_scenario() {
  const QString path = QFileDialog::getOpenFileName(this, "Open scenario", {}, "Scenarios (*.yaml *.yml)");
  if (path.isEmpty()) return;
  try {
    open_scenario(path.toStdString());
  } catch (const plan::InputError& e) {
    QMessageBox::warning(this, "Cannot open the scenario", e.what());
  }
}

void MainWindow::save_scenario() {
  const QString path = QFileDialog::getSaveFileName(this, "Save scenario", {}, "Scenarios (*.yaml *.yml)");
  if (path.isEmpty()) return;
  try {
    session_.save_scenario(path.toStdString());
    statusBar()->showMessage("Saved " + path, 5000);
  } catch (const std::exception& e) {
    QMessageBox::warning(this, "Cannot save the scenario", e.what());
  }
}

void MainWindow::choose_trace() {
  const QStringList paths =
      QFileDialog::getOpenFileNames(this, "Open traces", {}, "Traces (*.json *.json.gz *.pt.trace.json);;All files (*)");
  for (const QString& path : paths) {
    try {
      open_trace(path.toStdString());
    } catch (const plan::InputError& e) {
      QMessageBox::warning(this, "Cannot read the trace", e.what());
      return;
    }
  }
}

void MainWindow::start_run() {
  if (!session_.error().empty()) {
    statusBar()->showMessage("Fix the knobs first: " + QString::fromStdString(session_.error()), 8000);
    return;
  }
  if (run_.start(session_.source(), session_.overrides(), run_steps_->value())) {
    run_action_->setEnabled(false);
    cancel_action_->setEnabled(true);
    run_progress_->setRange(0, 0);  // busy until the first step reports
  }
}

void MainWindow::on_run_finished(bool ok, const QString& trace, const QString& message) {
  run_action_->setEnabled(true);
  cancel_action_->setEnabled(false);
  run_progress_->setRange(0, 1);
  run_progress_->setValue(ok ? 1 : 0);
  statusBar()->showMessage(message, 10000);
  if (!ok) {
    if (!message.startsWith("run cancelled")) QMessageBox::warning(this, "Run for real", message);
    return;
  }
  try {
    open_trace(trace.toStdString());
  } catch (const plan::InputError& e) {
    QMessageBox::warning(this, "Cannot read the measured trace", e.what());
  }
}

}  // namespace parallax::gui
