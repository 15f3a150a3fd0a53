// Calibrations written back as YAML: the `calibration:` section, and whole profiles with it.
#include <iomanip>
#include <sstream>

#include "plan/calibration.hpp"
#include "plan/hardware.hpp"
#include "plan/profile_copy.hpp"

namespace parallax::plan {

namespace {

std::string list(const std::vector<double>& v, int precision) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(precision) << "[";
  for (size_t i = 0; i < v.size(); ++i) s << (i ? ", " : "") << v[i];
  s << "]";
  return s.str();
}

void write_signatures(std::ostringstream& s, const char* key, const std::map<std::string, SignatureCost>& m) {
  if (m.empty()) return;
  s << "  " << key << ":\n";
  for (const auto& [sig, c] : m) {
    s << "    - signature: \"" << sig << "\"\n";
    s << "      mb: " << list(c.forward.mb.empty() ? c.backward.mb : c.forward.mb, 0) << "\n";
    if (!c.forward.empty()) s << "      fwd_us: " << list(c.forward.us, 2) << "\n";
    if (!c.forward_no_grad.empty()) s << "      fwd_no_grad_us: " << list(c.forward_no_grad.us, 2) << "\n";
    if (!c.backward.empty()) s << "      bwd_us: " << list(c.backward.us, 2) << "\n";
    if (!c.backward_no_input.empty()) s << "      bwd_no_input_us: " << list(c.backward_no_input.us, 2) << "\n";
    if (!c.kept_bytes.empty()) s << "      kept_bytes: " << list(c.kept_bytes.us, 0) << "\n";
    if (!c.forward_launch.empty()) s << "      fwd_launch_us: " << list(c.forward_launch.us, 2) << "\n";
    if (!c.backward_launch.empty()) s << "      bwd_launch_us: " << list(c.backward_launch.us, 2) << "\n";
  }
}

}  // namespace

std::string calibration_yaml(const Calibration& c) {
  std::ostringstream s;
  s << std::setprecision(6);
  s << "  threads: " << c.threads << "\n";
  s << "  cores: " << c.cores << "\n";
  s << "  backward_call_us: " << c.backward_call_us << "\n";
  s << "  copy_gb_per_s: " << c.copy_gb_per_s << "\n";
  if (c.host_probe_us > 0) s << "  host_probe_us: " << c.host_probe_us << "\n";
  s << "  in_run: {forward: " << c.in_run.forward << ", backward: " << c.in_run.backward
    << ", optimizer: " << c.in_run.optimizer << ",\n            forward_extra_us: " << c.in_run.forward_extra_us
    << ", backward_extra_us: " << c.in_run.backward_extra_us
    << ", optimizer_extra_us: " << c.in_run.optimizer_extra_us << ",\n            forward_probed_us: "
    << c.in_run.forward_probed_us << ", backward_probed_us: " << c.in_run.backward_probed_us
    << ", optimizer_probed_us: " << c.in_run.optimizer_probed_us << ",\n            send_extra_us: " << c.in_run.send_extra_us
    << ", delivery_extra_us: " << c.in_run.delivery_extra_us;
  if (!c.in_run.probe.empty()) s << ", probe: \"" << c.in_run.probe << "\"";
  if (!c.in_run.bounded.empty()) s << ",\n            bounded: \"" << c.in_run.bounded << "\"";
  s << "}\n";
  if (const auto& d = c.in_run_data) {
    s << "  in_run_data: {forward: " << d->forward << ", backward: " << d->backward << ", optimizer: " << d->optimizer
      << ",\n                forward_extra_us: " << d->forward_extra_us << ", backward_extra_us: " << d->backward_extra_us
      << ", optimizer_extra_us: " << d->optimizer_extra_us << ",\n                forward_probed_us: " << d->forward_probed_us
      << ", backward_probed_us: " << d->backward_probed_us << ", optimizer_probed_us: " << d->optimizer_probed_us
      << ", allreduce: " << d->allreduce
      << ",\n                sync_backward_extra_us_per_mb: " << d->sync_backward_extra_us_per_mb;
    if (!d->probe.empty()) s << ",\n                probe: \"" << d->probe << "\"";
    if (!d->bounded.empty()) s << ",\n                bounded: \"" << d->bounded << "\"";
    s << "}\n";
  }
  if (!c.send_call.empty())
    s << "  send_call: {bytes: " << list(c.send_call.mb, 0) << ", us: " << list(c.send_call.us, 2) << "}\n";
  // Measured over Gloo on the CPU only; a GPU's calibration leaves links to the profile's NCCL model.
  if (c.p2p.bandwidth_gb_per_s > 0)
    s << "  p2p: {latency_us: " << c.p2p.latency_us << ", bandwidth_gb_per_s: " << c.p2p.bandwidth_gb_per_s << "}\n";
  if (c.allreduce.bandwidth_gb_per_s > 0)
    s << "  allreduce: {ranks: " << c.allreduce_ranks << ", latency_us: " << c.allreduce.latency_us
      << ", bandwidth_gb_per_s: " << c.allreduce.bandwidth_gb_per_s << "}\n";
  if (c.allgather.bandwidth_gb_per_s > 0) {
    s << "  allgather: {ranks: " << c.allreduce_ranks << ", latency_us: " << c.allgather.latency_us
      << ", bandwidth_gb_per_s: " << c.allgather.bandwidth_gb_per_s;
    if (c.allgather_cpu_share > 0) s << ", cpu_share: " << c.allgather_cpu_share;
    if (!c.allgather_by_bytes.empty())
      s << ",\n              bytes: " << list(c.allgather_by_bytes.mb, 0) << ", us: " << list(c.allgather_by_bytes.us, 2);
    s << "}\n";
  }
  if (!c.optimizers.empty()) {
    s << "  optimizers:\n";
    for (const auto& o : c.optimizers) {
      s << "    - {kind: " << o.kind << ", momentum: " << (o.momentum ? "true" : "false")
        << ", mb: " << list(o.by_params.mb, 0) << ", us: " << list(o.by_params.us, 2);
      if (o.per_tensor_us > 0) s << ", per_tensor_us: " << o.per_tensor_us;
      if (!o.launch.empty()) s << ", launch_us: " << list(o.launch.us, 2);
      s << "}\n";
    }
  }
  if (!c.loss_scaler.empty())
    s << "  loss_scaler: {params: " << list(c.loss_scaler.mb, 0) << ", us: " << list(c.loss_scaler.us, 2) << "}\n";
  if (!c.data.empty()) {
    s << "  data:\n";
    for (const auto& [load, curve] : c.data)
      s << "    - {load: \"" << load << "\", mb: " << list(curve.mb, 0) << ", us: " << list(curve.us, 2) << "}\n";
  }
  write_signatures(s, "losses", c.losses);
  write_signatures(s, "layers", c.layers);
  return s.str();
}

