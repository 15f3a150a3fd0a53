#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "plan/executable.hpp"
#include "plan/scenario.hpp"
#include "tests/test_util.hpp"

using namespace parallax;
using test::parse_error;

namespace {
const std::string kGood =
    "name: t\n"                                        // line 1
    "model: {preset: mlp, layers: 2, hidden: 64}\n"    // line 2
    "data: {batch_size: 32}\n"                         // line 3
    "parallel:\n"                                      // line 4
    "  pipeline: 2\n"                                  // line 5
    "  chunks: 4\n"                                    // line 6
    "hardware: cpu-host\n";                            // line 7
}

TEST_CASE("plan::Scenario: defaults fill what the file leaves out", "[plan]") {
  const auto s = test::scenario_from(kGood);
  CHECK(s.parallel.data == 1);
  CHECK(s.parallel.virtual_stages == 1);
  CHECK(s.parallel.schedule == schedule::ScheduleKind::gpipe);
  CHECK(s.parallel.partition_len.mode == plan::PartitionLen::Mode::balanced);
  CHECK(s.parallel.bucket_cap_mb == 25);
  CHECK(s.parallel.first_bucket_mb == 1);
  CHECK(s.parallel.precision == plan::Precision::fp32);
  CHECK(s.layers.size() == 3);  // fc0, fc1, out
  CHECK(s.hardware.name == "cpu-host");
}

TEST_CASE("plan::Scenario: keys keep their places in copies, and a copy's new place stays its own", "[plan]") {
  const auto s = test::scenario_from(kGood);
  CHECK(s.where("parallel.chunks").line == 6);
  CHECK(s.where("parallel.data").line == s.where("parallel").line);  // not written: its parent's place
  plan::Scenario copy = s;
  CHECK(copy.where("parallel.chunks").line == 6);
  copy.places.set("parallel.chunks", plan::Location{"other.yaml", 40, 2});
  CHECK(copy.where("parallel.chunks").line == 40);
  CHECK(s.where("parallel.chunks").line == 6);
  CHECK(s.where("parallel.chunks").file == copy.where("model").file);
}

TEST_CASE("plan::Scenario: --set overrides any value, lists and maps included", "[plan]") {
  const auto s = test::scenario_from(kGood, {"parallel.chunks=8", "parallel.partition_len=[2, 1]",
                                             "optimizer.kind=adam", "hardware={profile: cpu-host, nodes: 1}"});
  CHECK(s.parallel.chunks == 8);
  CHECK(s.parallel.partition_len.lens == std::vector<int>{2, 1});
  CHECK(s.optimizer.kind == "adam");
}

