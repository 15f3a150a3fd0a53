#include "exec/measuring.hpp"

#include <algorithm>
#include <ctime>
#include <map>
#include <set>

#include "exec/calibrate.hpp"
#include "exec/data.hpp"
#include "exec/grad_scaler.hpp"
#include "exec/host_memory.hpp"
#include "exec/host_probe.hpp"
#include "exec/model.hpp"
#include "timeline/compare.hpp"
#include "timeline/step_statistic.hpp"

namespace parallax::exec::measuring {

using timeline::median;

double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}

HostGate::HostGate() {
  for (int i = 0; i < 200; ++i) probe();
}

double HostGate::probe() {
  const double us = host_probe_us();
  reference_us_ = std::min(reference_us_, us);
  return us;
}

bool HostGate::at_speed(double probe_us) const { return plan::host_at_speed(probe_us, reference_us_); }

Budget budget(bool quick, HostGate* gate) {
  Budget b;
  if (quick) b.min_reps = 8, b.max_reps = 60, b.min_total_us = 20'000, b.enough_us = 1.5e6, b.wait_us = 5e6;
  b.gate = gate;
  return b;
}

// The fewest samples at the host's reference speed a figure is made of; with fewer, of all.
constexpr int kMinSamplesAtSpeed = 4;

bool another_sample(const Budget& b, int reps, double spent_us, int fast, double fast_us) {
  if (reps >= b.max_reps) return false;
  if (reps < kMinSamplesAtSpeed) return true;
  const bool enough = spent_us >= b.enough_us;
  if (!enough && (reps < b.min_reps || fast_us < b.min_total_us)) return true;
  return b.gate && fast < kMinSamplesAtSpeed && spent_us < b.wait_us;
}

std::vector<double> repeat(const std::function<std::vector<double>()>& rep, const Budget& b) {
  rep();
  std::vector<std::vector<double>> samples;
  std::vector<bool> at_speed;
  int fast = 0;
  std::vector<double> probes;  // the host's probe before each sample
  double total = 0, spent = 0;
  for (int i = 0; another_sample(b, i, spent, fast, total); ++i) {
    const double probe = b.gate ? b.gate->probe() : 0;
    const bool ok = !b.gate || b.gate->at_speed(probe);
    const auto t0 = Clock::now();
    const auto s = rep();
    const double took = us_since(t0);
    spent += took;
    if (ok) total += took, ++fast;
    probes.push_back(probe);
    if (samples.empty()) samples.resize(s.size());
    for (size_t k = 0; k < s.size(); ++k) samples[k].push_back(s[k]);
  }
  // The reference may have dropped during the loop (the loop went on by the reference of each
  // moment): every sample is judged again by the final one.
  fast = 0;
  for (double probe : probes) {
    at_speed.push_back(!b.gate || b.gate->at_speed(probe));
    fast += at_speed.back();
  }
  const bool use_speed = b.gate && fast >= kMinSamplesAtSpeed;
  if (b.gate) b.gate->count(use_speed);
  std::vector<double> out;
  for (auto& v : samples) {
    std::vector<double> kept;
    for (size_t i = 0; i < v.size(); ++i)
      if (!use_speed || at_speed[i]) kept.push_back(v[i]);
    out.push_back(timeline::undisturbed(std::move(kept)));
  }
  return out;
}

torch::Tensor layer_input(const plan::Layer& l, int64_t mb, torch::Device device) {
  const auto& s = l.shape;
  const auto on = torch::TensorOptions().device(device);
  switch (l.kind) {
    case plan::LayerKind::linear: return torch::randn({mb, s.in}, on);
    case plan::LayerKind::embedding: return torch::randint(0, s.vocab, {mb, s.seq_len}, on.dtype(torch::kLong));
    case plan::LayerKind::encoder:
    case plan::LayerKind::head: return torch::randn({s.seq_len, mb, s.hidden}, on);
    case plan::LayerKind::synthetic: break;
  }
  throw std::logic_error("synthetic layers are not measured");
}

torch::Tensor loss_target(const plan::Layer& last, int64_t mb, torch::Device device) {
  const auto on = torch::TensorOptions().device(device).dtype(torch::kLong);
  if (last.kind == plan::LayerKind::head) return torch::randint(0, last.shape.vocab, {mb, last.shape.seq_len}, on);
  return torch::randint(0, last.shape.out, {mb}, on);
}

PhaseClock::PhaseClock(torch::Device device)
    : device_(device), events_(device.is_cuda() ? gpu::make_compute_timer() : nullptr) {}

