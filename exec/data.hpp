#pragma once
// Training data, in the order every layout of the same global batch agrees on. A step's global
// batch (batch_size x grad_accumulation x data samples) is a slice of a seeded permutation of the
// dataset; inside it, accumulation round k, replica r and micro-batch j take contiguous samples.
// So one process with batch 64, two replicas of 32, and two accumulation rounds of 32 all see the
// same 64 samples in step t, as DistributedSampler with drop_last does per epoch. The last partial
// global batch of an epoch is dropped.
#include <torch/torch.h>

#include <string>

#include "plan/plan.hpp"

namespace parallax::exec {

struct MicroBatch {
  torch::Tensor input;   ///< [mb, 784] float, or [mb, seq] int64 tokens
  torch::Tensor target;  ///< [mb] class ids, or [mb, seq] next tokens
};

class DataSource {
 public:
  /// Fashion-MNIST from Debian's dataset-fashion-mnist, or synthetic samples; a missing dataset
  /// is an InputError naming the package.
  explicit DataSource(const plan::Plan& plan);

  /// Micro-batch `mb` (0 .. chunks*ga-1) of `replica` in optimizer step `step`. Without
  /// `with_input` only the target is filled (what a last stage needs).
  MicroBatch micro_batch(int64_t step, int mb, int replica, bool with_input = true) const;
  /// The test set (Fashion-MNIST only): images [n, 784], labels [n].
  bool has_test_set() const { return test_images_.defined(); }
  const torch::Tensor& test_images() const { return test_images_; }
  const torch::Tensor& test_labels() const { return test_labels_; }
  int64_t train_size() const { return size_; }

  static std::string fashion_mnist_dir();
  /// Bad input (naming the Debian package) when the scenario needs a dataset that is missing.
  static void require_installed(const plan::Scenario& scenario);
  /// Bad input when the dataset is missing, or holds fewer samples than a step's global batch
  /// (data.batch_size x grad_accumulation x data); reads the dataset's header only.
  static void require_fits(const plan::Scenario& scenario);

 private:
  int64_t sample_index(int64_t global_position) const;
  MicroBatch synthetic(const std::vector<int64_t>& ids, bool with_input) const;

  const plan::Plan& plan_;
  int64_t size_ = 0;
  int64_t global_batch_ = 0;
  torch::Tensor images_, labels_, test_images_, test_labels_;
  mutable int64_t cached_epoch_ = -1;
  mutable std::vector<int64_t> permutation_;
};

}  // namespace parallax::exec
