#include "sim/cost_model.hpp"

#include <cmath>

#include "plan/cost.hpp"

namespace parallax::sim {

Time optimizer_time(int64_t param_bytes, int state_per_param, const plan::Device& device) {
  const double bytes = static_cast<double>(param_bytes) * (3 + 2 * state_per_param);
  const double ns = std::isinf(device.memory_bandwidth_gb_per_s) ? 0.0 : bytes / device.memory_bandwidth_gb_per_s;
  return Time::us(device.layer_overhead_us) + Time::ns(std::llround(ns));
}

std::vector<StageCost> stage_costs(const plan::Plan& plan) {
  const auto& s = plan.scenario;
  const int elem = plan::activation_bytes(s.parallel.precision);
  std::vector<StageCost> out;
  for (const plan::Stage& st : plan.stages) {
    StageCost c;
    const int last = st.first_layer + st.layer_count - 1;
    std::vector<Time> bwd_layer(plan.layers().size());
    for (int l = st.first_layer; l <= last; ++l) {
      const auto lc = plan::estimate_layer_cost(plan.layers()[l], s.hardware, s.parallel.precision, plan.microbatch_size,
                                              /*input_gradient=*/l > 0);
      c.forward += lc.forward;
      c.backward += lc.backward;
      bwd_layer[l] = lc.backward;
    }
    // Checkpointing re-runs the whole stage forward before the first layer's backward.
    const Time recompute = s.parallel.activation_checkpointing ? c.forward : Time();
    c.backward += recompute;
    for (const plan::Bucket& b : st.buckets) {
      Time at = recompute;
      for (int l = last; l >= b.ready_layer; --l) at += bwd_layer[l];
      c.bucket_ready.push_back(at);
    }
    c.send_forward_bytes = std::llround(plan.layers()[last].output_elems_per_sample * plan.microbatch_size * elem);
    c.send_backward_bytes =
        std::llround(plan.layers()[st.first_layer].input_elems_per_sample * plan.microbatch_size * elem);
    c.optimizer = optimizer_time(st.param_bytes, s.optimizer.state_per_param(), s.hardware.device);
    c.activation_bytes = plan::stage_activation_bytes(plan, st);
    if (s.parallel.activation_checkpointing) {
      double elems = 0;
      for (int l = st.first_layer; l <= last; ++l) elems += plan.layers()[l].activation_elems_per_sample;
      c.recompute_bytes = std::llround(elems * plan.microbatch_size * elem);
    }
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace parallax::sim
