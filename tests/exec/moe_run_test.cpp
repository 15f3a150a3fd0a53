// Mixture-of-experts jobs through `parallax run` (issue 59): the traced all-to-alls, hand-checked,
// and a resumed expert-parallel run. The losses against PyTorch are tests/exec/decoder_reference.sh's.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "tests/test_util.hpp"

namespace {

using Result = parallax::test::CommandResult;
Result run(const std::string& args) { return parallax::test::run_parallax(args); }

// 2 MoE blocks of 4 experts, top-2, on 2 expert ranks (data 2); micro-batches of 2 samples x 16
// tokens, hidden 32, fp32.
constexpr int kTokens = 2 * 16, kTopK = 2, kHidden = 32, kBlocks = 2, kMicroBatches = 2;
const char* const kScenario =
    "model: {preset: transformer, layers: 2, hidden: 32, heads: 4, ffn: 48, seq_len: 16, vocab: 64, kv_heads: 2, mlp: swiglu, "
    "norm: rmsnorm, positions: rope, bias: false, experts: 4, experts_per_token: 2, shared_experts: 1, expert_ffn: 16}\n"
    "data: {source: synthetic, batch_size: 4, steps: 2, seed: 1, shuffle: false}\n"
    "parallel: {data: 2, expert: 2, chunks: 2, precision: fp32}\n"
    "optimizer: {kind: adamw, lr: 0.001}\n"
    "hardware: cpu-host\n";

std::filesystem::path scratch(const std::string& name) {
  const auto dir = std::filesystem::temp_directory_path() / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "moe.yaml") << kScenario;
  return dir;
}

}  // namespace

TEST_CASE("exec: a MoE run traces each all-to-all as an action, with the bytes each rank sent", "[exec][run][moe]") {
  const auto dir = scratch("parallax_moe_trace");
  const std::string scenario = (dir / "moe.yaml").string(), measured = (dir / "m.json").string(),
                    predicted = (dir / "p.json").string();
  REQUIRE(run("run " + scenario + " -o " + measured).code == 0);
  std::ifstream in(measured);
  const auto trace = nlohmann::json::parse(in);
  // bytes[rank][step][id], on the all_to_all lane (tid 4).
  std::map<int, std::map<int, std::map<std::string, int64_t>>> bytes;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X" && e["cat"] == "ALL_TO_ALL") {
      CHECK(e["tid"] == 4);
      bytes[e["pid"].get<int>()][e["args"]["step"].get<int>()][e["name"].get<std::string>()] = e["args"]["bytes"].get<int64_t>();
    }
  // Per micro-batch and block: a dispatch and a combine in forward, both again in backward.
  const int64_t copies = int64_t{kTokens} * kTopK * kHidden * 4;  // a rank's routed copies, fp32
  for (int rank : {0, 1})
    for (int step : {0, 1}) {
      const auto& ids = bytes[rank][step];
      REQUIRE(ids.size() == static_cast<size_t>(kMicroBatches * kBlocks * 4));
      for (int mb = 0; mb < kMicroBatches; ++mb) {
        const std::string a = "0ALL_TO_ALL" + std::to_string(mb) + ".";
        INFO("rank " << rank << " step " << step << " micro-batch " << mb);
        // A dispatch sends every copy of the rank's tokens (its own experts' too); the backward
        // of a combine sends the gradients of those same copies back.
        CHECK(ids.at(a + "0") == copies);  // block 0's dispatch
        CHECK(ids.at(a + "2") == copies);  // block 1's dispatch
        CHECK(ids.at(a + "4") == copies);  // block 1's combine, backward
        CHECK(ids.at(a + "6") == copies);  // block 0's combine, backward
        // A combine sends back what arrived: over the two ranks, every copy once.
        CHECK(ids.at(a + "1") + bytes[1 - rank][step].at(a + "1") == 2 * copies);
      }
    }
  // compare: the exchanges are counted, not taken for a different plan.
  REQUIRE(run("simulate " + scenario + " -o " + predicted).code == 0);
  const auto cmp = run("compare " + predicted + " " + measured + " --json");
  REQUIRE(cmp.code == 0);
  const auto report = nlohmann::json::parse(cmp.out);
  CHECK(report["missing"]["only_measured"].empty());
  CHECK(report["missing"]["only_predicted"].empty());
  CHECK(report["measured_exchanges"] == 2 * kMicroBatches * kBlocks * 4);  // per rank and action id
  std::filesystem::remove_all(dir);
}

TEST_CASE("exec: a resumed expert-parallel run continues with the losses of an uninterrupted one", "[exec][run][moe]") {
  const auto dir = scratch("parallax_moe_ckpt");
  const std::string scenario = (dir / "moe.yaml").string(), ckpt = (dir / "ckpt").string();
  const auto full = run("run " + scenario + " --set data.steps=4 --json");
  REQUIRE(full.code == 0);
  REQUIRE(run("run " + scenario + " --set data.steps=2 --checkpoint-dir " + ckpt + " --checkpoint-every 2").code == 0);
  // Each expert rank's experts in their own file, written by its first replica.
  CHECK(std::filesystem::exists(dir / "ckpt" / "step-2" / "stage-0-shard-0.pt"));
  CHECK(std::filesystem::exists(dir / "ckpt" / "step-2" / "stage-0-shard-1.pt"));
  const auto resumed = run("run " + scenario + " --set data.steps=4 --checkpoint-dir " + ckpt + " --resume --json");
  REQUIRE(resumed.code == 0);
  const auto a = nlohmann::json::parse(full.out)["steps"], b = nlohmann::json::parse(resumed.out)["steps"];
  REQUIRE(b.size() == 2);
  CHECK(b[0]["loss"].get<double>() == Approx(a[2]["loss"].get<double>()).epsilon(1e-6));
  CHECK(b[1]["loss"].get<double>() == Approx(a[3]["loss"].get<double>()).epsilon(1e-6));
  std::filesystem::remove_all(dir);
}
