// parallax-gui tests (Qt Test, offscreen platform). The numbers shown are checked against the
// simulator run directly, analytic counts, and hand-made traces whose errors are known.
#include <QCoreApplication>
#include <QElapsedTimer>
#include <QImage>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest/QtTest>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "gui/main_window.hpp"
#include "gui/run_panel.hpp"
#include "gui/sweep.hpp"
#include "gui/timeline_model.hpp"
#include "sim/metrics.hpp"
#include "sim/simulator.hpp"
#include "tests/test_util.hpp"
#include "timeline/trace_reader.hpp"
#include "timeline/trace_writer.hpp"
#include "tune/evaluator.hpp"

using namespace parallax;
using namespace parallax::gui;

// A test that cannot run here for want of `what`: QSKIP, which ctest reports as skipped
// (SKIP_REGULAR_EXPRESSION in tests/CMakeLists.txt), or a failure where PARALLAX_TEST_REQUIRE
// names `what` (CI, for what its machine has).
#define SKIP_WITHOUT(condition, what, why) \
  do {                                     \
    if (!(condition)) {                    \
      if (test::required(what)) QFAIL(why); \
      QSKIP(why);                          \
    }                                      \
  } while (0)

namespace {

const std::string kSource = PARALLAX_SOURCE_DIR;
const std::string kPipeline2 = kSource + "/scenarios/mlp-fashion-mnist-pipeline2.yaml";
const std::string kDdp = kSource + "/scenarios/ddp-transformer-accum-4xA100.yaml";

// The step time of a configuration, straight from the simulator (not through the GUI).
double simulated_step_ms(const std::string& scenario, const std::vector<std::string>& sets) {
  const plan::Plan p = plan::resolve_plan(plan::load_scenario(scenario, sets));
  const sim::SimRun run = sim::simulate(p);
  return sim::compute_metrics(p, run).step_time.to_ms();
}

// A "measured" trace of two steps made from a prediction with every duration scaled by `scale`
// (start times scaled too, so the schedule's order is kept).
std::string write_scaled_trace(const timeline::Timeline& predicted, double scale, const QTemporaryDir& dir) {
  timeline::Timeline t = predicted;
  t.kind = "measured";
  t.events.clear();
  int64_t offset = 0;
  for (int step = 0; step < 2; ++step) {
    int64_t end = 0;
    for (auto e : predicted.events) {
      e.start = plan::Time::ns(offset + std::llround(e.start.count_ns() * scale));
      e.end = plan::Time::ns(offset + std::llround(e.end.count_ns() * scale));
      e.step = step;
      end = std::max(end, e.end.count_ns());
      t.events.push_back(e);
    }
    offset = end + 1000;
  }
  const std::string path = dir.filePath("measured.json").toStdString();
  std::ofstream out(path);
  timeline::write_chrome_trace(t, out);
  return path;
}

int count_pixels(const QImage& image, QColor color) {
  int n = 0;
  const QRgb want = color.rgb();
  for (int y = 0; y < image.height(); ++y)
    for (int x = 0; x < image.width(); ++x) n += image.pixel(x, y) == want;
  return n;
}

QString gui_binary() { return PARALLAX_GUI_BINARY; }

// Lets the background simulation finish and the window take its result.
void settle(MainWindow& w) {
  w.session().wait_idle();
  QCoreApplication::processEvents();
}

void open(MainWindow& w, const std::string& scenario) {
  w.open_scenario(scenario);
  settle(w);
}

}  // namespace