TEST_CASE("plan::Scenario: each bad input names its line and column", "[plan]") {
  SECTION("unknown key, with a hint") {
    std::string yaml = kGood;
    yaml.replace(yaml.find("  chunks: 4"), 11, "  chunk: 4");
    const auto e = parse_error(yaml);
    CHECK_THAT(e, Catch::StartsWith("test.yaml:6:3: unknown key 'chunk'"));
    CHECK_THAT(e, Catch::Contains("did you mean 'chunks'"));
    CHECK_THAT(e, Catch::Contains("allowed: data, context, context_attention, expert, expert_tensor, pipeline, tensor, sequence_parallel"));
  }
  SECTION("wrong type") {
    std::string yaml = kGood;
    yaml.replace(yaml.find("chunks: 4"), 9, "chunks: four");
    CHECK_THAT(parse_error(yaml), Catch::StartsWith("test.yaml:6:11: 'parallel.chunks' must be an integer >= 1"));
  }
  SECTION("a key without a value is refused, not read as absent") {
    std::string yaml = kGood;
    yaml.replace(yaml.find("chunks: 4"), 9, "chunks:");
    CHECK_THAT(parse_error(yaml), Catch::StartsWith("test.yaml:6:3: 'parallel.chunks' has no value"));
  }
  SECTION("an infinite number (YAML's .inf) is no size, rate or time") {
    CHECK_THAT(test::parse_error(kGood, {"parallel.bucket_cap_mb=.inf"}),
               Catch::Contains("'parallel.bucket_cap_mb' must be a finite number, got '.inf'"));
  }
  SECTION("batch not divisible by chunks") {
    std::string yaml = kGood;
    yaml.replace(yaml.find("chunks: 4"), 9, "chunks: 5");
    CHECK_THAT(parse_error(yaml), Catch::StartsWith("test.yaml:6:11: data.batch_size (32) is not divisible"));
  }
  SECTION("partition_len that does not cover the layers") {
    std::string yaml = kGood + "";
    yaml.replace(yaml.find("  chunks: 4"), 11, "  chunks: 4\n  partition_len: [1, 1]");
    CHECK_THAT(parse_error(yaml), Catch::StartsWith("test.yaml:7:18: partition_len lists 2 stages covering 2 layers"));
    yaml.replace(yaml.find("[1, 1]"), 6, "2");
    CHECK_THAT(parse_error(yaml), Catch::StartsWith("test.yaml:7:18: partition_len 2 x 2 stages = 4 layers"));
  }
  SECTION("pipeline larger than the layer count") {
    std::string yaml = kGood;
    yaml.replace(yaml.find("pipeline: 2"), 11, "pipeline: 4");
    CHECK_THAT(parse_error(yaml), Catch::StartsWith("test.yaml:5:13: parallel.pipeline (4) is larger than the model's 3 layers"));
  }
  SECTION("missing hardware profile") {
    std::string yaml = kGood;
    yaml.replace(yaml.find("cpu-host"), 8, "tpu-v9");
    const auto e = parse_error(yaml);
    CHECK_THAT(e, Catch::StartsWith("test.yaml:7:11: unknown hardware profile 'tpu-v9'"));
    CHECK_THAT(e, Catch::Contains("t4-pcie"));
  }
  SECTION("a device kind other than cpu or cuda") {
    std::string yaml = kGood;
    yaml.replace(yaml.find("cpu-host"), 8,
                 "{name: x, device: {kind: tpu, memory_gb: 1, peak_tflops: {fp32: 1}}, "
                 "node: {devices: 1, link: {name: l, bandwidth_gb_per_s: 1, latency_us: 1}}}");
    const auto e = parse_error(yaml);
    CHECK_THAT(e, Catch::StartsWith("test.yaml:7:"));
    CHECK_THAT(e, Catch::Contains("cpu | cuda"));
  }
  SECTION("a profile file that does not exist") {
    std::string yaml = kGood;
    yaml.replace(yaml.find("cpu-host"), 8, "profiles/mine.yaml");
    CHECK_THAT(parse_error(yaml), Catch::StartsWith("test.yaml:7:11: hardware profile file"));
  }
  SECTION("unknown schedule and precision name the choices") {
    CHECK_THAT(parse_error(kGood, {"parallel.schedule=zb"}),
               Catch::Equals("--set parallel.schedule=zb: 'parallel.schedule' must be one of gpipe | 1f1b | "
                             "interleaved-1f1b | looped-bfs | interleaved-zero-bubble | zbv-zero-bubble | dualpipev | "
                             "<file>.csv, got 'zb'"));
    CHECK_THAT(parse_error(kGood, {"parallel.precision=fp4"}), Catch::Contains("fp32 | bf16 | fp16 | fp8"));
  }
  SECTION("a value from --set is blamed on the flag") {
    CHECK_THAT(parse_error(kGood, {"parallel.chunks=3"}), Catch::StartsWith("--set parallel.chunks=3: data.batch_size (32)"));
  }
  SECTION("a model with neither a preset nor layers (fuzzing found these ending in yaml-cpp's 'invalid node')") {
    for (const std::string model : {"model: {}", "model: {preset: }", "model: {preset: ~, layers: }"})
      CHECK_THAT(parse_error(model + "\nhardware: cpu-host\n"),
                 Catch::StartsWith("test.yaml:1:8: 'model' needs a 'preset' (mlp | transformer | synthetic) or a non-empty"));
  }
  SECTION("a layer count or width past the bounds (fuzzing found 69,935 transformer blocks taking seconds)") {
    CHECK_THAT(parse_error("model: {preset: transformer, layers: 69935}\nhardware: cpu-host\n"),
               Catch::StartsWith("test.yaml:1:38: 'model.layers' must be an integer >= 1 and <= 10000, got 69935"));
    CHECK_THAT(parse_error("model: {preset: mlp, hidden: 1099511627776}\nhardware: cpu-host\n"),
               Catch::StartsWith("test.yaml:1:30: 'model.hidden' must be an integer >= 1 and <= 1048576, got 1099511627776"));
  }
  SECTION("YAML syntax errors") {
    CHECK_THAT(parse_error("model: {preset: mlp\nhardware: x\n"), Catch::StartsWith("test.yaml:2:"));
  }
  SECTION("a key given twice in one map, at its second place (yaml-cpp would keep the first)") {
    std::string yaml = kGood;
    yaml.replace(yaml.find("  chunks: 4"), 11, "  chunks: 4\n  chunks: 8");
    CHECK_THAT(parse_error(yaml), Catch::StartsWith("test.yaml:7:3: 'parallel.chunks' is given twice (first at line 6)"));
    CHECK_THAT(parse_error("name: a\nname: b\n"), Catch::StartsWith("test.yaml:2:1: 'name' is given twice"));
  }
  SECTION("a second YAML document, at its start (yaml-cpp's Load would drop it)") {
    CHECK_THAT(parse_error(kGood + "---\nname: other\n"), Catch::StartsWith("test.yaml:8:1: a second YAML document ('---' after"));
    CHECK_THAT(parse_error(kGood + "...\nname: other\n"), Catch::StartsWith("test.yaml:8:1: a second YAML document ('...' after"));
    CHECK(parse_error("# a comment\n---\n" + kGood).empty());  // one document, its start marked
    CHECK(parse_error(kGood + "# ---\n  # ---\n...\n").empty());  // an end marker with nothing after it
  }
  SECTION("a required key left empty, at its own line") {
    CHECK_THAT(parse_error("model: {preset: synthetic, layers: 2, fwd_us_per_sample: }\nhardware: ideal\n"),
               Catch::StartsWith("test.yaml:1:") && Catch::Contains("'model.fwd_us_per_sample' is empty (null); it needs a value"));
  }
  SECTION("more ranks than Parallax plans (each degree alone is allowed)") {
    CHECK_THAT(parse_error(kGood, {"parallel.data=1048576"}), Catch::Contains("ranks; Parallax plans at most 1048576"));
  }
  SECTION("a node count beyond the profile's cap") {
    // At the --set that made the plan need them, not at the file's line it replaced.
    CHECK_THAT(parse_error(kGood, {"parallel.data=8"}), Catch::StartsWith("--set parallel.data=8: ") && Catch::Contains("caps nodes at 1"));
  }
  SECTION("precision the device lacks") {
    CHECK_THAT(parse_error(kGood, {"parallel.precision=fp16"}), Catch::Contains("has no fp16 peak"));
  }
}

