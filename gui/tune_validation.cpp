// The Tune tab's "Validate top K for real": fit::run_picks on a worker thread over the ranked
// configurations `parallax tune --validate K` would pick, its progress, and predicted against
// measured per validated configuration (gui/tune_view.hpp).
#include <QFileInfo>
#include <QLabel>
#include <QProgressBar>
#include <QTableWidget>
#include <QtConcurrent>
#include <algorithm>
#include <cmath>

#include "fit/tune_picks.hpp"
#include "gui/run_panel.hpp"
#include "gui/tune_cells.hpp"
#include "gui/tune_view.hpp"
#include "timeline/step_statistic.hpp"

namespace parallax::gui {

using namespace tune_cells;

std::vector<std::string> TuneView::validation_sets() const {
  std::vector<std::string> sets = source_.sets;
  sets.insert(sets.end(), base_sets_.begin(), base_sets_.end());
  return sets;
}

bool TuneView::validate(int count) {
  if (validating() || running() || !result_ || result_->ranked.empty() || !base_scenario_) return false;
  const QString binary = RealRun::parallax_binary();
  if (!QFileInfo(binary).isExecutable()) {
    const QString message =
        "cannot run " + binary + ": no such program (set PARALLAX_BIN to the parallax binary)";
    status_->setText(message);
    emit validation_finished(false, message);
    return false;
  }
  const tune::SearchResult& r = *result_;
  const std::vector<const tune::Evaluation*> candidates =
      fit::validation_candidates(r, *base_scenario_, static_cast<size_t>(count));
  if (candidates.empty()) {
    const QString message = "None of the ranked configurations can run on this machine's executor (they are predict-only).";
    status_->setText(message);
    emit validation_finished(false, message);
    return false;
  }
  // Copies for the worker (a new search replaces result_), and the ranked row each one is (-1: a
  // layout's best below the ranked top K).
  std::vector<tune::Evaluation> chosen;
  std::vector<int> rows;
  for (const tune::Evaluation* e : candidates) {
    chosen.push_back(*e);
    const auto at = std::find_if(r.ranked.begin(), r.ranked.end(), [&](const tune::Evaluation& x) { return x.config == e->config; });
    rows.push_back(at == r.ranked.end() ? -1 : static_cast<int>(at - r.ranked.begin()));
  }
  validated_.clear();
  validation_table_->setRowCount(0);
  validation_table_->hide();
  validation_cancel_ = std::make_shared<std::atomic<bool>>(false);
  const uint64_t generation = ++validation_generation_;
  fit::PickRuns runs;
  runs.self = binary.toStdString();
  runs.scenario = source_.path;
  runs.sets = validation_sets();
  runs.cancel = validation_cancel_.get();
  runs.starting = [this, generation](size_t i, size_t n, const plan::Overrides& changed) {
    const QString what = QString::fromStdString(plan::describe(changed));
    QMetaObject::invokeMethod(
        this, [this, generation, i, n, what] { on_validation_progress(generation, static_cast<int>(i), static_cast<int>(n), what); },
        Qt::QueuedConnection);
  };
  progress_->setRange(0, static_cast<int>(candidates.size()));
  progress_->setValue(0);
  progress_->setFormat("validating %v/%m");
  status_->setText(QString("Validating %1 configurations for real …").arg(candidates.size()));
  validation_.setFuture(QtConcurrent::run([chosen, rows, runs, search = generation_, flag = validation_cancel_] {
    std::vector<const tune::Evaluation*> to_run;
    for (const auto& e : chosen) to_run.push_back(&e);
    ValidationOutcome out;
    out.search = search;
    // Collected as they are measured, so that a run that fails keeps the ones before it.
    std::vector<fit::ValidatedPick> picks;
    fit::PickRuns collecting = runs;
    collecting.measured = [&](const fit::ValidatedPick& p) { picks.push_back(p); };
    try {
      fit::run_picks(to_run, collecting);
    } catch (const std::exception& e) {
      out.error = e.what();
    }
    for (const fit::ValidatedPick& p : picks) {
      const size_t at = static_cast<size_t>(p.evaluation - chosen.data());
      out.rows.push_back({rows[at], p.evaluation->changes, p.predicted, p.measured.undisturbed});
    }
    return out;
  }));
  update_buttons();
  return true;
}

void TuneView::on_validation_progress(uint64_t generation, int started, int count, const QString& what) {
  if (generation != validation_generation_ || !validating()) return;
  progress_->setRange(0, count);
  progress_->setValue(started);
  status_->setText(QString("Validating %1 of %2 for real: %3 (parallax run in a child process) …")
                       .arg(started + 1)
                       .arg(count)
                       .arg(what.isEmpty() ? "as given" : what));
}

void TuneView::on_validation_finished() {
  const ValidationOutcome outcome = validation_.result();
  if (outcome.search != generation_) return;  // a search started since: these rows are not its
  const bool cancelled = validation_cancel_ && validation_cancel_->load();
  progress_->setRange(0, 1);
  progress_->setFormat("%p%");
  progress_->setValue(outcome.error.empty() && !cancelled ? 1 : 0);
  validated_ = outcome.rows;
  show_validation();
  update_buttons();
  QString message;
  if (!outcome.error.empty()) message = "A validation run failed: " + QString::fromStdString(outcome.error);
  else if (cancelled) message = QString("Validation cancelled (%1 configurations measured).").arg(validated_.size());
  if (!message.isEmpty()) {
    status_->setText(message);
    emit validation_finished(false, message);
    return;
  }
  message = QString("%1 configurations validated for real.").arg(validated_.size());
  status_->setText(message);
  emit validation_finished(true, message);
}

void TuneView::show_validation() {
  // The fastest measured is the pick `parallax tune --validate` makes.
  std::vector<plan::Time> measured;
  for (const ValidatedRow& v : validated_) measured.push_back(v.measured_step);
  const int fastest = fit::fastest_index(measured);
  validation_table_->setRowCount(static_cast<int>(validated_.size()));
  for (int i = 0; i < static_cast<int>(validated_.size()); ++i) {
    const ValidatedRow& v = validated_[i];
    const bool both = v.predicted_step > plan::Time() && v.measured_step > plan::Time();
    const double error = both ? timeline::relative_error(v.predicted_step, v.measured_step) * 100 : std::nan("");
    // The same configuration in the ranked table gets its measured time too.
    const int ranked_row = v.ranked_row;
    QString changed = QString::fromStdString(plan::describe(v.overrides));
    // Below the ranked top K: the best of its data x pipeline x tensor layout (tune --validate's rule).
    changed = ranked_row >= 0 ? QString("#%1: %2").arg(ranked_row + 1).arg(changed) : "best of its layout: " + changed;
    if (i == fastest) changed = "★ " + changed;
    validation_table_->setItem(i, 0, item(changed, Qt::AlignLeft | Qt::AlignVCenter));
    validation_table_->setItem(i, 1, item(ms_text(v.predicted_step)));
    validation_table_->setItem(i, 2, item(ms_text(v.measured_step)));
    validation_table_->setItem(
        i, 3,
        item(std::isfinite(error) ? QString("%1%2%").arg(error > 0 ? "+" : "").arg(error, 0, 'f', 1)
                                  : "—"));
    if (ranked_row >= 0) table_->setItem(ranked_row, kMeasured, item(ms_text(v.measured_step)));
  }
  validation_table_->setVisible(!validated_.empty());
}

}  // namespace parallax::gui