class GuiTest : public QObject {
  Q_OBJECT
 private slots:
  void changing_chunks_changes_the_step_time_shown();
  void a_bad_combination_is_shown_beside_its_knob();
  void overlay_with_a_measured_trace_draws_both();
  void selecting_an_action_highlights_its_micro_batch();
  void sweep_marks_the_best_simulated_cell();
  void visible_bars_match_a_brute_force_search();
  void zoom_keeps_the_time_under_the_cursor();
  void pytorch_profiler_traces_open_on_their_own_rows();
  void screenshots_are_not_blank();
  void screenshot_rejects_bad_input_and_writes_nothing();
  void saved_scenario_reopens_with_the_knobs();
  void run_for_real_overlays_the_measured_trace();
  void run_for_real_reports_a_dead_rank();
  void tune_tab_ranks_as_the_evaluator_predicts();
  void clicking_a_tune_row_loads_it_into_the_knobs();
  void cancel_stops_a_tune_search();
  void validate_shows_predicted_against_measured();
};

void GuiTest::changing_chunks_changes_the_step_time_shown() {
  MainWindow w;
  open(w, "");
  const QString before = w.step_time_shown();
  QVERIFY(before.contains(QString::number(simulated_step_ms("", {}), 'f', 2)));

  w.knob_panel()->chunks_box()->setValue(4);
  settle(w);
  const QString after = w.step_time_shown();
  QVERIFY2(after != before, qPrintable(after));
  QVERIFY2(after.contains(QString::number(simulated_step_ms("", {"parallel.chunks=4"}), 'f', 2)), qPrintable(after));
  // GPipe with 4 chunks: each of the 2 stages runs 4 forwards.
  const auto& model = w.timeline()->model();
  int forwards = 0;
  for (const auto& b : model.bars()) forwards += b.kind == BarKind::forward;
  QCOMPARE(forwards, 2 * 4);
}

void GuiTest::a_bad_combination_is_shown_beside_its_knob() {
  MainWindow w;
  open(w, "");
  const QString good = w.step_time_shown();
  w.knob_panel()->chunks_box()->setValue(7);  // the batch of 32 does not split into 7
  settle(w);
  QVERIFY2(w.knob_panel()->error_of("parallel.chunks").contains("divisible"), qPrintable(w.knob_panel()->error_of("parallel.chunks")));
  QVERIFY(w.knob_panel()->error_of("parallel.pipeline").isEmpty());
  QCOMPARE(w.step_time_shown(), good);  // the last good prediction stays
  w.knob_panel()->chunks_box()->setValue(8);
  settle(w);
  QVERIFY(w.knob_panel()->error_of("parallel.chunks").isEmpty());
}

void GuiTest::overlay_with_a_measured_trace_draws_both() {
  QTemporaryDir dir;
  MainWindow w;
  w.resize(1400, 800);
  open(w, kPipeline2);
  w.open_trace(write_scaled_trace(w.session().prediction()->run.timeline, 1.5, dir));
  w.show();
  QCoreApplication::processEvents();
  TimelineView* view = w.timeline();
  view->fit_step();

  const auto items = view->visible_items();
  std::set<Layer> layers;
  for (const auto& i : items) layers.insert(view->model().bars()[i.bar].layer);
  QVERIFY(layers.count(Layer::predicted) && layers.count(Layer::measured));
  // Every action of the measured step is paired with its prediction.
  for (const auto& b : view->model().bars())
    if (b.layer == Layer::measured) QVERIFY(b.pair >= 0);
  // Measured durations are 1.5x predicted: the error is (p - m) / m = -33.3%.
  int measured_forward = -1;
  for (size_t i = 0; i < view->model().bars().size(); ++i)
    if (view->model().bars()[i].layer == Layer::measured && view->model().bars()[i].kind == BarKind::forward)
      measured_forward = static_cast<int>(i);
  QVERIFY(measured_forward >= 0);
  const QString text = QString::fromStdString(view->model().describe(measured_forward));
  QVERIFY2(text.contains("-33.3%"), qPrintable(text));
  // On screen: measured bars filled, predicted ones outlined in the darker shade.
  const QImage image = view->grab().toImage();
  const QColor forward = TimelineView::color_of(BarKind::forward);
  QVERIFY(count_pixels(image, forward) > 50);
  QVERIFY(count_pixels(image, forward.darker(130)) > 50);
  // The comparison's step error: predicted / measured - 1 = 1/1.5 - 1.
  QVERIFY(w.session().comparison());
  QVERIFY(std::abs(w.session().comparison()->step_error - (1 / 1.5 - 1)) < 0.01);
}

