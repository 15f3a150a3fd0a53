#include "tune/config.hpp"

#include <cstdio>

namespace parallax::tune {

Config config_of(const plan::Scenario& s) {
  const plan::ParallelSpec& p = s.parallel;
  Config c;
  c.data = p.data;
  c.pipeline = p.pipeline;
  c.virtual_stages = p.virtual_stages;
  c.schedule = p.schedule;
  c.chunks = p.chunks;
  switch (p.partition_len.mode) {
    case plan::PartitionLen::Mode::balanced: break;
    case plan::PartitionLen::Mode::per_stage: c.partition.assign(p.stages(), p.partition_len.per_stage); break;
    case plan::PartitionLen::Mode::list: c.partition = p.partition_len.lens; break;
  }
  c.bucket_cap_mb = p.bucket_cap_mb;
  c.first_bucket_mb = p.first_bucket_mb;
  c.batch_size = s.data.batch_size;
  c.grad_accumulation = p.grad_accumulation;
  c.activation_checkpointing = p.activation_checkpointing;
  c.precision = p.precision;
  return c;
}

void apply(const Config& c, plan::Scenario* s) {
  plan::ParallelSpec& p = s->parallel;
  p.data = c.data;
  p.pipeline = c.pipeline;
  p.virtual_stages = c.virtual_stages;
  p.schedule = c.schedule;
  p.chunks = c.chunks;
  p.partition_len = {};
  if (!c.partition.empty()) {
    p.partition_len.mode = plan::PartitionLen::Mode::list;
    p.partition_len.lens = c.partition;
  }
  p.bucket_cap_mb = c.bucket_cap_mb;
  p.first_bucket_mb = c.first_bucket_mb;
  s->data.batch_size = c.batch_size;
  p.grad_accumulation = c.grad_accumulation;
  p.activation_checkpointing = c.activation_checkpointing;
  p.precision = c.precision;
}

plan::Scenario with_config(const plan::Scenario& base, const Config& c) {
  plan::Scenario s = base;
  apply(c, &s);
  plan::check_scenario(s);
  return s;
}

std::string number_text(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

namespace {

std::string list_text(const std::vector<int>& lens) {
  if (lens.empty()) return "balanced";
  std::string s = "[";
  for (size_t i = 0; i < lens.size(); ++i) s += (i ? ", " : "") + std::to_string(lens[i]);
  return s + "]";
}

}  // namespace

Overrides overrides(const Config& base, const Config& c) {
  Overrides o;
  auto add = [&](bool differs, const char* key, const std::string& value) {
    if (differs) o.emplace_back(key, value);
  };
  add(c.data != base.data, "parallel.data", std::to_string(c.data));
  add(c.pipeline != base.pipeline, "parallel.pipeline", std::to_string(c.pipeline));
  add(c.schedule != base.schedule, "parallel.schedule", plan::name(c.schedule));
  add(c.virtual_stages != base.virtual_stages, "parallel.virtual", std::to_string(c.virtual_stages));
  add(c.chunks != base.chunks, "parallel.chunks", std::to_string(c.chunks));
  add(c.partition != base.partition, "parallel.partition_len", list_text(c.partition));
  add(c.bucket_cap_mb != base.bucket_cap_mb, "parallel.bucket_cap_mb", number_text(c.bucket_cap_mb));
  add(c.first_bucket_mb != base.first_bucket_mb, "parallel.first_bucket_mb", number_text(c.first_bucket_mb));
  add(c.batch_size != base.batch_size, "data.batch_size", std::to_string(c.batch_size));
  add(c.grad_accumulation != base.grad_accumulation, "parallel.grad_accumulation", std::to_string(c.grad_accumulation));
  add(c.activation_checkpointing != base.activation_checkpointing, "parallel.activation_checkpointing",
      c.activation_checkpointing ? "true" : "false");
  add(c.precision != base.precision, "parallel.precision", plan::name(c.precision));
  return o;
}

std::string describe(const Overrides& o) {
  if (o.empty()) return "as given";
  std::string s;
  for (const auto& [key, value] : o) s += (s.empty() ? "" : ", ") + key.substr(key.find('.') + 1) + "=" + value;
  return s;
}

}  // namespace parallax::tune
