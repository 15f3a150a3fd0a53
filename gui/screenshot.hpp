#pragma once
// parallax-gui's command line, and headless screenshots: `--screenshot out.png` renders one view
// of the window to PNG under Qt's offscreen platform, with the simulation (and for the sweep and
// tune views, the sweep or search) finished first, so documentation, CI and bug reports get the picture a user would see.
#include <QString>
#include <QStringList>
#include <string>
#include <vector>

namespace parallax::gui {

struct GuiArgs {
  std::string scenario;              ///< "" = built-in default
  std::vector<std::string> traces;   ///< positional trace files
  std::string measured;              ///< --measured: a run of parallax run -o, "" for none
  std::vector<std::string> sets;     ///< --set key=value
  QString screenshot;                ///< PNG to write, headless
  QString view = "timeline";         ///< timeline | metrics | sweep | tune
  QString sweep = "chunks-bucket";   ///< chunks-bucket | chunks-partition
  int width = 1600, height = 1000;
  bool critical_path = false;
};

/// Sorts positional FILEs into the scenario (.yaml/.yml, in any case) and traces; InputError for two scenarios.
void classify_files(const QStringList& files, GuiArgs* args);

/// InputError for a `--view` or `--sweep` the window does not have, with or without --screenshot.
void check_view(const GuiArgs& args);

class MainWindow;
/// Opens the positional traces, then --measured, which must be a measured run (InputError for a
/// predicted trace or another tool's, naming the file).
void open_traces(MainWindow& window, const GuiArgs& args);

/// Renders `args.view` to `args.screenshot`; InputError for bad input (nothing is written then).
void write_screenshot(const GuiArgs& args);

}  // namespace parallax::gui
