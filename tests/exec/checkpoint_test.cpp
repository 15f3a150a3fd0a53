// Checkpoints: the files themselves, and checkpoint + resume of real DDP jobs, one of them with a
// rank killed in the middle of a save.
#include "exec/checkpoint.hpp"
#include "tests/test_util.hpp"
// LibTorch's logging defines CHECK (glog's, which aborts the process); Catch's must win here.
#undef CHECK
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <stdexcept>

namespace {

namespace fs = std::filesystem;
using parallax::exec::load_stage;
using parallax::exec::mark_complete;
using parallax::exec::save_stage;
using parallax::exec::scan_checkpoints;
using parallax::exec::unreadable_shard;

fs::path fresh_dir(const std::string& name) {
  const fs::path dir = parallax::test::temp_path(name);
  fs::remove_all(dir);
  return dir;
}

struct Tiny {
  torch::nn::Linear layer{2, 2};
  torch::optim::SGD opt{layer->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9)};
};

struct SplitResult {
  int code = -1;
  std::string out, err;
};

// Runs `parallax args` with stdout and stderr apart (the JSON report on stdout, the ranks'
// messages on stderr).
SplitResult run_split(const std::string& args, const std::string& env, const fs::path& err_file) {
  const std::string cmd = env + " " + PARALLAX_BINARY + " " + args + " 2>" + err_file.string();
  SplitResult r;
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) throw std::runtime_error("popen failed");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) r.out.append(buf, n);
  const int status = pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  std::ifstream in(err_file);
  r.err.assign(std::istreambuf_iterator<char>(in), {});
  return r;
}

std::vector<double> step_losses(const std::string& json_text) {
  std::vector<double> out;
  const auto report = nlohmann::json::parse(json_text);
  for (const auto& s : report["steps"]) out.push_back(s["loss"]);
  return out;
}

bool fashion_mnist_installed() { return fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"); }

}  // namespace

TEST_CASE("exec::checkpoint: resume takes the newest complete step and skips torn ones", "[exec]") {
  const fs::path dir = fresh_dir("parallax_ckpt_files");
  Tiny a;
  save_stage(dir.string(), 1, 0, *a.layer, a.opt);
  mark_complete(dir.string(), 1);
  save_stage(dir.string(), 2, 0, *a.layer, a.opt);  // no marker: a save that did not finish
  fs::create_directories(dir / "step-x");           // not a checkpoint
  auto scan = scan_checkpoints(dir.string());
  REQUIRE(scan.latest == 1);
  CHECK(scan.skipped == std::vector<int64_t>{2});
  CHECK(!fs::exists(dir / "step-1" / "stage-0.pt.tmp"));

  Tiny b;
  load_stage(dir.string(), 1, 0, *b.layer, b.opt);
  CHECK(torch::equal(a.layer->weight, b.layer->weight));
  CHECK_THROWS_WITH(load_stage(dir.string(), 1, 3, *b.layer, b.opt), Catch::Contains("stage-3.pt is missing"));
  CHECK(scan_checkpoints((dir / "absent").string()).latest == std::nullopt);
  fs::remove_all(dir);
}

// A complete step whose file was cut since (a full disk, a copy stopped early): named before any
// rank starts (unreadable_shard), and a load says which file, not only PyTorch's words.
TEST_CASE("exec::checkpoint: a truncated shard is named, before the ranks start and by the load", "[exec]") {
  const fs::path dir = fresh_dir("parallax_ckpt_truncated");
  Tiny a;
  save_stage(dir.string(), 1, 0, *a.layer, a.opt);
  save_stage(dir.string(), 1, 1, *a.layer, a.opt);
  mark_complete(dir.string(), 1);
  CHECK(unreadable_shard(dir.string(), 1).empty());
  const fs::path cut = dir / "step-1" / "stage-1.pt";
  fs::resize_file(cut, fs::file_size(cut) / 2);
  CHECK_THAT(unreadable_shard(dir.string(), 1), Catch::StartsWith(cut.string() + ": not a readable PyTorch archive ("));
  Tiny b;
  CHECK_THROWS_WITH(load_stage(dir.string(), 1, 1, *b.layer, b.opt), Catch::Contains("checkpoint " + cut.string() + " cannot be read"));
  fs::remove_all(dir);
}

TEST_CASE("exec::checkpoint: a crash while a step is saved again leaves it incomplete, not torn", "[exec]") {
  const fs::path dir = fresh_dir("parallax_ckpt_resave");
  Tiny a;
  save_stage(dir.string(), 1, 0, *a.layer, a.opt);
  mark_complete(dir.string(), 1);
  save_stage(dir.string(), 2, 0, *a.layer, a.opt);
  mark_complete(dir.string(), 2);
  // Step 2 saved again (a fresh run into the same folder) and killed before the rename.
  auto crash = [] { throw std::runtime_error("killed"); };
  CHECK_THROWS(save_stage(dir.string(), 2, 0, *a.layer, a.opt, crash));
  CHECK(fs::exists(dir / "step-2" / "stage-0.pt.tmp"));
  const auto scan = scan_checkpoints(dir.string());
  CHECK(scan.latest == 1);
  CHECK(scan.skipped == std::vector<int64_t>{2});
  fs::remove_all(dir);
}

