// parallax-gui: the desktop app. See docs/gui.md.
#include <QApplication>
#include <QCommandLineParser>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "gui/main_window.hpp"
#include "gui/screenshot.hpp"
#include "plan/error.hpp"

namespace {

// Whether `flag` is given, alone or as --flag=value (before Qt parses anything).
bool wants(int argc, char** argv, const std::string& flag) {
  for (int i = 1; i < argc; ++i)
    if (argv[i] == flag || std::string(argv[i]).rfind(flag + "=", 0) == 0) return true;
  return false;
}

bool has_display() {
  return std::getenv("DISPLAY") || std::getenv("WAYLAND_DISPLAY") || std::getenv("QT_QPA_PLATFORM");
}

QtMessageHandler default_handler = nullptr;

// Qt's offscreen platform warns about things that do not matter for a PNG; keep stderr for ours.
void quiet_offscreen(QtMsgType type, const QMessageLogContext& context, const QString& message) {
  if (message.contains("propagateSizeHints") || message.contains("XDG_RUNTIME_DIR")) return;
  if (default_handler) default_handler(type, context, message);
}

}  // namespace

int main(int argc, char** argv) {
  using namespace parallax;
  // Screenshots (and --help) need no display: Qt's offscreen platform renders them.
  const bool headless = wants(argc, argv, "--screenshot") || wants(argc, argv, "--help") || wants(argc, argv, "-h");
  if (headless && !std::getenv("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  if (!headless && !has_display()) {
    std::fprintf(stderr,
                 "parallax-gui: no display (DISPLAY and WAYLAND_DISPLAY are unset).\n"
                 "Run it on a desktop, under xvfb-run, or headless with --screenshot out.png.\n");
    return 1;
  }
  if (headless) default_handler = qInstallMessageHandler(quiet_offscreen);
  QApplication app(argc, argv);
  QApplication::setApplicationName("parallax-gui");

  QCommandLineParser parser;
  parser.setApplicationDescription(
      "Explore a training plan: turn the knobs and watch the predicted timeline change, run the plan for real\n"
      "and lay the measured timeline over the prediction, sweep chunks against bucket_cap_mb or partition_len,\n"
      "tune the plan on the simulator and validate the best configurations for real.\n\n"
      "Examples:\n"
      "  parallax-gui                                   the built-in default scenario\n"
      "  parallax-gui scenarios/gpipe-1b-4xA100.yaml measured.json\n"
      "  parallax-gui rank0.json.gz rank1.json.gz       PyTorch profiler traces\n"
      "  parallax-gui --screenshot t.png scenarios/mlp-fashion-mnist-pipeline2.yaml --view metrics");
  parser.addHelpOption();
  parser.addPositionalArgument("FILE", "A scenario (.yaml) and/or traces (.json, .json.gz): Parallax predicted or "
                                       "measured traces, PyTorch profiler traces.", "[SCENARIO] [TRACE...]");
  QCommandLineOption screenshot("screenshot", "Render a view to a PNG file without a display and exit.", "PNG");
  QCommandLineOption measured("measured", "A measured run (parallax run -o) to lay over the prediction.", "TRACE");
  QCommandLineOption view("view", "The view for --screenshot: timeline, metrics, sweep or tune (default timeline).",
                          "VIEW",
                          "timeline");
  QCommandLineOption sweep("sweep", "The sweep for --view sweep: chunks-bucket or chunks-partition.", "SWEEP",
                           "chunks-bucket");
  QCommandLineOption set("set", "Override a scenario value, as for parallax: --set parallel.chunks=8 (repeatable).",
                         "KEY=VALUE");
  QCommandLineOption size("size", "Window size for --screenshot (default 1600x1000).", "WxH", "1600x1000");
  QCommandLineOption critical("critical-path", "Highlight the critical path in the timeline.");
  parser.addOptions({screenshot, measured, view, sweep, set, size, critical});
  if (!parser.parse(QApplication::arguments())) {
    std::fprintf(stderr, "parallax-gui: %s\n(see parallax-gui --help)\n", qPrintable(parser.errorText()));
    return 2;
  }
  if (parser.isSet("help")) {
    std::fputs(qPrintable(parser.helpText()), stdout);
    return 0;
  }

  gui::GuiArgs args;
  try {
    gui::classify_files(parser.positionalArguments(), &args);
    if (parser.values(measured).size() > 1)
      throw plan::InputError(plan::Location{"--measured"}, "one measured run at a time (its trace holds every rank of it)");
    args.measured = parser.value(measured).toStdString();
    for (const QString& s : parser.values(set)) args.sets.push_back(s.toStdString());
    args.view = parser.value(view);
    args.sweep = parser.value(sweep);
    if (parser.isSet(sweep) && args.view != "sweep")
      throw plan::InputError(plan::Location{"--sweep"}, "picks the sweep of --view sweep; add --view sweep (the view is " +
                                                            args.view.toStdString() + ")");
    args.critical_path = parser.isSet(critical);
    const QStringList wh = parser.value(size).split('x');
    bool ok_w = false, ok_h = false;
    if (wh.size() == 2) args.width = wh[0].toInt(&ok_w), args.height = wh[1].toInt(&ok_h);
    if (!ok_w || !ok_h || args.width < 200 || args.height < 150 || args.width > 8000 || args.height > 8000)
      throw plan::InputError(plan::Location{"--size"}, "expected WIDTHxHEIGHT between 200x150 and 8000x8000, e.g. 1600x1000");
    gui::check_view(args);
    if (parser.isSet(screenshot)) {
      args.screenshot = parser.value(screenshot);
      gui::write_screenshot(args);
      std::fprintf(stderr, "parallax-gui: wrote %s (%s view)\n", qPrintable(args.screenshot), qPrintable(args.view));
      return 0;
    }
    gui::MainWindow window;
    window.resize(1500, 950);
    window.open_scenario(args.scenario, args.sets);
    gui::open_traces(window, args);
    window.show_view(args.view);
    window.show();
    return QApplication::exec();
  } catch (const plan::InputError& e) {
    std::fprintf(stderr, "parallax-gui: %s\n", e.what());
    return 2;
  }
}
