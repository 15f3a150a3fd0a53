#include "plan/scenario.hpp"

#include <filesystem>
#include <numeric>

#include "plan/builtin.hpp"

namespace parallax::plan {
namespace {

const std::vector<std::string> kTopKeys = {"name", "model", "data", "parallel", "optimizer", "hardware"};
const std::vector<std::string> kDataKeys = {"source", "batch_size", "steps", "seed"};
const std::vector<std::string> kParallelKeys = {
    "data",      "pipeline",          "virtual",       "partition_len",   "chunks",
    "schedule",  "grad_accumulation", "bucket_cap_mb", "first_bucket_mb", "precision",
    "activation_checkpointing"};
const std::vector<std::string> kOptimizerKeys = {"kind", "lr", "momentum", "weight_decay"};
const std::vector<std::string> kScheduleNames = {"gpipe", "1f1b", "interleaved-1f1b"};

constexpr int64_t kMaxCount = 1 << 24;

void remember(Scenario& s, const Field& f) { s.places[f.path()] = f.where(); }

DataSpec parse_data(const Field& m, Scenario& s) {
  DataSpec d;
  if (!m.present()) return d;
  expect_keys(m, kDataKeys);
  if (m["source"].present()) d.source = to_choice(m["source"], {"synthetic", "fashion-mnist"});
  d.batch_size = static_cast<int>(int_or(m, "batch_size", d.batch_size, 1, kMaxCount));
  d.steps = static_cast<int>(int_or(m, "steps", d.steps, 1, kMaxCount));
  d.seed = static_cast<uint64_t>(int_or(m, "seed", 0, 0));
  remember(s, m["batch_size"]);
  remember(s, m["source"]);
  return d;
}

PartitionLen parse_partition_len(const Field& f) {
  PartitionLen p;
  if (!f.present()) return p;
  if (f.is_sequence()) {
    p.mode = PartitionLen::Mode::list;
    for (const Field& e : f.elements()) p.lens.push_back(static_cast<int>(to_int(e, 1, kMaxCount)));
    return p;
  }
  if (f.is_scalar() && f.node().Scalar() == "balanced") return p;
  if (f.is_scalar()) {
    try {
      p.per_stage = f.node().as<int>();
      p.mode = PartitionLen::Mode::per_stage;
    } catch (const YAML::Exception&) {
      p.per_stage = 0;
    }
  }
  if (p.mode != PartitionLen::Mode::per_stage || p.per_stage < 1)
    f.fail("'parallel.partition_len' must be a positive integer (layers per stage), a list of them, or \"balanced\"");
  return p;
}

ParallelSpec parse_parallel(const Field& m, Scenario& s) {
  ParallelSpec p;
  if (!m.present()) return p;
  expect_keys(m, kParallelKeys);
  for (const auto& key : kParallelKeys) remember(s, m[key]);
  remember(s, m);
  p.data = static_cast<int>(int_or(m, "data", 1, 1, kMaxCount));
  p.pipeline = static_cast<int>(int_or(m, "pipeline", 1, 1, kMaxCount));
  p.virtual_stages = static_cast<int>(int_or(m, "virtual", 1, 1, 1024));
  p.partition_len = parse_partition_len(m["partition_len"]);
  p.chunks = static_cast<int>(int_or(m, "chunks", 1, 1, kMaxCount));
  Field sched = m["schedule"];
  if (sched.present()) {
    const std::string v = to_string(sched);
    if (v.ends_with(".csv")) {
      p.schedule = ScheduleKind::csv;
      std::filesystem::path path(v);
      if (path.is_relative()) path = std::filesystem::path(m.doc().base_dir()) / path;
      p.schedule_csv = path.string();
    } else {
      const std::string k = to_choice(sched, {"gpipe", "1f1b", "interleaved-1f1b", "<file>.csv"});
      p.schedule = k == "gpipe" ? ScheduleKind::gpipe
                   : k == "1f1b" ? ScheduleKind::one_f_one_b
                                 : ScheduleKind::interleaved_1f1b;
    }
  }
  p.grad_accumulation = static_cast<int>(int_or(m, "grad_accumulation", 1, 1, kMaxCount));
  p.bucket_cap_mb = number_or(m, "bucket_cap_mb", 25, 0);
  p.first_bucket_mb = number_or(m, "first_bucket_mb", 1, 0);
  if (p.bucket_cap_mb <= 0) m["bucket_cap_mb"].fail("'parallel.bucket_cap_mb' must be > 0");
  if (m["precision"].present())
    p.precision = *precision_from_name(to_choice(m["precision"], {"fp32", "bf16", "fp16"}));
  p.activation_checkpointing = bool_or(m, "activation_checkpointing", false);
  return p;
}

OptimizerSpec parse_optimizer(const Field& m) {
  OptimizerSpec o;
  if (!m.present()) return o;
  expect_keys(m, kOptimizerKeys);
  if (m["kind"].present()) o.kind = to_choice(m["kind"], {"sgd", "adam", "adamw"});
  o.lr = number_or(m, "lr", o.lr, 0);
  o.momentum = number_or(m, "momentum", 0, 0);
  o.weight_decay = number_or(m, "weight_decay", 0, 0);
  if (o.momentum > 0 && o.kind != "sgd") m["momentum"].fail("'optimizer.momentum' applies to sgd only");
  return o;
}

[[noreturn]] void fail_at(const Scenario& s, const std::string& key, const std::string& message) {
  throw InputError(s.where(key), message);
}

}  // namespace

// Checks that need several values at once; each error points at the value to change.
void check_scenario(const Scenario& s) {
  const ParallelSpec& p = s.parallel;
  const int layers = static_cast<int>(s.layers.size());
  const int stages = p.stages();
  if (s.data.batch_size % p.chunks != 0)
    fail_at(s, "parallel.chunks", "data.batch_size (" + std::to_string(s.data.batch_size) +
                                      ") is not divisible by parallel.chunks (" + std::to_string(p.chunks) +
                                      "); chunks must divide the batch into equal micro-batches");
  if (p.pipeline > layers)
    fail_at(s, "parallel.pipeline", "parallel.pipeline (" + std::to_string(p.pipeline) +
                                        ") is larger than the model's " + std::to_string(layers) +
                                        " layers; every stage needs at least one layer");
  if (stages > layers)
    fail_at(s, "parallel.virtual", "pipeline x virtual = " + std::to_string(stages) +
                                       " stages, but the model has only " + std::to_string(layers) +
                                       " layers; every stage needs at least one layer");
  if (p.virtual_stages > 1 && p.schedule != ScheduleKind::interleaved_1f1b && p.schedule != ScheduleKind::csv)
    fail_at(s, "parallel.schedule", "parallel.virtual > 1 needs schedule: interleaved-1f1b (or a CSV schedule)");
  if (p.schedule == ScheduleKind::interleaved_1f1b) {
    const int rounds = std::max(1, p.chunks / p.pipeline);
    if (p.chunks % rounds != 0)
      fail_at(s, "parallel.chunks", "interleaved-1f1b needs chunks to be a multiple of its rounds (max(1, chunks / pipeline) = " +
                                        std::to_string(rounds) + "), as in PyTorch; got chunks " + std::to_string(p.chunks));
  }
  const PartitionLen& part = p.partition_len;
  if (part.mode == PartitionLen::Mode::per_stage && part.per_stage * stages != layers)
    fail_at(s, "parallel.partition_len",
            "partition_len " + std::to_string(part.per_stage) + " x " + std::to_string(stages) + " stages = " +
                std::to_string(part.per_stage * stages) + " layers, but the model has " + std::to_string(layers) +
                " layers; give a list (e.g. [5, 5]) or \"balanced\"");
  if (part.mode == PartitionLen::Mode::list) {
    const int sum = std::accumulate(part.lens.begin(), part.lens.end(), 0);
    if (static_cast<int>(part.lens.size()) != stages || sum != layers)
      fail_at(s, "parallel.partition_len",
              "partition_len lists " + std::to_string(part.lens.size()) + " stages covering " + std::to_string(sum) +
                  " layers, but the plan has " + std::to_string(stages) + " stages (pipeline x virtual) and the model " +
                  std::to_string(layers) + " layers; the list needs one entry per stage summing to the layer count");
  }
  if (!s.hardware.device.peak_tflops.count(p.precision))
    fail_at(s, "parallel.precision", std::string("hardware '") + s.hardware.name + "' (" + s.hardware.device.name +
                                         ") has no " + name(p.precision) + " peak; use a precision it lists");
  const int nodes = s.hardware.nodes_for(p.world_size());
  if (s.hardware.max_nodes && nodes > *s.hardware.max_nodes)
    fail_at(s, "parallel", "the plan needs " + std::to_string(p.world_size()) + " ranks = " + std::to_string(nodes) +
                               " nodes of " + std::to_string(s.hardware.devices_per_node) + " devices, but hardware '" +
                               s.hardware.name + "' caps nodes at " + std::to_string(*s.hardware.max_nodes));
  if (nodes > 1 && !s.hardware.network)
    fail_at(s, "hardware", "the plan needs " + std::to_string(nodes) + " nodes, but hardware '" + s.hardware.name +
                               "' has no 'network' between nodes");
}

const char* name(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::gpipe: return "gpipe";
    case ScheduleKind::one_f_one_b: return "1f1b";
    case ScheduleKind::interleaved_1f1b: return "interleaved-1f1b";
    case ScheduleKind::csv: return "csv";
  }
  return "?";
}

