#include "gui/run_panel.hpp"

#include <QCoreApplication>
#include <QFileInfo>
#include <QRegularExpression>
#include <QTimer>

namespace parallax::gui {

RealRun::RealRun(QObject* parent) : QObject(parent) {}

RealRun::~RealRun() {
  if (running()) {
    process_->kill();  // its ranks die with it (PR_SET_PDEATHSIG in the launcher)
    process_->waitForFinished(3000);
  }
}

QString RealRun::parallax_binary() {
  const QString env = qEnvironmentVariable("PARALLAX_BIN");
  if (!env.isEmpty()) return env;
  return QCoreApplication::applicationDirPath() + "/parallax";
}

QStringList RealRun::arguments(const ScenarioSource& source, const std::vector<std::string>& sets, int steps,
                               const QString& trace) {
  QStringList args = {"run"};
  if (!source.path.empty()) args << QString::fromStdString(source.path);
  for (const auto& s : source.sets) args << "--set" << QString::fromStdString(s);
  for (const auto& s : sets) args << "--set" << QString::fromStdString(s);
  args << "--set" << QString("data.steps=%1").arg(steps) << "-o" << trace;
  return args;
}

bool RealRun::start(const ScenarioSource& source, const std::vector<std::string>& sets, int steps) {
  if (running()) return false;
  const QString binary = parallax_binary();
  if (!QFileInfo(binary).isExecutable()) {
    emit finished(false, {}, "cannot run " + binary + ": no such program (set PARALLAX_BIN to the parallax binary)");
    return false;
  }
  dir_ = std::make_unique<QTemporaryDir>();
  trace_ = dir_->filePath("measured.json");
  process_ = std::make_unique<QProcess>();
  process_->setProcessChannelMode(QProcess::MergedChannels);
  connect(process_.get(), &QProcess::readyRead, this, &RealRun::read_output);
  connect(process_.get(), &QProcess::finished, this, &RealRun::on_finished);
  connect(process_.get(), &QProcess::errorOccurred, this, [this](QProcess::ProcessError e) {
    if (e == QProcess::FailedToStart) emit finished(false, {}, "could not start " + process_->program());
  });
  last_lines_.clear();
  cancelled_ = false;
  clock_.start();
  process_->start(binary, arguments(source, sets, steps, trace_));
  emit progress(0, steps, "starting " + binary + " run …");
  return true;
}

void RealRun::cancel() {
  if (!running()) return;
  cancelled_ = true;
  process_->terminate();
  // A run that ignores SIGTERM is killed; its ranks follow their parent.
  QTimer::singleShot(3000, process_.get(), [p = process_.get()] {
    if (p->state() != QProcess::NotRunning) p->kill();
  });
}

void RealRun::read_output() {
  static const QRegularExpression step_re(R"(step (\d+)/(\d+))");
  while (process_->canReadLine()) {
    const QString line = QString::fromUtf8(process_->readLine()).trimmed();
    if (line.isEmpty()) continue;
    last_lines_ << line;
    if (last_lines_.size() > 8) last_lines_.removeFirst();
    const auto m = step_re.match(line);
    emit progress(m.hasMatch() ? m.captured(1).toInt() : -1, m.hasMatch() ? m.captured(2).toInt() : -1, line);
  }
}

void RealRun::on_finished(int code, QProcess::ExitStatus status) {
  read_output();
  const QString seconds = QString::number(clock_.elapsed() / 1000.0, 'f', 1);
  if (cancelled_) {
    emit finished(false, {}, "run cancelled after " + seconds + " s");
  } else if (status == QProcess::NormalExit && code == 0 && QFileInfo::exists(trace_)) {
    emit finished(true, trace_, "run finished in " + seconds + " s");
  } else {
    const QString why = code == 2 ? "the run rejected its input" : "the run failed";
    emit finished(false, {}, QString("%1 (exit code %2): %3").arg(why).arg(code).arg(last_lines_.join("\n")));
  }
}

}  // namespace parallax::gui