void PhaseClock::begin() {
  if (events_) {
    if (!started_) {
      torch::cuda::synchronize(device_.index());  // the anchor event must run at once
      events_->start_step(0);
      started_ = true;
    }
    gpu::keep_busy(ahead_us_);
    events_->begin();
  }
  t0_ = Clock::now();
}

void PhaseClock::end() {
  host_us_.push_back(us_since(t0_));
  if (events_) events_->end();
}

std::vector<double> PhaseClock::lap(bool host_too) {
  std::vector<double> out;
  if (events_) {
    torch::cuda::synchronize(device_.index());
    for (const auto& [b, e] : events_->collect()) out.push_back(static_cast<double>(e - b) / 1e3);
    started_ = false;
  } else {
    out = host_us_;
  }
  if (host_too) out.insert(out.end(), host_us_.begin(), host_us_.end());
  host_us_.clear();
  return out;
}

// Loading one micro-batch as the executor does (stage 0 with its input, the last stage the
// target only), per data source and model input.
std::vector<DataCost> measure_data(const std::vector<plan::Plan>& plans, const Bench& b) {
  std::vector<DataCost> out;
  std::set<std::string> done;
  for (const plan::Plan& p : plans) {
    const std::string key = plan::data_key(p.scenario.data.source, p.layers().front(), true);
    if (!done.insert(key).second) continue;
    // A copy of the plan whose micro-batch size we change between measurements: DataSource
    // reads it by reference, and its global batch (set at construction) covers every size.
    plan::Plan probe = p;
    const int largest = p.scenario.data.batch_size;
    probe.scenario.data.batch_size = largest;
    probe.scenario.parallel.chunks = 1;
    probe.scenario.parallel.data = 1;
    probe.scenario.parallel.grad_accumulation = 1;
    probe.microbatch_size = largest;
    DataSource data(probe);
    plan::CostCurve input, target;
    int64_t step = 0;
    for (int mb : calibration_sizes({p.microbatch_size}, largest, b.quick)) {
      probe.microbatch_size = mb;
      const auto t = repeat(
          [&] {
            auto t0 = Clock::now();
            data.micro_batch(step, 0, 0, true);
            const double with_input = us_since(t0);
            t0 = Clock::now();
            data.micro_batch(step++, 0, 0, false);
            return std::vector<double>{with_input, us_since(t0)};
          },
          b.budget);
      input.mb.push_back(mb);
      input.us.push_back(t[0]);
      target.mb.push_back(mb);
      target.us.push_back(t[1]);
    }
    out.push_back({key, plan::data_key(p.scenario.data.source, p.layers().front(), false), input, target});
  }
  return out;
}

namespace {

// The bytes tensors on `device` hold now: the CUDA caching allocator's count, or on the CPU the
// count of live tensors (exec/host_memory.hpp), as a run measures its memory.
int64_t allocated_bytes(torch::Device device) {
  return device.is_cuda() ? gpu::allocated_bytes(std::max<int>(0, device.index())) : tensor_bytes();
}

double allocated_while(torch::Device device, const std::function<torch::Tensor()>& forward) {
  const int64_t before = allocated_bytes(device);
  torch::Tensor out = forward();
  const int64_t after = allocated_bytes(device);
  out = torch::Tensor();
  return static_cast<double>(std::max<int64_t>(0, after - before));
}

}  // namespace

KeptBytes kept_bytes(Stage& module, const plan::Layer& layer, bool with_loss, int64_t mb, c10::ScalarType autocast,
                     torch::Device device) {
  KeptBytes kept;
  const bool float_input = layer.kind != plan::LayerKind::embedding;
  const auto x = layer_input(layer, mb, device);
  const auto in = float_input ? x.clone().requires_grad_(true) : x;  // the layer before's output
  kept.layer = allocated_while(device, [&] {
    AutocastScope scope(autocast, device.type());
    return module->forward(in);
  });
  if (with_loss) {
    const auto target = loss_target(layer, mb, device);
    const auto out = torch::randn(output_shape(layer, mb), torch::TensorOptions().device(device)).requires_grad_(true);
    kept.loss = allocated_while(device, [&] {
      AutocastScope scope(autocast, device.type());
      return model_loss(layer, out, target);
    });
  }
  return kept;
}

double copy_gb_per_s(const Bench& b) {
  const auto src = torch::randn({1 << 22}, torch::TensorOptions().device(b.device));
  auto dst = torch::empty_like(src);
  PhaseClock& clock = *b.clock;
  const double us = repeat(
      [&] {
        clock.begin();
        dst.copy_(src);
        clock.end();
        return clock.lap();
      },
      b.budget)[0];
  return static_cast<double>(src.nbytes()) / (us * 1e3);
}

