// Timeline drawing speed with tens of thousands of bars: a 1F1B step of gpipe-1b-4xA100 with
// data 8 and many chunks (32 ranks), predicted and a "measured" copy laid over it, painted
// offscreen at the whole step and zoomed in. Prints figures; asserts nothing (see docs/gui.md).
//
//   QT_QPA_PLATFORM=offscreen parallax_gui_bench [--chunks 128]
#include <QApplication>
#include <QElapsedTimer>
#include <QImage>
#include <cstdio>
#include <cstring>

#include "gui/plan_session.hpp"
#include "gui/timeline_view.hpp"

using namespace parallax;

int main(int argc, char** argv) {
  if (!qEnvironmentVariableIsSet("QT_QPA_PLATFORM")) qputenv("QT_QPA_PLATFORM", "offscreen");
  QApplication app(argc, argv);
  int chunks = 128;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--chunks") == 0) chunks = std::atoi(argv[i + 1]);

  QElapsedTimer clock;
  clock.start();
  const auto prediction = gui::predict(plan::load_scenario(PARALLAX_SOURCE_DIR "/scenarios/gpipe-1b-4xA100.yaml",
                                                          {"parallel.schedule=1f1b", "parallel.data=8",
                                                           "data.batch_size=" + std::to_string(chunks),
                                                           "parallel.chunks=" + std::to_string(chunks)}));
  const double simulate_ms = clock.nsecsElapsed() / 1e6;
  timeline::Timeline measured = prediction->run.timeline;
  measured.kind = "measured";
  for (auto& e : measured.events) e.end = e.end + plan::Time::ns((e.end - e.start).count_ns() / 5);

  gui::TimelineView view;
  view.resize(1600, 900);
  clock.restart();
  view.model().set_predicted(&prediction->run.timeline, prediction->metrics.critical_path);
  view.model().set_measured(&measured, 0);
  const double build_ms = clock.nsecsElapsed() / 1e6;
  view.fit_step();

  QImage image(view.size(), QImage::Format_ARGB32_Premultiplied);
  auto frame_ms = [&](int frames) {
    QElapsedTimer t;
    t.start();
    for (int i = 0; i < frames; ++i) view.render(&image);
    return t.nsecsElapsed() / 1e6 / frames;
  };
  const size_t bars = view.model().bars().size();
  const double whole = frame_ms(20);
  const size_t drawn_whole = view.visible_items().size();
  view.set_critical_path(true);
  const double critical = frame_ms(20);
  view.set_critical_path(false);
  gui::TimeAxis axis = view.axis();
  const double zoom_factor = 40;
  std::printf("timeline bench: %zu bars on %zu rows (%d ranks, %d chunks, predicted + measured)\n", bars,
              view.model().rows().size(), prediction->plan.world_size, chunks);
  std::printf("  simulate            %8.1f ms\n", simulate_ms);
  std::printf("  build model         %8.1f ms\n", build_ms);
  std::printf("  paint whole step    %8.2f ms/frame  (%zu bars drawn after pixel merging)\n", whole, drawn_whole);
  std::printf("  paint, crit. path   %8.2f ms/frame\n", critical);
  // Zoomed in 40x around the middle: only the visible bars are visited.
  axis.zoom(zoom_factor, axis.width_px / 2.0);
  const auto zoomed = view.model().layout(axis, 0, static_cast<int>(view.model().rows().size()) - 1);
  QElapsedTimer t;
  t.start();
  for (int i = 0; i < 200; ++i) (void)view.model().layout(axis, 0, static_cast<int>(view.model().rows().size()) - 1);
  std::printf("  layout zoomed 40x   %8.3f ms  (%zu bars in view, all rows)\n", t.nsecsElapsed() / 1e6 / 200, zoomed.size());
  return 0;
}
