#include "gui/plan_session.hpp"

#include <QSaveFile>
#include <QtConcurrent/QtConcurrentRun>
#include <algorithm>

#include "plan/hardware.hpp"
#include "timeline/metrics.hpp"

namespace parallax::gui {

plan::YamlDocument ScenarioSource::document(const std::vector<std::string>& overrides) const {
  std::vector<std::string> all = sets;
  all.insert(all.end(), overrides.begin(), overrides.end());
  return plan::scenario_document(path, all);
}

plan::Scenario with_knobs(const plan::Scenario& base, const KnobValues& knobs) {
  plan::Scenario s = base;
  if (!knobs.hardware.empty()) {
    // The profile alone, as `--set hardware=NAME` would name it.
    plan::YamlDocument doc = plan::YamlDocument::from_text("{}", "hardware");
    doc.apply_override("hardware=" + knobs.hardware);
    s.hardware = plan::resolve_hardware(plan::Field::root(doc)["hardware"]);
  }
  return plan::with_settings(s, knobs.settings);
}

std::shared_ptr<const Prediction> predict(const plan::Scenario& scenario, bool link_samples) {
  auto p = std::make_shared<Prediction>();
  p->plan = plan::resolve_plan(scenario);
  p->run = sim::simulate(p->plan, sim::SimOptions{link_samples});
  p->metrics = sim::compute_metrics(p->plan, p->run);
  p->run.timeline.plan = timeline::summarize(p->plan);  // as `simulate -o` writes it: the rows say where each rank sits
  return p;
}

PlanSession::PlanSession(QObject* parent) : QObject(parent) {
  connect(&watcher_, &QFutureWatcher<Evaluation>::finished, this, &PlanSession::on_evaluated);
}

PlanSession::~PlanSession() { watcher_.waitForFinished(); }

void PlanSession::open_scenario(const std::string& path, const std::vector<std::string>& sets) {
  ScenarioSource source{path, sets, ""};
  const plan::YamlDocument doc = source.document({});
  source.display_name = doc.file();
  auto scenario = std::make_shared<const plan::Scenario>(plan::parse_scenario(doc));
  source_ = std::move(source);
  scenario_ = scenario;
  file_knobs_ = KnobValues{plan::settings_of(*scenario), ""};
  file_hardware_ = scenario->hardware.name;
  set_knobs(file_knobs_);  // also drops a predicted trace opened from a file
}

void PlanSession::set_knobs(const KnobValues& knobs) {
  knobs_ = knobs;
  predicted_file_.reset();  // the knobs now say what is predicted
  ++generation_;
  if (running_) {
    pending_ = true;
    return;
  }
  start_evaluation();
}

void PlanSession::start_evaluation() {
  running_ = true;
  pending_ = false;
  emit busy_changed(true);
  const std::shared_ptr<const plan::Scenario> base = scenario_;
  const KnobValues knobs = knobs_;
  const uint64_t generation = generation_;
  watcher_.setFuture(QtConcurrent::run([base, knobs, generation] {
    Evaluation e;
    e.generation = generation;
    try {
      e.prediction = predict(with_knobs(*base, knobs));
    } catch (const plan::InputError& err) {
      e.error_knob = knob_of_error(err);
      // Under its knob the message speaks for itself; elsewhere it needs its place.
      e.error = e.error_knob.empty() ? err.what() : err.message();
    } catch (const std::exception& err) {
      e.error = std::string("the simulation failed: ") + err.what();
    }
    return e;
  }));
}

void PlanSession::on_evaluated() {
  if (!running_ || !watcher_.isFinished()) return;  // handled by wait_idle(), or a stale signal
  running_ = false;
  const Evaluation e = watcher_.result();
  if (pending_) {
    start_evaluation();  // newer knobs arrived meanwhile: this result is stale
    return;
  }
  emit busy_changed(false);
  if (e.generation != generation_) return;
  error_ = e.error;
  error_knob_ = e.error_knob;
  if (e.prediction) {
    prediction_ = e.prediction;
    update_comparison();
    emit predicted_changed();
  } else {
    emit prediction_failed(QString::fromStdString(error_knob_), QString::fromStdString(error_));
  }
}

void PlanSession::wait_idle() {
  while (running_) {
    watcher_.waitForFinished();
    on_evaluated();
  }
}

std::string PlanSession::open_trace(const std::string& path) {
  const int next_rank = static_cast<int>(imported_.size());
  timeline::LoadedTrace t = timeline::read_trace(path, next_rank);
  if (t.format != "parallax") {  // PyTorch profiler and other Chrome traces: shown on their own rows
    const std::string format = t.format;
    imported_.push_back(std::move(t));
    emit traces_changed();
    return format;
  }
  if (t.kind == "measured") {
    measured_ = std::move(t.timeline);
    measured_step_ = timeline::representative_step(*measured_);
  } else {
    predicted_file_ = std::move(t.timeline);
  }
  update_comparison();
  emit traces_changed();
  return t.kind;
}

void PlanSession::clear_traces() {
  measured_.reset();
  predicted_file_.reset();
  imported_.clear();
  comparison_.reset();
  measured_step_ = -1;
  emit traces_changed();
}

const timeline::Timeline* PlanSession::predicted_timeline() const {
  if (predicted_file_) return &*predicted_file_;
  return prediction_ ? &prediction_->run.timeline : nullptr;
}

std::vector<int> PlanSession::measured_steps() const {
  return measured_ ? timeline::steps_of(*measured_) : std::vector<int>{};
}

void PlanSession::set_measured_step(int step) {
  measured_step_ = step;
  emit traces_changed();
}

void PlanSession::update_comparison() {
  comparison_.reset();
  mismatch_.clear();
  const timeline::Timeline* predicted = predicted_timeline();
  // A prediction from a file stands in for the knobs' until one changes: of another scenario, it
  // is not the plan the knobs show.
  if (predicted_file_ && scenario_ && !predicted_file_->scenario.empty() && predicted_file_->scenario != scenario_->name)
    mismatch_ = "the trace file predicts scenario '" + predicted_file_->scenario + "'; the knobs show '" + scenario_->name + "'";
  if (!measured_ || !predicted || measured_->events.empty() || predicted->events.empty()) return;
  mismatch_.clear();  // set below, with the run
  if (measured_->world_size != predicted->world_size) {
    mismatch_ = "the run has " + std::to_string(measured_->world_size) + " ranks, the plan " +
                std::to_string(predicted->world_size) + ": not a run of this plan, nothing compared";
    return;
  }
  comparison_ = timeline::compare(*predicted, *measured_);
  if (measured_->scenario != predicted->scenario)
    mismatch_ = "the run is of scenario '" + measured_->scenario + "', the prediction of '" + predicted->scenario + "'";
  // The prediction follows the knobs, so another plan than the run's is shown (compare refuses it),
  // with what differs, as compare names it.
  const std::optional<timeline::PlanSummary>& planned = predicted->plan;  // the knobs' plan (predict), or a trace's
  const std::string differ = planned && measured_->plan ? timeline::plan_differences(*planned, *measured_->plan) : "";
  if (!differ.empty()) mismatch_ += (mismatch_.empty() ? "" : "; ") + std::string("another plan than the run's (") + differ + ")";
  const size_t one_side = comparison_->only_predicted.size() + comparison_->only_measured.size();
  if (one_side > 0 && differ.empty())
    mismatch_ += (mismatch_.empty() ? "" : "; ") + std::to_string(one_side) + " actions on one side only: the plans differ";
}

void PlanSession::save_scenario(const std::string& path) const {
  const plan::YamlDocument doc = source_.document(overrides());
  YAML::Emitter out;
  out << doc.root();
  QSaveFile file(QString::fromStdString(path));  // written whole or not at all
  if (!file.open(QIODevice::WriteOnly))
    throw plan::InputError(plan::Location{path}, "cannot write here: " + file.errorString().toStdString());
  file.write("# saved by parallax-gui\n");
  file.write(out.c_str());
  file.write("\n");
  if (!file.commit()) throw plan::InputError(plan::Location{path}, "writing failed: " + file.errorString().toStdString());
}

}  // namespace parallax::gui
