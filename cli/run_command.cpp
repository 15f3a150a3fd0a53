#include "cli/run_command.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/output.hpp"
#include "cli/plan_report.hpp"
#include "exec/checkpoint.hpp"
#include "exec/comm.hpp"
#include "exec/data.hpp"
#include "exec/device.hpp"
#include "exec/launcher.hpp"
#include "exec/model.hpp"
#include "exec/runtime.hpp"
#include "plan/error.hpp"
#include "plan/executable.hpp"
#include "timeline/trace_writer.hpp"

namespace parallax::cli {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// The newest complete checkpoint in `dir` must be of this plan's layout (its marker keeps it since
// checkpoint_layout): another model, split or sharding would load shards of other shapes. And it
// must leave steps to train.
void check_resumable(const plan::Plan& p, const std::string& dir) {
  const exec::CheckpointScan scan = exec::scan_checkpoints(dir);
  if (!scan.latest) return;
  if (const std::string unreadable = exec::unreadable_shard(dir, *scan.latest); !unreadable.empty())
    throw plan::InputError(plan::Location{exec::checkpoint_folder(dir, *scan.latest)},
                           "complete, but " + unreadable + ": remove this step's folder to resume from the one before it");
  const std::string differs = exec::layout_difference(exec::marker_layout(dir, *scan.latest), exec::checkpoint_layout(p));
  if (!differs.empty())
    throw plan::InputError(plan::Location{exec::checkpoint_folder(dir, *scan.latest)},
                           "a checkpoint of another plan (" + differs + "): --resume continues the plan that saved it");
  // Steps run from the checkpoint's to data.steps: none left is a run that trains nothing.
  if (*scan.latest >= p.scenario.data.steps)
    throw plan::InputError(plan::Location{"--resume"}, "the newest complete checkpoint, " + exec::checkpoint_folder(dir, *scan.latest) +
                                                           ", is at step " + std::to_string(*scan.latest) + " and data.steps is " +
                                                           std::to_string(p.scenario.data.steps) +
                                                           ": nothing is left to train (raise data.steps to continue, e.g. --set data.steps=" +
                                                           std::to_string(*scan.latest + p.scenario.data.steps) + ")");
}

// The checkpoint folder, made now and written to once, so that a folder that cannot be made or
// written to stops the run before any rank starts, not at its first save.
void require_checkpoint_folder(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  const fs::path probe = fs::path(dir) / ".parallax-write-probe";
  if (!ec) {
    const bool written = static_cast<bool>(std::ofstream(probe) << "");
    std::error_code ignored;
    fs::remove(probe, ignored);
    if (!written) ec = std::make_error_code(std::errc::permission_denied);
  }
  if (ec) throw plan::InputError(plan::Location{"--checkpoint-dir"}, "cannot make or write to the folder " + dir + " (" + ec.message() + ")");
}

// Everything that can be wrong with the input is found here, before any rank starts.
plan::Plan check_input(const RunArgs& args) {
  plan::Plan p = plan::resolve_plan(plan::load_scenario(args.scenario, args.sets));
  check_runs_here(p.scenario);
  std::vector<std::string> inputs = p.scenario.files_read();
  inputs.push_back(args.checkpoint_dir);
  require_output_folder(args.trace_path, inputs);
  if ((args.checkpoint_every > 0 || args.resume) && args.checkpoint_dir.empty())
    throw plan::InputError(plan::Location{"--checkpoint-every/--resume"}, "needs --checkpoint-dir");
  if (!args.checkpoint_dir.empty() && args.checkpoint_every == 0 && !args.resume)
    throw plan::InputError(plan::Location{"--checkpoint-dir"}, "saves nothing alone: add --checkpoint-every K (or --resume to continue from it)");
  if (args.timeout_s < 1) throw plan::InputError(plan::Location{"--timeout"}, "must be at least 1 second");
  // A file there would read as a folder without checkpoints: --resume would train from the first step.
  if (!args.checkpoint_dir.empty() && fs::exists(args.checkpoint_dir) && !fs::is_directory(args.checkpoint_dir))
    throw plan::InputError(plan::Location{"--checkpoint-dir"}, args.checkpoint_dir + " is a file, not a folder of checkpoints");
  if (args.resume) check_resumable(p, args.checkpoint_dir);
  if (args.checkpoint_every > 0) require_checkpoint_folder(args.checkpoint_dir);
  return p;
}

// Rank 0: one report from every rank's result.
int report(const plan::Plan& p, const RunArgs& args, std::vector<exec::RankResult> results) {
  const auto& s = p.scenario;
  const size_t steps = results.front().steps.size();
  json steps_json = json::array();
  std::ostringstream text;
  text << "ran " << s.name << " on " << p.world_size << " ranks (data " << s.parallel.data << " x pipeline "
       << s.parallel.pipeline << ", " << schedule::name(s.parallel.schedule) << ", " << counted(s.parallel.chunks, "chunk") << ")\n";
  text << "step   loss       step time\n";
  for (size_t i = 0; i < steps; ++i) {
    double loss_sum = 0;
    plan::Time step_time;  // the slowest rank's
    int count = 0;
    for (const auto& r : results) {
      loss_sum += r.steps[i].loss_sum;
      count += r.steps[i].loss_count;
      step_time = std::max(step_time, r.steps[i].step_time);
    }
    const double loss = count ? loss_sum / count : 0.0;
    steps_json.push_back({{"step", results.front().steps[i].step}, {"step_time_ms", step_time.to_ms()}, {"loss", loss}});
    if (const auto& first = results.front().steps[i]; first.loss_scale > 0) {  // fp16: every rank agrees on both
      steps_json.back()["loss_scale"] = first.loss_scale;
      steps_json.back()["skipped"] = first.skipped;
    }
    char line[96];
    std::snprintf(line, sizeof line, "%-6lld %-10.5f %.2f ms\n", static_cast<long long>(results.front().steps[i].step + 1),
                  loss, step_time.to_ms());
    if (steps <= 20 || i < 5 || i + 5 >= steps) text << line;
    else if (i == 5) text << "...\n";
  }
  if (steps > 0 && results.front().steps.back().loss_scale > 0) {
    int skipped = 0;
    for (const auto& st : results.front().steps) skipped += st.skipped;
    text << "loss scale " << results.front().steps.back().loss_scale << " at the last step; " << skipped
         << " step(s) skipped on a gradient overflow\n";
  }
  int64_t correct = 0, tested = 0;
  uint64_t dropped = 0;
  for (const auto& r : results) {
    correct += r.correct;
    tested += r.tested;
    dropped += r.dropped;
  }
  json memory = json::array();
  text << "memory   per rank, measured (the peak of live tensors, less what they held before the model was built) / "
          "the plan's estimate without its reserve:\n        ";
  for (const auto& r : results) {
    constexpr double kMiB = 1024.0 * 1024.0;
    const double measured = static_cast<double>(r.memory.training_bytes()) / kMiB;
    const double predicted = static_cast<double>(p.ranks[r.rank].memory.allocated()) / kMiB;
    memory.push_back({{"rank", r.rank}, {"measured_mb", measured}, {"predicted_mb", predicted},
                      {"peak_rss_mb", static_cast<double>(r.memory.peak_rss_bytes) / kMiB}});
    char line[96];
    std::snprintf(line, sizeof line, "%s rank %d: %.1f / %.1f MiB", r.rank == results.front().rank ? "" : ",", r.rank,
                  measured, predicted);
    text << line;
  }
  text << "\n";
  json accuracy = nullptr;
  if (tested > 0) {
    accuracy = static_cast<double>(correct) / static_cast<double>(tested);
    text << "accuracy " << 100.0 * correct / tested << "% on " << tested << " test images\n";
  }
  json trace = nullptr;
  std::string trace_failed;  // the training is done: its report is printed whatever became of the file
  if (!args.trace_path.empty()) {
    timeline::Timeline t = exec::measured_timeline(results, s.name, p.world_size);
    t.plan = timeline::summarize(p);
    std::ostringstream out;
    timeline::write_chrome_trace(t, out);
    try {
      write_file_atomically(args.trace_path, out.str());
      trace = args.trace_path;
      text << "trace    " << args.trace_path << " (" << t.events.size() << " spans)\n";
    } catch (const std::exception& e) {
      trace_failed = e.what();
    }
  }
  if (dropped) std::cerr << "warning: the tracer dropped " << dropped << " spans (buffer full)\n";
  if (args.json) {
    std::cout << json{{"scenario", s.name}, {"world_size", p.world_size}, {"steps", steps_json}, {"memory", memory},
                      {"accuracy", accuracy}, {"test_images", tested > 0 ? json(tested) : json()}, {"trace", trace}, {"dropped_spans", dropped}}
                     .dump(2)
              << "\n";
  } else {
    std::cout << text.str();
  }
  if (!trace_failed.empty()) {
    std::cerr << "parallax: the run finished, but its trace was not written: " << trace_failed << "\n";
    return 1;
  }
  return 0;
}

int run_as_rank(const plan::Plan& p, const RunArgs& args, exec::LaunchInfo launch) {
  if (launch.world_size != p.world_size)
    throw plan::InputError(plan::Location{"WORLD_SIZE"}, "the job has " + std::to_string(launch.world_size) +
                                                             " ranks, but the plan needs " + std::to_string(p.world_size));
  launch.timeout = std::chrono::seconds(args.timeout_s);
  exec::RunOptions options{args.checkpoint_dir, args.checkpoint_every, args.resume, !args.trace_path.empty()};
  try {
    auto results = exec::run_rank(p, launch, options);
    if (launch.rank == 0) return report(p, args, std::move(results));
    return 0;
  } catch (const std::exception& e) {
    std::string msg = e.what();
    if (const auto nl = msg.find("\nException raised from"); nl != std::string::npos) msg.resize(nl);
    std::cerr << "rank " << launch.rank << ": error: " << msg << std::endl;
    // run_rank left the failed runtime standing (its process groups would wait out the timeout
    // again for every queued collective); leave without running destructors.
    std::cout.flush();
    std::_Exit(1);
  }
}

}  // namespace

