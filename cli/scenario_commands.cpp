#include "cli/scenario_commands.hpp"

#include <filesystem>
#include <iostream>
#include <map>
#include <set>
#include <sstream>

#include "cli/output.hpp"
#include "cli/plan_report.hpp"
#include "cli/sim_report.hpp"
#include "cli/trace_report.hpp"
#include "plan/error.hpp"
#include "plan/knobs.hpp"
#include "plan/trainer_export.hpp"
#include "schedule/csv.hpp"
#include "sim/metrics.hpp"
#include "sim/simulator.hpp"
#include "timeline/compare.hpp"
#include "timeline/trace_reader.hpp"
#include "timeline/trace_writer.hpp"

namespace parallax::cli {

plan::Plan ScenarioArgs::resolve() const { return plan::resolve_plan(plan::load_scenario(scenario, sets)); }

int plan_command(const ScenarioArgs& args) {
  const plan::Plan p = args.resolve();
  if (args.json) std::cout << timeline::summarize(p).document.dump(2) << "\n";
  else std::cout << plan_text(p);
  return 0;
}

int schedule_command(const ScenarioArgs& args, const std::string& csv_path) {
  const plan::Plan p = args.resolve();
  require_output_folder(csv_path, p.scenario.files_read());
  if (!csv_path.empty()) {
    std::ostringstream csv;
    schedule::write_schedule_csv(p.schedule, csv);
    write_file_atomically(csv_path, csv.str());
    std::cerr << "wrote " << csv_path << " (PyTorch pipelining CSV, compute actions of one mini-batch)\n";
  }
  if (args.json) std::cout << schedule_json(p).dump(2) << "\n";
  else std::cout << schedule_text(p);
  return 0;
}

int simulate_command(const ScenarioArgs& args, const std::string& trace_path) {
  const plan::Plan p = args.resolve();
  require_output_folder(trace_path, p.scenario.files_read());
  sim::SimOptions options;
  options.record_link_samples = !trace_path.empty();
  const sim::SimRun run = sim::simulate(p, options);
  const sim::Metrics m = sim::compute_metrics(p, run);
  if (!trace_path.empty()) {
    std::ostringstream trace;
    timeline::write_chrome_trace(predicted_timeline(p, run), trace);
    write_file_atomically(trace_path, trace.str());
  }
  if (args.json) std::cout << simulate_json(p, run, m).dump(2) << "\n";
  else std::cout << simulate_text(p, run, m);
  if (!trace_path.empty()) std::cerr << "wrote " << trace_path << " (open it in https://ui.perfetto.dev)\n";
  return 0;
}

int export_command(const std::string& trainer, const ScenarioArgs& args) {
  const plan::Plan p = args.resolve();
  const plan::TrainerExport e = trainer == "megatron" ? plan::export_megatron(p) : plan::export_torchtitan(p);
  std::cout << e.text;
  if (!e.does_not_fit.empty()) std::cerr << "warning: " << e.does_not_fit << "\n";
  return 0;
}

int keys_command(bool markdown) {
  auto cell = [](const std::string& text) {  // a | inside a Markdown cell ends it
    std::string out;
    for (char c : text) {
      if (c == '|') out += '\\';
      out += c;
    }
    return out;
  };
  const plan::Settings defaults;
  if (markdown) std::cout << "| key | default | values | meaning |\n|---|---|---|---|\n";
  for (const plan::Knob& k : plan::knobs()) {
    const std::string def = k.format(k.get(defaults)), tuned = k.tuned() ? "; tune searches it" : "";
    if (markdown)
      std::cout << "| `" << k.key << "` | `" << def << "` | " << cell(k.allowed()) << " | " << cell(k.doc) << tuned << " |\n";
    else
      std::cout << k.key << " (default " << def << "; " << k.allowed() << ")\n    " << k.doc << tuned << "\n";
  }
  return 0;
}

namespace {
// A trace's job in words: "a Parallax measured trace of 'S', 2 ranks", "a kineto trace of 128 ranks".
std::string job_of(const timeline::LoadedTrace& t) {
  if (t.format == "parallax")
    return "a Parallax " + t.kind + " trace of '" + t.timeline.scenario + "', " + std::to_string(t.timeline.world_size) + " ranks";
  return "a " + t.format + " trace" + (t.world_size > 0 ? " of " + std::to_string(t.world_size) + " ranks" : "");
}
// The ranks a trace's events belong to.
std::set<int> ranks_in(const timeline::LoadedTrace& t) {
  std::set<int> ranks;
  for (const auto& e : t.events) ranks.insert(e.rank);
  for (const auto& e : t.timeline.events) ranks.insert(e.rank);
  return ranks;
}
}  // namespace

int trace_command(const std::vector<std::string>& files, bool json) {
  std::vector<timeline::LoadedTrace> traces;
  std::set<std::string> seen;
  for (size_t i = 0; i < files.size(); ++i) {
    // A file given twice would merge its ranks' actions twice over.
    refuse_given_twice(&seen, files[i], "each file is merged once, as the ranks of one job");
    traces.push_back(timeline::read_trace(files[i], static_cast<int>(i)));
  }
  // Several files merge as the ranks of one job: Parallax's of one kind, scenario and size (a
  // prediction and a run, or two runs, are compare's), and never Parallax's with a profiler's.
  for (size_t i = 1; i < traces.size(); ++i) {
    const timeline::LoadedTrace &first = traces.front(), &t = traces[i];
    const bool parallax = first.format == "parallax" || t.format == "parallax";
    // Profiler traces of one job say the same world size (distributedInfo), where they say one.
    const bool other_size = first.world_size > 0 && t.world_size > 0 && first.world_size != t.world_size;
    if (other_size || (parallax && (t.format != first.format || t.kind != first.kind || t.timeline.scenario != first.timeline.scenario ||
                                    t.timeline.world_size != first.timeline.world_size)))
      throw plan::InputError(plan::Location{files[i]}, "not of the job of " + files[0] + " (" + job_of(first) + "; this one: " + job_of(t) +
                                                           "): trace merges the files of one job; compare sets a prediction beside a run");
  }
  // ... and each rank in one file only: two files of one rank (two runs, one file twice under two
  // names, a trace without distributedInfo whose position gives it a rank another file has) had
  // merged into doubled steps and summed counts.
  std::map<int, size_t> file_of_rank;
  for (size_t i = 0; i < traces.size(); ++i)
    for (int rank : ranks_in(traces[i]))
      if (const auto [at, fresh] = file_of_rank.emplace(rank, i); !fresh)
        throw plan::InputError(plan::Location{files[i]}, "holds rank " + std::to_string(rank) + ", as " + files[at->second] +
                                                             " does: trace merges the files of one job, each rank once (a trace "
                                                             "without distributedInfo takes its position among the files as its rank)");
  const auto summary = trace_summary_json(traces);
  if (json) std::cout << summary.dump(2) << "\n";
  else std::cout << trace_summary_text(summary);
  return 0;
}

int compare_command(const std::string& predicted, const std::string& measured, bool json) {
  const auto p = read_trace_of_kind(predicted, "predicted", "compare", "PREDICTED (the first trace)");
  const auto m = read_trace_of_kind(measured, "measured", "compare", "MEASURED (the second trace)");
  for (const std::string& w : check_same_job(p.timeline, m.timeline, measured)) std::cerr << "warning: " << w << "\n";
  const auto report = timeline::compare(p.timeline, m.timeline);
  if (json) std::cout << compare_json(report).dump(2) << "\n";
  else std::cout << compare_text(report);
  if (!report.only_predicted.empty() || !report.only_measured.empty())
    std::cerr << "warning: the two traces hold different actions: they are not of the same plan\n";
  return 0;
}

}  // namespace parallax::cli
