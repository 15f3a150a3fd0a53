#pragma once
// The GUI's Qt Test case, shared by gui_test.cpp (the timeline, knobs, sweep, screenshots and real
// runs) and gui_tune_test.cpp (the Tune tab). tests/CMakeLists.txt makes one ctest entry of each
// test function of the class below (its private slots).
#include <QObject>
#include <string>
#include <vector>

#include "gui/main_window.hpp"
#include "tests/test_util.hpp"

// A test that cannot run here for want of `what`: QSKIP, which ctest reports as skipped
// (SKIP_REGULAR_EXPRESSION in tests/CMakeLists.txt), or a failure where PARALLAX_TEST_REQUIRE
// names `what` (CI, for what its machine has).
#define SKIP_WITHOUT(condition, what, why) \
  do {                                     \
    if (!(condition)) {                    \
      if (test::required(what)) QFAIL(why); \
      QSKIP(why);                          \
    }                                      \
  } while (0)

namespace gui_test {

const std::string kSource = PARALLAX_SOURCE_DIR;
const std::string kPipeline2 = kSource + "/scenarios/mlp-fashion-mnist-pipeline2.yaml";
const std::string kDdp = kSource + "/scenarios/ddp-transformer-accum-4xA100.yaml";
const std::string kGpipe = kSource + "/scenarios/gpipe-1b-4xA100.yaml";

/// The step time of a configuration, straight from the simulator (not through the GUI).
double simulated_step_ms(const std::string& scenario, const std::vector<std::string>& sets);
/// Lets the background simulation finish and the window take its result.
void settle(parallax::gui::MainWindow& w);
void open(parallax::gui::MainWindow& w, const std::string& scenario);

}  // namespace gui_test

class GuiTest : public QObject {
  Q_OBJECT
 private slots:
  void changing_chunks_changes_the_step_time_shown();
  void a_gpu_plan_says_how_its_profile_held_on_published_runs();
  void a_bad_combination_is_shown_beside_its_knob();
  void overlay_with_a_measured_trace_draws_both();
  void a_run_of_another_plan_is_flagged();
  void selecting_an_action_highlights_its_micro_batch();
  void rows_and_bars_say_where_each_rank_sits();
  void sweep_marks_the_best_simulated_cell();
  void sweep_axes_hold_the_knobs_own_values();
  void sweep_never_stars_a_plan_that_does_not_fit();
  void link_chart_draws_each_spans_mean();
  void visible_bars_match_a_brute_force_search();
  void a_pixel_of_many_actions_takes_the_busiest_kind();
  void zoom_keeps_the_time_under_the_cursor();
  void pytorch_profiler_traces_open_on_their_own_rows();
  void screenshots_are_not_blank();
  void screenshot_rejects_bad_input_and_writes_nothing();
  void saved_scenario_reopens_with_the_knobs();
  void every_knob_has_an_editor_that_reads_back();
  void run_for_real_overlays_the_measured_trace();
  void run_for_real_reports_a_dead_rank();
  void tune_tab_ranks_as_the_evaluator_predicts();
  void clicking_a_tune_row_loads_it_into_the_knobs();
  void cancel_stops_a_tune_search();
  void validate_shows_predicted_against_measured();
};
