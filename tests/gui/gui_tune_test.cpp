// The GUI's Tune tab: a search as the evaluator predicts it, a row into the knobs, cancel, and
// validating the top picks for real (with a stand-in for the parallax binary).
#include <QCoreApplication>
#include <QElapsedTimer>
#include <QFile>
#include <QSignalSpy>
#include <QTableWidget>
#include <QTemporaryDir>
#include <QtTest/QtTest>

#include "tests/gui/gui_test.hpp"
#include "tune/evaluator.hpp"

using namespace parallax;
using namespace parallax::gui;
using namespace gui_test;

namespace {

// A finished search of the tune tab on a scenario, the knobs as opened.
const tune::SearchResult& tune_search(MainWindow& w) {
  TuneView* tune = w.tune();
  const bool started = tune->start(w.session());
  tune->wait_finished();
  if (!started || !tune->result()) qFatal("the tune search did not run: %s", qPrintable(tune->status()));
  return *tune->result();
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

}  // namespace

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
  // Cancelled once it reports planning or simulating ("planning 12 of 12186 configurations · ..."; the
  // status before that, "Searching the configurations of ...", had passed for it: the search was
  // cancelled while it listed the space).
  QElapsedTimer clock;
  clock.start();
  while (tune->running() && !tune->status().contains(" configurations · ") && clock.elapsed() < 3000) QTest::qWait(5);
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
