#pragma once
// "Run for real": runs the current configuration with `parallax run` as a child process (the GUI
// never links the executor), follows its progress from the ranks' "step k/K" lines, can cancel it,
// and hands over the measured trace when it is done.
#include <QElapsedTimer>
#include <QObject>
#include <QProcess>
#include <QStringList>
#include <QTemporaryDir>
#include <memory>

#include "gui/plan_session.hpp"

namespace parallax::gui {

class RealRun : public QObject {
  Q_OBJECT
 public:
  explicit RealRun(QObject* parent = nullptr);
  ~RealRun() override;

  /// The `parallax` binary: $PARALLAX_BIN, else the one beside this program.
  static QString parallax_binary();
  /// The arguments `parallax run` gets for a session's scenario and knobs.
  /// `sets`: the --set values that give the knobs from the scenario (PlanSession::overrides).
  static QStringList arguments(const ScenarioSource& source, const std::vector<std::string>& sets, int steps,
                               const QString& trace);

  /// Starts a run of `steps` optimizer steps; false (with a message) when one is already running.
  bool start(const ScenarioSource& source, const std::vector<std::string>& sets, int steps);
  void cancel();
  bool running() const { return process_ && process_->state() != QProcess::NotRunning; }

 signals:
  void progress(int step, int steps, QString line);
  /// ok: the run finished and wrote `trace`; otherwise `message` says why not.
  void finished(bool ok, QString trace, QString message);

 private:
  void read_output();
  void on_finished(int code, QProcess::ExitStatus status);

  std::unique_ptr<QProcess> process_;
  std::unique_ptr<QTemporaryDir> dir_;
  QString trace_;
  QStringList last_lines_;
  QElapsedTimer clock_;
  bool cancelled_ = false;
};

}  // namespace parallax::gui