TEST_CASE("plan::Scenario: --set needs key=value and a map to descend into", "[plan]") {
  CHECK_THAT(parse_error(kGood, {"parallel.chunks"}), Catch::StartsWith("--set parallel.chunks: expected key.path=value"));
  CHECK_THAT(parse_error(kGood, {"hardware.nodes.x=1"}), Catch::Contains("'hardware' is not a map"));
  // A misspelt section that only a flag made is the flag's error, not the file's.
  CHECK_THAT(parse_error(kGood, {"paralel.chunks=8"}), Catch::StartsWith("--set paralel.chunks=8: unknown key 'paralel' at the top level"));
  // A key of a section given at the top level: the section's key is offered.
  CHECK_THAT(parse_error(kGood, {"precision=bf16"}), Catch::Contains("unknown key 'precision' at the top level (did you mean 'parallel.precision'?)"));
  // An empty value (an unset shell variable: --set parallel.pipeline=$PP) would be YAML's null and
  // plan the key's default instead of the file's 2.
  CHECK_THAT(parse_error(kGood, {"parallel.pipeline="}), Catch::StartsWith("--set parallel.pipeline=: no value after '='"));
  CHECK_THAT(parse_error(kGood, {"parallel= "}), Catch::StartsWith("--set parallel= : no value after '='"));
  for (const char* null : {"~", "null", "#2"})
    CHECK_THAT(parse_error(kGood, {std::string("parallel.pipeline=") + null}), Catch::Contains("is YAML's null, no value for 'parallel.pipeline'"));
  // A list's element given by a flag is the flag's error, not the file's first line.
  CHECK_THAT(parse_error(kGood, {"parallel.partition_len=[0, 2]"}),
             Catch::StartsWith("--set parallel.partition_len=[0, 2]: ") && Catch::Contains("partition_len[0]"));
}