namespace {

// This process's CPU time, every thread's (Gloo's included), in microseconds.
double process_cpu_us() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e6 + static_cast<double>(t.tv_nsec) / 1e3;
}

// Latency from the smallest message, bandwidth from the slope over the large ones.
plan::AlphaBeta alpha_beta(const std::vector<double>& bytes, const std::vector<double>& us) {
  const size_t from = bytes.size() / 2;
  const auto fit = plan::fit_linear({bytes.begin() + from, bytes.end()}, {us.begin() + from, us.end()});
  plan::AlphaBeta ab;
  ab.bandwidth_gb_per_s = fit.per_sample_us > 0 ? 1.0 / (fit.per_sample_us * 1e3) : 1e3;
  ab.latency_us = std::max(0.0, us.front() - bytes.front() / (ab.bandwidth_gb_per_s * 1e3));
  return ab;
}

}  // namespace

void measure_gloo(Communicator& comm, plan::Calibration* c) {
  const std::vector<int64_t> sizes = {1 << 8, 1 << 10, 1 << 14, 1 << 16, 1 << 18, 1 << 20, 1 << 22};  // floats
  std::vector<double> bytes, call, delivery, allreduce, allgather, allgather_cpu;
  for (int64_t n : sizes) {
    auto t = torch::zeros({n});
    auto back = torch::zeros({n});
    auto token = torch::zeros({1});
    const int reps = n >= (1 << 20) ? 8 : 30;
    std::vector<double> in_call, one_way, ar, ag, ag_cpu;
    // Every message here has its receive posted first, so that the sender writes the payload
    // in its send call (the run's other order is measured by the in-run probe): rank 1 posts
    // its receive, then tells rank 0 with a token over the same connection, which arrives after
    // the receive's notification; rank 0 posts the pong's receive before it sends.
    for (int r = 0; r < reps + 2; ++r) {
      std::vector<torch::Tensor> v{t}, w{back}, k{token};
      if (comm.rank() == 0) {
        auto pong = comm.world().recv(w, 1, 8);
        comm.world().recv(k, 1, 9)->wait();
        const auto t0 = Clock::now();
        auto work = comm.world().send(v, 1, 7);
        if (r >= 2) in_call.push_back(us_since(t0));
        pong->wait();
        if (r >= 2) one_way.push_back(us_since(t0) / 2);
        work->wait();
      } else {
        auto ping = comm.world().recv(v, 0, 7);
        comm.world().send(k, 0, 9)->wait();
        ping->wait();
        comm.world().send(w, 0, 8)->wait();
      }
      const auto t1 = Clock::now();
      comm.world().allreduce(v)->wait();
      if (r >= 2) ar.push_back(us_since(t1));
      // FSDP's all-gather of a unit as the executor runs it (exec/fsdp.cpp, launch_gather): each
      // rank broadcasts its slice of the gathered tensor, the broadcasts in flight together.
      const auto t2 = Clock::now();
      const double cpu2 = process_cpu_us();
      const int ranks = comm.world().getSize();
      std::vector<Communicator::Work> slices;
      for (int from = 0; from < ranks; ++from) {
        std::vector<torch::Tensor> slice{t.narrow(0, from * n / ranks, n / ranks)};
        c10d::BroadcastOptions root;
        root.rootRank = from;
        slices.push_back(comm.world().broadcast(slice, root));
      }
      for (auto& w : slices) w->wait();
      if (r >= 2) {
        ag.push_back(us_since(t2));
        ag_cpu.push_back((process_cpu_us() - cpu2) / ag.back());
      }
    }
    bytes.push_back(static_cast<double>(t.nbytes()));
    if (comm.rank() == 0) {
      call.push_back(median(in_call));
      // A one-way trip is the send call, then delivery (the receiver's Gloo thread reading).
      delivery.push_back(std::max(0.0, median(one_way) - call.back()));
    }
    allreduce.push_back(median(ar));
    allgather.push_back(median(ag));
    allgather_cpu.push_back(median(ag_cpu));
  }
  if (!c) return;
  c->send_call.mb = bytes;
  c->send_call.us = call;
  c->p2p = alpha_beta(bytes, delivery);
  c->allreduce = alpha_beta(bytes, allreduce);
  c->allgather = alpha_beta(bytes, allgather);
  c->allgather_by_bytes = {bytes, allgather};
  // Over the sizes the bandwidth is fitted on, as the gathers that matter are large.
  c->allgather_cpu_share = median(std::vector<double>(allgather_cpu.begin() + static_cast<std::ptrdiff_t>(allgather_cpu.size() / 2), allgather_cpu.end()));
  c->allreduce_ranks = 2;
}

}  // namespace parallax::exec::measuring