std::vector<std::string> RunArgs::command_line() const {
  std::vector<std::string> line = {"parallax", "run"};
  if (!scenario.empty()) line.push_back(scenario);
  for (const auto& s : sets) line.insert(line.end(), {"--set", s});
  if (json) line.push_back("--json");
  if (nproc > 0) line.insert(line.end(), {"--nproc", std::to_string(nproc)});
  if (!trace_path.empty()) line.insert(line.end(), {"-o", trace_path});
  if (!checkpoint_dir.empty()) line.insert(line.end(), {"--checkpoint-dir", checkpoint_dir});
  if (checkpoint_every > 0) line.insert(line.end(), {"--checkpoint-every", std::to_string(checkpoint_every)});
  if (resume) line.push_back("--resume");
  line.insert(line.end(), {"--timeout", std::to_string(timeout_s)});
  return line;
}

void check_runs_here(const plan::Scenario& scenario, const std::string& instead) {
  plan::check_executable(scenario);
  exec::check_device(scenario, instead);
  exec::DataSource::require_fits(scenario);
}

int run_command(const RunArgs& args) {
  const plan::Plan p = check_input(args);
  exec::LaunchInfo launch;
  if (exec::LaunchInfo::from_environment(&launch)) return run_as_rank(p, args, launch);
  const int nproc = args.nproc > 0 ? args.nproc : p.world_size;
  if (nproc != p.world_size)
    throw plan::InputError(plan::Location{"--nproc " + std::to_string(nproc)},
                           "the plan needs " + std::to_string(p.world_size) + " ranks (data " +
                               std::to_string(p.scenario.parallel.data) + " x pipeline " +
                               std::to_string(p.scenario.parallel.pipeline) + ")");
  return exec::launch_local(nproc, args.command_line(), std::chrono::seconds(args.timeout_s));
}

}  // namespace parallax::cli
