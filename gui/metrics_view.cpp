#include "gui/metrics_view.hpp"

#include <QBarCategoryAxis>
#include <QBarSeries>
#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QGridLayout>
#include <QLineSeries>
#include <QScatterSeries>
#include <QStackedBarSeries>
#include <QVBoxLayout>
#include <QValueAxis>
#include <algorithm>


namespace parallax::gui {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;
constexpr double kGiB = 1024.0 * kMiB;

QChart* new_chart(const QString& title) {
  auto* chart = new QChart;
  chart->setTitle(title);
  chart->setAnimationOptions(QChart::NoAnimation);
  chart->legend()->setAlignment(Qt::AlignBottom);
  chart->setMargins(QMargins(4, 4, 4, 4));
  return chart;
}

QBarSet* bar_set(const QString& name, const std::vector<double>& values, QColor color) {
  auto* set = new QBarSet(name);
  for (double v : values) *set << v;
  set->setColor(color);
  set->setBorderColor(color.darker(130));
  return set;
}

// Category x axis and a value y axis from 0 to a little above the largest value.
void attach_axes(QChart* chart, QAbstractSeries* series, const QStringList& categories, double max_value,
                 const QString& y_title) {
  auto* x = new QBarCategoryAxis;
  x->append(categories);
  auto* y = new QValueAxis;
  y->setRange(0, max_value > 0 ? max_value * 1.15 : 1);
  y->setTitleText(y_title);
  y->applyNiceNumbers();
  chart->addAxis(x, Qt::AlignBottom);
  chart->addAxis(y, Qt::AlignLeft);
  series->attachAxis(x);
  series->attachAxis(y);
}

QStringList to_list(const std::vector<std::string>& v) {
  QStringList out;
  for (const auto& s : v) out << QString::fromStdString(s);
  return out;
}

const QColor kPredicted(120, 144, 156);
const QColor kMeasured(30, 136, 229);

// A size read at a glance: MiB under a GiB (a CPU run's 4 MiB is not "0.00 GiB"), else GiB.
QString memory_text(double mib) {
  return mib < 1024 ? QString("%1 MiB").arg(mib, 0, 'f', 1) : QString("%1 GiB").arg(mib / 1024, 0, 'f', 2);
}

}  // namespace

StageBubbles stage_bubbles(const Prediction& prediction, const timeline::CompareReport* comparison) {
  const plan::Plan& plan = prediction.plan;
  const int p = plan.scenario.parallel.pipeline;
  StageBubbles out;
  std::vector<double> predicted(p, 0), measured(p, 0), predicted_imbalance(p, 0), measured_imbalance(p, 0);
  std::vector<int> count(p, 0);
  // Timeline ranks are tensor groups, numbered as the plan places them (plan::group_of).
  const auto pipeline_rank = [&](int group) { return plan::group_placement(plan.scenario.parallel, group).pipeline_rank; };
  for (const auto& r : prediction.metrics.ranks) {
    const int pr = pipeline_rank(r.rank);
    predicted[pr] += r.bubble_fraction;
    predicted_imbalance[pr] += r.imbalance_fraction;
    count[pr] += 1;
  }
  if (comparison)
    for (const auto& r : comparison->ranks)
      if (r.rank < plan.scenario.parallel.tensor_groups()) {
        measured[pipeline_rank(r.rank)] += r.measured_bubble_fraction;
        measured_imbalance[pipeline_rank(r.rank)] += r.measured_imbalance_fraction;
      }
  // A bar's label stays short (the axis cuts long ones); an interleaved rank's stages go in the
  // axis title, pipeline rank 0's as the example.
  const auto stages_of = [&](int pr) {
    std::string list;
    for (int s : plan.ranks[plan::rank_of(plan.scenario.parallel, {0, pr, 0})].stages) list += (list.empty() ? "" : ", ") + std::to_string(s);
    return list;
  };
  const bool interleaved = plan.scenario.parallel.virtual_stages > 1;
  if (interleaved) out.axis = "pipeline rank (pp 0 holds stages " + stages_of(0) + ")";
  for (int pr = 0; pr < p; ++pr) {
    out.labels.push_back(interleaved ? "pp " + std::to_string(pr) : "stage " + stages_of(pr));
    const auto mean = [&](const std::vector<double>& sums) { return count[pr] ? sums[pr] / count[pr] : 0; };
    out.predicted.push_back(mean(predicted));
    out.predicted_imbalance.push_back(mean(predicted_imbalance));
    if (comparison) out.measured.push_back(mean(measured)), out.measured_imbalance.push_back(mean(measured_imbalance));
  }
  return out;
}

