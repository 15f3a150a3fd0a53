#include "exec/checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include <caffe2/serialize/inline_container.h>

namespace parallax::exec {
namespace fs = std::filesystem;
namespace {

fs::path step_dir(const std::string& dir, int64_t step) { return fs::path(dir) / ("step-" + std::to_string(step)); }
fs::path shard_path(const std::string& dir, int64_t step, int stage, int shard) {
  const std::string of_shard = shard < 0 ? "" : "-shard-" + std::to_string(shard);
  return step_dir(dir, step) / ("stage-" + std::to_string(stage) + of_shard + ".pt");
}

// A rename is only durable once the folder holding the name is synced, and a file's bytes only
// once the file is: without both, a power cut after COMPLETE could leave a marker over shards
// that never reached the disk.
void sync(const fs::path& path, bool directory) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | (directory ? O_DIRECTORY : 0));
  if (fd < 0) throw std::runtime_error("checkpoint: cannot open " + path.string() + " to sync it: " + std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw std::runtime_error("checkpoint: cannot sync " + path.string() + ": " + std::strerror(err));
}

// Creates DIR/step-N and makes its name durable in DIR.
fs::path make_step_dir(const std::string& dir, int64_t step) {
  const fs::path folder = step_dir(dir, step);
  if (!fs::is_directory(folder)) {
    fs::create_directories(folder);  // several writers may race here; an existing folder is fine
    sync(folder.parent_path(), true);
  }
  return folder;
}

// Renames `tmp` over `final_path` once its bytes are on disk, then syncs the folder.
void commit(const fs::path& tmp, const fs::path& final_path) {
  sync(tmp, false);
  fs::rename(tmp, final_path);
  sync(final_path.parent_path(), true);
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isdigit(c); });
}

}  // namespace

std::string checkpoint_folder(const std::string& dir, int64_t step) { return step_dir(dir, step).string(); }

void save_stage(const std::string& dir, int64_t step, int stage, torch::nn::Module& module,
                torch::optim::Optimizer& opt, const std::function<void()>& before_rename, int shard) {
  const fs::path folder = make_step_dir(dir, step);
  // A marker left by an earlier run of this step must go before its shards change.
  if (fs::remove(folder / "COMPLETE")) sync(folder, true);
  torch::serialize::OutputArchive archive, opt_archive;
  module.save(archive);
  opt.save(opt_archive);
  archive.write("optimizer", opt_archive);
  archive.write("step", torch::tensor(step));
  const fs::path final_path = shard_path(dir, step, stage, shard);
  const fs::path tmp = final_path.string() + ".tmp";
  archive.save_to(tmp.string());
  if (before_rename) before_rename();
  commit(tmp, final_path);
}

void mark_complete(const std::string& dir, int64_t step, const std::string& state, const std::string& layout) {
  const fs::path marker = step_dir(dir, step) / "COMPLETE";
  const fs::path tmp = marker.string() + ".tmp";
  {
    std::ofstream out(tmp);
    out << step << "\n";
    if (!state.empty() || !layout.empty()) out << state << "\n";
    out << layout;
    if (!out.flush()) throw std::runtime_error("checkpoint: cannot write " + tmp.string());
  }
  commit(tmp, marker);
}

std::string marker_state(const std::string& dir, int64_t step) {
  std::ifstream in(step_dir(dir, step) / "COMPLETE");
  std::string first, state;
  std::getline(in, first);
  std::getline(in, state);
  return state;
}

std::string marker_layout(const std::string& dir, int64_t step) {
  std::ifstream in(step_dir(dir, step) / "COMPLETE");
  std::string line, layout;
  for (int i = 0; std::getline(in, line); ++i)
    if (i >= 2) layout += line + "\n";  // after the step and the state
  return layout;
}

std::string checkpoint_layout(const plan::Plan& p) {
  const plan::ParallelSpec& par = p.scenario.parallel;
  std::ostringstream o;
  o << "layers:";
  for (const plan::Layer& l : p.layers()) o << " " << l.name << "=" << l.param_count();
  o << "\nstages:";
  for (const plan::Stage& st : p.stages) o << " " << st.first_layer << "+" << st.layer_count;
  o << "\ntensor: " << par.tensor << "\nexpert: " << par.expert << "\nshard: " << plan::name(par.shard);
  if (par.shard != plan::Shard::none) o << " over " << par.shard_ranks() << " ranks";
  o << "\noptimizer: " << p.scenario.optimizer.kind << (p.scenario.optimizer.momentum > 0 ? " with momentum" : "")
    << "\nmaster weights: " << (par.master_weights ? "yes" : "no") << "\n";
  return o.str();
}

