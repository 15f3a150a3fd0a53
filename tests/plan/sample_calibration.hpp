#pragma once
// A calibration with hand-picked numbers, shared by the calibration tests of plan/ and sim/.
#include <string>

#include "plan/calibration.hpp"

namespace parallax::test {

// The one-layer MLP (and its loss layer) that sample_calibration() measures.
inline const std::string kMlp = "name: t\nmodel: {preset: mlp, layers: 1, hidden: 256, input: 784, classes: 10}\n";

// A calibration with hand-picked numbers for one linear layer and its loss.
inline plan::Calibration sample_calibration() {
  plan::Calibration c;
  c.threads = 1;
  c.cores = 2;
  c.in_run = {.forward = 1.25, .backward = 1.5, .optimizer = 2.0, .forward_extra_us = 12, .backward_extra_us = -5,
              .backward_probed_us = 2500, .send_extra_us = 40, .delivery_extra_us = 15,
              .probe = "probe", .bounded = ""};
  c.backward_call_us = 7;
  c.copy_gb_per_s = 20;
  c.host_probe_us = 12.5;
  c.send_call = {{1024, 65536}, {12, 30}};
  c.p2p = {60, 3};
  c.allreduce = {300, 1.5};
  c.allgather = {120, 4};
  c.allgather_cpu_share = 0.6;
  c.allgather_by_bytes = {{1024, 1048576}, {110, 380}};
  plan::SignatureCost l;
  l.signature = "linear 784x256 relu fp32";
  l.forward = {{1, 8, 64}, {60, 70, 280}};
  l.forward_no_grad = {{1, 8, 64}, {55, 66, 270}};
  l.backward = {{1, 8, 64}, {100, 130, 650}};
  l.backward_no_input = {{1, 8, 64}, {45, 77, 390}};
  c.layers[l.signature] = l;
  plan::SignatureCost loss;
  loss.signature = "linear 256x10 fp32";
  loss.forward = {{1, 64}, {2, 5.5}};
  loss.backward = {{1, 64}, {0.5, 2.5}};
  c.losses[loss.signature] = loss;
  c.data["fashion-mnist linear 784x256 relu fp32 input"] = {{1, 64}, {3, 25}};
  plan::OptimizerCost sgd;
  sgd.kind = "sgd";
  sgd.momentum = true;
  sgd.by_params = {{4096, 1048576}, {12, 300}};
  c.optimizers.push_back(sgd);
  return c;
}

}  // namespace parallax::test
