// Runs the built `parallax` binary as a user would and checks exit codes and output streams.
#include <sys/wait.h>

#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include "cli/calibrate_command.hpp"
#include "cli/validate_command.hpp"
#include "fit/measure.hpp"
#include "fit/validation.hpp"
#include "plan/hardware.hpp"
#include "tests/test_util.hpp"
#include <sstream>

namespace {

using Result = parallax::test::CommandResult;

Result run(const std::string& args, const std::string& env = "", bool with_stderr = false) {
  return parallax::test::run_parallax(args, env, with_stderr);
}

std::string scenario(const std::string& name) { return std::string(PARALLAX_SOURCE_DIR) + "/scenarios/" + name; }

}  // namespace

TEST_CASE("cli: plan --json prints one object with the documented fields", "[cli]") {
  const auto r = run("plan --json");
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"layers", "ranks", "stages", "buckets", "microbatch_size", "chunks", "memory"})
    CHECK(j.contains(key));
  CHECK(j["chunks"] == 16);
  CHECK(j["microbatch_size"] == 2);
  CHECK(j["layers"][1]["params"][0]["name"] == "layers.0.self_attn.in_proj_weight");
  CHECK(j["stages"][0]["layers"].size() == 5);
}

TEST_CASE("cli: every shipped scenario gives a plan as JSON", "[cli]") {
  for (const auto& entry :
       std::filesystem::recursive_directory_iterator(std::string(PARALLAX_SOURCE_DIR) + "/scenarios")) {
    if (entry.path().extension() != ".yaml" || entry.path().parent_path().filename() == "hardware") continue;
    INFO(entry.path());
    const auto r = run("plan " + entry.path().string() + " --json");
    CHECK(r.code == 0);
    CHECK_NOTHROW(nlohmann::json::parse(r.out));
  }
}

TEST_CASE("cli: plan gives a MoE model's parameters a token uses beside its total, as its makers do", "[cli]") {
  // Mistral AI's Mixtral 8x7B: 46.7B parameters, 12.9B a token (its model card and paper);
  // Qwen3-30B-A3B: 30.5B and 3.3B (its model card).
  auto line = [](const std::string& model) {
    return run("plan --set model.hf_config=" + std::string(PARALLAX_SOURCE_DIR) + "/scenarios/models/" + model +
               " --set parallel.partition_len=balanced").out;
  };
  CHECK_THAT(line("mixtral-8x7b.json"), Catch::Contains("46702792704 parameters, 12879925248 a token uses"));
  CHECK_THAT(line("qwen3-30b-a3b.json"), Catch::Contains("30532122624 parameters, 3353032704 a token uses"));
  CHECK_THAT(line("llama-3.1-8b.json"), Catch::Contains("8030261248 parameters\n"));  // dense: one figure
}

TEST_CASE("cli: plan counts FSDP's all-gathers beside its reduce-scatters", "[cli]") {
  // Llama 3.1 8B's 8,030,261,248 parameters gathered in bf16 before each of its 34 units' forward
  // and again before its backward: 2 x 2 x 8,030,261,248 bytes = 29.92 GiB a micro-batch.
  const std::string fsdp = std::string(PARALLAX_SOURCE_DIR) + "/scenarios/llama-3.1-8b-64xH100-fsdp.yaml";
  CHECK_THAT(run("plan " + fsdp).out, Catch::Contains("stage 0: 68 a micro-batch (34 layers x 2), 29.92 GiB gathered"));
  CHECK_THAT(run("plan " + fsdp + " --set parallel.reshard_after_forward=false").out,
             Catch::Contains("stage 0: 34 a micro-batch (34 layers x 1), 14.96 GiB gathered"));
  CHECK_THAT(run("plan " + fsdp + " --set parallel.shard=gradients").out, !Catch::Contains("all-gathers"));
}

TEST_CASE("cli: plan says when a profile's GPU runs below its tables' clock", "[cli]") {
  const auto limited = run("plan --set hardware=h100-hbm2e-500w-nvlink-roce");
  REQUIRE(limited.code == 0);
  CHECK_THAT(limited.out, Catch::Contains("GEMMs and attention at 0.879 of its tables' clock (device.compute.clock_fraction)"));
  const auto rated = run("plan --set hardware=h100-nvlink-ib");
  REQUIRE(rated.code == 0);
  CHECK_THAT(rated.out, !Catch::Contains("clock_fraction"));
  // And the GEMMs' ceiling at the power limit, in the plan's precision: the profile's figure, scaled
  // by the clock where one is stated (755 x 0.879 = 663.6).
  const auto bf16 = run("plan --set hardware=h100-nvlink-ib --set parallel.precision=bf16");
  CHECK_THAT(bf16.out, Catch::Contains("GEMMs at most 755 TFLOP/s in bf16, what it sustains at its power limit"));
  const auto fp8 = run("plan --set hardware=h100-nvlink-ib --set parallel.precision=fp8");
  CHECK_THAT(fp8.out, Catch::Contains("GEMMs at most 1354 TFLOP/s in fp8"));
  const auto slower = run("plan --set hardware=h100-hbm2e-500w-nvlink-roce --set parallel.precision=bf16");
  CHECK_THAT(slower.out, Catch::Contains("GEMMs at most 664 TFLOP/s in bf16"));
  CHECK_THAT(rated.out, !Catch::Contains("sustained_tflops"));  // fp32: no ceiling stated
}