namespace {

// The fullest rank's predicted peak memory, in bytes.
int64_t fullest_rank(const sim::Metrics& m) {
  int64_t peak = 0;
  for (const auto& r : m.ranks) peak = std::max(peak, r.peak_memory);
  return peak;
}

}  // namespace

QString step_time_text(const Prediction* prediction, const timeline::CompareReport* comparison,
                       const timeline::Timeline* predicted_file, const std::string& mismatch) {
  const std::vector<int> file_steps = predicted_file ? timeline::steps_of(*predicted_file) : std::vector<int>{};
  if (!prediction && !comparison && file_steps.empty()) return "Step time: —";
  QString text = "Step time ";
  const plan::Time predicted = comparison           ? comparison->predicted_step
                               : !file_steps.empty() ? timeline::step_times(*predicted_file, file_steps.front()).step_time
                                                     : prediction->metrics.step_time;
  text += QString::number(predicted.to_ms(), 'f', 2) + " ms predicted";
  if (!file_steps.empty()) text += " (the trace file's)";
  // Every tab shows this line: a plan that cannot train says so here, not on Metrics alone.
  if (prediction && file_steps.empty() && !prediction->metrics.fits) {
    const int64_t peak = fullest_rank(prediction->metrics);
    text += QString(", but it DOES NOT FIT: peak %1 of %2 GiB")
                .arg(static_cast<double>(peak) / (1 << 30), 0, 'f', 1)
                .arg(static_cast<double>(prediction->metrics.device_memory) / (1 << 30), 0, 'f', 1);
  }
  if (comparison) {
    const timeline::StepStatistic& m = comparison->measured_step;
    text += QString(", %1 ms measured (undisturbed: p20 of %2 steps; median %3 ms, %4% disturbed), error %5%")
                .arg(m.undisturbed.to_ms(), 0, 'f', 2)
                .arg(m.steps)
                .arg(m.median.to_ms(), 0, 'f', 2)
                .arg(100.0 * m.disturbed_share, 0, 'f', 0)
                .arg(100.0 * comparison->step_error, 0, 'f', 1);
  }
  if (!mismatch.empty()) text += " — WARNING: " + QString::fromStdString(mismatch);
  return text;
}

MetricsView::MetricsView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  summary_ = new QLabel;
  summary_->setTextFormat(Qt::RichText);
  summary_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  summary_->setWordWrap(true);  // a long line (the published runs) must not widen the window
  layout->addWidget(summary_);
  auto* grid = new QGridLayout;
  bubbles_ = new QChartView;
  exposed_ = new QChartView;
  memory_ = new QChartView;
  bandwidth_ = new QChartView;
  int i = 0;
  for (QChartView* v : {bubbles_, exposed_, memory_, bandwidth_}) {
    v->setRenderHint(QPainter::Antialiasing);
    v->setMinimumSize(320, 220);
    grid->addWidget(v, i / 2, i % 2);
    ++i;
  }
  layout->addLayout(grid, 1);
}

void MetricsView::set_chart(QChartView* view, QChart* chart) {
  QChart* old = view->chart();
  view->setChart(chart);
  delete old;  // the view releases, but does not delete, the chart it showed
}

namespace {
// The largest measured training memory of any rank, MiB; negative when the run recorded none.
double measured_memory_peak_mb(const timeline::CompareReport* c) {
  double peak = -1;
  if (c)
    for (const auto& r : c->ranks) peak = std::max(peak, r.measured_memory_mb);
  return peak;
}
}  // namespace

