// The Tune tab's "Validate top K for real": `parallax tune --validate K --json` as a child process,
// its progress, and predicted against measured per validated configuration (gui/tune_view.hpp).
#include <QFileInfo>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QProgressBar>
#include <QRegularExpression>
#include <QTableWidget>
#include <algorithm>
#include <cmath>

#include "gui/run_panel.hpp"
#include "gui/tune_cells.hpp"
#include "gui/tune_view.hpp"

namespace parallax::gui {

using namespace tune_cells;

namespace {

// A JSON value as the overrides write it: "8", "0.5", "true", "[2, 2]", "1f1b".
std::string value_text(const QJsonValue& v) {
  if (v.isString()) return v.toString().toStdString();
  if (v.isBool()) return v.toBool() ? "true" : "false";
  if (v.isDouble()) return plan::number_text(v.toDouble());
  if (v.isArray()) {
    std::string s = "[";
    const QJsonArray a = v.toArray();
    for (qsizetype i = 0; i < a.size(); ++i) s += (i ? ", " : "") + value_text(a[i]);
    return s + "]";
  }
  return "";
}

plan::Overrides sorted(plan::Overrides o) {
  std::sort(o.begin(), o.end());
  return o;
}

}  // namespace

std::vector<ValidatedRow> parse_validated(const QByteArray& json, QString* error) {
  QJsonParseError parse;
  const QJsonDocument doc = QJsonDocument::fromJson(json, &parse);
  if (!doc.isObject()) {
    *error = parse.error != QJsonParseError::NoError
                 ? "its output is not JSON: " + parse.errorString()
                 : QString("its output is not a JSON object");
    return {};
  }
  const QJsonValue validated = doc.object().value("validated");
  if (!validated.isArray()) {
    *error = "its output has no validated[] array";
    return {};
  }
  std::vector<ValidatedRow> out;
  for (const QJsonValue& v : validated.toArray()) {
    const QJsonObject o = v.toObject();
    ValidatedRow row;
    const QJsonObject overrides = o.value("overrides").toObject();
    for (auto it = overrides.begin(); it != overrides.end(); ++it)
      row.overrides.emplace_back(it.key().toStdString(), value_text(it.value()));
    auto time_of = [&](const char* key) {
      const QJsonValue ms = o.value(key);
      return ms.isDouble() && ms.toDouble() > 0 ? plan::Time::ms(ms.toDouble()) : plan::Time();
    };
    row.predicted_step = time_of("predicted_step_ms");
    row.measured_step = time_of("measured_step_ms");
    out.push_back(std::move(row));
  }
  error->clear();
  return out;
}

QStringList TuneView::validate_arguments(const ScenarioSource& source, const std::vector<std::string>& sets,
                                         int count) {
  QStringList args = {"tune"};
  if (!source.path.empty()) args << QString::fromStdString(source.path);
  for (const auto& s : source.sets) args << "--set" << QString::fromStdString(s);
  for (const auto& s : sets) args << "--set" << QString::fromStdString(s);
  args << "--validate" << QString::number(count) << "--json";
  return args;
}

bool TuneView::validate(int count) {
  if (validating()) return false;
  // The configuration the shown rows are relative to; before any search, the knobs as they are.
  if (!result_ && !session_) return false;
  const ScenarioSource source = result_ ? source_ : session_->source();
  const KnobValues knobs = result_ ? base_knobs_ : session_->knobs();
  const std::vector<std::string> sets = result_ ? base_sets_ : session_->overrides();
  const QString binary = RealRun::parallax_binary();
  if (!QFileInfo(binary).isExecutable()) {
    const QString message =
        "cannot run " + binary + ": no such program (set PARALLAX_BIN to the parallax binary)";
    status_->setText(message);
    emit validation_finished(false, message);
    return false;
  }
  if (!result_) {
    source_ = source;
    base_knobs_ = knobs;
    base_sets_ = sets;
  }
  validated_.clear();
  validation_stdout_.clear();
  validation_last_line_.clear();
  validation_cancelled_ = false;
  validation_count_ = count;
  process_ = std::make_unique<QProcess>();
  connect(process_.get(), &QProcess::readyReadStandardError, this,
          &TuneView::read_validation_progress);
  connect(process_.get(), &QProcess::readyReadStandardOutput, this,
          [this] { validation_stdout_ += process_->readAllStandardOutput(); });
  connect(process_.get(), &QProcess::finished, this, &TuneView::on_validation_finished);
  connect(process_.get(), &QProcess::errorOccurred, this, [this](QProcess::ProcessError e) {
    if (e != QProcess::FailedToStart) return;
    const QString message = "could not start " + process_->program();
    status_->setText(message);
    update_buttons();
    emit validation_finished(false, message);
  });
  const QStringList args = validate_arguments(source, sets, count);
  process_->start(binary, args);
  progress_->setRange(0, 0);
  progress_->setFormat("validating %p%");
  status_->setText(
      QString("Validating the top %1 for real: parallax %2 …").arg(count).arg(args.join(' ')));
  update_buttons();
  return true;
}

void TuneView::read_validation_progress() {
  static const QRegularExpression lines("[\r\n]");
  static const QRegularExpression fraction(R"((\d+)/(\d+))");
  static const QRegularExpression started(R"(running (\d+) of \d+ for real)");
  const QString text = QString::fromUtf8(process_->readAllStandardError());
  for (const QString& part : text.split(lines, Qt::SkipEmptyParts)) {
    const QString line = part.trimmed();
    if (line.isEmpty()) continue;
    validation_last_line_ = line;
    // "tune: running 2 of 3 for real (...)": two of the configurations started.
    if (const auto r = started.match(line); r.hasMatch() && validation_count_ > 0) {
      progress_->setRange(0, validation_count_);
      progress_->setValue(std::min(r.captured(1).toInt() - 1, validation_count_));
      continue;
    }
    const auto m = fraction.match(line);
    if (m.hasMatch() && m.captured(2).toInt() > 0) {
      progress_->setRange(0, m.captured(2).toInt());
      progress_->setValue(std::min(m.captured(1).toInt(), m.captured(2).toInt()));
    }
  }
  if (!validation_last_line_.isEmpty()) status_->setText("parallax tune: " + validation_last_line_);
}

void TuneView::on_validation_finished(int code, QProcess::ExitStatus exit) {
  read_validation_progress();
  validation_stdout_ += process_->readAllStandardOutput();
  progress_->setRange(0, 1);
  progress_->setFormat("%p%");
  progress_->setValue(0);
  update_buttons();
  QString message;
  if (validation_cancelled_) {
    message = "validation cancelled";
  } else if (exit != QProcess::NormalExit || code != 0) {
    message = QString("parallax tune %1 (exit code %2): %3")
                  .arg(code == 2 ? "rejected its input" : "failed")
                  .arg(code)
                  .arg(validation_last_line_);
  } else {
    QString error;
    validated_ = parse_validated(validation_stdout_, &error);
    if (!error.isEmpty()) message = "parallax tune: " + error;
  }
  if (!message.isEmpty()) {
    status_->setText(message);
    emit validation_finished(false, message);
    return;
  }
  progress_->setValue(1);
  show_validation();
  message = QString("%1 configurations validated for real.").arg(validated_.size());
  status_->setText(message);
  emit validation_finished(true, message);
}

void TuneView::show_validation() {
  // The fastest measured is the pick `parallax tune --validate` makes.
  int fastest = -1;
  for (int i = 0; i < static_cast<int>(validated_.size()); ++i)
    if (validated_[i].measured_step > plan::Time() &&
        (fastest < 0 || validated_[i].measured_step < validated_[fastest].measured_step))
      fastest = i;
  validation_table_->setRowCount(static_cast<int>(validated_.size()));
  for (int i = 0; i < static_cast<int>(validated_.size()); ++i) {
    const ValidatedRow& v = validated_[i];
    const bool both = v.predicted_step > plan::Time() && v.measured_step > plan::Time();
    const double error = both ? (v.predicted_step / v.measured_step - 1) * 100 : std::nan("");
    // The same configuration in the ranked table gets its measured time too, and names the
    // overrides in the tuner's order (JSON objects come back sorted by key).
    int ranked_row = -1;
    for (int row = 0; result_ && row < static_cast<int>(result_->ranked.size()); ++row)
      if (sorted(overrides_of(row)) == sorted(v.overrides)) ranked_row = row;
    QString changed = QString::fromStdString(
        plan::describe(ranked_row >= 0 ? overrides_of(ranked_row) : v.overrides));
    if (ranked_row >= 0) changed = QString("#%1: %2").arg(ranked_row + 1).arg(changed);
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
