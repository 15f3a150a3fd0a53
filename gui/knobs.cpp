#include "gui/knobs.hpp"

#include <sstream>

namespace parallax::gui {
std::string number(double v) {
  std::ostringstream o;
  o << v;
  return o.str();
}

const std::vector<std::string>& knob_keys() {
  static const std::vector<std::string> keys = {
      "parallel.data",          "parallel.pipeline",         "parallel.virtual",
      "parallel.partition_len", "parallel.chunks",           "data.batch_size",           "parallel.schedule",
      "parallel.bucket_cap_mb", "parallel.first_bucket_mb",  "parallel.grad_accumulation",
      "parallel.precision",     "parallel.activation_checkpointing", "hardware"};
  return keys;
}

std::string partition_len_text(const plan::PartitionLen& p) {
  switch (p.mode) {
    case plan::PartitionLen::Mode::balanced: return "balanced";
    case plan::PartitionLen::Mode::per_stage: return std::to_string(p.per_stage);
    case plan::PartitionLen::Mode::list: {
      std::string s = "[";
      for (size_t i = 0; i < p.lens.size(); ++i) s += (i ? ", " : "") + std::to_string(p.lens[i]);
      return s + "]";
    }
  }
  return "balanced";
}

Knobs Knobs::from(const plan::Scenario& s) {
  const plan::ParallelSpec& p = s.parallel;
  Knobs k;
  k.data = p.data;
  k.pipeline = p.pipeline;
  k.virtual_stages = p.virtual_stages;
  k.partition_len = partition_len_text(p.partition_len);
  k.chunks = p.chunks;
  k.batch_size = s.data.batch_size;
  k.schedule = p.schedule == plan::ScheduleKind::csv ? p.schedule_csv : plan::name(p.schedule);
  k.bucket_cap_mb = p.bucket_cap_mb;
  k.first_bucket_mb = p.first_bucket_mb;
  k.grad_accumulation = p.grad_accumulation;
  k.precision = plan::name(p.precision);
  k.activation_checkpointing = p.activation_checkpointing;
  return k;
}

Knobs knobs_of(const tune::Config& c, const std::string& hardware) {
  Knobs k;
  k.data = c.data;
  k.pipeline = c.pipeline;
  k.virtual_stages = c.virtual_stages;
  plan::PartitionLen p;
  if (!c.partition.empty()) {
    p.mode = plan::PartitionLen::Mode::list;
    p.lens = c.partition;
  }
  k.partition_len = partition_len_text(p);
  k.chunks = c.chunks;
  k.batch_size = c.batch_size;
  k.schedule = plan::name(c.schedule);
  k.bucket_cap_mb = c.bucket_cap_mb;
  k.first_bucket_mb = c.first_bucket_mb;
  k.grad_accumulation = c.grad_accumulation;
  k.precision = plan::name(c.precision);
  k.activation_checkpointing = c.activation_checkpointing;
  k.hardware = hardware;
  return k;
}

std::vector<std::string> Knobs::overrides() const {
  std::vector<std::string> o = {
      "parallel.data=" + std::to_string(data),
      "parallel.pipeline=" + std::to_string(pipeline),
      "parallel.virtual=" + std::to_string(virtual_stages),
      "parallel.partition_len=" + partition_len,
      "parallel.chunks=" + std::to_string(chunks),
      "data.batch_size=" + std::to_string(batch_size),
      "parallel.schedule=" + schedule,
      "parallel.bucket_cap_mb=" + number(bucket_cap_mb),
      "parallel.first_bucket_mb=" + number(first_bucket_mb),
      "parallel.grad_accumulation=" + std::to_string(grad_accumulation),
      "parallel.precision=" + precision,
      std::string("parallel.activation_checkpointing=") + (activation_checkpointing ? "true" : "false"),
  };
  if (!hardware.empty()) o.push_back("hardware=" + hardware);
  return o;
}

std::string knob_of_error(const std::string& where, const std::string& message) {
  const std::string flag = "--set ";
  if (where.rfind(flag, 0) == 0) {
    const std::string key = where.substr(flag.size(), where.find('=') - flag.size());
    for (const auto& k : knob_keys())
      if (key == k || key.rfind(k + ".", 0) == 0) return k;
  }
  // An error about a value from the file (e.g. data.batch_size vs chunks) names the knob it
  // conflicts with; the earliest mention wins.
  size_t best = std::string::npos;
  std::string found;
  for (const auto& k : knob_keys()) {
    const size_t at = message.find(k);
    if (at < best) best = at, found = k;
  }
  return found;
}

}  // namespace parallax::gui