// Per layout: the uninterrupted run; the same run checkpointing every step with rank `victim`
// killed in the middle of saving step-3 (exit 1, step-2 stays complete); the resumed run, which
// must say it took step-2 and continue with the uninterrupted run's losses.
TEST_CASE("exec: DDP and sharded checkpoints survive a rank killed during a save and resume the uninterrupted losses", "[exec][run]") {
  INFO("Fashion-MNIST is missing: scripts/setup.sh installs dataset-fashion-mnist");
  REQUIRE(fashion_mnist_installed());
  const std::string mlp = std::string(PARALLAX_SOURCE_DIR) + "/scenarios/mlp-fashion-mnist-ddp2.yaml";
  const std::string small =
      " --set data.steps=4 --set model.layers=3 --set model.hidden=32 --set optimizer.lr=0.1 --json";
  struct Layout {
    std::string sets;
    int victim, files;  // a file per stage, or per stage and shard
  };
  // Rank 0 writes stage 0 and hosts the store; rank 1 writes stage 1 of the 2 x 2 grid.
  const std::vector<Layout> layouts = {
      {" --set parallel.data=2 --set parallel.pipeline=1 --set data.batch_size=32", 0, 1},
      {" --set parallel.data=2 --set parallel.pipeline=2 --set parallel.chunks=2 --set data.batch_size=32", 1, 2},
      // Sharded: every rank writes its own shards and optimizer state.
      {" --set parallel.data=2 --set parallel.pipeline=2 --set parallel.chunks=2 --set data.batch_size=32"
       " --set parallel.shard=full",
       1, 4},
      // Shards that are views of the whole parameters (a resume that loaded them beside those
      // views once left the parameters at their first values).
      {" --set parallel.data=2 --set parallel.pipeline=1 --set data.batch_size=32 --set parallel.shard=gradients", 0, 2},
      {" --set parallel.data=2 --set parallel.pipeline=2 --set parallel.chunks=2 --set data.batch_size=32"
       " --set parallel.shard=optimizer",
       0, 4}};
  for (const auto& layout : layouts) {
    INFO(layout.sets);
    const fs::path dir = fresh_dir("parallax_ckpt_ddp");
    const fs::path ckpt = dir / "ckpt";
    fs::create_directories(dir);
    const std::string args = "run " + mlp + small + layout.sets;
    const auto full = run_split(args, "", dir / "full.err");
    REQUIRE(full.code == 0);
    const auto expected = step_losses(full.out);
    REQUIRE(expected.size() == 4);

    const std::string saving = args + " --checkpoint-dir " + ckpt.string() + " --checkpoint-every 1";
    const auto crashed = run_split(saving, "PARALLAX_FAULT=" + std::to_string(layout.victim) + ":3:save", dir / "crash.err");
    INFO(crashed.err);
    CHECK(crashed.code == 1);
    CHECK(fs::exists(ckpt / "step-2" / "COMPLETE"));
    CHECK(!fs::exists(ckpt / "step-3" / "COMPLETE"));

    const auto resumed = run_split(saving + " --resume", "", dir / "resume.err");
    INFO(resumed.err);
    REQUIRE(resumed.code == 0);
    CHECK_THAT(resumed.err, Catch::Contains("resumed from " + (ckpt / "step-2").string()));
    CHECK_THAT(resumed.err, Catch::Contains("skipped " + (ckpt / "step-3").string()));
    const auto got = step_losses(resumed.out);
    REQUIRE(got.size() == 2);
    CHECK(nlohmann::json::parse(resumed.out)["steps"][0]["step"] == 2);
    CHECK(got[0] == Approx(expected[2]).epsilon(1e-6));
    CHECK(got[1] == Approx(expected[3]).epsilon(1e-6));
    // The resumed run saved steps 3 and 4 whole: its files, nothing temporary left.
    for (const char* step : {"step-3", "step-4"}) {
      int files = 0;
      for (const auto& e : fs::directory_iterator(ckpt / step)) files += e.path().extension() == ".pt";
      CHECK(files == layout.files);
      CHECK(fs::exists(ckpt / step / "COMPLETE"));
      CHECK(!fs::exists(ckpt / step / "stage-0.pt.tmp"));
    }
    // Resumed again at step 4 of 4: nothing left to train, refused before any rank starts (it had
    // trained nothing, written an empty trace and exited 0).
    const auto again = run_split(saving + " --resume", "", dir / "again.err");
    CHECK(again.code == 2);
    CHECK_THAT(again.err, Catch::Contains("is at step 4 and data.steps is 4: nothing is left to train"));
    fs::remove_all(dir);
  }
}

// A resume refused for another plan names the first difference: a value that only grew ("sgd with
// momentum" against "sgd") whole, not as a count of its words; the layers' long line by its count.
TEST_CASE("exec::layout_difference: a short value that grew is said whole, a long list by its count", "[exec]") {
  using parallax::exec::layout_difference;
  CHECK(layout_difference("tensor: 1\noptimizer: sgd with momentum\n", "tensor: 1\noptimizer: sgd\n") ==
        "optimizer: 'sgd with momentum' in the checkpoint, 'sgd' in this plan");
  CHECK(layout_difference("optimizer: sgd\n", "optimizer: adamw\n") == "optimizer: sgd in the checkpoint, adamw in this plan");
  CHECK(layout_difference("layers: a=1 b=2 c=3 d=4 e=5\n", "layers: a=1 b=2 c=3 d=4 e=5 f=6\n") == "layers: 5 in the checkpoint, 6 in this plan");
  CHECK(layout_difference("tensor: 1\n", "tensor: 1\n").empty());
}