std::string calibrated_profile_yaml(const HardwareProfile& base, const std::string& name, const Calibration& c,
                                    const std::vector<std::string>& header) {
  std::ostringstream s;
  s << std::setprecision(6);
  for (const auto& line : header) s << "# " << line << "\n";
  const Device& d = base.device;
  s << "name: " << name << "\n";
  s << "device:\n  name: \"" << d.name << "\"\n  memory_gb: " << d.memory_gb << "\n";
  if (!std::isinf(d.memory_bandwidth_gb_per_s)) s << "  memory_bandwidth_gb_per_s: " << d.memory_bandwidth_gb_per_s << "\n";
  s << "  peak_tflops: {";
  bool first = true;
  for (const auto& [p, v] : d.peak_tflops) {
    s << (first ? "" : ", ") << plan::name(p) << ": " << v;
    first = false;
  }
  s << "}\n  efficiency: " << d.efficiency << "\n  layer_overhead_us: " << d.layer_overhead_us << "\n";
  // The link as a run sees it: Gloo's delivery after the send call, plus what the probe run added.
  s << "node:\n  devices: " << base.devices_per_node << "\n  link: {name: gloo-loopback-measured, bandwidth_gb_per_s: "
    << c.p2p.bandwidth_gb_per_s << ", latency_us: " << std::max(0.0, c.p2p.latency_us + c.in_run.delivery_extra_us)
    << "}\n";
  if (base.network)
    s << "network: {name: " << base.network->name << ", bandwidth_gb_per_s: " << base.network->bandwidth_gb_per_s
      << ", latency_us: " << base.network->latency_us << ", nics_per_node: " << base.nics_per_node << "}\n";
  if (base.max_nodes) s << "nodes: " << *base.max_nodes << "\n";
  const Interference& i = base.interference;
  const double shared = c.shared_cores > 1 ? std::min(c.shared_cores, 10.0) : i.shared_cores;
  if (i.compute != 1 || i.communication != 1 || shared != 1)
    s << "interference: {compute_while_communicating: " << i.compute << ", communication_while_memory_bound: "
      << i.communication << ", compute_while_computing: " << shared << "}\n";
  s << "calibration:\n" << calibration_yaml(c);
  return s.str();
}

std::string renamed_profile_text(const std::string& base_text, const std::string& name,
                                 const std::vector<std::string>& header, const std::string& section) {
  std::ostringstream s;
  for (const auto& line : header) s << "# " << line << "\n";
  std::istringstream in(base_text);
  bool named = false;
  for (std::string line; std::getline(in, line);) {  // top-level keys start in column 0
    if (line.rfind(section + ":", 0) == 0) throw std::logic_error("the base profile has a " + section + " section already");
    if (line.rfind("name:", 0) == 0) {
      s << "name: " << name << "\n";
      named = true;
      continue;
    }
    s << line << "\n";
  }
  if (!named) s << "name: " << name << "\n";
  return s.str();
}

std::string without_published_check(const std::string& text) {
  std::istringstream in(text);
  std::ostringstream out;
  std::string comments;  // column-0 comment lines not yet written: they belong to what follows
  bool skipping = false;
  for (std::string line; std::getline(in, line);) {
    const bool top_level = !line.empty() && line[0] != ' ';
    if (skipping && top_level) skipping = false;
    if (skipping) continue;
    if (line.rfind("#", 0) == 0) {
      comments += line + "\n";
      continue;
    }
    if (line.rfind("published_check:", 0) == 0) {
      comments.clear();
      skipping = true;
      continue;
    }
    out << comments << line << "\n";
    comments.clear();
  }
  out << comments;
  return out.str();
}

std::string calibrated_copy_yaml(const std::string& base_text, const std::string& name, const Calibration& c,
                                 const std::vector<std::string>& header) {
  return renamed_profile_text(base_text, name, header, "calibration") + "calibration:\n" + calibration_yaml(c);
}

}  // namespace parallax::plan
