// parallax-gui tests (Qt Test, offscreen platform). The numbers shown are checked against the
// simulator run directly, analytic counts, and hand-made traces whose errors are known.
#include <QCheckBox>
#include <QComboBox>
#include <QCoreApplication>
#include <QDoubleSpinBox>
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
#include <algorithm>
#include <numeric>
#include <random>
#include <set>
#include <tuple>

#include "gui/metrics_view.hpp"
#include "gui/run_panel.hpp"
#include "gui/sweep.hpp"
#include "gui/timeline_model.hpp"
#include "sim/metrics.hpp"
#include "sim/simulator.hpp"
#include "tests/gui/gui_test.hpp"
#include "tests/test_util.hpp"
#include "timeline/trace_reader.hpp"
#include "timeline/trace_writer.hpp"
#include "tune/evaluator.hpp"

using namespace parallax;
using namespace parallax::gui;
using namespace gui_test;

double gui_test::simulated_step_ms(const std::string& scenario, const std::vector<std::string>& sets) {
  const plan::Plan p = plan::resolve_plan(plan::load_scenario(scenario, sets));
  const sim::SimRun run = sim::simulate(p);
  return sim::compute_metrics(p, run).step_time.to_ms();
}

void gui_test::settle(MainWindow& w) {
  w.session().wait_idle();
  QCoreApplication::processEvents();
}

void gui_test::open(MainWindow& w, const std::string& scenario) {
  w.open_scenario(scenario);
  settle(w);
}

namespace {

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

}  // namespace


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

void GuiTest::a_gpu_plan_says_how_its_profile_held_on_published_runs() {
  MainWindow w;
  open(w, kSource + "/scenarios/llama-3.1-70b-64xH100.yaml");
  const QString summary = w.metrics()->summary_text();
  QVERIFY2(summary.contains("How h100-nvlink-ib's predictions held on published runs"), qPrintable(summary));
  // The profile's own first entry as plan::describe words it (its figures: tests/plan/published_check_test.cpp).
  const plan::PublishedCheck megatron = test::builtin_profile("h100-nvlink-ib").published_check.at(0);
  QVERIFY(megatron.runs_of == "Megatron-LM and NeMo");
  QVERIFY2(summary.contains(QString::fromStdString(plan::describe(megatron))), qPrintable(summary));
  // What the step's compute is made of, in simulate's words (its figures: tests/cli).
  const plan::Plan p = plan::resolve_plan(plan::load_scenario(kSource + "/scenarios/llama-3.1-70b-64xH100.yaml", {}));
  const auto kernels = plan::step_kernels(p);
  QVERIFY(kernels.has_value());
  QVERIFY2(summary.contains(QString("Compute kernels of pipeline rank %1 over the step").arg(kernels->pipeline_rank)), qPrintable(summary));
  QVERIFY2(summary.contains(QString::fromStdString(plan::describe(*kernels))), qPrintable(summary));
  // The default scenario's T4s: no published runs, nothing said; no compute model, no kernels.
  open(w, "");
  QVERIFY2(!w.metrics()->summary_text().contains("published runs"), qPrintable(w.metrics()->summary_text()));
  QVERIFY2(!w.metrics()->summary_text().contains("Compute kernels"), qPrintable(w.metrics()->summary_text()));
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
  QVERIFY(w.session().trace_mismatch().empty());
}

