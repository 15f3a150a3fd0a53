#include "gui/screenshot.hpp"

#include <QApplication>
#include <QPixmap>
#include <QSaveFile>
#include <cstdio>

#include "gui/main_window.hpp"
#include "plan/error.hpp"

namespace parallax::gui {

void classify_files(const QStringList& files, GuiArgs* args) {
  for (const QString& f : files) {
    if (f.endsWith(".yaml", Qt::CaseInsensitive) || f.endsWith(".yml", Qt::CaseInsensitive)) {
      if (!args->scenario.empty())
        throw plan::InputError(plan::Location{f.toStdString()},
                               "a second scenario (already have " + args->scenario + "); give one scenario and any traces");
      args->scenario = f.toStdString();
    } else {
      args->traces.push_back(f.toStdString());
    }
  }
}

void check_view(const GuiArgs& args) {
  const QStringList views = {"timeline", "metrics", "sweep", "tune"};
  if (!views.contains(args.view))
    throw plan::InputError(plan::Location{"--view"},
                           "unknown view '" + args.view.toStdString() + "'; use timeline, metrics, sweep or tune");
  if (args.sweep != "chunks-bucket" && args.sweep != "chunks-partition")
    throw plan::InputError(plan::Location{"--sweep"},
                           "unknown sweep '" + args.sweep.toStdString() + "'; use chunks-bucket or chunks-partition");
}

void open_traces(MainWindow& window, const GuiArgs& args) {
  for (const auto& t : args.traces) window.open_trace(t);
  if (args.measured.empty()) return;
  const std::string kind = window.open_trace(args.measured);
  if (kind != "measured")
    throw plan::InputError(plan::Location{args.measured}, "not a measured run (a " + kind +
                                                              " trace): --measured takes what `parallax run -o` writes; give "
                                                              "another trace without --measured to open it beside the plan");
}

void write_screenshot(const GuiArgs& args) {
  check_view(args);
  if (!args.screenshot.endsWith(".png", Qt::CaseInsensitive))
    throw plan::InputError(plan::Location{"--screenshot"}, "the screenshot is a PNG: give a file name ending in .png");

  MainWindow window;
  window.resize(args.width, args.height);
  window.open_scenario(args.scenario, args.sets);
  open_traces(window, args);
  window.session().wait_idle();
  if (!window.session().error().empty())
    throw plan::InputError(plan::Location{window.session().source().display_name}, window.session().error());
  window.show_view(args.view);
  window.show();
  QApplication::processEvents();
  if (args.view == "sweep") {
    window.sweep()->start(args.sweep == "chunks-bucket" ? SweepKind::chunks_by_bucket_cap : SweepKind::chunks_by_partition_len,
                          window.session());
    window.sweep()->wait_finished();
  }
  if (args.view == "tune") {
    window.tune()->start(window.session());
    window.tune()->wait_finished();
  }
  window.timeline()->fit_first_view();
  window.timeline()->set_critical_path(args.critical_path);
  QApplication::processEvents();

  const QPixmap picture = window.grab();
  if (picture.width() != args.width || picture.height() != args.height)  // below the window's smallest
    std::fprintf(stderr, "parallax-gui: note: the window takes %dx%d at least; the screenshot is %dx%d, not the %dx%d asked\n",
                 window.minimumSizeHint().width(), window.minimumSizeHint().height(), picture.width(), picture.height(),
                 args.width, args.height);
  QSaveFile file(args.screenshot);  // the PNG appears whole or not at all
  if (!file.open(QIODevice::WriteOnly) || !picture.save(&file, "PNG") || !file.commit())
    throw plan::InputError(plan::Location{args.screenshot.toStdString()}, "cannot write the screenshot here: " +
                                                                              file.errorString().toStdString());
}

}  // namespace parallax::gui
