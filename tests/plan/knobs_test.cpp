#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "plan/knobs.hpp"
#include "tests/test_util.hpp"

using namespace parallax;

namespace {
std::string source(const std::string& rel) { return std::string(PARALLAX_SOURCE_DIR) + "/" + rel; }

// A value other than the default for each knob, as YAML text.
const std::map<std::string, std::string> kOther = {
    {"parallel.data", "2"},          {"parallel.pipeline", "2"},          {"parallel.schedule", "1f1b"},
    {"parallel.virtual", "2"},             {"parallel.chunks", "4"},            {"parallel.partition_len", "[1, 2]"},
    {"parallel.bucket_cap_mb", "0.5"}, {"parallel.first_bucket_mb", "4"}, {"data.batch_size", "16"},
    {"parallel.grad_accumulation", "2"}, {"parallel.activation_checkpointing", "stage"}, {"parallel.precision", "bf16"},
    {"parallel.tensor", "2"},          {"parallel.sequence_parallel", "true"}, {"parallel.tensor_across_nodes", "true"},
    {"parallel.master_weights", "true"}, {"parallel.shard", "full"}, {"parallel.p2p", "megatron"},
    {"parallel.rank_order", "tp-pp-dp"},     {"parallel.context", "2"}, {"parallel.context_attention", "megatron"}, {"parallel.grad_reduce_in_bf16", "true"},
    {"parallel.tp_comm_overlap", "true"}, {"parallel.overlap_grad_reduce", "false"},
    {"parallel.shard_group", "4"}, {"parallel.reshard_after_forward", "false"}, {"parallel.expert", "2"},
    {"parallel.expert_tensor", "1"}, {"parallel.overlap_moe_expert_parallel_comm", "true"},
    {"parallel.recompute_modules", "[layernorm, moe_act]"}, {"parallel.reduce_scatter_every_microbatch", "true"},
    {"parallel.moe_token_dispatcher", "deepep"}, {"parallel.fp8_param_gather", "true"},
    {"parallel.ddp_buckets", "megatron"}, {"parallel.overlap_param_gather", "true"}, {"parallel.p2p_scatter_gather", "true"}};
}  // namespace

TEST_CASE("plan::knobs: every knob reads, writes and reads back its value", "[plan][knobs]") {
  REQUIRE(plan::knobs().size() == kOther.size());  // a new knob gets a value here too
  const plan::Settings defaults;
  for (const plan::Knob& k : plan::knobs()) {
    INFO(k.key);
    const plan::KnobValue def = k.get(defaults);
    CHECK(k.parse(k.format(def), plan::Location{"test"}) == def);
    const plan::KnobValue other = k.parse(kOther.at(k.key), plan::Location{"test"});
    CHECK(other != def);
    CHECK(k.format(other) == kOther.at(k.key));
    plan::Settings s;
    k.set(s, other);
    CHECK(k.get(s) == other);
    CHECK(plan::overrides(defaults, s) == plan::Overrides{{k.key, kOther.at(k.key)}});
    CHECK_FALSE(k.doc.empty());
  }
}

TEST_CASE("plan::knobs: a scenario with every knob changed by --set equals the typed values", "[plan][knobs]") {
  // Independently of the table: the file's parser, given the overrides as --set flags.
  const std::string file = source("scenarios/mlp-fashion-mnist-pipeline2.yaml");
  const plan::Scenario base = plan::load_scenario(file, {});
  plan::Settings want = plan::settings_of(base);
  want.schedule = schedule::ScheduleKind::gpipe;
  REQUIRE(base.parallel.schedule != want.schedule);
  REQUIRE(base.layers.size() == 4);
  want.chunks = 2;
  want.batch_size = 16;
  want.partition_len = plan::partition_of({1, static_cast<int>(base.layers.size()) - 1});
  want.bucket_cap_mb = 0.5;
  want.activation_checkpointing = plan::Recompute::stage;
  const plan::Overrides o = plan::overrides(plan::settings_of(base), want);
  CHECK(o.size() == 6);
  const plan::Scenario from_flags = plan::load_scenario(file, plan::set_flags(o));
  CHECK(plan::settings_of(from_flags) == want);
  CHECK(plan::settings_of(plan::with_settings(base, want)) == want);
  CHECK(plan::describe(o) == "schedule=gpipe, chunks=2, partition_len=[1, 3], bucket_cap_mb=0.5, batch_size=16, "
                             "activation_checkpointing=stage");
}