int OptimizerSpec::state_per_param() const {
  if (kind == "sgd") return momentum > 0 ? 1 : 0;
  return 2;
}

Location Scenario::where(const std::string& key_path) const {
  // Fall back to the nearest recorded parent, then to the file itself.
  for (std::string path = key_path;;) {
    auto it = places.find(path);
    if (it != places.end() && (it->second.line > 0 || !it->second.file.empty())) return it->second;
    const auto dot = path.rfind('.');
    if (dot == std::string::npos) break;
    path = path.substr(0, dot);
  }
  return Location{file, 1, 1};
}

Scenario parse_scenario(const YamlDocument& doc) {
  Scenario s;
  const Field root = Field::root(doc);
  expect_keys(root, kTopKeys);
  s.file = doc.file();
  s.name = string_or(root, "name", std::filesystem::path(doc.file()).stem().string());
  s.layers = parse_model(root["model"], &s.model_description);
  s.data = parse_data(root["data"], s);
  s.parallel = parse_parallel(root["parallel"], s);
  s.optimizer = parse_optimizer(root["optimizer"]);
  remember(s, root["hardware"]);
  s.hardware = resolve_hardware(root["hardware"]);
  // A key that is absent points at its section (or the top of the file) in later errors.
  if (!s.places.count("parallel")) s.places["parallel"] = root.where();
  check_scenario(s);
  return s;
}

YamlDocument scenario_document(const std::string& path, const std::vector<std::string>& overrides) {
  YamlDocument doc = [&] {
    if (!path.empty()) return YamlDocument::from_file(path);
    const BuiltinFile def = builtin_default_scenario();
    return YamlDocument::from_text(def.text, std::string("(built-in) scenarios/") + def.name + ".yaml");
  }();
  for (const auto& o : overrides) doc.apply_override(o);
  return doc;
}

Scenario load_scenario(const std::string& path, const std::vector<std::string>& overrides) {
  return parse_scenario(scenario_document(path, overrides));
}

std::vector<std::string> scenario_keys() {
  std::vector<std::string> keys = {"name", "hardware", "model.preset", "model.layers"};
  for (const auto& k : kDataKeys) keys.push_back("data." + k);
  for (const auto& k : kParallelKeys) keys.push_back("parallel." + k);
  for (const auto& k : kOptimizerKeys) keys.push_back("optimizer." + k);
  return keys;
}

}  // namespace parallax::plan
