#include "exec/data.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <numeric>
#include <random>

#include "plan/error.hpp"

namespace parallax::exec {
namespace {

constexpr int64_t kSyntheticSamples = 1 << 20;

// Reads a gzipped IDX file (big-endian header: magic, dimensions; then uint8 data).
// A gzip file open for reading, closed when it goes.
struct GzReader {
  gzFile f;
  explicit GzReader(const std::string& path) : f(gzopen(path.c_str(), "rb")) {
    if (!f) throw std::runtime_error("cannot open " + path);
  }
  ~GzReader() { gzclose(f); }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;
};

// An IDX file's dimensions, read from its header; `f` is left at its data.
std::vector<int64_t> idx_dims(gzFile f, const std::string& path, int expected_dims) {
  auto read_u32 = [&]() {
    unsigned char b[4];
    if (gzread(f, b, 4) != 4) throw std::runtime_error(path + ": truncated header");
    return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
  };
  const uint32_t magic = read_u32();
  if ((magic >> 8) != 0x08 || static_cast<int>(magic & 0xff) != expected_dims)
    throw std::runtime_error(path + ": not an IDX file of unsigned bytes with " + std::to_string(expected_dims) + " dimensions");
  std::vector<int64_t> dims;
  for (int i = 0; i < expected_dims; ++i) dims.push_back(read_u32());
  return dims;
}

torch::Tensor read_idx(const std::string& path, int expected_dims) {
  const GzReader file(path);
  gzFile f = file.f;
  const std::vector<int64_t> dims = idx_dims(f, path, expected_dims);
  int64_t total = 1;
  for (int64_t d : dims) total *= d;
  auto t = torch::empty(dims, torch::kUInt8);
  int64_t got = 0;
  while (got < total) {
    const int n = gzread(f, t.data_ptr<uint8_t>() + got, static_cast<unsigned>(std::min<int64_t>(total - got, 1 << 30)));
    if (n <= 0) break;
    got += n;
  }
  if (got != total) throw std::runtime_error(path + ": truncated data");
  return t;
}

// The samples one optimizer step takes over all replicas.
int64_t global_batch_of(const plan::Scenario& s) {
  return static_cast<int64_t>(s.data.batch_size) * s.parallel.grad_accumulation * s.parallel.data;
}

void require_batch_fits(const plan::Scenario& s, int64_t samples) {
  const int64_t global_batch = global_batch_of(s);
  if (global_batch > samples)
    throw plan::InputError(s.where("data.batch_size"), "the global batch (" + std::to_string(global_batch) +
                                                           " samples) is larger than the dataset (" + std::to_string(samples) + ")");
}

uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

std::string DataSource::fashion_mnist_dir() {
  const char* env = std::getenv("PARALLAX_FASHION_MNIST");
  return env ? env : "/usr/share/datasets/fashion-mnist";
}

void DataSource::require_installed(const plan::Scenario& s) {
  if (s.data.source != "fashion-mnist") return;
  const std::string train = fashion_mnist_dir() + "/train-images-idx3-ubyte.gz";
  if (!std::filesystem::exists(train))
    throw plan::InputError(s.where("data.source"), "Fashion-MNIST is not installed: " + train +
                                                       " is missing; install Debian's dataset-fashion-mnist "
                                                       "(apt-get install dataset-fashion-mnist, or scripts/setup.sh)");
}

DataSource::DataSource(const plan::Plan& plan) : plan_(plan) {
  const auto& s = plan.scenario;
  global_batch_ = global_batch_of(s);
  require_installed(s);
  if (s.data.source == "fashion-mnist") {
    const std::string dir = fashion_mnist_dir();
    images_ = read_idx(dir + "/train-images-idx3-ubyte.gz", 3).reshape({-1, 784}).to(torch::kFloat).div_(255.0);
    labels_ = read_idx(dir + "/train-labels-idx1-ubyte.gz", 1).to(torch::kLong);
    test_images_ = read_idx(dir + "/t10k-images-idx3-ubyte.gz", 3).reshape({-1, 784}).to(torch::kFloat).div_(255.0);
    test_labels_ = read_idx(dir + "/t10k-labels-idx1-ubyte.gz", 1).to(torch::kLong);
    size_ = images_.size(0);
  } else {
    size_ = kSyntheticSamples;
  }
  require_batch_fits(s, size_);
}

void DataSource::require_fits(const plan::Scenario& s) {
  require_installed(s);
  if (s.data.source != "fashion-mnist") return require_batch_fits(s, kSyntheticSamples);
  // The header alone: the ranks read the whole file once they start.
  const std::string path = fashion_mnist_dir() + "/train-images-idx3-ubyte.gz";
  const GzReader file(path);
  require_batch_fits(s, idx_dims(file.f, path, 3).front());
}

int64_t DataSource::sample_index(int64_t position) const {
  const int64_t per_epoch = (size_ / global_batch_) * global_batch_;
  const int64_t epoch = position / per_epoch;
  if (epoch != cached_epoch_) {
    permutation_.resize(size_);
    std::iota(permutation_.begin(), permutation_.end(), 0);
    std::mt19937_64 rng(plan_.scenario.data.seed * 7919 + static_cast<uint64_t>(epoch));
    if (plan_.scenario.data.shuffle) std::shuffle(permutation_.begin(), permutation_.end(), rng);
    cached_epoch_ = epoch;
  }
  return permutation_[position % per_epoch];
}

MicroBatch DataSource::micro_batch(int64_t step, int mb, int replica, bool with_input) const {
  const auto& p = plan_.scenario.parallel;
  const int round = mb / p.chunks, chunk = mb % p.chunks;
  const int64_t batch = plan_.scenario.data.batch_size;
  const int64_t first = step * global_batch_ + (static_cast<int64_t>(round) * p.data + replica) * batch +
                        static_cast<int64_t>(chunk) * plan_.microbatch_size;
  std::vector<int64_t> ids(plan_.microbatch_size);
  for (int i = 0; i < plan_.microbatch_size; ++i) ids[i] = sample_index(first + i);
  if (!images_.defined()) return synthetic(ids, with_input);
  const auto index = torch::tensor(ids, torch::kLong);
  return {with_input ? images_.index_select(0, index) : torch::Tensor(), labels_.index_select(0, index)};
}

// Synthetic samples are functions of (seed, sample id): tokens from a hash, and a next-token
// target that is a fixed mapping of the token, so the loss can fall; for linear models a class
// from a hash and random features with a bump at the class's feature, so the class is learnable
// and a last stage can know it without making the features.
MicroBatch DataSource::synthetic(const std::vector<int64_t>& ids, bool with_input) const {
  const auto& first = plan_.layers().front();
  const auto& last = plan_.layers().back();
  const uint64_t seed = plan_.scenario.data.seed;
  const int64_t n = static_cast<int64_t>(ids.size());
  if (first.kind == plan::LayerKind::embedding) {
    const int64_t seq = first.shape.seq_len, vocab = first.shape.vocab;
    auto input = torch::empty({n, seq}, torch::kLong);
    auto target = torch::empty({n, seq}, torch::kLong);
    auto* in = input.data_ptr<int64_t>();
    auto* out = target.data_ptr<int64_t>();
    const int64_t classes = last.kind == plan::LayerKind::head ? last.shape.vocab : vocab;
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t t = 0; t < seq; ++t) {
        const auto tok = static_cast<int64_t>(splitmix(seed ^ (static_cast<uint64_t>(ids[i]) * 4096 + t)) % vocab);
        in[i * seq + t] = tok;
        out[i * seq + t] = (tok * 31 + 7) % classes;
      }
    }
    return {input, target};
  }
  const int64_t in_features = first.shape.in, classes = last.shape.out;
  auto target = torch::empty({n}, torch::kLong);
  for (int64_t i = 0; i < n; ++i)
    target[i] = static_cast<int64_t>(splitmix(seed ^ (static_cast<uint64_t>(ids[i]) << 1)) % static_cast<uint64_t>(classes));
  if (!with_input) return {torch::Tensor(), target};
  auto input = torch::empty({n, in_features});
  for (int64_t i = 0; i < n; ++i) {
    auto gen = at::detail::createCPUGenerator(splitmix(seed + static_cast<uint64_t>(ids[i])));
    input[i] = at::randn({in_features}, gen);
    input[i][target[i].item<int64_t>() % in_features] += 3.0;
  }
  return {input, target};
}

}  // namespace parallax::exec
