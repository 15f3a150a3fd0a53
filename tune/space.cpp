#include "tune/space.hpp"

#include <algorithm>
#include <cmath>

#include "plan/calibration.hpp"
#include "plan/yaml_reader.hpp"

namespace parallax::tune {
namespace {

[[noreturn]] void fail(const std::string& flag, const std::string& message) {
  throw plan::InputError(plan::Location{flag}, message);
}

int to_positive_int(const std::string& flag, const std::string& v) {
  size_t used = 0;
  int n = 0;
  try {
    n = std::stoi(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || n < 1) fail(flag, "'" + v + "' is not a positive integer");
  return n;
}

double to_positive_number(const std::string& flag, const std::string& v) {
  size_t used = 0;
  double x = 0;
  try {
    x = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != v.size() || !(x > 0) || std::isinf(x)) fail(flag, "'" + v + "' is not a positive number");
  return x;
}

plan::ScheduleKind to_schedule(const std::string& flag, const std::string& v) {
  if (v == "gpipe") return plan::ScheduleKind::gpipe;
  if (v == "1f1b") return plan::ScheduleKind::one_f_one_b;
  if (v == "interleaved-1f1b") return plan::ScheduleKind::interleaved_1f1b;
  fail(flag, "'" + v + "' is not a schedule the tuner searches; use gpipe, 1f1b or interleaved-1f1b");
}

// Whether a calibrated profile measured every layer of `s` at `precision`.
bool measured_at(const plan::Scenario& s, plan::Precision precision) {
  const auto& cal = s.hardware.calibration;
  return cal && !s.layers.empty() && plan::unmeasured_signatures(*cal, s.layers, precision).empty();
}

}  // namespace

std::vector<int> divisors(int n) {
  std::vector<int> out;
  for (int d = 1; d <= n; ++d)
    if (n % d == 0) out.push_back(d);
  return out;
}

std::vector<int> parse_partition(const std::string& flag, const std::string& v) {
  if (v == "balanced") return {};
  YAML::Node n;
  try {
    n = YAML::Load(v);
  } catch (const YAML::Exception&) {
  }
  if (!n.IsSequence() || n.size() == 0)
    fail(flag, "'" + v + "' is not a partition: give \"balanced\" or a list of layers per stage, e.g. [4, 6]");
  std::vector<int> lens;
  for (const auto& e : n) lens.push_back(to_positive_int(flag, e.Scalar()));
  return lens;
}


const std::vector<std::string>& search_keys() {
  static const std::vector<std::string> keys = {
      "parallel.data",          "parallel.pipeline",     "parallel.schedule",
      "parallel.virtual",       "parallel.chunks",       "parallel.partition_len",
      "parallel.bucket_cap_mb", "parallel.first_bucket_mb", "parallel.grad_accumulation",
      "parallel.activation_checkpointing", "parallel.precision"};
  return keys;
}

std::vector<std::string> split_values(const std::string& text) {
  std::vector<std::string> out(1);
  int depth = 0;
  for (char ch : text) {
    if (ch == ',' && depth == 0) {
      out.emplace_back();
      continue;
    }
    depth += ch == '[' ? 1 : ch == ']' ? -1 : 0;
    if (ch != ' ' || depth > 0) out.back() += ch;
  }
  return out;
}

Space default_space(const plan::Scenario& s, int world) {
  Space sp;
  sp.world = world > 0 ? world : s.parallel.world_size();
  const int layers = static_cast<int>(s.layers.size());
  for (int p : divisors(sp.world)) {
    if (p > layers) continue;
    sp.pipeline.push_back(p);
    sp.data.push_back(sp.world / p);
  }
  std::sort(sp.data.begin(), sp.data.end());
  sp.schedules = {plan::ScheduleKind::gpipe, plan::ScheduleKind::one_f_one_b, plan::ScheduleKind::interleaved_1f1b};
  sp.virtual_stages = {2, 4};
  // DDP's bucket size on a log grid (PyTorch's default, 25, is on it), and the first bucket.
  sp.bucket_caps = {1, 2, 5, 10, 25, 50, 100, 200, 400};
  sp.first_buckets = {1, 4};
  // Accumulation changes the optimizer's batch statistics per step; only when asked for.
  sp.accumulations = {s.parallel.grad_accumulation};
  sp.checkpointing = {false, true};
  // The device's precisions; with a profile calibrated for this model, only those it measured: a
  // precision costed from the peak figures would race measured ones (on this project's CPUs a bf16
  // layer took 15-50x its fp32 time where the peaks say 1x, so the tuner picked bf16).
  const bool calibrated = measured_at(s, s.parallel.precision);
  for (const auto& [precision, peak] : s.hardware.device.peak_tflops)
    if (!calibrated || measured_at(s, precision)) sp.precisions.push_back(precision);
  std::sort(sp.precisions.begin(), sp.precisions.end());
  return sp;
}

void search(Space* sp, const std::string& assignment) {
  const std::string flag = "--search " + assignment;
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == assignment.size())
    fail(flag, "expected KEY=V1,V2,... (e.g. --search parallel.chunks=4,8,16)");
  const std::string key = assignment.substr(0, eq);
  const auto& keys = search_keys();
  if (std::find(keys.begin(), keys.end(), key) == keys.end())
    fail(flag, "'" + key + "' is not a key the tuner searches; it searches " + plan::join(keys));
  std::vector<std::string> values = split_values(assignment.substr(eq + 1));
  for (const auto& v : values)
    if (v.empty()) fail(flag, "an empty value in the list");
  auto ints = [&] {
    std::vector<int> out;
    for (const auto& v : values) out.push_back(to_positive_int(flag, v));
    return out;
  };
  auto numbers = [&] {
    std::vector<double> out;
    for (const auto& v : values) out.push_back(to_positive_number(flag, v));
    return out;
  };
  if (key == "parallel.data") {
    sp->data = ints();
    sp->pipeline.clear();
    for (int d : sp->data) {
      if (sp->world % d != 0)
        fail(flag, "data " + std::to_string(d) + " does not divide the world of " + std::to_string(sp->world) +
                       " ranks (set it with --world)");
      sp->pipeline.push_back(sp->world / d);
    }
  } else if (key == "parallel.pipeline") {
    sp->pipeline = ints();
    sp->data.clear();
    for (int p : sp->pipeline) {
      if (sp->world % p != 0)
        fail(flag, "pipeline " + std::to_string(p) + " does not divide the world of " + std::to_string(sp->world) +
                       " ranks (set it with --world)");
      sp->data.push_back(sp->world / p);
    }
  } else if (key == "parallel.schedule") {
    sp->schedules.clear();
    for (const auto& v : values) sp->schedules.push_back(to_schedule(flag, v));
  } else if (key == "parallel.virtual") {
    sp->virtual_stages = ints();
  } else if (key == "parallel.chunks") {
    sp->chunks = ints();
  } else if (key == "parallel.partition_len") {
    sp->partitions.clear();
    for (const auto& v : values) sp->partitions.push_back(parse_partition(flag, v));
  } else if (key == "parallel.bucket_cap_mb") {
    sp->bucket_caps = numbers();
  } else if (key == "parallel.first_bucket_mb") {
    sp->first_buckets = numbers();
  } else if (key == "parallel.grad_accumulation") {
    sp->accumulations = ints();
  } else if (key == "parallel.activation_checkpointing") {
    sp->checkpointing.clear();
    for (const auto& v : values) {
      if (v != "true" && v != "false") fail(flag, "'" + v + "' is not true or false");
      sp->checkpointing.push_back(v == "true");
    }
  } else if (key == "parallel.precision") {
    sp->precisions.clear();
    for (const auto& v : values) {
      const auto p = plan::precision_from_name(v);
      if (!p) fail(flag, "'" + v + "' is not a precision; use fp32, bf16 or fp16");
      sp->precisions.push_back(*p);
    }
  }
  std::sort(sp->data.begin(), sp->data.end());
  sp->data.erase(std::unique(sp->data.begin(), sp->data.end()), sp->data.end());
}

void fix(Space* sp, const plan::Scenario& s, const std::string& key) {
  const Config c = config_of(s);
  const auto& keys = search_keys();
  if (std::find(keys.begin(), keys.end(), key) == keys.end())
    fail("--fix " + key, "'" + key + "' is not a key the tuner searches; it searches " + plan::join(keys));
  if (key == "parallel.data" || key == "parallel.pipeline") {
    if (c.world_size() != sp->world)
      fail("--fix " + key, "the scenario's data x pipeline is " + std::to_string(c.world_size()) +
                               " ranks, not the --world of " + std::to_string(sp->world));
    sp->data = {c.data};
    sp->pipeline = {c.pipeline};
  } else if (key == "parallel.schedule") {
    if (c.schedule == plan::ScheduleKind::csv) fail("--fix " + key, "an imported CSV schedule cannot be tuned");
    sp->schedules = {c.schedule};
  } else if (key == "parallel.virtual") {
    sp->virtual_stages = {c.virtual_stages};
  } else if (key == "parallel.chunks") {
    sp->chunks = {c.chunks};
  } else if (key == "parallel.partition_len") {
    sp->partitions = {c.partition};
  } else if (key == "parallel.bucket_cap_mb") {
    sp->bucket_caps = {c.bucket_cap_mb};
  } else if (key == "parallel.first_bucket_mb") {
    sp->first_buckets = {c.first_bucket_mb};
  } else if (key == "parallel.grad_accumulation") {
    sp->accumulations = {c.grad_accumulation};
  } else if (key == "parallel.activation_checkpointing") {
    sp->checkpointing = {c.activation_checkpointing};
  } else if (key == "parallel.precision") {
    sp->precisions = {c.precision};
  }
}

}  // namespace parallax::tune