void MetricsView::show_session(const PlanSession& session) {
  const auto prediction = session.prediction();
  const timeline::CompareReport* c = session.comparison() ? &*session.comparison() : nullptr;
  if (!prediction) {
    summary_->setText("No prediction yet.");
    return;
  }
  const sim::Metrics& m = prediction->metrics;
  double exposed = 0;
  for (const auto& r : m.ranks) exposed = std::max(exposed, r.exposed_comm.to_ms());
  const int64_t peak = fullest_rank(m);
  const timeline::Timeline* file = session.predicted_from_file() ? &*session.predicted_from_file() : nullptr;
  QString html = "<b>" + step_time_text(prediction.get(), c, file, session.trace_mismatch()).toHtmlEscaped() + "</b><br>";
  html += QString("Bubble fraction %1 (mean over ranks; imbalance %2 of it, the rest fill and drain)")
              .arg(m.bubble_fraction, 0, 'f', 3)
              .arg(m.imbalance_fraction, 0, 'f', 3);
  if (c) {
    double measured = 0;
    for (const auto& r : c->ranks) measured += r.measured_bubble_fraction;
    if (!c->ranks.empty()) html += QString(", measured %1").arg(measured / c->ranks.size(), 0, 'f', 3);
  }
  html += QString(" &nbsp;·&nbsp; exposed communication up to %1 ms per rank").arg(exposed, 0, 'f', 2);
  html += QString(" &nbsp;·&nbsp; memory peak %1 of %2 GiB %3")
              .arg(memory_text(static_cast<double>(peak) / kMiB))
              .arg(static_cast<double>(m.device_memory) / kGiB, 0, 'f', 1)
              .arg(m.fits ? "(fits)" : "<span style='color:#c62828'><b>(does not fit)</b></span>");
  if (const double measured_mb = measured_memory_peak_mb(c); measured_mb >= 0)
    html += QString(", %1 measured").arg(memory_text(measured_mb));
  // What the step's compute is made of, as the profile's compute model costs it (plan::step_kernels).
  if (const auto k = plan::step_kernels(prediction->plan))
    html += "<br>Compute kernels of " + QString::fromStdString(plan::whose(prediction->plan, *k)) + " over the step (the profile's compute model, without the collectives and slowdowns inside F and B): " +
            QString::fromStdString(plan::describe(*k)).toHtmlEscaped();
  // How the profile's predictions held on published runs: what to expect of the step time above.
  const plan::HardwareProfile& hw = prediction->plan.scenario.hardware;
  if (!hw.published_checks().empty()) {
    QStringList checks;
    for (const plan::PublishedCheck& check : hw.published_checks()) checks << QString::fromStdString(plan::describe(check));
    html += "<br>How " + QString::fromStdString(hw.name).toHtmlEscaped() +
            "'s predictions held on published runs (error = predicted / published - 1; negative: the runs took longer): " +
            checks.join("; ").toHtmlEscaped();
  }
  if (session.predicted_from_file()) html += "<br><i>Predicted timeline from a file; the charts show the knobs' prediction.</i>";
  if (const int tensor = prediction->plan.scenario.parallel.tensor; tensor > 1)
    html += QString("<br><i>A rank below is a tensor group (%1 GPUs that hold and take alike), numbered as the timeline's rows.</i>").arg(tensor);
  summary_->setText(html);
  set_chart(bubbles_, bubble_chart(*prediction, c));
  set_chart(exposed_, exposed_chart(*prediction, c));
  set_chart(memory_, memory_chart(*prediction, c));
  set_chart(bandwidth_, bandwidth_chart(*prediction));
}

QChart* MetricsView::bubble_chart(const Prediction& p, const timeline::CompareReport* c) {
  const StageBubbles b = stage_bubbles(p, c);
  QChart* chart = new_chart(b.axis.empty() ? "Bubble fraction per stage" : "Bubble fraction per pipeline rank");
  auto* series = new QBarSeries;
  // Each bubble beside the imbalance in it (the rest is fill and drain), lighter.
  series->append(bar_set("predicted", b.predicted, kPredicted));
  series->append(bar_set("of it imbalance, predicted", b.predicted_imbalance, kPredicted.lighter(150)));
  double top = *std::max_element(b.predicted.begin(), b.predicted.end());
  if (!b.measured.empty()) {
    series->append(bar_set("measured", b.measured, kMeasured));
    series->append(bar_set("of it imbalance, measured", b.measured_imbalance, kMeasured.lighter(150)));
    top = std::max(top, *std::max_element(b.measured.begin(), b.measured.end()));
  }
  chart->addSeries(series);
  attach_axes(chart, series, to_list(b.labels), std::min(1.0, top), "fraction of the step");
  if (!b.axis.empty()) chart->axes(Qt::Horizontal).front()->setTitleText(QString::fromStdString(b.axis));
  return chart;
}

