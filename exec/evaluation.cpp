#include "exec/evaluation.hpp"

#include <algorithm>

namespace parallax::exec {

void evaluate_test_set(const plan::Plan& job, const DataSource& data, int replica, const std::map<int, Stage*>& stages,
                       torch::Device device, torch::ScalarType dtype, Communicator& comm, int64_t* correct,
                       int64_t* tested) {
  const plan::ParallelSpec& p = job.scenario.parallel;
  const auto peer = [&](int stage) { return plan::rank_of(p, {replica, p.rank_of_stage(stage), 0}); };
  const auto last_layer = [&](int stage) -> const plan::Layer& {
    const plan::Stage& st = job.stages[stage];
    return job.layers()[st.first_layer + st.layer_count - 1];
  };
  torch::NoGradGuard no_grad;
  const auto& images = data.test_images();
  // Each replica its contiguous share of the whole test set (shares differ by one image at most
  // where the replicas do not divide it), in micro-batches, the last one short where needed:
  // every image is tested once.
  const int64_t total = images.size(0);
  const int64_t begin = total * replica / p.data, end = total * (replica + 1) / p.data;
  const int stages_in_plan = static_cast<int>(job.stages.size());
  const int eval_tag_base = 1 << 28;
  for (int64_t b = 0, first = begin; first < end; ++b, first += job.microbatch_size) {
    const int64_t mb = std::min<int64_t>(job.microbatch_size, end - first);
    torch::Tensor handed;  // the output of this rank's previous stage, when the next is here too
    for (auto& [s, st] : stages) {
      torch::Tensor x;
      if (s == 0) {
        x = images.narrow(0, first, mb).to(device);
      } else if (peer(s - 1) == peer(s)) {
        x = handed;
      } else {
        x = torch::empty(output_shape(last_layer(s - 1), mb), torch::TensorOptions().dtype(dtype).device(device));
        const int tag = eval_tag_base + static_cast<int>(b % 100000) * stages_in_plan + s;
        const std::string what = "test-set evaluation of stage " + std::to_string(s);
        comm.wait(comm.recv(x, peer(s - 1), tag, what), what, {peer(s - 1)});
        x = x.to(torch::kFloat);
      }
      torch::Tensor out;
      {
        AutocastScope autocast(dtype, device.type());
        out = (*st)->forward(x);
      }
      if (s == stages_in_plan - 1) {
        *correct += out.argmax(1).eq(data.test_labels().narrow(0, first, mb).to(device)).sum().item<int64_t>();
        *tested += mb;
      } else if (peer(s + 1) == peer(s)) {
        handed = out.to(torch::kFloat);
      } else {
        torch::Tensor t = out.to(dtype).contiguous();
        const int tag = eval_tag_base + static_cast<int>(b % 100000) * stages_in_plan + s + 1;
        const std::string what = "test-set evaluation of stage " + std::to_string(s);
        comm.wait(comm.send(t, peer(s + 1), tag, what), what, {peer(s + 1)});
      }
    }
  }
}

}  // namespace parallax::exec