TEST_CASE("plan::knobs: an error names its knob as data, from the file, a flag, or a combination", "[plan][knobs]") {
  const std::string file = source("scenarios/mlp-fashion-mnist-pipeline2.yaml");
  auto key_of = [&](const std::vector<std::string>& sets) {
    try {
      plan::load_scenario(file, sets);
    } catch (const plan::InputError& e) {
      return e.key();
    }
    return std::string("(no error)");
  };
  CHECK(key_of({"parallel.chunks=x"}) == "parallel.chunks");
  CHECK(key_of({"parallel.chunks=7"}) == "parallel.chunks");  // does not divide the batch
  CHECK(key_of({"parallel.precision=fp8"}) == "parallel.precision");
  CHECK(key_of({"parallel.virtual=2"}) == "parallel.schedule");  // virtual needs an interleaved schedule
  CHECK(key_of({"parallel.partition_len=[1]"}) == "parallel.partition_len");
  const plan::Scenario base = plan::load_scenario(file, {});
  plan::Settings bad = plan::settings_of(base);
  bad.chunks = 7;
  try {
    plan::with_settings(base, bad);
    FAIL("accepted chunks that do not divide the batch");
  } catch (const plan::InputError& e) {
    CHECK(e.key() == "parallel.chunks");
    CHECK_THAT(e.message(), Catch::Contains("not divisible"));
  }
}

TEST_CASE("plan::knobs: a path from --set is relative to the working directory, one in a file to the file",
          "[plan][knobs]") {
  // The scenario lives in scenarios/; the profile in a folder of the working directory, named as
  // calibrate's last line and `tune --help` suggest.
  const std::filesystem::path dir = std::filesystem::current_path() / "knobs-test-profiles";
  std::filesystem::create_directories(dir);
  std::filesystem::copy_file(source("scenarios/hardware/cpu-host.yaml"), dir / "mine.yaml",
                             std::filesystem::copy_options::overwrite_existing);
  const std::string file = source("scenarios/mlp-fashion-mnist-pipeline2.yaml");
  const plan::Scenario s = plan::load_scenario(file, {"hardware=knobs-test-profiles/mine.yaml"});
  CHECK(s.hardware.name == plan::load_scenario(file, {"hardware=cpu-host"}).hardware.name);
  // In a file, the same text is relative to the file's folder: not found there.
  std::ofstream(dir / "scenario.yaml") << "model: {preset: mlp, layers: 2}\nhardware: knobs-test-profiles/mine.yaml\n";
  CHECK_THROWS_WITH(plan::load_scenario((dir / "scenario.yaml").string(), {}),
                    Catch::Contains((dir / "knobs-test-profiles" / "mine.yaml").string()));
  std::filesystem::remove_all(dir);
}

TEST_CASE("plan::knobs: docs/scenarios.md's knob table is what `parallax keys --markdown` prints", "[plan][knobs][docs]") {
  std::ifstream in(source("docs/scenarios.md"));
  REQUIRE(in);
  std::stringstream text;
  text << in.rdbuf();
  const std::string doc = text.str(), open = "<!-- knobs: parallax keys --markdown -->\n", close = "<!-- end knobs -->";
  const size_t from = doc.find(open), to = doc.find(close);
  REQUIRE(from != std::string::npos);
  REQUIRE(to != std::string::npos);
  const auto r = test::run_parallax("keys --markdown");
  REQUIRE(r.code == 0);
  CHECK(doc.substr(from + open.size(), to - from - open.size()) == r.out);
}