// An -o that names one of the command's own inputs would replace it (a scenario overwritten by a
// trace, a measured trace by its report): exit 2 before any work, the input as it was.
TEST_CASE("cli: an output never replaces the command's own input", "[cli]") {
  const auto dir = std::filesystem::temp_directory_path() / ("parallax-cli-over-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string job = (dir / "job.yaml").string();
  std::filesystem::copy_file(scenario("mlp-fashion-mnist-ddp2.yaml"), job);
  const auto text = [&] {
    std::ifstream in(job);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string before = text();
  const std::string same = (dir / "." / "job.yaml").string();  // the same file, spelled otherwise
  for (const std::string& command : {"simulate " + job + " -o " + same, "schedule " + job + " --csv " + same,
                                     "report " + job + " -o " + same, "tune " + job + " -o " + same,
                                     "run " + job + " -o " + same, "report --predicted " + same + " -o " + job,
                                     "run " + job + " --checkpoint-dir " + (dir / "ck").string() + " -o " + (dir / "ck").string()}) {
    INFO(command);
    const auto r = run(command, "", true);
    CHECK(r.code == 2);
    CHECK_THAT(r.out, Catch::Contains("the command also reads or writes") && Catch::Contains("write it elsewhere"));
    CHECK(text() == before);
  }
  std::filesystem::remove_all(dir);
}

// The files a scenario reads besides itself (a hardware profile, a Hugging Face config, a schedule
// CSV) are inputs too: an -o naming one of them exits 2 and leaves it as it was.
TEST_CASE("cli: an output never replaces a file the scenario reads", "[cli]") {
  const auto dir = std::filesystem::temp_directory_path() / ("parallax-cli-reads-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string profile = (dir / "profile.yaml").string(), config = (dir / "config.json").string();
  std::filesystem::copy_file(scenario("hardware/cpu-host.yaml"), profile);
  std::filesystem::copy_file(scenario("models/llama-3.1-8b.json"), config);
  const std::string job = (dir / "job.yaml").string(), llama = (dir / "llama.yaml").string();
  std::ofstream(job) << "model: {preset: mlp, layers: 4}\nparallel: {pipeline: 2, chunks: 4}\nhardware: ./profile.yaml\n";
  std::ofstream(llama) << "model: {hf_config: config.json, seq_len: 4096}\nparallel: {data: 8}\nhardware: h100-nvlink-ib\n";
  const std::string csv = (dir / "order.csv").string();
  REQUIRE(run("schedule " + job + " --csv " + csv).code == 0);
  const auto text = [](const std::string& path) {
    std::ifstream in(path);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  const std::string profile_before = text(profile), config_before = text(config), csv_before = text(csv);
  const std::string with_csv = job + " --set parallel.schedule=" + csv;
  for (const std::string& command : {"simulate " + job + " -o " + profile, "report " + job + " -o " + profile,
                                     "tune " + job + " -o " + profile, "run " + job + " -o " + profile,
                                     "simulate " + llama + " -o " + config, "simulate " + with_csv + " -o " + csv,
                                     "schedule " + with_csv + " --csv " + csv}) {
    INFO(command);
    const auto r = run(command, "", true);
    CHECK(r.code == 2);
    CHECK_THAT(r.out, Catch::Contains("the command also reads or writes") && Catch::Contains("write it elsewhere"));
  }
  CHECK(text(profile) == profile_before);
  CHECK(text(config) == config_before);
  CHECK(text(csv) == csv_before);
  std::filesystem::remove_all(dir);
}

// A figure out of scale (a forward of 1e300 us a sample) is bad input, said as such, where it had
// printed a step of 0.000 ms with exit 0; tune refuses the scenario as given the same way.
TEST_CASE("cli: a duration out of scale exits 2 and says which figures to check", "[cli]") {
  for (const std::string command : {"simulate ", "tune --max-configs 5 "}) {
    const auto r = run(command + scenario("interleaved-synthetic-ideal.yaml") + " --set model.fwd_us_per_sample=1e300", "", true);
    INFO(command);
    CHECK(r.code == 2);
    CHECK_THAT(r.out, Catch::Contains("parallax: a duration of 4e+294 s comes out of the scenario's and its hardware profile's figures") &&
                          Catch::Contains("out of scale"));
  }
}

TEST_CASE("cli: a word that names no command says so, and names the commands", "[cli]") {
  const auto r = run("whatif " + scenario("llama-3.1-70b-64xH100.yaml"), "", true);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("parallax: 'whatif' is not a command; the commands: plan, schedule, simulate, run") &&
                        Catch::Contains("calibrate --from-trace"));
  const auto typo = run("simualte", "", true);
  CHECK(typo.code == 2);
  CHECK_THAT(typo.out, Catch::Contains("'simualte' is not a command") && !Catch::Contains("calibrate --from-trace"));
  CHECK(run("plan").code == 0);  // a command still runs
}

TEST_CASE("cli: plan and simulate say how the profile's predictions held on published runs", "[cli]") {
  const std::string h100 = "--set hardware=h100-nvlink-ib";
  // The profile's own first entry, as plan::describe words it (its format: tests/plan/published_check_test.cpp;
  // its figures against the bench's raw output: the same file), so a bench rerun needs no edit here.
  const parallax::plan::PublishedCheck megatron = parallax::test::builtin_profile("h100-nvlink-ib").published_check.at(0);
  REQUIRE(megatron.runs_of == "Megatron-LM and NeMo");
  const std::string line = parallax::plan::describe(megatron) + " (bench/published_h100.sh";
  const auto planned = run("plan " + h100);
  REQUIRE(planned.code == 0);
  CHECK_THAT(planned.out, Catch::Contains("published  how h100-nvlink-ib's predictions held on published runs"));
  CHECK_THAT(planned.out, Catch::Contains(line));
  CHECK_THAT(planned.out, Catch::Contains("Megatron-core MoE, 17 runs"));
  const auto simulated = run("simulate " + h100);
  REQUIRE(simulated.code == 0);
  CHECK_THAT(simulated.out, Catch::Contains(line));
  const auto j = nlohmann::json::parse(run("simulate --json " + h100).out);
  REQUIRE(j["published_check"].size() == 2);
  CHECK(j["published_check"][0]["runs_of"] == "Megatron-LM and NeMo");
  CHECK(j["published_check"][0]["mean_error_percent"] == megatron.mean_error);
  // Throughput and MFU from the step time and the plan's model FLOPs (plan::model_work), on all its GPUs.
  const auto& tp = j["throughput"];
  const double seconds = j["step_time_ms"].get<double>() / 1e3, gpus = static_cast<double>(j["ranks"].size());  // tensor 1
  CHECK(tp["mfu"].get<double>() == Approx(tp["model_flops_per_step"].get<double>() / seconds / gpus / 989e12));
  CHECK(tp["tokens_per_s_per_gpu"].get<double>() > 0);
  CHECK_THAT(simulated.out, Catch::Contains("tokens/s per GPU; MFU "));
  // A CPU plan: samples (no sequence) a second per rank, and no MFU (no 16-bit GPU peak).
  const auto cpu = run("simulate " + std::string(PARALLAX_SOURCE_DIR) + "/scenarios/mlp-fashion-mnist-ddp2.yaml");
  CHECK_THAT(cpu.out, Catch::Contains("samples/s per rank\n") && !Catch::Contains("MFU"));
  // A torchtitan job on a profile checked on Megatron-LM's runs only: torchtitan's own, where they ran.
  const auto titan = run("simulate " + std::string(PARALLAX_SOURCE_DIR) + "/scenarios/llama-3.1-8b-64xH100-fsdp.yaml");
  const parallax::plan::PublishedCheck grand_teton = parallax::test::builtin_profile("h100-hbm2e-500w-nvlink-roce").published_check.at(0);
  REQUIRE(grand_teton.runs_of == "torchtitan");
  CHECK_THAT(titan.out, Catch::Contains("none of these ran torchtitan; its published runs, on the profiles of the GPUs they ran on:\n"
                                        "           h100-hbm2e-500w-nvlink-roce: " + parallax::plan::describe(grand_teton)));
  CHECK_THAT(run("simulate " + h100).out, !Catch::Contains("none of these ran"));  // no trainer named: nothing to add
  // A profile no published run was predicted on (the default scenario's T4s) prints none.
  CHECK_THAT(run("simulate").out, !Catch::Contains("published  "));
  CHECK(nlohmann::json::parse(run("simulate --json").out)["published_check"].empty());
}

// What F and B took beyond their kernels, on the pipeline rank whose F and B took longest: its
// compute actions' durations in the written trace (Megatron's order tp-dp-pp: that rank's first
// replica is tensor group pipeline rank x data), less its kernels as the kernels line gives them.
TEST_CASE("cli: simulate says what the longest pipeline rank's F and B took beyond their kernels", "[cli]") {
  const std::string llama = std::string(PARALLAX_SOURCE_DIR) + "/scenarios/llama-3.1-70b-64xH100.yaml";
  const auto trace = std::filesystem::temp_directory_path() / ("parallax-inside-" + std::to_string(::getpid()) + ".json");
  const auto j = nlohmann::json::parse(run("simulate " + llama + " --json -o " + trace.string()).out);
  const auto t = nlohmann::json::parse(std::ifstream(trace));
  std::filesystem::remove(trace);
  const auto& in = j["inside"];
  const int data = 2, pr = in["pipeline_rank"].get<int>();
  std::map<int, double> compute_ms;  // by pipeline rank
  for (const auto& e : t["traceEvents"]) {
    if (e.value("ph", "") != "X" || e.value("tid", -1) != 0 || e["pid"].get<int>() % data != 0) continue;
    const std::string kind = e.value("cat", "");
    if (kind == "F" || kind == "B" || kind == "I" || kind == "W" || kind == "OVERLAP_F_B") compute_ms[e["pid"].get<int>() / data] += e["dur"].get<double>() / 1e3;
  }
  for (const auto& [rank, ms] : compute_ms) CHECK(ms <= in["compute_ms"].get<double>() + 1e-6);  // the longest
  CHECK(compute_ms.at(pr) == Approx(in["compute_ms"].get<double>()).epsilon(1e-6));
  CHECK(in["kernels_ms"].get<double>() < in["compute_ms"].get<double>());
  CHECK_THAT(run("simulate " + llama).out, Catch::Contains("inside     pipeline rank " + std::to_string(pr) + "'s F and B took longest"));
}

TEST_CASE("cli: simulate splits the bubble into fill and drain and imbalance", "[cli]") {
  // Uniform stages on free links: the whole bubble is fill and drain, the textbook's 3/35.
  const auto ideal = run("simulate " + scenario("interleaved-synthetic-ideal.yaml"));
  CHECK_THAT(ideal.out, Catch::Contains("bubble     mean 8.6%: fill and drain 8.6% (the bubble of the rank with the most work; the textbook's "
                                        "for uniform stages 8.6%), imbalance 0.0%"));
  // Llama 3.1 70B: the last pipeline rank holds the output layer and the loss, and the others wait it out.
  const auto j = nlohmann::json::parse(run("simulate " + scenario("llama-3.1-70b-64xH100.yaml") + " --json").out);
  const double book = 3.0 / (5 * 64 + 3);  // (p-1)/(v m+p-1)
  CHECK(j["textbook_bubble_fraction"].get<double>() == Approx(book));
  CHECK(j["imbalance_fraction"].get<double>() > 2 * book);
  double most = 0;
  for (const auto& r : j["ranks"]) most = std::max(most, r["busy_ms"].get<double>() + r["exposed_comm_ms"].get<double>());
  for (const auto& r : j["ranks"])  // the work of the rank with the most beyond this one's
    CHECK(r["imbalance_fraction"].get<double>() * j["step_time_ms"].get<double>() ==
          Approx(most - r["busy_ms"].get<double>() - r["exposed_comm_ms"].get<double>()).margin(1e-6));
}

TEST_CASE("cli: plan and simulate say that a GPU pipeline at PyTorch's point-to-point is not Megatron-LM's", "[cli]") {
  const std::string hint = "framework  pytorch (torch.distributed.pipelining's point-to-point";
  const std::string pytorch = scenario("llama-3.1-70b-64xH100.yaml") + " --set framework=pytorch";
  for (const char* command : {"plan ", "simulate "}) {
    INFO(command);
    CHECK_THAT(run(command + pytorch).out, Catch::Contains(hint));
    CHECK_THAT(run(command + scenario("llama-3.1-70b-64xH100.yaml")).out, !Catch::Contains(hint));  // framework: megatron
    CHECK_THAT(run(command + pytorch + " --set parallel.p2p=megatron").out, !Catch::Contains(hint));
    CHECK_THAT(run(command + scenario("mlp-fashion-mnist-pipeline2.yaml")).out, !Catch::Contains(hint));  // on CPUs: Gloo's
  }
}

TEST_CASE("cli: bad input exits 2 with nothing on stdout", "[cli]") {
  for (const std::string args : {"plan /nonexistent.yaml", "plan --set parallel.chunks=3", "plan --bogus",
                                 "schedule --set parallel.schedule=zb --json", "frobnicate"}) {
    INFO(args);
    const auto r = run(args);
    CHECK(r.code == 2);
    CHECK(r.out.empty());
  }
}

TEST_CASE("cli: --help teaches every command and exits 0", "[cli]") {
  for (const std::string args : {"--help", "plan --help", "schedule --help"}) {
    const auto r = run(args);
    CHECK(r.code == 0);
    CHECK_THAT(r.out, Catch::Contains("--set") || Catch::Contains("plan"));
  }
}

TEST_CASE("cli: schedule --csv writes a file the scenario can read back", "[cli]") {
  const auto dir = parallax::test::temp_path("parallax_cli_test");
  std::filesystem::create_directories(dir);
  const std::string csv = (dir / "1f1b.csv").string();
  const auto r = run("schedule " + scenario("mlp-fashion-mnist-pipeline2.yaml") + " --csv " + csv + " --json");
  REQUIRE(r.code == 0);
  const auto direct = nlohmann::json::parse(r.out);
  const auto back = run("schedule " + scenario("mlp-fashion-mnist-pipeline2.yaml") + " --set parallel.schedule=" +
                        csv + " --json");
  REQUIRE(back.code == 0);
  CHECK(nlohmann::json::parse(back.out)["ranks"] == direct["ranks"]);
  // A CSV into a folder that does not exist: exit 2, no stray temporary file.
  CHECK(run("schedule --csv " + (dir / "no" / "x.csv").string()).code == 2);
  std::filesystem::remove_all(dir);
}

TEST_CASE("cli: an output path that names a folder exits 2 and writes nothing", "[cli]") {
  const auto dir = parallax::test::temp_path("parallax_cli_folder_test");
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / "out");
  const std::string mlp = scenario("mlp-fashion-mnist-pipeline2.yaml"), out = (dir / "out").string();
  for (const std::string& command : {"simulate " + mlp + " -o " + out, "simulate " + mlp + " -o " + out + "/",
                                     "report " + mlp + " -o " + out, "schedule " + mlp + " --csv " + out + "/"}) {
    INFO(command);
    const auto r = run(command, "", /*with_stderr=*/true);
    CHECK(r.code == 2);
    CHECK_THAT(r.out, Catch::Contains("is a folder"));
  }
  // Nothing beside the folder or in it: no temporary file left behind.
  CHECK(std::distance(std::filesystem::directory_iterator(dir), {}) == 1);
  CHECK(std::filesystem::is_empty(dir / "out"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("cli: simulate says what a step's compute kernels are, by kind, on a GPU with a compute model", "[cli]") {
  // Megatron-LM's 1.7B GPT of bench/data/megatron-gpt-h100.yaml, one stage, on h100-nvlink-ib.
  const std::string gpt = std::string(PARALLAX_SOURCE_DIR) + "/bench/data/megatron-gpt-h100.yaml";
  auto kernels = [&](const std::string& sets) {
    const auto r = run("simulate " + gpt + " --json" + sets);
    REQUIRE(r.code == 0);
    return nlohmann::json::parse(r.out)["kernels"];
  };
  const auto four = kernels("");
  REQUIRE(four.is_object());
  for (const char* kind : {"gemm_ms", "flash_ms", "memory_ms"}) CHECK(four[kind].get<double>() > 0);
  // The step's micro-batches, each of the same size: twice as many, twice each kind.
  const auto eight = kernels(" --set data.batch_size=8 --set parallel.chunks=8");
  for (const char* kind : {"gemm_ms", "flash_ms", "memory_ms"}) CHECK(eight[kind].get<double>() == Approx(2 * four[kind].get<double>()));
  // The kernels alone are less than the step, which also reduces gradients and steps the optimizer.
  const auto step = nlohmann::json::parse(run("simulate " + gpt + " --json").out)["step_time_ms"].get<double>();
  CHECK(four["gemm_ms"].get<double>() + four["flash_ms"].get<double>() + four["memory_ms"].get<double>() < step);
  // Two stages, the second holding three times the layers: its pipeline rank is the busier, and told.
  const auto uneven = kernels(" --set parallel.pipeline=2 --set parallel.data=24 --set parallel.partition_len=[7,19]");
  CHECK(uneven["pipeline_rank"] == 1);
  const auto text = run("simulate " + gpt);
  CHECK_THAT(text.out, Catch::Contains("kernels    a rank's F and B kernels over the step's 4 micro-batches") &&
                           Catch::Contains("GEMMs") && Catch::Contains("memory-bound"));
  // No compute model (a CPU profile): no line, null in JSON.
  const auto cpu = run("simulate " + scenario("mlp-fashion-mnist-ddp2.yaml") + " --json");
  CHECK(nlohmann::json::parse(cpu.out)["kernels"].is_null());
  CHECK_THAT(run("simulate " + scenario("mlp-fashion-mnist-ddp2.yaml")).out, !Catch::Contains("kernels  "));
}

TEST_CASE("cli: simulate --json has the documented fields, and -o writes a Perfetto-loadable trace", "[cli]") {
  const auto dir = parallax::test::temp_path("parallax_cli_sim");
  std::filesystem::create_directories(dir);
  const std::string trace = (dir / "predicted.json").string();
  const auto r = run("simulate " + scenario("mlp-fashion-mnist-ddp2.yaml") + " -o " + trace + " --json");
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  for (const char* key : {"step_time_ms", "bubble_fraction", "imbalance_fraction", "textbook_bubble_fraction", "ranks", "links", "critical_path", "events", "wall_ms", "fits"})
    CHECK(j.contains(key));
  for (const char* key : {"rank", "busy_ms", "bubble_ms", "bubble_fraction", "imbalance_fraction", "exposed_comm_ms", "peak_memory_mb"})
    CHECK(j["ranks"][0].contains(key));
  for (const char* key : {"name", "bytes", "avg_gbps", "utilization"}) CHECK(j["links"][0].contains(key));
  CHECK(j["step_time_ms"].get<double>() > 0);

  std::ifstream in(trace);
  const auto t = nlohmann::json::parse(in);
  CHECK(t["parallax"]["kind"] == "predicted");
  int complete = 0, names = 0, counters = 0;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] == "X") {
      ++complete;
      CHECK(e["args"].contains("action"));
    }
    if (e["ph"] == "M" && e["name"] == "thread_name") ++names;
    if (e["ph"] == "C") ++counters;
  }
  CHECK(complete > 0);
  CHECK(names == 2 * 6);  // 2 ranks x 6 lanes
  CHECK(counters > 0);    // link bandwidth over time
  // A missing folder is bad input: exit 2, nothing written.
  CHECK(run("simulate -o " + (dir / "no" / "t.json").string()).code == 2);
  CHECK_FALSE(std::filesystem::exists(dir / "no"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("cli: simulate flags a plan that does not fit", "[cli]") {
  const auto r = run("simulate " + scenario("gpipe-1b-4xA100.yaml") + " --set hardware=t4-pcie --set parallel.precision=fp16 --json");
  REQUIRE(r.code == 0);
  CHECK(nlohmann::json::parse(r.out)["fits"] == false);
}

TEST_CASE("cli: trace merges the ranks of a PyTorch profiler job", "[cli]") {
  const std::string dir = std::string(PARALLAX_SOURCE_DIR) + "/../shared/fixtures/kineto/";
  if (!std::filesystem::exists(dir)) parallax::test::skip("fixtures", "../shared/fixtures is not present");
  const auto r = run("trace " + dir + "sampled_rank-0.json.gz " + dir + "sampled_rank-1.json.gz --json");
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  REQUIRE(j["ranks"].size() == 2);
  bool nccl_lane = false;
  for (const auto& l : j["ranks"][1]["lanes"]) nccl_lane = nccl_lane || l["lane"].get<std::string>().ends_with(" nccl");
  CHECK(nccl_lane);
  CHECK(j["ranks"][0]["communication_ms"].get<double>() > 0);
  CHECK(j["steps"].size() == 4);  // two profiled steps on each rank
  // The kernels by kind. The figures were summed by a few lines of Python over the fixture's JSON
  // (events of cat kernel, gpu_memcpy and gpu_memset; their ts and dur), not by Parallax's reader,
  // each kernel classed by its own name: template arguments and parameter lists removed by regular
  // expressions, innermost first; "gemm" not in "fbgemm". The whole name had made FBGEMM's
  // embedding kernels GEMMs: 432 kernels, 156.793 ms.
  // (re.sub(r'<[^<>()]*>|\([^<>()]*\)', '', name) until it holds; then nccl, (?<!fb)gemm|gemv|cutlass|cublas|nvjet|xmma.)
  const auto& k = j["ranks"][0]["kernels"];
  std::map<std::string, std::pair<size_t, double>> kinds;
  for (const auto& kind : k["kinds"]) kinds[kind["kind"]] = {kind["kernels"].get<size_t>(), kind["ms"].get<double>()};
  CHECK(kinds.size() == 4);
  CHECK(kinds["gemm"].first == 368);
  CHECK(kinds["gemm"].second == Approx(67.458).margin(1e-3));
  CHECK(kinds["memory-bound"].first == 776);
  CHECK(kinds["memory-bound"].second == Approx(142.862).margin(1e-3));
  CHECK(kinds["communication"].second == Approx(396.199).margin(1e-3));
  CHECK(kinds["copy"].second == Approx(1.325).margin(1e-3));
  CHECK(k["busy_ms"].get<double>() == Approx(547.656).margin(1e-3));  // the union of every kernel's span
  CHECK(k["communication_overlapped_ms"].get<double>() == Approx(59.216).margin(1e-3));
  CHECK(k["top"][0]["kind"] == "communication");
  CHECK(j["ranks"][1]["kernels"]["kinds"].size() == 4);
  // A trace through a pipe is read as the file is (it had failed with "cannot make canonical path",
  // exit 1); the same rank in two files is refused, naming both (a copy had doubled the steps).
  const auto piped = parallax::test::run_shell("zcat " + dir + "sampled_rank-0.json.gz | " + PARALLAX_BINARY + " trace /dev/stdin --json");
  REQUIRE(piped.code == 0);
  CHECK(nlohmann::json::parse(piped.out)["ranks"][0]["kernels"] == k);
  const auto same_rank = parallax::test::run_shell("zcat " + dir + "sampled_rank-1.json.gz | " + PARALLAX_BINARY + " trace " + dir +
                                                   "sampled_rank-1.json.gz /dev/stdin 2>&1");
  CHECK(same_rank.code == 2);
  CHECK_THAT(same_rank.out, Catch::Contains("/dev/stdin: holds rank 1, as " + dir + "sampled_rank-1.json.gz does"));
  // Steps by rank, then step, whatever order the files come in.
  const auto swapped = nlohmann::json::parse(run("trace " + dir + "sampled_rank-1.json.gz " + dir + "sampled_rank-0.json.gz --json").out);
  std::vector<std::pair<int, int>> order;
  for (const auto& s : swapped["steps"]) order.emplace_back(s["rank"].get<int>(), s["step"].get<int>());
  CHECK(order == std::vector<std::pair<int, int>>{{0, 551}, {0, 552}, {1, 551}, {1, 552}});
  // A rank of another job (another world size in its distributedInfo) is not merged.
  const auto other_job = parallax::test::run_shell("zcat " + dir + "sampled_rank-1.json.gz | sed 's/\"world_size\": 128/\"world_size\": 64/' | " +
                                                   PARALLAX_BINARY + " trace " + dir + "sampled_rank-0.json.gz /dev/stdin 2>&1");
  CHECK(other_job.code == 2);
  CHECK_THAT(other_job.out, Catch::Contains("/dev/stdin: not of the job of"));
}

TEST_CASE("cli: trace counts a Parallax trace's lanes idle over the whole job, fill and drain included", "[cli]") {
  // Pipeline rank 1 starts after rank 0's first forward and ends before its last backward: its
  // compute lane's idle is its bubble and exposed communication, as simulate counts them.
  const auto trace = parallax::test::temp_path("parallax_cli_trace_idle.json");
  const auto sim = nlohmann::json::parse(run("simulate " + scenario("gpipe-transformer-2xT4.yaml") + " --json -o " + trace.string()).out);
  const auto j = nlohmann::json::parse(run("trace " + trace.string() + " --json").out);
  std::filesystem::remove(trace);
  const auto& rank1 = j["ranks"][1];
  CHECK(rank1["idle_over_ms"].get<double>() == Approx(sim["step_time_ms"].get<double>()));
  CHECK(rank1["span_ms"].get<double>() < rank1["idle_over_ms"].get<double>());
  double compute_idle = -1;
  for (const auto& l : rank1["lanes"])
    if (l["lane"] == "compute") compute_idle = l["idle_ms"].get<double>();
  CHECK(compute_idle == Approx(sim["ranks"][1]["bubble_ms"].get<double>() + sim["ranks"][1]["exposed_comm_ms"].get<double>()).epsilon(1e-6));
  CHECK(j["steps"][0]["rank"].is_null());  // a step of every rank
}

TEST_CASE("cli: trace and compare reject what they cannot read with exit 2", "[cli]") {
  const auto dir = parallax::test::temp_path("parallax_cli_trace");
  std::filesystem::create_directories(dir);
  const std::string bad = (dir / "bad.json").string();
  std::ofstream(bad) << "{\"traceEvents\": [";
  CHECK(run("trace " + bad).code == 2);
  CHECK(run("trace " + (dir / "missing.json").string()).code == 2);
  const std::string kineto = std::string(PARALLAX_SOURCE_DIR) + "/../shared/fixtures/kineto/sampled_rank-0.json.gz";
  if (std::filesystem::exists(kineto)) CHECK(run("compare " + kineto + " " + kineto).code == 2);
  std::filesystem::remove_all(dir);
}

TEST_CASE("cli: compare takes the prediction first and the run second, of one plan, or exits 2", "[cli]") {
  const auto dir = std::filesystem::temp_directory_path() / ("parallax_cli_compare_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  // A predicted trace, and the same trace marked as a run's (so the two hold the same actions).
  const std::string predicted = (dir / "predicted.json").string(), measured = (dir / "measured.json").string();
  REQUIRE(run("simulate " + scenario("mlp-fashion-mnist-pipeline2.yaml") + " -o " + predicted).code == 0);
  auto trace = nlohmann::json::parse(std::ifstream(predicted));
  trace["parallax"]["kind"] = "measured";
  std::ofstream(measured) << trace.dump();
  const auto same = run("compare " + predicted + " " + measured, "", true);
  CHECK(same.code == 0);
  CHECK_THAT(same.out, !Catch::Contains("warning"));
  // A prediction for other hardware than the run's: compared, with a warning.
  const std::string elsewhere = (dir / "elsewhere.json").string();
  REQUIRE(run("simulate " + scenario("mlp-fashion-mnist-pipeline2.yaml") + " --set hardware=a100-nvlink-ib -o " + elsewhere).code == 0);
  const auto machines = run("compare " + elsewhere + " " + measured, "", true);
  CHECK(machines.code == 0);
  CHECK_THAT(machines.out, Catch::Contains("warning: the prediction is for hardware 'a100-nvlink-ib', the run was on 'cpu-host'"));
  // A profile calibrated on the run's machine is named otherwise and keeps its base's device: no warning.
  const std::string calibrated_profile = (dir / "cpu-host-calibrated.yaml").string(), calibrated = (dir / "calibrated.json").string();
  {
    std::ifstream base(std::string(PARALLAX_SOURCE_DIR) + "/scenarios/hardware/cpu-host.yaml");
    std::stringstream text;
    text << base.rdbuf();
    std::string yaml = text.str();
    yaml.replace(yaml.find("name: cpu-host"), 14, "name: cpu-host-calibrated");
    std::ofstream(calibrated_profile) << yaml;
  }
  REQUIRE(run("simulate " + scenario("mlp-fashion-mnist-pipeline2.yaml") + " --set hardware=" + calibrated_profile + " -o " + calibrated).code == 0);
  const auto same_machine = run("compare " + calibrated + " " + measured, "", true);
  CHECK(same_machine.code == 0);
  CHECK_THAT(same_machine.out, !Catch::Contains("warning"));
  // A prediction of another plan (other chunks and schedule): its actions pair with nothing, its
  // error is the plans', not the model's. Refused, naming what differs.
  const std::string other_plan = (dir / "other_plan.json").string();
  REQUIRE(run("simulate " + scenario("mlp-fashion-mnist-pipeline2.yaml") + " --set parallel.chunks=4 --set parallel.schedule=gpipe -o " +
              other_plan).code == 0);
  const auto plans = run("compare " + other_plan + " " + measured, "", true);
  CHECK(plans.code == 2);
  CHECK_THAT(plans.out, Catch::Contains("a run of another plan than the prediction's (schedule: predicted gpipe, run 1f1b; chunks: predicted 4, run 8; micro-batch size: predicted 16, run 8)"));
  CHECK(run("report --predicted " + other_plan + " --measured " + measured + " -o " + (dir / "page.html").string()).code == 2);
  // Accumulation keeps chunks and micro-batch size, and doubles the micro-batches.
  const std::string accumulating = (dir / "accumulating.json").string();
  REQUIRE(run("simulate " + scenario("mlp-fashion-mnist-pipeline2.yaml") + " --set parallel.grad_accumulation=2 -o " + accumulating).code == 0);
  CHECK_THAT(run("compare " + accumulating + " " + measured, "", true).out, Catch::Contains("(grad_accumulation: predicted 2, run 1)"));
  // Another model (a layer's width), or another optimizer: named, and no partition hint, which
  // would not fit a model of other layers.
  const std::string wider = (dir / "wider.json").string(), adamw = (dir / "adamw.json").string();
  REQUIRE(run("simulate " + scenario("mlp-fashion-mnist-pipeline2.yaml") + " --set model.hidden=512 -o " + wider).code == 0);
  const auto model = run("compare " + wider + " " + measured, "", true);
  CHECK(model.code == 2);
  CHECK_THAT(model.out, Catch::Contains("(model: layer 'fc0' predicted with 401920 parameters, run with 200960"));
  const std::string deeper = (dir / "deeper.json").string();
  REQUIRE(run("simulate " + scenario("mlp-fashion-mnist-pipeline2.yaml") + " --set model.layers=4 --set 'parallel.partition_len=[3, 2]' -o " + deeper).code == 0);
  const auto layers = run("compare " + deeper + " " + measured, "", true);
  CHECK(layers.code == 2);
  CHECK_THAT(layers.out, Catch::Contains("(model: predicted 5 layers, run 4") && !Catch::Contains("partition_len"));
  REQUIRE(run("simulate " + scenario("mlp-fashion-mnist-pipeline2.yaml") + " --set 'optimizer={kind: adamw, lr: 0.001}' -o " + adamw).code == 0);
  CHECK_THAT(run("compare " + adamw + " " + measured, "", true).out, Catch::Contains("(optimizer: predicted adamw, run sgd)"));
  CHECK(run("report --predicted " + adamw + " --measured " + measured + " -o " + (dir / "page.html").string()).code == 2);
  CHECK_FALSE(std::filesystem::exists(dir / "page.html"));
  // A run missing a rank's actions (it stopped before writing its trace): the rank is named.
  const std::string short_of_one = (dir / "short.json").string();
  auto without_rank_1 = trace;
  without_rank_1["traceEvents"] = nlohmann::json::array();
  for (const auto& e : trace["traceEvents"])
    if (e.value("pid", 0) != 1) without_rank_1["traceEvents"].push_back(e);
  std::ofstream(short_of_one) << without_rank_1.dump();
  const auto missing = run("compare " + predicted + " " + short_of_one, "", true);
  CHECK(missing.code == 0);
  CHECK_THAT(missing.out, Catch::Contains("holds no actions of rank 1, which the prediction has"));
  // A run that trained no step (its trace holds the ranks' names and no action): no error of +0%.
  const std::string nothing = (dir / "nothing.json").string();
  auto no_actions = trace;
  no_actions["traceEvents"] = nlohmann::json::array();
  for (const auto& e : trace["traceEvents"])
    if (e.value("ph", "") == "M") no_actions["traceEvents"].push_back(e);
  std::ofstream(nothing) << no_actions.dump();
  const auto empty = run("compare " + predicted + " " + nothing, "", true);
  CHECK(empty.code == 2);
  CHECK_THAT(empty.out, Catch::Contains("holds no actions: the run it records trained no step"));
  // A file given twice would merge its actions twice.
  const auto twice = run("trace " + measured + " " + measured, "", true);
  CHECK(twice.code == 2);
  CHECK_THAT(twice.out, Catch::Contains("given twice"));
  // A prediction and a run are not one job's files; a profiler's trace beside Parallax's neither.
  const auto kinds = run("trace " + measured + " " + predicted, "", true);
  CHECK(kinds.code == 2);
  CHECK_THAT(kinds.out, Catch::Contains("(a Parallax measured trace of 'mlp-fashion-mnist-pipeline2', 2 ranks; this one: a Parallax "
                                        "predicted trace of 'mlp-fashion-mnist-pipeline2', 2 ranks)"));
  const std::string kineto = std::string(PARALLAX_SOURCE_DIR) + "/../shared/fixtures/kineto/sampled_rank-0.json.gz";
  if (std::filesystem::exists(kineto)) CHECK_THAT(run("trace " + measured + " " + kineto, "", true).out, Catch::Contains("this one: a kineto trace of 128 ranks)"));
  const auto swapped = run("compare " + measured + " " + predicted, "", true);
  CHECK(swapped.code == 2);
  CHECK_THAT(swapped.out, Catch::Contains("PREDICTED (the first trace) needs a predicted trace"));
  CHECK(run("compare " + predicted + " " + predicted).code == 2);
  // trace merges the files of one job, not a prediction with a run.
  const auto merged = run("trace " + predicted + " " + measured, "", true);
  CHECK(merged.code == 2);
  CHECK_THAT(merged.out, Catch::Contains("trace merges the files of one job"));
  // A run of another size: nothing to join rank by rank.
  const std::string other = (dir / "other.json").string();
  REQUIRE(run("simulate " + scenario("mlp-fashion-mnist-ddp4.yaml") + " -o " + other).code == 0);
  trace = nlohmann::json::parse(std::ifstream(other));
  trace["parallax"]["kind"] = "measured";
  std::ofstream(other) << trace.dump();
  const auto sizes = run("compare " + predicted + " " + other, "", true);
  CHECK(sizes.code == 2);
  CHECK_THAT(sizes.out, Catch::Contains("a run of 4 ranks, against a prediction of 2"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("cli: calibrate writes a profile that simulate uses, with measured layer costs", "[cli][exec]") {
  const auto dir = std::filesystem::temp_directory_path() / ("parallax-cal-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string profile = (dir / "here.yaml").string();
  // The probes run on --probe-with's model, not on the measured scenario's.
  const auto r = run("calibrate --quick --precision bf16 " + scenario("mlp-fashion-mnist-ddp2.yaml") + " -o " + profile +
                         " --probe-with " + scenario("mlp-fashion-mnist-pipeline2.yaml"),
                     "", true);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("linear 784x256 relu fp32"));
  CHECK_THAT(r.out, Catch::Contains("; mlp-fashion-mnist-pipeline2 (calibration probe"));
  CHECK_THAT(r.out, !Catch::Contains("mlp-fashion-mnist-ddp2 (calibration probe"));
  const auto doc = parallax::plan::YamlDocument::from_file(profile);
  const auto hw = parallax::plan::parse_hardware(parallax::plan::Field::root(doc));
  REQUIRE(hw.calibration);
  const auto* fc0 = hw.calibration->layer("linear 784x256 relu fp32");
  REQUIRE(fc0);
  // Forward at the plan's micro-batch (64) was measured, and backward costs more than forward.
  CHECK(fc0->forward.at(64) > 0);
  CHECK(fc0->backward.at(64) > fc0->forward.at(64));
  // What its forward keeps for the backward, counted on the CPU too: the ReLU's output (64 x 256
  // floats; the input is the layer before's), and at most the linear's output beside it.
  REQUIRE_FALSE(fc0->kept_bytes.empty());
  CHECK(fc0->kept_bytes.at(64) >= 64 * 256 * 4);
  CHECK(fc0->kept_bytes.at(64) <= 2 * 64 * 256 * 4);
  CHECK(hw.calibration->p2p.bandwidth_gb_per_s > 0);
  CHECK(hw.calibration->allgather.bandwidth_gb_per_s > 0);  // FSDP's gathers as the executor runs them
  // What compute beside a gather loses: some of the gather is waiting for the peer, not CPU work.
  CHECK(hw.calibration->allgather_cpu_share > 0);
  REQUIRE(hw.calibration->allgather_by_bytes.mb.size() >= 2);  // and the gathers by size, as measured
  CHECK(hw.calibration->allgather_by_bytes.at(1 << 20) > 0);
  // --precision bf16: the same layers measured under autocast too, each timed on its own.
  for (const char* sig : {"linear 784x256 relu bf16", "linear 256x256 relu bf16", "linear 256x10 bf16"}) {
    const auto* bf16 = hw.calibration->layer(sig);
    REQUIRE(bf16);
    CHECK(bf16->forward.at(64) > 0);
  }
  const auto sim = run("simulate " + scenario("mlp-fashion-mnist-ddp2.yaml") + " --set hardware=" + profile + " --json");
  REQUIRE(sim.code == 0);
  CHECK(nlohmann::json::parse(sim.out)["step_time_ms"].get<double>() > 0);
  // plan says when the plan's micro-batch lies past the sizes measured (--quick: the scenario's 64).
  const auto measured = run("plan " + scenario("mlp-fashion-mnist-ddp2.yaml") + " --set hardware=" + profile);
  CHECK_THAT(measured.out, !Catch::Contains("extrapolated"));
  const auto beyond = run("plan " + scenario("mlp-fashion-mnist-ddp2.yaml") + " --set hardware=" + profile + " --set data.batch_size=512");
  CHECK_THAT(beyond.out, Catch::Contains("3 layers' calibrated costs measured at micro-batches") &&
                             Catch::Contains("this plan's 512 is extrapolated along the line through the larger measured sizes"));
  // Layers the profile has not measured (another width) are named before validate runs anything.
  const auto other = run("validate " + scenario("mlp-fashion-mnist-ddp2.yaml") +
                             " --set model.hidden=128 --steps 3 --profile " + profile,
                         "", true);
  CHECK(other.code == 0);
  CHECK_THAT(other.out, Catch::Contains("3 layer signature(s) not in"));
  CHECK_THAT(other.out, Catch::Contains("parallax calibrate --precision fp32"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("cli: calibrate's default scenarios are the shipped ones wherever it starts", "[cli]") {
  // From another folder the checkout beside the binary is found (the probes would otherwise run
  // the built-in default, some twenty times slower a step).
  const auto here = std::filesystem::current_path();
  const auto elsewhere = std::filesystem::temp_directory_path() / ("parallax_cli_cwd_" + std::to_string(::getpid()));
  std::filesystem::create_directories(elsewhere);
  std::filesystem::current_path(elsewhere);
  const auto files = parallax::cli::default_calibration_scenarios();
  std::filesystem::current_path(here);
  std::filesystem::remove_all(elsewhere);
  CHECK(files.front().empty());  // the built-in default
  CHECK(std::any_of(files.begin(), files.end(), [](const std::string& f) { return f.find("accuracy/") != std::string::npos; }));
  CHECK(std::any_of(files.begin(), files.end(), [](const std::string& f) { return f.ends_with("mlp-fashion-mnist-ddp2.yaml"); }));
}

TEST_CASE("cli: calibrate refuses a scenario it cannot run, and bad profiles, with exit 2", "[cli]") {
  const auto r = run("calibrate " + scenario("interleaved-synthetic-ideal.yaml") + " -o /tmp/never-written.yaml", "", true);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("synthetic"));
  CHECK_FALSE(std::filesystem::exists("/tmp/never-written.yaml"));
  const auto fp16 = run("calibrate --precision bf16,fp16 " + scenario("mlp-fashion-mnist-ddp2.yaml") +
                        " -o /tmp/never-written.yaml", "", true);
  CHECK(fp16.code == 2);
  CHECK_THAT(fp16.out, Catch::Contains("--precision: 'fp16'"));
  CHECK_FALSE(std::filesystem::exists("/tmp/never-written.yaml"));
  const auto probe = run("calibrate " + scenario("mlp-fashion-mnist-ddp2.yaml") + " --probe-with " +
                         scenario("interleaved-synthetic-ideal.yaml") + " -o /tmp/never-written.yaml", "", true);
  CHECK(probe.code == 2);
  CHECK_THAT(probe.out, Catch::Contains("synthetic"));
  CHECK_FALSE(std::filesystem::exists("/tmp/never-written.yaml"));
  // --launch times a GPU's launches apart; on the CPU host there are none to part.
  const auto launch = run("calibrate --launch " + scenario("mlp-fashion-mnist-ddp2.yaml") + " -o /tmp/never-written.yaml", "", true);
  CHECK(launch.code == 2);
  CHECK_THAT(launch.out, Catch::Contains("--launch: --launch times a GPU's kernel launches"));
  CHECK_FALSE(std::filesystem::exists("/tmp/never-written.yaml"));
  const auto dir = std::filesystem::temp_directory_path() / ("parallax-badcal-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "bad.yaml") << "name: x\ndevice: {name: d, memory_gb: 1, peak_tflops: {fp32: 1}}\n"
                                     "node: {devices: 2, link: {bandwidth_gb_per_s: 1, latency_us: 1}}\n"
                                     "calibration: {backward_call_us: -3}\n";
  const auto bad = run("simulate --set hardware=" + (dir / "bad.yaml").string(), "", true);
  CHECK(bad.code == 2);
  CHECK_THAT(bad.out, Catch::Contains("bad.yaml:4:"));
  std::filesystem::remove_all(dir);
}

// validate's input, before anything runs: a missing scenario is named first (it had been hidden
// behind "no calibrated profile here"), a missing --profile is called that (not "give one with
// --profile"), and a --set hardware, which the profile would silently replace, is refused.
TEST_CASE("cli: validate names a missing scenario, a missing --profile, and refuses --set hardware", "[cli]") {
  const auto missing = run("validate no-such-scenario.yaml", "", true);
  CHECK(missing.code == 2);
  CHECK_THAT(missing.out, Catch::StartsWith("no-such-scenario.yaml: no scenario file here"));
  const auto profile = run("validate " + scenario("mlp-fashion-mnist-ddp2.yaml") + " --profile no-such-profile.yaml", "", true);
  CHECK(profile.code == 2);
  CHECK_THAT(profile.out, Catch::StartsWith("--profile no-such-profile.yaml: no such profile"));
  const auto hardware = run("validate " + scenario("mlp-fashion-mnist-ddp2.yaml") + " --set hardware=cpu-host --profile " +
                                std::string(PARALLAX_SOURCE_DIR) + "/scenarios/hardware/cpu-host.yaml",
                            "", true);
  CHECK(hardware.code == 2);
  CHECK_THAT(hardware.out, Catch::StartsWith("--set hardware=cpu-host: validate predicts with the calibrated profile"));
}

TEST_CASE("cli: validate runs each configuration of a sweep for real and ranks them", "[cli][exec]") {
  // Any profile will do for the machinery (calibrated ones are what users give it).
  const std::string profile = std::string(PARALLAX_SOURCE_DIR) + "/scenarios/hardware/cpu-host.yaml";
  const auto r = run("validate " + scenario("mlp-fashion-mnist-pipeline2.yaml") +
                     " --sweep parallel.chunks=2,4 --steps 3 --json --profile " + profile);
  REQUIRE(r.code == 0);
  const auto j = nlohmann::json::parse(r.out);
  REQUIRE(j["configurations"].size() == 2);
  double sum = 0;
  std::vector<double> predicted, measured;
  for (size_t i = 0; i < 2; ++i) {
    const auto& c = j["configurations"][i];
    CHECK(c["overrides"][0] == (i == 0 ? "parallel.chunks=2" : "parallel.chunks=4"));
    const double p = c["predicted_ms"], m = c["measured_ms"];
    CHECK(p > 0);
    CHECK(m > 0);
    CHECK(c["statistic"] == "undisturbed step (p20)");
    CHECK(c["steps"] == 3);
    REQUIRE(c["runs_ms"].size() == 1);
    CHECK(c["runs_ms"][0].get<double>() == Approx(m));  // one run: its own statistic
    CHECK(c["spread"].is_null());  // one run measures no spread (not a spread of 0)
    CHECK(c["median_ms"].get<double>() >= m);           // p20 of the steps is no more than their median
    CHECK(c["error"].get<double>() == Approx((p - m) / m));
    CHECK(c["ranks"].size() == 2);
    sum += std::abs((p - m) / m);
    predicted.push_back(p);
    measured.push_back(m);
  }
  CHECK(j["mape"].get<double>() == Approx(sum / 2));
  CHECK(j["median_spread_of_configurations"].is_null());
  // Two configurations: tau is +1 when both sides order them alike, -1 otherwise.
  REQUIRE(j["sweeps"].size() == 1);
  const double same = (predicted[0] - predicted[1]) * (measured[0] - measured[1]) > 0 ? 1.0 : -1.0;
  CHECK(j["sweeps"][0]["kendall_tau"].get<double>() == Approx(same));
  // One run each: the pair is resolved unless both measured alike.
  CHECK(j["sweeps"][0]["pairs"] == 1);
  if (j["sweeps"][0]["resolved_pairs"] == 1) CHECK(j["sweeps"][0]["kendall_tau_resolved"].get<double>() == Approx(same));
  // A profile with no calibration measured nothing: validate says so (it had said nothing).
  const auto said = run("validate " + scenario("mlp-fashion-mnist-pipeline2.yaml") + " --steps 3 --profile " + profile, "", true);
  CHECK_THAT(said.out, Catch::Contains("validate: warning: " + profile + " holds no calibration"));
}

TEST_CASE("cli: validate refuses what it cannot run with exit 2, before running anything", "[cli]") {
  const std::string pipe = scenario("mlp-fashion-mnist-pipeline2.yaml");
  const std::string profile = " --profile " + std::string(PARALLAX_SOURCE_DIR) + "/scenarios/hardware/cpu-host.yaml";
  const auto missing = run("validate " + pipe + " --profile /nonexistent/profile.yaml", "", true);
  CHECK(missing.code == 2);
  CHECK_THAT(missing.out, Catch::Contains("parallax calibrate"));
  const auto steps = run("validate " + pipe + " --steps 2" + profile, "", true);
  CHECK(steps.code == 2);
  CHECK_THAT(steps.out, Catch::Contains("--steps: Value 2 not in range 3"));
  const auto sweep = run("validate " + pipe + " --sweep parallel.chunks" + profile, "", true);
  CHECK(sweep.code == 2);
  CHECK_THAT(sweep.out, Catch::Contains("KEY=V1,V2"));
  const auto key = run("validate " + pipe + " --sweep parallel.chunkz=2,4" + profile, "", true);
  CHECK(key.code == 2);
  CHECK_THAT(key.out, Catch::StartsWith("--sweep parallel.chunkz=2: unknown key 'chunkz'"));  // the flag the user wrote
  // What the executor cannot run is found before the first run (chunks 2 would run first, and be lost).
  const auto predict_only = run("validate " + pipe + " --sweep parallel.chunks=2 --sweep parallel.p2p=megatron --steps 3" + profile, "", true);
  CHECK(predict_only.code == 2);
  CHECK_THAT(predict_only.out, Catch::StartsWith("--sweep parallel.p2p=megatron: ") && Catch::Contains("predict-only"));
  CHECK_THAT(predict_only.out, !Catch::Contains("validate: "));  // the banner before the runs: never reached
  const auto gpu = run("validate " + pipe + " --steps 3 --profile " + std::string(PARALLAX_SOURCE_DIR) + "/scenarios/hardware/a100-nvlink-ib.yaml", "", true);
  // These machines have no GPU: a CPU build says it has no CUDA, a CUDA build that it sees no GPU.
  CHECK(gpu.code == 2);
  CHECK_THAT(gpu.out, Catch::StartsWith("--profile "));
  const auto file = std::filesystem::temp_directory_path() / ("parallax-keep-" + std::to_string(::getpid()));
  std::ofstream(file) << "a file, not a folder\n";
  const auto keep = run("validate " + pipe + " --steps 3 --keep-traces " + file.string() + profile, "", true);
  CHECK(keep.code == 2);
  CHECK_THAT(keep.out, Catch::Contains("--keep-traces needs a folder"));
  std::filesystem::remove(file);
}

TEST_CASE("cli: validate names each sweep apart, and says when one has nothing to rank", "[cli]") {
  using parallax::fit::configurations;
  // A key swept twice is two sweeps; a scenario given twice is two scenarios.
  const auto twice = configurations({"a/s.yaml"}, {"parallel.chunks=2,4", "parallel.chunks=8,16"});
  REQUIRE(twice.size() == 4);
  CHECK(twice[0].sweep == twice[1].sweep);
  CHECK(twice[1].sweep != twice[2].sweep);
  CHECK(twice[2].sweep == twice[3].sweep);
  const auto same_file = configurations({"a/s.yaml", "a/s.yaml"}, {"parallel.chunks=2,4"});
  REQUIRE(same_file.size() == 4);
  CHECK(same_file[0].sweep != same_file[2].sweep);
  const auto same_stem = configurations({"a/s.yaml", "b/s.yaml"}, {"parallel.chunks=2,4"});
  CHECK(same_stem[0].sweep != same_stem[2].sweep);
  CHECK_THAT(same_stem[2].sweep, Catch::Contains("b/s.yaml"));
  CHECK(configurations({"a/s.yaml"}, {"parallel.chunks=2,4"})[0].sweep == "s parallel.chunks");  // the plain name unchanged
}

TEST_CASE("cli::kendall_tau_resolved: only pairs whose measured ranges do not overlap count", "[cli]") {
  // Measured ranges [10, 12], [11, 13], [30, 31]: the first two overlap, so 2 of the 3 pairs count.
  const std::vector<double> low = {10, 11, 30}, high = {12, 13, 31};
  const auto same = parallax::fit::kendall_tau_resolved({1, 2, 3}, low, high);
  CHECK(same.pairs == 3);
  CHECK(same.resolved == 2);
  CHECK(same.tau == Approx(1));
  // Predicting the unresolved pair backwards changes nothing; the third item first, both resolved pairs.
  CHECK(parallax::fit::kendall_tau_resolved({2, 1, 3}, low, high).tau == Approx(1));
  CHECK(parallax::fit::kendall_tau_resolved({2, 3, 1}, low, high).tau == Approx(-1));
  // One resolved pair right, one predicted as a tie: (1 + 0) / 2.
  CHECK(parallax::fit::kendall_tau_resolved({1, 3, 3}, low, high).tau == Approx(0.5));
  // Nothing resolved: 0, and says so.
  const auto none = parallax::fit::kendall_tau_resolved({1, 2}, {10, 11}, {12, 13});
  CHECK(none.resolved == 0);
  CHECK(none.tau == 0);
}

TEST_CASE("cli::kendall_tau: pairs in the same and in the opposite order", "[cli]") {
  CHECK(parallax::fit::kendall_tau({1, 2, 3, 4}, {10, 20, 30, 40}) == Approx(1));
  CHECK(parallax::fit::kendall_tau({1, 2, 3, 4}, {40, 30, 20, 10}) == Approx(-1));
  // One swapped pair of six: (5 - 1) / 6.
  CHECK(parallax::fit::kendall_tau({1, 2, 3, 4}, {1, 3, 2, 4}) == Approx(4.0 / 6));
}

TEST_CASE("cli: tune --validate leaves out what the executor cannot run", "[cli][exec]") {
  // Selective recompute is predict-only: with --validate it is not searched, so every run is real.
  const auto r = run("tune " + scenario("mlp-fashion-mnist-pipeline2.yaml") +
                         " --search parallel.activation_checkpointing=false,selective --search parallel.chunks=2"
                         " --fix parallel.precision --fix parallel.schedule --fix parallel.partition_len"
                         " --validate 1 --validate-steps 3 --json",
                     "", true);
  REQUIRE(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("leaving out parallel.activation_checkpointing selective (predict-only)"));
  CHECK_THAT(r.out, !Catch::Contains("\"selective\""));  // in no ranked or validated configuration
  // A searched key left with nothing to run is refused: it had been searched as if never named.
  const auto none = run("tune " + scenario("mlp-fashion-mnist-pipeline2.yaml") +
                            " --search parallel.activation_checkpointing=selective --validate 1 --validate-steps 3", "", true);
  CHECK(none.code == 2);
  CHECK_THAT(none.out, Catch::Contains("--search parallel.activation_checkpointing=selective: every value is predict-only"));
}

TEST_CASE("cli: tune keeps a Megatron-LM job to what Megatron-LM runs, and says so, and --any-trainer lifts it", "[cli]") {
  const std::string job = scenario("mlp-fashion-mnist-pipeline2.yaml") + " --set framework=megatron --json";
  const auto kept = run("tune " + job, "", false);
  REQUIRE(kept.code == 0);
  const auto k = nlohmann::json::parse(kept.out);
  CHECK(k["trainer"] == "megatron");
  for (const auto& row : k["ranked"]) {
    const std::string schedule = row["overrides"].value("parallel.schedule", "1f1b");  // unchanged: the scenario's 1F1B
    INFO(row["overrides"].dump());
    CHECK((schedule == "1f1b" || schedule == "interleaved-1f1b" || row["overrides"].value("parallel.pipeline", "2") == "1"));
  }
  const auto any = nlohmann::json::parse(run("tune " + job + " --any-trainer").out);
  CHECK(any["trainer"] == "none");
  CHECK(any["configs_total"].get<int>() > k["configs_total"].get<int>());
  CHECK_THAT(run("tune " + job, "", true).out, Catch::Contains("searching only what Megatron-LM runs"));
}

TEST_CASE("cli: tune --validate with nothing it can run says why, exit 2", "[cli]") {
  // Synthetic layers describe costs only: no configuration of this scenario runs for real.
  const auto r = run("tune " + scenario("interleaved-synthetic-ideal.yaml") + " --max-configs 20 --validate 1", "", true);
  CHECK(r.code == 2);
  CHECK_THAT(r.out, Catch::Contains("is synthetic") && Catch::Contains("cannot be run"));
}

// Restrictions that contradict each other, and flags that cannot work, exit 2 before the search.
TEST_CASE("cli: tune refuses a key restricted twice, too many threads and a GPU --validate here, before searching", "[cli]") {
  const std::string ddp4 = scenario("mlp-fashion-mnist-ddp4.yaml");
  const auto fixed = run("tune " + ddp4 + " --search parallel.data=2 --fix parallel.data", "", true);
  CHECK(fixed.code == 2);
  CHECK_THAT(fixed.out, Catch::StartsWith("--fix parallel.data: 'parallel.data' is restricted already by --search parallel.data=2"));
  const auto twice = run("tune " + ddp4 + " --search parallel.chunks=1 --search parallel.chunks=8", "", true);
  CHECK(twice.code == 2);
  CHECK_THAT(twice.out, Catch::Contains("restricted already by --search parallel.chunks=1"));
  CHECK(run("tune " + ddp4 + " --threads 100000", "", true).code == 2);
  // A100s cannot run here: said at once, not after the search (it had exited 1 after it).
  const auto gpu = run("tune " + scenario("gpipe-1b-4xA100.yaml") + " --validate 1", "", true);
  CHECK(gpu.code == 2);
  CHECK_THAT(gpu.out, Catch::Contains("trains on CUDA GPUs") && !Catch::Contains("configurations"));
  // Nothing valid: the example is the combination that got furthest through the checks, here the
  // trainer's refusal (chunks 1 fails earlier, on DualPipeV's micro-batches, but is not the cause),
  // and a rule of the crossed knobs says its reason.
  const auto dualpipe = run("tune " + scenario("llama-3.1-70b-64xH100.yaml") + " --search parallel.schedule=dualpipev", "", true);
  CHECK(dualpipe.code == 2);
  CHECK_THAT(dualpipe.out, Catch::Contains("e.g.: Megatron-LM runs 1F1B and interleaved 1F1B") && Catch::Contains("--any-trainer"));
  const auto experts = run("tune " + scenario("mlp-fashion-mnist-pipeline2.yaml") + " --search parallel.expert=2 --fix parallel.schedule"
                           " --fix parallel.virtual --fix parallel.pipeline --fix parallel.data", "", true);
  CHECK(experts.code == 2);
  CHECK_THAT(experts.out, Catch::Contains("e.g.: expert 2 needs a mixture-of-experts model"));
  // Nothing fits (70B, unsharded, on one GPU's memory a rank): exit 1, and --json still prints its
  // one object, saying why.
  const auto none = run("tune " + scenario("llama-3.1-70b-64xH100.yaml") +
                        " --set parallel.data=64 --set parallel.tensor=1 --set parallel.pipeline=1 --set parallel.virtual=1"
                        " --set parallel.schedule=1f1b --set parallel.partition_len=balanced --set data.batch_size=2"
                        " --set parallel.chunks=2 --set parallel.sequence_parallel=false --search parallel.tensor=1"
                        " --search parallel.pipeline=1 --search parallel.context=1 --json");
  CHECK(none.code == 1);
  const auto j = nlohmann::json::parse(none.out);
  CHECK(j["best"].is_null());
  CHECK(j["ranked"].empty());
  CHECK_THAT(j["none_fits"].get<std::string>(), Catch::Contains("fits device memory"));
}

// With --world the scenario as given holds other ranks than the pick: its speed-up says so.
TEST_CASE("cli: tune --world says the scenario as given ran on other ranks than the pick", "[cli]") {
  const auto wider = run("tune " + scenario("gpipe-1b-4xA100.yaml") + " --world 64 --max-configs 50");
  REQUIRE(wider.code == 0);
  CHECK_THAT(wider.out, Catch::Contains("the scenario as given (") && Catch::Contains(" ms on 4 ranks, the pick on 64)"));
  const auto same = run("tune " + scenario("gpipe-1b-4xA100.yaml") + " --max-configs 50");
  REQUIRE(same.code == 0);
  CHECK_THAT(same.out, !Catch::Contains("the pick on"));
}

TEST_CASE("cli: calibrate --tables measures a GPU and refuses what it cannot, with exit 2", "[cli]") {
  const auto cpu = run("calibrate --tables -o /tmp/never-written.yaml", "", true);
  CHECK(cpu.code == 2);
  CHECK_THAT(cpu.out, Catch::Contains("--tables measures a GPU") && Catch::Contains("'cpu-host'"));
  const auto t4 = run("calibrate --tables --base t4-pcie -o /tmp/never-written.yaml", "", true);  // no bf16 peak
  CHECK(t4.code == 2);
  CHECK_THAT(t4.out, Catch::Contains("no device.peak_tflops.bf16"));
  const auto with_scenario = run("calibrate --tables --base h100-nvlink-ib " + scenario("mlp-fashion-mnist-ddp2.yaml") +
                                     " -o /tmp/never-written.yaml", "", true);
  CHECK(with_scenario.code == 2);
  CHECK_THAT(with_scenario.out, Catch::Contains("takes no SCENARIO"));
  // These machines have no GPU: a CUDA build says so, a CPU build that it has no CUDA.
  const auto no_gpu = run("calibrate --tables --base a100-nvlink-ib -o /tmp/never-written.yaml", "", true);
  CHECK(no_gpu.code == 2);
  CHECK_THAT(no_gpu.out, Catch::Contains("--tables needs a GPU"));
  // --sizes: the grid's axes, checked before any GPU is looked for.
  for (const char* bad : {"8,4096", "4096", "1024,65536", "abc"}) {
    const auto r = run(std::string("calibrate --tables --base h100-nvlink-ib --sizes ") + bad + " -o /tmp/never-written.yaml", "", true);
    CHECK(r.code == 2);
    CHECK_THAT(r.out, Catch::Contains("--sizes"));
  }
  // --from-trace fits the job's own profile and measures nothing: what says what to measure is refused beside it.
  for (const char* measuring : {"--base h100-nvlink-ib", "--quick", "--precision bf16", "--tables"}) {
    const auto r = run(std::string("calibrate --from-trace t.json ") + measuring + " -o /tmp/never-written.yaml", "", true);
    CHECK(r.code == 2);
    CHECK_THAT(r.out, Catch::Contains("excludes --from-trace"));
  }
  // A folder that takes no file is found before the measuring, not after it.
  const auto proc = run("calibrate --quick " + scenario("mlp-fashion-mnist-ddp2.yaml") + " -o /proc/never-written.yaml", "", true);
  CHECK(proc.code == 2);
  CHECK_THAT(proc.out, Catch::Contains("cannot write here"));
  CHECK_THAT(proc.out, !Catch::Contains("measuring"));
  const auto sizes_alone = run("calibrate --sizes 1024,2048 -o /tmp/never-written.yaml", "", true);
  CHECK(sizes_alone.code == 2);
  CHECK_THAT(sizes_alone.out, Catch::Contains("--sizes: sets the GEMM grid of --tables"));
  const auto good_sizes = run("calibrate --tables --base a100-nvlink-ib --sizes 8192,1024,16384 -o /tmp/never-written.yaml", "", true);
  CHECK(good_sizes.code == 2);  // accepted, then no GPU here
  CHECK_THAT(good_sizes.out, Catch::Contains("--tables needs a GPU"));
  CHECK_FALSE(std::filesystem::exists("/tmp/never-written.yaml"));
}

TEST_CASE("cli: calibrate --from-trace fits a profile to a measured run, and simulate predicts with it",
          "[cli][exec]") {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("parallax-what-if-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string mlp = scenario("accuracy/mlp-pipeline2.yaml");
  const std::string sets = " --set parallel.chunks=4 --set data.steps=8";
  const std::string trace = (dir / "run.json").string(), fitted = (dir / "fitted.yaml").string();
  REQUIRE(run("run " + mlp + sets + " -o " + trace).code == 0);

  // The job's own profile file is an input: a fit written over it is refused, the file as it was.
  const std::string base = (dir / "base.yaml").string();
  std::filesystem::copy_file(scenario("hardware/cpu-host.yaml"), base);
  const auto over = run("calibrate --from-trace " + trace + " " + mlp + sets + " --set hardware=" + base + " -o " + base, "", true);
  CHECK(over.code == 2);
  CHECK_THAT(over.out, Catch::Contains("the command also reads or writes"));
  CHECK_FALSE(std::filesystem::exists(dir / "base.yaml.tmp"));
  // A CPU run fits a CPU profile only: on an H100's it would predict the CPU under the H100's name.
  const auto h100 = run("calibrate --from-trace " + trace + " " + mlp + sets + " --set hardware=h100-nvlink-ib -o " + base, "", true);
  CHECK(h100.code == 2);
  CHECK_THAT(h100.out, Catch::Contains("where the job's profile 'h100-nvlink-ib' describes NVIDIA H100") &&
                            Catch::Contains("a fit corrects the profile of the machine that ran; give that one (--set hardware=cpu-host"));

  const auto fit = run("calibrate --from-trace " + trace + " " + mlp + sets + " -o " + fitted, "", true);
  REQUIRE(fit.code == 0);
  CHECK_THAT(fit.out, Catch::Contains("fitted from the traces") && Catch::Contains("kept from cpu-host"));
  // Seven steps after the warm-up: the fit says what it rests on. The commands it suggests carry
  // the job's --set values (a 2-chunk plan of 8 steps is what the trace measured).
  CHECK_THAT(fit.out, Catch::Contains("the fit rests on ") && Catch::Contains("the statistic wants 20 or more"));
  CHECK_THAT(fit.out, Catch::Contains("--set 'parallel.chunks=4' --set 'data.steps=8' --set hardware=" + fitted));
  CHECK_THAT(fit.out, !Catch::Contains("no correction of"));
  // The fitted profile predicts the measured configuration as the report says...
  const auto again = run("simulate " + mlp + sets + " --set hardware=" + fitted + " --json");
  REQUIRE(again.code == 0);
  const double fitted_ms = nlohmann::json::parse(again.out)["step_time_ms"];
  char text[48];
  std::snprintf(text, sizeof text, "%.3f ms fitted", fitted_ms);
  CHECK_THAT(fit.out, Catch::Contains(text));
  // ...and the job's other configurations.
  CHECK(run("simulate " + mlp + " --set parallel.chunks=8 --set hardware=" + fitted).code == 0);
  // A job that capped its nodes ({profile, nodes}) keeps its cap in the commands: the fitted
  // profile is its base's text, whose cap (cpu-host: 1 node) is another.
  const std::string capped = (dir / "capped.yaml").string();
  const auto nodes = run("calibrate --from-trace " + trace + " " + mlp + sets + " --set 'hardware={profile: cpu-host, nodes: 2}' -o " +
                         capped, "", true);
  REQUIRE(nodes.code == 0);
  CHECK_THAT(nodes.out, Catch::Contains("--set 'hardware={profile: " + capped + ", nodes: 2}'"));
  CHECK(run("simulate " + mlp + " --set 'hardware={profile: " + capped + ", nodes: 2}'").code == 0);

  // A run of another model, or something that is not a measured run: exit 2, saying what differs.
  const auto other = run("calibrate --from-trace " + trace + " " + scenario("accuracy/transformer-pipeline2.yaml") +
                             " -o " + (dir / "other.yaml").string(), "", true);
  CHECK(other.code == 2);
  CHECK_THAT(other.out, Catch::Contains("not a run of this job") && Catch::Contains("layer"));
  CHECK_FALSE(std::filesystem::exists(dir / "other.yaml"));
  // One of a balanced scenario, whose partition the fit takes from the run: named as another model,
  // not as a partition given by --set.
  const auto balanced = run("calibrate --from-trace " + trace + " " + scenario("mlp-fashion-mnist-ddp2.yaml") + " -o " +
                                (dir / "other.yaml").string(), "", true);
  CHECK(balanced.code == 2);
  CHECK_THAT(balanced.out, Catch::Contains("not a run of this job: a run of 'acc-mlp-pipeline2' (4 layers), where this scenario's model has 3"));
  const auto chunks = run("calibrate --from-trace " + trace + " " + mlp + " --set parallel.chunks=2 -o " +
                              (dir / "other.yaml").string(), "", true);
  CHECK(chunks.code == 2);
  CHECK_THAT(chunks.out, Catch::Contains("4 chunks"));
  // The same model and layout with another optimizer (whose step the fit would carry) or data.
  const auto adam = run("calibrate --from-trace " + trace + " " + mlp + sets + " --set 'optimizer={kind: adam, lr: 0.01}' -o " +
                            (dir / "other.yaml").string(), "", true);
  CHECK(adam.code == 2);
  CHECK_THAT(adam.out, Catch::Contains("not a run of this job: the trace's optimizer is sgd, the scenario's adam"));
  const auto synthetic = run("calibrate --from-trace " + trace + " " + mlp + sets + " --set data.source=synthetic -o " +
                                 (dir / "other.yaml").string(), "", true);
  CHECK(synthetic.code == 2);
  CHECK_THAT(synthetic.out, Catch::Contains("the trace's data came from"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("cli: calibrate --from-trace takes a profiler job's files per rank as one run, and each file once", "[cli][fixtures]") {
  const std::string dir = std::string(PARALLAX_SOURCE_DIR) + "/../shared/fixtures/kineto/";
  if (!std::filesystem::exists(dir)) parallax::test::skip("fixtures", "../shared/fixtures is not present");
  const std::string job = std::string(PARALLAX_SOURCE_DIR) + "/bench/data/hta-sampled.yaml";
  const auto out = std::filesystem::temp_directory_path() / ("parallax-ranks-" + std::to_string(::getpid()) + ".yaml");
  const std::string rank0 = " --from-trace " + dir + "sampled_rank-0.json.gz", rank1 = " --from-trace " + dir + "sampled_rank-1.json.gz";
  const auto both = run("calibrate" + rank0 + rank1 + " " + job + " -o " + out.string(), "", true);
  REQUIRE(both.code == 0);
  CHECK_THAT(both.out, Catch::Contains("to 1 measured run(s)"));
  // Steps 551 and 552 across both ranks, each the first forward's start to the last optimizer's
  // end (575.062 and 599.333 ms): the profiled window starts at step 551 of a running job, so
  // neither is a warm-up (step 551 had been dropped as one); their 20th percentile.
  CHECK_THAT(both.out, Catch::Contains("measured   579.916 ms a step (undisturbed step (p20), 2 undisturbed steps"));
  const auto twice = run("calibrate" + rank0 + rank0 + " " + job + " -o " + out.string(), "", true);
  CHECK(twice.code == 2);
  CHECK_THAT(twice.out, Catch::Contains("given twice"));
  CHECK_THAT(both.out, !Catch::Contains("no correction of"));
  // The same files against a small MLP of as many ranks: every layer thousands of times its
  // profile's, which no profile is off by. Fitted, and said.
  const auto mlp = run("calibrate" + rank0 + rank1 + " " + std::string(PARALLAX_SOURCE_DIR) + "/scenarios/mlp-fashion-mnist-ddp2.yaml" +
                       " --set parallel.data=128 --set 'hardware={profile: a100-nvlink-ib, nodes: 16}' -o " + out.string(), "", true);
  REQUIRE(mlp.code == 0);
  CHECK_THAT(mlp.out, Catch::Contains("no correction of a100-nvlink-ib but the times of another job or machine"));
  CHECK_THAT(mlp.out, Catch::Contains("--set 'parallel.data=128' --set 'hardware={profile: " + out.string() + ", nodes: 16}'"));
  // A rank's file of a 128-GPU job is not a run of a one-GPU job.
  const auto other = run("calibrate" + rank0 + " " + std::string(PARALLAX_SOURCE_DIR) + "/bench/data/gpu-transformer.yaml -o " +
                         out.string(), "", true);
  CHECK(other.code == 2);
  CHECK_THAT(other.out, Catch::Contains("a run of 128 ranks") && Catch::Contains("not a run of this job"));
  std::filesystem::remove(out);
}

TEST_CASE("cli: calibrate --from-trace on an H200's traces says which actions waited on the host's launches", "[cli]") {
  // bench/results: one GPU's traced runs of bench/data/gpu-transformer.yaml (2026-11-27, docs/gpu.md).
  // In fp32 the host queues each action well ahead of the device; in bf16 the device waits on it.
  const std::string dir = std::string(PARALLAX_SOURCE_DIR) + "/bench/results/gpu-h200-2026-11-27/whatif/";
  const std::string job = std::string(PARALLAX_SOURCE_DIR) + "/bench/data/gpu-transformer.yaml";
  const auto out = std::filesystem::temp_directory_path() / ("parallax-launch-" + std::to_string(::getpid()) + ".yaml");
  const auto fp32 = run("calibrate --from-trace " + dir + "trace-fp32.json.gz " + job + " -o " + out.string());
  REQUIRE(fp32.code == 0);
  CHECK_THAT(fp32.out, Catch::Contains("kernel launches and the device's time"));
  CHECK_THAT(fp32.out, !Catch::Contains("bound by the launches"));
  const auto bf16 = run("calibrate --from-trace " + dir + "trace-bf16.json.gz " + job +
                        " --set parallel.precision=bf16 -o " + out.string());
  REQUIRE(bf16.code == 0);
  CHECK_THAT(bf16.out, Catch::Contains("F     launched in") && Catch::Contains("bound by the launches"));
  CHECK_THAT(bf16.out, Catch::Contains("the device waited on the host's launches"));
  // The profile says the precision it was fitted at; planned at another, plan and simulate say what
  // of the fit applies there.
  const std::string fitted_line = "was fitted to bf16 runs: at fp32 its layer factors do not apply";
  for (const char* command : {"plan ", "simulate "}) {
    INFO(command);
    CHECK_THAT(run(command + job + " --set hardware=" + out.string()).out, Catch::Contains(fitted_line));
    CHECK_THAT(run(command + job + " --set parallel.precision=bf16 --set hardware=" + out.string()).out, !Catch::Contains("fitted     "));
  }
  std::filesystem::remove(out);
}