// A run of another plan is said to be one, in the heading, as `parallax compare` warns (or exits 2).
void GuiTest::a_run_of_another_plan_is_flagged() {
  QTemporaryDir dir;
  MainWindow w;
  open(w, kDdp);
  timeline::Timeline other = w.session().prediction()->run.timeline;  // 4 ranks
  open(w, kPipeline2);                                                 // 2 ranks
  w.open_trace(write_scaled_trace(other, 1.0, dir));
  settle(w);
  QVERIFY(!w.session().comparison());
  QVERIFY2(QString::fromStdString(w.session().trace_mismatch()).contains("4 ranks, the plan 2"), w.session().trace_mismatch().c_str());
  QVERIFY(w.metrics()->summary_text().contains("WARNING"));
  // The same size, another scenario's name.
  timeline::Timeline renamed = w.session().prediction()->run.timeline;
  renamed.scenario = "another";
  w.session().clear_traces();
  w.open_trace(write_scaled_trace(renamed, 1.0, dir));
  settle(w);
  QVERIFY(w.session().comparison());
  QVERIFY2(QString::fromStdString(w.session().trace_mismatch()).contains("scenario 'another'"), w.session().trace_mismatch().c_str());
  // A run whose plan had other chunks: what differs is named, as compare names it.
  timeline::Timeline chunked = w.session().prediction()->run.timeline;
  chunked.plan = timeline::summarize(w.session().prediction()->plan);
  chunked.plan->document["chunks"] = 4;  // what a trace carries
  w.session().clear_traces();
  w.open_trace(write_scaled_trace(chunked, 1.0, dir));
  settle(w);
  QVERIFY2(QString::fromStdString(w.session().trace_mismatch()).contains("another plan than the run's (chunks: predicted 8, run 4)"),
           w.session().trace_mismatch().c_str());
  // A prediction from a file of another scenario stands in for the knobs' plan: said.
  timeline::Timeline foreign = w.session().prediction()->run.timeline;
  foreign.scenario = "another";
  w.session().clear_traces();
  const std::string foreign_path = dir.filePath("foreign-predicted.json").toStdString();
  {
    std::ofstream out(foreign_path);
    timeline::write_chrome_trace(foreign, out);
  }
  QCOMPARE(QString::fromStdString(w.open_trace(foreign_path)), QString("predicted"));
  settle(w);
  QVERIFY2(QString::fromStdString(w.session().trace_mismatch()).contains("the trace file predicts scenario 'another'"),
           w.session().trace_mismatch().c_str());
  QVERIFY(w.step_time_shown().contains("WARNING"));
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

// Llama 3.1 70B on 64 GPUs, tensor 8, data 2, pipeline 4 in Megatron's order (tp-dp-pp): the
// timeline's rank g is the tensor group of GPU 8g, data index (8g / 8) % 2, pipeline 8g / 16.
// Interleaved by 5, pipeline rank 0 holds stages 0, 4, 8, 12 and 16.
void GuiTest::rows_and_bars_say_where_each_rank_sits() {
  MainWindow w;
  open(w, kSource + "/scenarios/llama-3.1-70b-64xH100.yaml");
  std::set<std::string> labels;
  for (const auto& row : w.timeline()->model().rows()) labels.insert(row.label);
  for (int g = 0; g < 8; ++g) {
    const std::string label = "rank " + std::to_string(g) + " (pp " + std::to_string(8 * g / 16) + ", dp " + std::to_string(g % 2) + ") compute";
    QVERIFY2(labels.count(label), label.c_str());
  }
  const StageBubbles b = stage_bubbles(*w.session().prediction(), nullptr);
  QCOMPARE(b.labels, (std::vector<std::string>{"pp 0", "pp 1", "pp 2", "pp 3"}));
  QCOMPARE(b.axis, std::string("pipeline rank (pp 0 holds stages 0, 4, 8, 12, 16)"));
  // The last pipeline rank holds the output layer and the loss: the others' bubbles are mostly
  // waiting for it, its own is the schedule's fill and drain.
  QCOMPARE(b.predicted_imbalance.size(), size_t{4});
  QVERIFY(b.predicted_imbalance[3] < 1e-3);
  for (int pr = 0; pr < 3; ++pr) QVERIFY(b.predicted_imbalance[pr] > 0.5 * b.predicted[pr]);
  // One stage per rank: the bars are the stages, as before.
  open(w, kPipeline2);
  QCOMPARE(stage_bubbles(*w.session().prediction(), nullptr).labels, (std::vector<std::string>{"stage 0", "stage 1"}));
  QVERIFY(w.timeline()->model().rows().front().label == "rank 0 (pp 0) compute");
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

// Llama 3.1 70B on 64 H100s at 1-16 chunks holds more than 80 GB a rank: such cells are marked,
// and the star goes to the fastest that fits, as simulate says of each; the headline every tab
// shows says when the plan on the knobs does not fit.
void GuiTest::sweep_never_stars_a_plan_that_does_not_fit() {
  const std::string llama = kSource + "/scenarios/llama-3.1-70b-64xH100.yaml";
  MainWindow w;
  open(w, llama);
  SweepView* sweep = w.sweep();
  sweep->start(SweepKind::chunks_by_bucket_cap, w.session());
  sweep->wait_finished();
  const SweepGrid& g = sweep->grid();
  int fitting = 0, over = 0;
  for (int r = 0; r < g.rows(); ++r) {  // the first column: the bucket size moves no memory
    const int i = r * g.columns();
    const plan::Plan p = plan::resolve_plan(plan::load_scenario(llama, g.knobs_of(i, w.session().knobs()).overrides(w.session().scenario_knobs().settings)));
    const bool fits = sim::compute_metrics(p, sim::simulate(p)).fits;
    QCOMPARE(g.cells[i].fits, fits);
    (fits ? fitting : over) += 1;
  }
  QVERIFY(fitting > 0 && over > 0);
  const int best = g.best();
  QVERIFY(best >= 0 && g.cells[best].fits);
  for (const SweepCell& c : g.cells)
    if (c.valid() && c.fits) QVERIFY(g.cells[best].step <= c.step);
  w.knob_panel()->chunks_box()->setValue(16);
  settle(w);
  QVERIFY(!w.session().prediction()->metrics.fits);
  QVERIFY(w.step_time_shown().contains("DOES NOT FIT"));
}

// The link chart's points are each span's mean: 50 GB/s for the first 1 ms of 10 is 50 in the
// first of ten spans; a burst across a span's edge splits by time; the spans' mean is the link's.
void GuiTest::link_chart_draws_each_spans_mean() {
  using plan::Time;
  const std::vector<std::pair<Time, double>> burst = {{Time::ns(0), 50.0}, {Time::ns(1'000'000), 0.0}};
  const auto a = mean_per_bin(burst, 10.0, 10);
  QCOMPARE(a[0], 50.0);
  QCOMPARE(a[1], 0.0);
  const std::vector<std::pair<Time, double>> across = {{Time::ns(500'000), 20.0}, {Time::ns(1'500'000), 0.0}};
  const auto b = mean_per_bin(across, 10.0, 10);
  QCOMPARE(b[0], 10.0);
  QCOMPARE(b[1], 10.0);
  QCOMPARE(b[2], 0.0);
  const std::vector<std::pair<Time, double>> held = {{Time::ns(0), 4.0}};  // the last sample holds to the end
  const auto c = mean_per_bin(held, 10.0, 5);
  QCOMPARE(std::accumulate(c.begin(), c.end(), 0.0) / c.size(), 4.0);
}

// The grid holds the knobs' own chunks and split, however many the batch's divisors or the
// splits around it: its best cell is then never slower than the plan one has.
void GuiTest::sweep_axes_hold_the_knobs_own_values() {
  auto grid = [](SweepKind kind, const std::vector<std::string>& sets) {
    const plan::Plan p = plan::resolve_plan(plan::load_scenario(kGpipe, sets));
    KnobValues knobs;
    knobs.settings = plan::settings_of(p.scenario);
    return std::make_tuple(make_sweep(kind, p, knobs), knobs, p.partition);
  };
  // 720 has 30 divisors; the 12 shown are those around 120, not 1 to 24.
  const auto [chunks, k1, split1] = grid(SweepKind::chunks_by_bucket_cap, {"data.batch_size=720", "parallel.chunks=120"});
  QCOMPARE(chunks.rows(), 12);
  QVERIFY(std::count(chunks.y.values.begin(), chunks.y.values.end(), "120") == 1);
  QVERIFY(chunks.cell_of(k1) >= 0);
  // Two stages of 42 layers, balanced: the split the plan resolved is a column, and the knobs'
  // cell is on it though their value reads "balanced".
  const auto [two, k2, split2] = grid(SweepKind::chunks_by_partition_len, {"model.layers=40", "parallel.pipeline=2", "parallel.chunks=4"});
  QCOMPARE(two.columns(), 16);
  const std::string resolved = plan::partition_text(plan::partition_of(split2));
  QCOMPARE(two.x.values.at(static_cast<size_t>(two.x.current)), resolved);
  QCOMPARE(two.cell_of(k2) % two.columns(), two.x.current);
  // Twenty stages: 38 splits one layer away; 15 of them and the current one, labelled apart.
  const auto [many, k3, split3] =
      grid(SweepKind::chunks_by_partition_len, {"model.layers=40", "parallel.pipeline=20", "parallel.chunks=20", "data.batch_size=20"});
  QCOMPARE(many.columns(), 16);
  QVERIFY(many.x.current >= 0);
  QCOMPARE(many.x.label(many.x.current), std::string("current"));
  QCOMPARE(std::set<std::string>(many.x.labels.begin(), many.x.labels.end()).size(), many.x.labels.size());
  QVERIFY(many.cell_of(k3) >= 0);
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

// Zoomed out, a pixel holds many actions: it takes the kind that keeps it busy longest. Each 10 us
// here holds a 2 us F and then an 8 us B, 100 to a pixel; the first into the pixel (F) had taken
// every one, so the row read as all forward.
void GuiTest::a_pixel_of_many_actions_takes_the_busiest_kind() {
  timeline::Timeline t;
  t.kind = "predicted";
  for (int i = 0; i < 100'000; ++i) {
    timeline::TimelineEvent f, b;
    f.lane = b.lane = timeline::Lane::compute;
    f.action = schedule::Action{schedule::ActionKind::F, 0, i, -1};
    b.action = schedule::Action{schedule::ActionKind::B, 0, i, -1};
    f.start = plan::Time::ns(i * 10'000);
    f.end = b.start = plan::Time::ns(i * 10'000 + 2'000);
    b.end = plan::Time::ns(i * 10'000 + 10'000);
    t.events.push_back(f);
    t.events.push_back(b);
  }
  TimelineModel model;
  model.set_predicted(&t);
  TimeAxis axis;
  axis.width_px = 1000;
  axis.fit(0, 1'000'000'000);
  size_t forward = 0, backward = 0;
  for (const DrawItem& item : model.layout(axis, 0, 0))
    (model.bars()[item.bar].kind == BarKind::forward ? forward : backward) += 1;
  QVERIFY2(backward >= 900 && forward == 0, qPrintable(QString("%1 forward, %2 backward pixels").arg(forward).arg(backward)));
  // Zoomed in so that each action is wide: every one drawn, in its own kind.
  axis.fit(0, 100'000);
  forward = backward = 0;
  for (const DrawItem& item : model.layout(axis, 0, 0))
    (model.bars()[item.bar].kind == BarKind::forward ? forward : backward) += 1;
  QVERIFY(forward >= 10 && backward >= 10);
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
  // A prediction is no measured run: given as --measured it would overlay nothing, silently.
  const QString predicted = dir.filePath("predicted.json");
  {
    const plan::Plan p = plan::resolve_plan(plan::load_scenario(kDdp, {}));
    std::ofstream out(predicted.toStdString());
    timeline::write_chrome_trace(sim::simulate(p).timeline, out);
  }
  const QList<QStringList> cases = {
      {"--set", "parallel.chunks=7"},
      {"--view", "flamegraph"},
      {QString::fromStdString(kSource + "/no-such-scenario.yaml")},
      {"--measured", dir.filePath("missing.json")},
      {QString::fromStdString(kDdp), "--measured", predicted},
      {QString::fromStdString(kDdp), "--measured", predicted, "--measured", predicted},  // one run at a time
      {"--sweep", "chunks-partition"},  // a sweep without its view would be ignored
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

void GuiTest::every_knob_has_an_editor_that_reads_back() {
  // Each knob of the table gets an editor of its type (none a bare widget, which would keep the
  // scenario's value whatever the user wants), and a list typed into recompute_modules' is read.
  MainWindow w;
  open(w, kPipeline2);
  for (const plan::Knob& k : plan::knobs()) {
    QWidget* e = w.knob_panel()->editor(k.key);
    QVERIFY2(e && (qobject_cast<QSpinBox*>(e) || qobject_cast<QDoubleSpinBox*>(e) || qobject_cast<QCheckBox*>(e) ||
                   qobject_cast<QComboBox*>(e)),
             k.key.c_str());
  }
  auto* modules = qobject_cast<QComboBox*>(w.knob_panel()->editor("parallel.recompute_modules"));
  QVERIFY(modules && modules->isEditable());
  QCOMPARE(modules->currentText(), QString("[core_attn]"));
  modules->setCurrentText("[core_attn, layernorm]");
  QCOMPARE(w.knob_panel()->knobs().settings.recompute_modules, plan::kRecomputeCoreAttn | plan::kRecomputeLayernorm);
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
  QVERIFY(fullest < (int64_t{1} << 30));  // a CPU run's few MiB: shown in MiB, not as "0.00 GiB"
  const QString memory = QString("%1 MiB measured").arg(static_cast<double>(fullest) / (1024.0 * 1024), 0, 'f', 1);
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

QTEST_MAIN(GuiTest)