std::string layout_difference(const std::string& saved, const std::string& current) {
  if (saved.empty() || saved == current) return "";
  // Each line is "key: a b c ...": the first entry that differs names the difference (a model's
  // layers are one line, and a long one).
  auto split = [](const std::string& line) {
    const auto colon = line.find(':');
    std::pair<std::string, std::vector<std::string>> out{colon == std::string::npos ? line : line.substr(0, colon), {}};
    std::istringstream words(colon == std::string::npos ? "" : line.substr(colon + 1));
    for (std::string w; words >> w;) out.second.push_back(w);
    return out;
  };
  std::istringstream a(saved), b(current);
  for (std::string x, y;;) {
    const bool more_a = static_cast<bool>(std::getline(a, x)), more_b = static_cast<bool>(std::getline(b, y));
    if (!more_a && !more_b) return "";
    if (more_a && more_b && x == y) continue;
    const auto [key, was] = split(more_a ? x : y);
    const auto now = split(more_b ? y : x).second;
    for (size_t i = 0; i < std::min(was.size(), now.size()); ++i)
      if (was[i] != now[i]) return key + ": " + was[i] + " in the checkpoint, " + now[i] + " in this plan";
    // One list holds the other and more: a short value is said whole ("sgd with momentum"
    // against "sgd"), a long one (the layers) by its count.
    const auto words = [](const std::vector<std::string>& v) {
      std::string out;
      for (const auto& w : v) out += (out.empty() ? "" : " ") + w;
      return out;
    };
    if (was.size() <= 4 && now.size() <= 4)
      return key + ": '" + words(was) + "' in the checkpoint, '" + words(now) + "' in this plan";
    return key + ": " + std::to_string(was.size()) + " in the checkpoint, " + std::to_string(now.size()) + " in this plan";
  }
}

CheckpointScan scan_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, bool>> found;  // step, complete
  if (fs::is_directory(dir)) {
    for (const auto& entry : fs::directory_iterator(dir)) {
      const std::string name = entry.path().filename().string();
      if (name.rfind("step-", 0) != 0 || !all_digits(name.substr(5)) || !entry.is_directory()) continue;
      found.emplace_back(std::stoll(name.substr(5)), fs::exists(entry.path() / "COMPLETE"));
    }
  }
  std::sort(found.begin(), found.end());
  CheckpointScan scan;
  for (const auto& [step, complete] : found) {
    if (complete) {
      scan.latest = step;
      scan.skipped.clear();
    } else {
      scan.skipped.push_back(step);
    }
  }
  return scan;
}

std::string unreadable_shard(const std::string& dir, int64_t step) {
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(step_dir(dir, step)))
    if (entry.path().extension() == ".pt") files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    try {
      caffe2::serialize::PyTorchStreamReader reader(f.string());  // its zip's central directory
    } catch (const std::exception& e) {
      const std::string what = e.what();
      return f.string() + ": not a readable PyTorch archive (" + what.substr(0, what.find('\n')) + ")";
    }
  }
  return "";
}

void load_stage(const std::string& dir, int64_t step, int stage, torch::nn::Module& module, torch::optim::Optimizer& opt,
                int shard) {
  const fs::path path = shard_path(dir, step, stage, shard);
  // Under a multi-host job every host must see the same DIR (a shared file system).
  if (!fs::exists(path))
    throw std::runtime_error("checkpoint " + step_dir(dir, step).string() + " is complete but " + path.string() +
                             " is missing here (is the checkpoint folder shared by every host?)");
  torch::serialize::InputArchive archive, opt_archive;
  try {
    archive.load_from(path.string());
  } catch (const std::exception& e) {
    const std::string what = e.what();
    throw std::runtime_error("checkpoint " + path.string() + " cannot be read (" + what.substr(0, what.find('\n')) + ")");
  }
  torch::Tensor saved_step;
  archive.read("step", saved_step);
  if (saved_step.item<int64_t>() != step)
    throw std::runtime_error("checkpoint " + path.string() + " holds step " + std::to_string(saved_step.item<int64_t>()) +
                             ", not " + std::to_string(step));
  module.load(archive);
  archive.read("optimizer", opt_archive);
  opt.load(opt_archive);
}

void save_job_checkpoint(Communicator& comm, const std::string& dir, int64_t step, int replica,
                         const std::vector<StageShard>& shards, const std::string& state,
                         const std::function<void()>& fault, const std::string& layout) {
  bool wrote = false;
  for (const StageShard& s : shards)
    if ((replica == 0 || s.shard >= 0) && s.writer) {
      save_stage(dir, step, s.stage, *s.module, *s.optimizer, fault, s.shard);
      wrote = true;
    }
  if (!wrote) fault();
  comm.barrier("checkpoint " + checkpoint_folder(dir, step) + " (every shard written)");
  if (comm.rank() == 0) mark_complete(dir, step, state, layout);
}

namespace {

std::string resume_message(const std::string& dir, const CheckpointScan& scan) {
  std::string text = scan.latest ? "resumed from " + checkpoint_folder(dir, *scan.latest) +
                                       ", the newest complete checkpoint; continuing after step " +
                                       std::to_string(*scan.latest)
                                 : "no complete checkpoint in " + dir + "; starting from the first step";
  for (int64_t s : scan.skipped) text += "\n  skipped " + checkpoint_folder(dir, s) + " (no COMPLETE marker: a torn save)";
  return text;
}

}  // namespace

Resumed resume_job(Communicator& comm, const std::string& dir, const std::vector<StageShard>& shards,
                   const std::function<void(const std::string&)>& say) {
  std::string chosen;
  if (comm.rank() == 0) {
    const CheckpointScan scan = scan_checkpoints(dir);
    chosen = scan.latest ? std::to_string(*scan.latest) : "none";
    say(resume_message(dir, scan));
  }
  chosen = comm.share_from_rank0("parallax/resume", chosen);
  if (chosen == "none") return {};
  Resumed r;
  r.step = std::stoll(chosen);
  for (const StageShard& s : shards) load_stage(dir, r.step, s.stage, *s.module, *s.optimizer, s.shard);
  r.state = marker_state(dir, r.step);
  return r;
}

}  // namespace parallax::exec