void GuiTest::selecting_an_action_highlights_its_micro_batch() {
  MainWindow w;
  open(w, kPipeline2);
  const auto& model = w.timeline()->model();
  int pick = -1;
  for (size_t i = 0; i < model.bars().size(); ++i)
    if (model.bars()[i].kind == BarKind::backward && model.bars()[i].mb == 3) pick = static_cast<int>(i);
  QVERIFY(pick >= 0);
  w.timeline()->select(pick);
  std::set<int> ranks;
  int compute = 0;
  for (size_t i = 0; i < model.bars().size(); ++i) {
    const bool related = model.related(static_cast<int>(i), pick);
    QCOMPARE(related, model.bars()[i].mb == 3);
    if (related) ranks.insert(model.rows()[model.bars()[i].row].rank);
    compute += related && (model.bars()[i].kind == BarKind::forward || model.bars()[i].kind == BarKind::backward);
  }
  QCOMPARE(static_cast<int>(ranks.size()), 2);
  QCOMPARE(compute, 4);  // F and B of micro-batch 3 on each of the 2 stages
}

void GuiTest::sweep_marks_the_best_simulated_cell() {
  MainWindow w;
  open(w, kDdp);
  SweepView* sweep = w.sweep();
  sweep->start(SweepKind::chunks_by_bucket_cap, w.session());
  sweep->wait_finished();
  const SweepGrid& g = sweep->grid();
  QVERIFY(g.rows() >= 3 && g.columns() >= 5);
  // Every cell against the simulator run directly; the best is the smallest of those.
  double best_ms = INFINITY;
  int best = -1;
  for (int i = 0; i < static_cast<int>(g.cells.size()); ++i) {
    const double ms = simulated_step_ms(kDdp, g.knobs_of(i, w.session().knobs()).overrides(w.session().scenario_knobs().settings));
    QVERIFY(g.cells[i].done);
    QCOMPARE(g.cells[i].step.to_ms(), ms);
    if (ms < best_ms) best_ms = ms, best = i;
  }
  QCOMPARE(g.best(), best);
  // The bucket size matters here (4 replicas): not all cells of a row are equal.
  std::set<double> row0;
  for (int c = 0; c < g.columns(); ++c) row0.insert(g.cells[c].step.to_ms());
  QVERIFY(row0.size() > 1);
  // Clicking the best cell loads it into the knobs.
  sweep->chosen(best);
  w.session().wait_idle();
  QCOMPARE(w.knob_panel()->knobs().settings.chunks, g.knobs_of(best, w.session().knobs()).settings.chunks);
  QCOMPARE(w.session().prediction()->metrics.step_time.to_ms(), best_ms);
}