QChart* MetricsView::exposed_chart(const Prediction& p, const timeline::CompareReport* c) {
  QChart* chart = new_chart("Exposed communication per rank (ms)");
  std::vector<double> predicted, measured;
  std::vector<std::string> labels;
  for (const auto& r : p.metrics.ranks) {
    predicted.push_back(r.exposed_comm.to_ms());
    labels.push_back("rank " + std::to_string(r.rank));
  }
  if (c) {
    measured.assign(predicted.size(), 0);
    for (const auto& r : c->ranks)
      if (r.rank < static_cast<int>(measured.size())) measured[r.rank] = r.measured_exposed_comm.to_ms();
  }
  auto* series = new QBarSeries;
  series->append(bar_set("predicted", predicted, kPredicted));
  if (c) series->append(bar_set("measured", measured, kMeasured));
  chart->addSeries(series);
  double top = 0;
  for (double v : predicted) top = std::max(top, v);
  for (double v : measured) top = std::max(top, v);
  attach_axes(chart, series, to_list(labels), top, "ms");
  return chart;
}

QChart* MetricsView::memory_chart(const Prediction& p, const timeline::CompareReport* c) {
  const bool measured = measured_memory_peak_mb(c) >= 0;
  QChart* chart = new_chart(measured ? "Memory per rank (GiB): predicted bars, measured dots, against the device"
                                     : "Memory per rank (GiB, predicted) against the device");
  const char* const names[] = {"parameters", "gradients", "optimizer", "DDP buckets", "activations", "backward transient", "unsharded (FSDP)", "reserve"};
  const QColor colors[] = {QColor(92, 107, 192), QColor(38, 166, 154), QColor(255, 167, 38), QColor(141, 110, 99),
                           QColor(236, 64, 122), QColor(171, 71, 188), QColor(255, 213, 79), QColor(158, 158, 158)};
  constexpr int kParts = 8;
  std::vector<std::vector<double>> parts(kParts);
  std::vector<std::string> labels;
  double top = static_cast<double>(p.metrics.device_memory) / kGiB;
  // A bar per timeline rank, as the other charts: a tensor group (whose ranks hold alike), its
  // first rank's memory.
  const plan::ParallelSpec& par = p.plan.scenario.parallel;
  for (int group = 0; group < par.tensor_groups(); ++group) {
    const plan::RankPlan& r = p.plan.ranks.at(static_cast<size_t>(plan::rank_of(par, plan::group_placement(par, group))));
    const plan::MemoryEstimate& m = r.memory;
    // What the fullest moment holds: each part less what that moment lacks of it (not at once).
    const int64_t values[] = {m.params,    m.gradients - m.lacks.gradients, m.optimizer, m.buckets, m.activations - m.lacks.activations,
                              m.recompute - m.lacks.transient, m.gathered - m.lacks.gathered, m.reserve};
    for (int i = 0; i < kParts; ++i) parts[i].push_back(static_cast<double>(values[i]) / kGiB);
    top = std::max(top, static_cast<double>(m.total()) / kGiB);
    labels.push_back(std::to_string(group));  // the axis says "rank": the bars are narrow beside the legend
  }
  auto* series = new QStackedBarSeries;
  for (int i = 0; i < kParts; ++i) series->append(bar_set(names[i], parts[i], colors[i]));
  chart->addSeries(series);
  attach_axes(chart, series, to_list(labels), top, "GiB");
  chart->axes(Qt::Horizontal).front()->setTitleText("rank");
  // The device's capacity as a line across all bars.
  auto* capacity = new QLineSeries;
  capacity->setName("device memory");
  const double cap = static_cast<double>(p.metrics.device_memory) / kGiB;
  capacity->append(-0.5, cap);
  capacity->append(static_cast<double>(labels.size()) - 0.5, cap);
  capacity->setPen(QPen(QColor(198, 40, 40), 2, Qt::DashLine));
  chart->addSeries(capacity);
  // Eight parts and the capacity: listed down the side, where their names fit, not elided below.
  chart->legend()->setAlignment(Qt::AlignRight);
  auto* hidden_x = new QValueAxis;
  hidden_x->setRange(-0.5, static_cast<double>(labels.size()) - 0.5);
  hidden_x->setVisible(false);
  chart->addAxis(hidden_x, Qt::AlignTop);
  capacity->attachAxis(hidden_x);
  capacity->attachAxis(chart->axes(Qt::Vertical).front());
  if (measured) {
    // What each rank's training took in the run (timeline::RankMemory), a dot over its bar.
    auto* dots = new QScatterSeries;
    dots->setName("measured");
    dots->setColor(kMeasured);
    dots->setMarkerSize(12);
    for (const auto& r : c->ranks)
      if (r.measured_memory_mb >= 0) dots->append(r.rank, r.measured_memory_mb / 1024.0);
    chart->addSeries(dots);
    dots->attachAxis(hidden_x);
    dots->attachAxis(chart->axes(Qt::Vertical).front());
  }
  return chart;
}

