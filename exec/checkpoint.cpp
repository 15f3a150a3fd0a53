#include "exec/checkpoint.hpp"

#include <filesystem>
#include <fstream>

namespace parallax::exec {
namespace fs = std::filesystem;
namespace {

fs::path step_dir(const std::string& dir, int64_t step) { return fs::path(dir) / ("step-" + std::to_string(step)); }

}  // namespace

void save_stage(const std::string& dir, int64_t step, int stage, torch::nn::Module& module, torch::optim::Optimizer& opt) {
  const fs::path folder = step_dir(dir, step);
  fs::create_directories(folder);
  torch::serialize::OutputArchive archive, opt_archive;
  module.save(archive);
  opt.save(opt_archive);
  archive.write("optimizer", opt_archive);
  archive.write("step", torch::tensor(step));
  const fs::path final_path = folder / ("stage-" + std::to_string(stage) + ".pt");
  const fs::path tmp = final_path.string() + ".tmp";
  archive.save_to(tmp.string());
  fs::rename(tmp, final_path);
}

void mark_complete(const std::string& dir, int64_t step) {
  const fs::path marker = step_dir(dir, step) / "COMPLETE";
  const fs::path tmp = marker.string() + ".tmp";
  std::ofstream(tmp) << step << "\n";
  fs::rename(tmp, marker);
}

std::optional<int64_t> latest_checkpoint(const std::string& dir) {
  std::optional<int64_t> best;
  if (!fs::is_directory(dir)) return best;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("step-", 0) != 0 || !fs::exists(entry.path() / "COMPLETE")) continue;
    try {
      const int64_t step = std::stoll(name.substr(5));
      if (!best || step > *best) best = step;
    } catch (const std::exception&) {
    }
  }
  return best;
}

void load_stage(const std::string& dir, int64_t step, int stage, torch::nn::Module& module, torch::optim::Optimizer& opt) {
  torch::serialize::InputArchive archive, opt_archive;
  archive.load_from((step_dir(dir, step) / ("stage-" + std::to_string(stage) + ".pt")).string());
  module.load(archive);
  archive.read("optimizer", opt_archive);
  opt.load(opt_archive);
}

}  // namespace parallax::exec