void GuiTest::visible_bars_match_a_brute_force_search() {
  std::mt19937 rng(7);
  timeline::Timeline t;
  t.kind = "predicted";
  for (int i = 0; i < 20000; ++i) {
    timeline::TimelineEvent e;
    e.rank = static_cast<int>(rng() % 4);
    e.lane = timeline::Lane::compute;
    e.action = schedule::Action{schedule::ActionKind::F, 0, i, -1};
    const int64_t start = rng() % 1'000'000'000;
    e.start = plan::Time::ns(start);
    e.end = plan::Time::ns(start + (rng() % 5 == 0 ? rng() % 50'000'000 : rng() % 100'000));
    t.events.push_back(e);
  }
  TimelineModel model;
  model.set_predicted(&t);
  QCOMPARE(model.bars().size(), t.events.size());
  for (int trial = 0; trial < 200; ++trial) {
    const int row = static_cast<int>(rng() % model.rows().size());
    const double t0 = rng() % 1'000'000'000, t1 = t0 + rng() % 20'000'000;
    std::set<int> fast, slow;
    model.for_each_in(row, t0, t1, [&](int i) { fast.insert(i); });
    for (size_t i = 0; i < model.bars().size(); ++i) {
      const auto& b = model.bars()[i];
      if (b.row == row && b.end_ns >= t0 && b.start_ns <= t1) slow.insert(static_cast<int>(i));
    }
    QCOMPARE(fast, slow);
  }
  // Zoomed out, drawing is bounded by pixels, not by bars.
  TimeAxis axis;
  axis.width_px = 1000;
  axis.fit(0, 1'050'000'000);
  const auto items = model.layout(axis, 0, 3);
  QVERIFY2(items.size() < 3 * 4 * 1000, qPrintable(QString::number(items.size())));
}

void GuiTest::zoom_keeps_the_time_under_the_cursor() {
  TimeAxis axis;
  axis.width_px = 800;
  axis.fit(0, 1'000'000);
  const double at = axis.t_of(300);
  axis.zoom(4, 300);
  QVERIFY(std::abs(axis.t_of(300) - at) < 1e-6);
  QVERIFY(std::abs(axis.end_ns() - axis.start_ns - 1'040'000 / 4.0) < 1);
  axis.pan(100);
  QVERIFY(std::abs(axis.t_of(400) - at) < 1e-6);
}

void GuiTest::pytorch_profiler_traces_open_on_their_own_rows() {
  const std::string fixture = kSource + "/../shared/fixtures/kineto/sampled_rank-1.json.gz";
  SKIP_WITHOUT(std::filesystem::exists(fixture), "fixtures", "../shared/fixtures is absent");
  MainWindow w;
  open(w, "");
  w.open_trace(fixture);
  const auto& model = w.timeline()->model();
  const auto& imported = w.session().imported();
  QCOMPARE(static_cast<int>(imported.size()), 1);
  QCOMPARE(model.count(Layer::imported), imported.front().events.size());
  bool nccl_row = false;
  for (const auto& r : model.rows()) nccl_row |= r.lane.rfind("trace: ", 0) == 0 && r.lane.find("nccl") != std::string::npos;
  QVERIFY(nccl_row);
}

void GuiTest::screenshots_are_not_blank() {
  QTemporaryDir dir;
  for (const QString view : {"timeline", "metrics", "sweep"}) {
    const QString png = dir.filePath(view + ".png");
    QProcess p;
    p.start(gui_binary(), {"--screenshot", png, QString::fromStdString(kDdp), "--view", view, "--size", "1000x700"});
    QVERIFY(p.waitForFinished(60000));
    QCOMPARE(p.exitCode(), 0);
    QImage image(png);
    QCOMPARE(image.size(), QSize(1000, 700));
    std::map<QRgb, int> colors;
    for (int y = 0; y < image.height(); y += 2)
      for (int x = 0; x < image.width(); x += 2) ++colors[image.pixel(x, y)];
    int most = 0;
    for (const auto& [c, n] : colors) most = std::max(most, n);
    const int total = (image.width() / 2) * (image.height() / 2);
    QVERIFY2(colors.size() > 30, qPrintable(view));
    QVERIFY2(most < total * 0.9, qPrintable(view));  // not one flat colour
  }
}

void GuiTest::screenshot_rejects_bad_input_and_writes_nothing() {
  QTemporaryDir dir;
  const QString png = dir.filePath("bad.png");
  const QList<QStringList> cases = {
      {"--set", "parallel.chunks=7"},
      {"--view", "flamegraph"},
      {QString::fromStdString(kSource + "/no-such-scenario.yaml")},
      {"--measured", dir.filePath("missing.json")},
  };
  for (const QStringList& extra : cases) {
    QProcess p;
    p.start(gui_binary(), QStringList{"--screenshot", png} + extra);
    QVERIFY(p.waitForFinished(30000));
    QCOMPARE(p.exitCode(), 2);
    const QString err = QString::fromUtf8(p.readAllStandardError());
    QVERIFY2(err.contains("parallax-gui: "), qPrintable(err));
    QVERIFY(!QFileInfo::exists(png));
  }
}

void GuiTest::saved_scenario_reopens_with_the_knobs() {
  QTemporaryDir dir;
  const std::string path = dir.filePath("saved.yaml").toStdString();
  MainWindow w;
  open(w, kPipeline2);
  KnobValues k = w.session().knobs();
  k.settings.chunks = 4;
  k.settings.schedule = schedule::ScheduleKind::gpipe;
  k.settings.partition_len = plan::partition_of({1, 3});
  w.session().set_knobs(k);
  w.session().wait_idle();
  w.session().save_scenario(path);
  MainWindow again;
  open(again, path);
  QCOMPARE(again.session().knobs(), k);
  QCOMPARE(again.session().prediction()->metrics.step_time, w.session().prediction()->metrics.step_time);
}

void GuiTest::run_for_real_overlays_the_measured_trace() {
  SKIP_WITHOUT(std::filesystem::exists("/usr/share/datasets/fashion-mnist"), "fashion-mnist",
               "Fashion-MNIST is not installed (scripts/setup.sh installs it)");
  qputenv("PARALLAX_BIN", PARALLAX_BINARY);
  MainWindow w;
  open(w, kPipeline2);
  RealRun run;
  QSignalSpy progress(&run, &RealRun::progress);
  QSignalSpy finished(&run, &RealRun::finished);
  QVERIFY(run.start(w.session().source(), w.session().overrides(), 3));
  QVERIFY(finished.wait(120000));
  const auto args = finished.takeFirst();
  QVERIFY2(args[0].toBool(), qPrintable(args[2].toString()));
  QVERIFY(progress.count() > 0);
  w.open_trace(args[1].toString().toStdString());
  QCOMPARE(static_cast<int>(w.session().measured_steps().size()), 3);
  QVERIFY(w.timeline()->model().has(Layer::measured));
  // The measured step holds the same actions the simulator played.
  QCOMPARE(w.timeline()->model().count(Layer::measured), w.timeline()->model().count(Layer::predicted));
  // The metrics show the memory the run recorded: the fullest rank's, as its trace holds it.
  int64_t fullest = 0;
  for (const auto& m : parallax::timeline::read_trace(args[1].toString().toStdString()).timeline.memory)
    fullest = std::max(fullest, m.training_bytes());
  QVERIFY(fullest > 0);
  const QString memory = QString("%1 GiB measured").arg(static_cast<double>(fullest) / (1024.0 * 1024 * 1024), 0, 'f', 2);
  QVERIFY2(w.metrics()->summary_text().contains(memory), qPrintable(w.metrics()->summary_text() + " lacks " + memory));

  // A long run is cancelled promptly.
  QSignalSpy cancelled(&run, &RealRun::finished);
  QVERIFY(run.start(w.session().source(), w.session().overrides(), 100000));
  QVERIFY(progress.wait(60000));
  QElapsedTimer clock;
  clock.start();
  run.cancel();
  QVERIFY(cancelled.wait(10000));
  QVERIFY(!cancelled.takeFirst()[0].toBool());
  QVERIFY(clock.elapsed() < 10000);
}

void GuiTest::run_for_real_reports_a_dead_rank() {
  SKIP_WITHOUT(std::filesystem::exists("/usr/share/datasets/fashion-mnist"), "fashion-mnist",
               "Fashion-MNIST is not installed (scripts/setup.sh installs it)");
  qputenv("PARALLAX_BIN", PARALLAX_BINARY);
  qputenv("PARALLAX_FAULT", "1:1:exit");  // rank 1 dies at the start of step 2
  MainWindow w;
  open(w, kPipeline2);
  RealRun run;
  QSignalSpy finished(&run, &RealRun::finished);
  QVERIFY(run.start(w.session().source(), w.session().overrides(), 5));
  QVERIFY(finished.wait(60000));
  qunsetenv("PARALLAX_FAULT");
  const auto args = finished.takeFirst();
  QVERIFY(!args[0].toBool());
  const QString message = args[2].toString();
  QVERIFY2(message.contains("the run failed (exit code 1)") && message.contains("rank 1"), qPrintable(message));
}

// A finished search of the tune tab on a scenario, the knobs as opened.
const tune::SearchResult& tune_search(MainWindow& w) {
  TuneView* tune = w.tune();
  const bool started = tune->start(w.session());
  tune->wait_finished();
  if (!started || !tune->result()) qFatal("the tune search did not run: %s", qPrintable(tune->status()));
  return *tune->result();
}

void GuiTest::tune_tab_ranks_as_the_evaluator_predicts() {
  MainWindow w;
  open(w, kPipeline2);
  QElapsedTimer clock;
  clock.start();
  const tune::SearchResult& r = tune_search(w);
  QVERIFY2(clock.elapsed() < 4000, qPrintable(QString::number(clock.elapsed())));
  QVERIFY(r.stopped.empty());
  QVERIFY(r.ranked.size() >= 3);
  QCOMPARE(w.tune()->table()->rowCount(), static_cast<int>(r.ranked.size()));
  // Independently: the scenario file with the knobs, parsed and evaluated again.
  const plan::Scenario scenario = plan::load_scenario(kPipeline2, w.session().overrides());
  tune::Evaluator evaluator(scenario);
  const tune::Evaluation first = evaluator.evaluate(r.ranked[0].config);
  QCOMPARE(first.step.to_ms(), r.ranked[0].step.to_ms());
  QCOMPARE(first.peak_memory, r.ranked[0].peak_memory);
  // The table shows what changed against the knobs, the step time and the throughput.
  const auto changed = plan::overrides(plan::settings_of(scenario), r.ranked[0].config);
  QVERIFY(w.tune()->table()->item(0, 1)->text().startsWith(QString::fromStdString(plan::describe(changed))));
  QVERIFY(std::abs(w.tune()->table()->item(0, 2)->text().toDouble() - first.step.to_ms()) < 0.01);
  const double samples = r.ranked[0].config.global_batch() / (first.step.to_ms() / 1000);
  QVERIFY(std::abs(w.tune()->table()->item(0, 3)->text().toDouble() - samples) <= 1);
  // Best first, and nothing ranked is slower than the scenario as given when that fits.
  for (size_t i = 1; i < r.ranked.size(); ++i) QVERIFY(r.ranked[i - 1].step.to_ms() <= r.ranked[i].step.to_ms());
  QVERIFY(r.ranked[0].step.to_ms() <= r.baseline.step.to_ms());
  QVERIFY(!r.pareto.empty());
}

void GuiTest::clicking_a_tune_row_loads_it_into_the_knobs() {
  MainWindow w;
  w.resize(1400, 900);
  open(w, kPipeline2);
  w.show_view("tune");
  w.show();
  const tune::SearchResult& r = tune_search(w);
  QCoreApplication::processEvents();
  for (int row : {0, 1}) {
    QTableWidget* table = w.tune()->table();
    QTest::mouseClick(table->viewport(), Qt::LeftButton, {}, table->visualItemRect(table->item(row, 1)).center());
    settle(w);
    const KnobValues want = w.tune()->knobs_of(row);
    QCOMPARE(w.knob_panel()->knobs(), want);
    QCOMPARE(w.session().knobs(), want);
    const double ms = w.session().prediction()->metrics.step_time.to_ms();
    QCOMPARE(ms, r.ranked[row].step.to_ms());
    QVERIFY2(w.step_time_shown().contains(QString::number(ms, 'f', 2)), qPrintable(w.step_time_shown()));
  }
  // A configuration with two replicas halves the per-replica batch (the global batch stays): the
  // knobs carry data.batch_size too.
  const plan::Scenario scenario = plan::load_scenario(kPipeline2, {});
  plan::Settings two = plan::settings_of(scenario);
  two.data = 2;
  two.pipeline = 1;
  two.partition_len = {};
  two.batch_size /= 2;
  two.chunks = 4;
  emit w.tune()->configuration_chosen(KnobValues{two, ""});
  settle(w);
  QCOMPARE(w.knob_panel()->knobs().settings.batch_size, 32);
  QCOMPARE(w.session().prediction()->plan.scenario.data.batch_size, 32);
  tune::Evaluator evaluator(scenario);
  QCOMPARE(w.session().prediction()->metrics.step_time.to_ms(), evaluator.evaluate(two).step.to_ms());
}

void GuiTest::cancel_stops_a_tune_search() {
  MainWindow w;
  open(w, kDdp);
  TuneView* tune = w.tune();
  QVERIFY(tune->start(w.session()));
  // Cancelled once it reports progress, i.e. while it plans or simulates.
  QElapsedTimer clock;
  clock.start();
  while (tune->running() && !tune->status().contains(" of ") && clock.elapsed() < 3000) QTest::qWait(5);
  QVERIFY2(tune->running(), "the search finished before it could be cancelled");
  clock.restart();
  tune->cancel();
  tune->wait_finished();
  QVERIFY2(clock.elapsed() < 1500, qPrintable(QString::number(clock.elapsed())));
  QVERIFY(tune->result());
  QCOMPARE(QString::fromStdString(tune->result()->stopped), QString("interrupted"));
  QVERIFY(tune->result()->evaluated + tune->result()->pruned + tune->result()->over_memory < tune->result()->combinations);
  QVERIFY2(tune->status().contains("stopped (interrupted)"), qPrintable(tune->status()));
  // A new search starts afresh after a cancel.
  QVERIFY(tune->start(w.session()));
  QVERIFY(tune->running());
  tune->cancel();
  tune->wait_finished();
}

// A stand-in for the parallax binary the validation's runs start: `run -o TRACE SCENARIO --set
// ...` becomes the same simulation on another hardware profile (t4-pcie), written where the run's
// trace goes, so that "measured" differs from predicted by a known amount. Each run's arguments
// are appended to args.txt, a run per line.
QString write_stand_in(const QTemporaryDir& dir, const QString& body) {
  const QString script = dir.filePath("parallax");
  QFile f(script);
  if (!f.open(QIODevice::WriteOnly)) return {};
  f.write(QString("#!/bin/sh\necho \"$*\" >> '%1'\n%2\n").arg(dir.filePath("args.txt"), body).toUtf8());
  f.close();
  f.setPermissions(f.permissions() | QFileDevice::ExeOwner);
  return script;
}

void GuiTest::validate_shows_predicted_against_measured() {
  MainWindow w;
  open(w, kPipeline2);
  KnobValues four = w.session().knobs();
  four.settings.chunks = 4;
  w.session().set_knobs(four);
  w.session().wait_idle();
  const tune::SearchResult& r = tune_search(w);
  TuneView* tune = w.tune();
  QTemporaryDir dir;
  const QString script =
      write_stand_in(dir, QString("shift\nexec '%1' simulate \"$@\" --set hardware=t4-pcie > /dev/null").arg(PARALLAX_BINARY));
  qputenv("PARALLAX_BIN", script.toUtf8());
  QSignalSpy finished(tune, &TuneView::validation_finished);
  QVERIFY(tune->validate(3));
  QVERIFY(tune->validating());
  QVERIFY(finished.wait(60000));
  const auto args = finished.takeFirst();
  QVERIFY2(args[0].toBool(), qPrintable(args[1].toString()));
  // Three runs, each `run -o TRACE SCENARIO` with the knobs as changed from the file (only those)
  // and then the configuration's own overrides.
  QFile recorded(dir.filePath("args.txt"));
  QVERIFY(recorded.open(QIODevice::ReadOnly));
  const QStringList runs = QString::fromUtf8(recorded.readAll()).split('\n', Qt::SkipEmptyParts);
  QCOMPARE(runs.size(), 3);
  const std::vector<std::string> base = tune->validation_sets();
  QVERIFY(std::find(base.begin(), base.end(), "parallel.chunks=4") != base.end());
  for (const QString& run : runs) {
    QVERIFY2(run.startsWith("run -o ") && run.contains(QString::fromStdString(" " + kPipeline2 + " ")), qPrintable(run));
    QVERIFY2(run.contains("--set parallel.chunks=4"), qPrintable(run));
    QVERIFY2(!run.contains("data.batch_size=64"), qPrintable(run));
  }
  // Predicted (the search's) against measured (the stand-in's T4 simulation) per configuration;
  // the ranked rows get their measured time; the fastest measured, the pick, is starred.
  QCOMPARE(static_cast<int>(tune->validated().size()), 3);
  QTableWidget* table = tune->validation_table();
  QCOMPARE(table->rowCount(), 3);
  int fastest = 0;
  for (int i = 0; i < 3; ++i) {
    const ValidatedRow& v = tune->validated()[i];
    std::vector<std::string> sets = base;
    for (const auto& s : plan::set_flags(v.overrides)) sets.push_back(s);
    sets.push_back("hardware=t4-pcie");
    const double t4 = simulated_step_ms(kPipeline2, sets);
    QVERIFY2(std::abs(v.measured_step.to_ms() - t4) < 1e-3, qPrintable(QString("%1 against %2").arg(v.measured_step.to_ms()).arg(t4)));
    // A ranked row, or the best of a data x pipeline x tensor layout below the top K.
    const tune::Evaluation* searched = nullptr;
    if (v.ranked_row >= 0) {
      searched = &r.ranked[v.ranked_row];
      QCOMPARE(v.overrides, tune->overrides_of(v.ranked_row));
      QCOMPARE(tune->table()->item(v.ranked_row, 5)->text(), table->item(i, 2)->text());
    }
    for (const auto& e : r.layout_best)
      if (!searched && plan::overrides(w.session().knobs().settings, e.config) == v.overrides) searched = &e;
    QVERIFY(searched);
    QCOMPARE(v.predicted_step, searched->step);
    const double error = (v.predicted_step / v.measured_step - 1) * 100;
    QCOMPARE(table->item(i, 3)->text(), QString("%1%2%").arg(error > 0 ? "+" : "").arg(error, 0, 'f', 1));
    if (v.measured_step < tune->validated()[fastest].measured_step) fastest = i;
  }
  for (int i = 0; i < 3; ++i) {
    const ValidatedRow& v = tune->validated()[i];
    const QString changed = QString::fromStdString(plan::describe(v.overrides));
    const QString name = v.ranked_row >= 0 ? QString("#%1: %2").arg(v.ranked_row + 1).arg(changed) : "best of its layout: " + changed;
    QCOMPARE(table->item(i, 0)->text(), i == fastest ? "★ " + name : name);
  }

  // A failing run says why, with its last lines.
  write_stand_in(dir, "echo 'parallax: --set: no such key' >&2\nexit 2");
  QVERIFY(tune->validate(3));
  QVERIFY(finished.wait(60000));
  const auto failed = finished.takeFirst();
  QVERIFY(!failed[0].toBool());
  QVERIFY2(failed[1].toString().contains("exit 2") && failed[1].toString().contains("no such key"),
           qPrintable(failed[1].toString()));

  // Cancel ends the run in progress (a stand-in that would take a minute) at once.
  write_stand_in(dir, "exec sleep 60");
  QVERIFY(tune->validate(3));
  QTest::qWait(200);
  QElapsedTimer clock;
  clock.start();
  tune->cancel();
  QVERIFY(finished.wait(10000));
  QVERIFY2(clock.elapsed() < 5000, qPrintable(QString::number(clock.elapsed())));
  const auto cancelled = finished.takeFirst();
  qunsetenv("PARALLAX_BIN");
  QVERIFY(!cancelled[0].toBool());
  QVERIFY2(cancelled[1].toString().contains("cancelled"), qPrintable(cancelled[1].toString()));
  QVERIFY(tune->validated().empty());
}

QTEST_MAIN(GuiTest)
#include "gui_test.moc"