// Drawn sample by sample, a step of thousands of short transfers at the link's full rate filled
// the chart as a solid block at that rate, where the link's mean use was 2%.
std::vector<double> mean_per_bin(const std::vector<std::pair<plan::Time, double>>& samples, double end_ms, int bins) {
  std::vector<double> out(static_cast<size_t>(bins), 0.0);
  if (end_ms <= 0) return out;
  const double width = end_ms / bins;
  for (size_t i = 0; i < samples.size(); ++i) {
    const double from = samples[i].first.to_ms(), to = i + 1 < samples.size() ? samples[i + 1].first.to_ms() : end_ms;
    const double gbps = samples[i].second;
    if (gbps <= 0 || to <= from) continue;
    for (int b = std::max(0, static_cast<int>(from / width)); b < bins && b * width < to; ++b) {
      const double overlap = std::min(to, (b + 1) * width) - std::max(from, b * width);
      if (overlap > 0) out[static_cast<size_t>(b)] += gbps * overlap / width;
    }
  }
  return out;
}

QChart* MetricsView::bandwidth_chart(const Prediction& p) {
  constexpr int kBins = 200;
  QChart* chart = new_chart("Link bandwidth (GB/s predicted, mean per 1/200 of the step)");
  std::vector<const sim::LinkUsage*> links;
  for (const auto& l : p.run.links)
    if (l.bytes > 0) links.push_back(&l);
  std::sort(links.begin(), links.end(), [](auto* a, auto* b) { return a->bytes > b->bytes; });
  if (links.size() > 5) links.resize(5);  // the busiest; the rest would be unreadable
  const double end_ms = p.metrics.step_time.to_ms();
  double top = 0;
  auto* x = new QValueAxis;
  x->setRange(0, std::max(end_ms, 1e-3));
  x->setTitleText("ms into the step");
  x->setLabelFormat(end_ms >= 100 ? "%.0f" : "%.3g");  // whole milliseconds where the step is long: "15852", not "158..."
  auto* y = new QValueAxis;
  chart->addAxis(x, Qt::AlignBottom);
  chart->addAxis(y, Qt::AlignLeft);
  for (const auto* l : links) {
    auto* s = new QLineSeries;
    // Cut in the middle, where long names are alike: "node0/dev0 gloo-loopback up" and "... down".
    const QString name = QString::fromStdString(l->name);
    s->setName(name.size() > 28 ? name.left(13) + "…" + name.right(14) : name);
    const std::vector<double> mean = mean_per_bin(l->samples, end_ms, kBins);
    for (int b = 0; b < kBins; ++b) {  // each bin's mean holds across it: drawn as steps
      s->append(b * end_ms / kBins, mean[static_cast<size_t>(b)]);
      s->append((b + 1) * end_ms / kBins, mean[static_cast<size_t>(b)]);
      top = std::max(top, mean[static_cast<size_t>(b)]);
    }
    chart->addSeries(s);
    s->attachAxis(x);
    s->attachAxis(y);
  }
  if (links.empty()) chart->setTitle("Link bandwidth: no link carries traffic in this plan");
  // Link names differ at their ends ("node0/dev0 gloo-loopback up" and "... down"): listed down
  // the side whole, not elided alike below.
  chart->legend()->setAlignment(Qt::AlignRight);
  y->setRange(0, top > 0 ? top * 1.1 : 1);
  y->applyNiceNumbers();
  y->setTitleText("GB/s");
  return chart;
}

}  // namespace parallax::gui