TEST_CASE("plan::Scenario: a bound that excludes its end says so whatever the value", "[plan]") {
  // bucket_cap_mb must be > 0: -5 and 0 get the one message (-5 had said '>= 0').
  CHECK_THAT(parse_error(kGood, {"parallel.bucket_cap_mb=-5"}), Catch::Contains("'parallel.bucket_cap_mb' must be > 0, got -5"));
  CHECK_THAT(parse_error(kGood, {"parallel.bucket_cap_mb=0"}), Catch::Contains("'parallel.bucket_cap_mb' must be > 0, got 0"));
}

TEST_CASE("plan::Scenario: every shipped scenario resolves", "[plan]") {
  const std::filesystem::path dir = std::filesystem::path(PARALLAX_SOURCE_DIR) / "scenarios";
  int count = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".yaml") continue;
    INFO(entry.path().string());
    const auto p = plan::resolve_plan(plan::load_scenario(entry.path().string(), {}));
    CHECK(p.stages.size() == static_cast<size_t>(p.scenario.parallel.stages()));
    ++count;
  }
  CHECK(count >= 7);
}

TEST_CASE("plan::Scenario: docs/scenarios.md documents every key the parser accepts", "[plan][docs]") {
  std::ifstream in(std::filesystem::path(PARALLAX_SOURCE_DIR) / "docs" / "scenarios.md");
  REQUIRE(in);
  std::stringstream text;
  text << in.rdbuf();
  for (const auto& key : plan::scenario_keys()) {
    INFO(key);
    CHECK_THAT(text.str(), Catch::Contains("`" + key + "`"));
  }
}

TEST_CASE("plan::check_executable: refuses synthetic layers, predict-only knobs, and fp16 on the CPU only", "[plan]") {
  CHECK_THROWS_AS(plan::check_executable(test::scenario_from(test::synthetic_scenario(4, 2, 2, "gpipe"))), plan::InputError);
  CHECK_THROWS_WITH(plan::check_executable(test::scenario_from("model: {preset: mlp}\nparallel: {precision: fp16}\nhardware: ideal\n")),
                    Catch::Contains("fp16 cannot run on the CPU"));
  // On a CUDA profile fp16 trains with a loss scaler (a missing GPU is check_device's to say).
  CHECK_NOTHROW(plan::check_executable(test::scenario_from("model: {preset: mlp}\nparallel: {precision: fp16}\nhardware: t4-pcie\n")));
  CHECK_THROWS_WITH(plan::check_executable(test::scenario_from("model: {preset: transformer, layers: 2, hidden: 16, heads: 2, ffn: 32, seq_len: 6, vocab: 30}\nparallel: {tensor: 2}\nhardware: ideal\n")),
                    Catch::Contains("parallel.tensor") && Catch::Contains("predict-only"));
  CHECK_THROWS_WITH(plan::check_executable(test::scenario_from("model: {preset: transformer, layers: 2, hidden: 16, heads: 2, ffn: 32, seq_len: 6, vocab: 30, loss: fused}\nhardware: ideal\n")),
                    Catch::Contains("model.loss") && Catch::Contains("predict-only"));
  CHECK(plan::executable(test::scenario_from("model: {preset: mlp}\nhardware: ideal\n")));
  CHECK_FALSE(plan::executable(test::scenario_from(test::synthetic_scenario(4, 2, 2, "gpipe"))));
}
