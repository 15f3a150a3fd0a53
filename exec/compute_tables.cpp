#include "exec/compute_tables.hpp"

#include <torch/version.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>

#include "exec/gpu.hpp"
#include "plan/compute_tables.hpp"

namespace parallax::exec {

namespace {

using plan::Precision;

using plan::fixed;

bool on_gpu(const TablesOptions& o) { return o.device.is_cuda(); }

// Microseconds a call over `calls` back-to-back calls of `work`: between CUDA events on a GPU (the
// device's time, the launches queued ahead of it), by the steady clock on the CPU.
double loop_us(const TablesOptions& o, const std::function<void()>& work, int calls) {
  auto loop = [&] {
    for (int i = 0; i < calls; ++i) work();
  };
  if (on_gpu(o)) return gpu::event_time_us(loop) / calls;
  const auto t0 = std::chrono::steady_clock::now();
  loop();
  return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() / calls;
}

// Microseconds of one call of `work`: on a GPU its device time (a CUDA graph of back-to-back
// calls, exec/gpu.hpp), enough calls to fill `seconds_per_figure`; on the CPU a steady clock over
// as many calls, the fastest of three such passes (a shared CPU's other work lands in some).
double time_call(const TablesOptions& o, const std::function<void()>& work, bool* graphed) {
  work();  // the first call's setup (cuBLAS's handle, a kernel's first load) outside the timings
  if (!on_gpu(o)) {
    int calls = 1;
    while (loop_us(o, work, calls) * calls < o.seconds_per_figure * 1e6 && calls < 1 << 16) calls *= 2;
    return std::min({loop_us(o, work, calls), loop_us(o, work, calls), loop_us(o, work, calls)});
  }
  const double estimate = loop_us(o, work, 3);
  // The launches make the estimate long for short kernels: the graph then runs more of them.
  const int wanted = static_cast<int>(std::clamp(o.seconds_per_figure * 1e6 / std::max(estimate, 1.0), 3.0, 4000.0));
  const int calls = std::min(wanted, 200), replays = std::max(1, wanted / calls);
  return gpu::device_time_us(work, calls, replays, graphed);
}

torch::ScalarType dtype_of(Precision p) {
  switch (p) {
    case Precision::fp32: return torch::kFloat;
    case Precision::bf16: return torch::kBFloat16;
    case Precision::fp16: return torch::kHalf;
    case Precision::fp8: break;
  }
  throw std::logic_error("fp8 has no plain GEMM dtype");
}

double peak_at(const plan::Device& device, Precision p) {
  const auto peak = device.peak_tflops.find(p);
  if (peak == device.peak_tflops.end())
    throw std::invalid_argument(std::string("the base profile gives no device.peak_tflops.") + plan::name(p) +
                                ": a table at that precision has nothing to be read against");
  return peak->second;
}

// One m x n x k GEMM's call at precision p (C[m, n] = A[m, k] B[k, n]); fp8 as Transformer Engine
// and torchao run it: e4m3 operands with per-tensor scales (torch._scaled_mm), B column-major,
// the result in bf16.
std::function<void()> gemm_call(const TablesOptions& o, Precision p, int64_t m, int64_t n, int64_t k) {
  const auto opts = torch::TensorOptions().device(o.device);
  if (p == Precision::fp8) {
#if TORCH_VERSION_MAJOR >= 2
    auto a = torch::randn({m, k}, opts).to(torch::kFloat8_e4m3fn);
    auto b = torch::randn({n, k}, opts).to(torch::kFloat8_e4m3fn).t();
    auto scale = torch::ones({}, opts.dtype(torch::kFloat));
    return [a, b, scale] { (void)at::_scaled_mm(a, b, scale, scale, {}, {}, torch::kBFloat16); };
#else
    throw std::invalid_argument("fp8 GEMMs need LibTorch 2.x (torch._scaled_mm)");
#endif
  }
  auto a = torch::randn({m, k}, opts.dtype(dtype_of(p)));
  auto b = torch::randn({k, n}, opts.dtype(dtype_of(p)));
  auto c = torch::empty({m, n}, opts.dtype(dtype_of(p)));
  return [a, b, c]() mutable { at::mm_out(c, a, b); };
}

// The grid at one precision, m outermost, then n, then k (as the profiles list it).
plan::GemmGrid measure_grid(const TablesOptions& o, const plan::Device& device, Precision p, MeasuredTables* out) {
  const double peak = peak_at(device, p);
  plan::GemmGrid g;
  for (int64_t s : o.sizes) g.m.push_back(static_cast<double>(s));
  g.n = g.m;
  g.k = g.m;
  int graphed = 0, held = 0;
  const auto started = std::chrono::steady_clock::now();
  for (size_t row = 0; row < o.sizes.size(); ++row) {
    const int64_t m = o.sizes[row];
    // A grid up to 16k or beyond runs for minutes: a line each m once it has taken 10 s.
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (o.progress && elapsed > 10)
      o.progress(std::string("gemm ") + plan::name(p) + ": m " + std::to_string(m) + " (" + std::to_string(row + 1) + " of " +
                 std::to_string(o.sizes.size()) + "), " + fixed(elapsed, 0) + " s so far");
    for (int64_t n : o.sizes)
      for (int64_t k : o.sizes) {
        bool graph = false;
        const double us = time_call(o, gemm_call(o, p, m, n, k), &graph);
        graphed += graph;
        double tflops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) / (us * 1e6);
        if (tflops > peak) {  // the profile refuses a figure above the peak (a datasheet below the card)
          tflops = peak;
          ++held;
        }
        g.tflops.push_back(tflops);
      }
  }
  const size_t shapes = g.tflops.size();
  std::string note = std::string("gemm ") + plan::name(p) + ": " + std::to_string(shapes) + " shapes, " +
                     (on_gpu(o) ? std::to_string(graphed) + " of them timed as CUDA graphs" : std::string("steady clock")) +
                     ", largest " + fixed(g.tflops.back(), 1) + " TFLOP/s";
  if (held) note += "; " + std::to_string(held) + " held at the profile's peak of " + fixed(peak, 0);
  out->notes.push_back(note);
  if (o.progress) o.progress(note);
  return g;
}

// Memory-bound kernels as a block runs them: a copy, the residual add, GELU, SwiGLU's SiLU and
// product, a softmax over rows, a layer norm and an RMS norm (LibTorch 2.x), each as GB/s of the
// bytes it reads and writes once. The profile's one figure is their median over the datasheet's
// bandwidth. Timed eagerly between events, not as a graph: at 512 MiB a call the launches do not
// set the pace, and a CUDA graph turns the copy into a memcpy node that ran at 0.66x of the eager
// copy's rate on an H200 (bench/memory_kernels.py, bench/results/gpu-h200-2026-12-04), the other
// kernels alike either way.
double measure_memory(const TablesOptions& o, const plan::Device& device, MeasuredTables* out) {
  const auto dtype = on_gpu(o) ? torch::kBFloat16 : torch::kFloat;
  const int64_t row = 4096, rows = std::max<int64_t>(1, o.memory_elements / row);
  const auto opts = torch::TensorOptions().device(o.device).dtype(dtype);
  auto x = torch::randn({rows, row}, opts), y = torch::empty_like(x), gate = torch::randn_like(x);
  auto weight = torch::ones({row}, opts), bias = torch::zeros({row}, opts);
  const double bytes = static_cast<double>(x.numel() * x.element_size());
  struct Kernel {
    std::string name;
    double moved;  // bytes read and written, in units of x's
    std::function<void()> run;
  };
  std::vector<Kernel> kernels = {
      {"copy", 2, [&] { y.copy_(x); }},
      {"add", 3, [&] { at::add_out(y, x, gate); }},
      {"gelu", 2, [&] { at::gelu_out(y, x); }},
      {"silu_mul", 3, [&] { at::mul_out(y, at::silu(gate), x); }},
      {"softmax", 2, [&] { at::_softmax_out(y, x, -1, false); }},
      {"layer_norm", 2, [&] { (void)at::layer_norm(x, {row}, weight, bias); }}};
#if TORCH_VERSION_MAJOR >= 2
  kernels.push_back({"rms_norm", 2, [&] { (void)at::rms_norm(x, {row}, weight); }});
#endif
  std::vector<double> rates;
  std::string note = "memory-bound kernels over " + fixed(bytes / (1 << 20), 0) + " MiB, eager:";
  for (const auto& k : kernels) {
    k.run();
    const double us = loop_us(o, k.run, 20);
    rates.push_back(k.moved * bytes / (us * 1e3));
    note += " " + k.name + " " + fixed(rates.back(), 0) + " GB/s";
  }
  std::vector<double> sorted = rates;
  std::sort(sorted.begin(), sorted.end());
  const size_t n = sorted.size();
  const double median = n % 2 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  note += "; their median over the profile's " + fixed(device.memory_bandwidth_gb_per_s, 0) + " GB/s";
  out->notes.push_back(note);
  if (o.progress) o.progress(note);
  return std::min(1.0, median / device.memory_bandwidth_gb_per_s);
}

// scaled_dot_product_attention (LibTorch 1.13: its private forerunner, the same math).
torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v, bool causal) {
#if TORCH_VERSION_MAJOR >= 2
  return at::scaled_dot_product_attention(q, k, v, {}, 0.0, causal);
#else
  return std::get<0>(at::_scaled_dot_product_attention(q, k, v, {}, 0.0, false, causal));
#endif
}

struct AttentionTimes {
  double forward_us = 0, backward_us = 0;
};

// scaled_dot_product_attention's forward alone, and forward and backward, over a batch of
// `tokens / seq` sequences; backward is their difference. Gradients come from autograd::grad, not
// accumulated into .grad (an accumulation would add memory-bound kernels of the attention's size).
AttentionTimes time_attention(const TablesOptions& o, int64_t seq, bool causal) {
  const auto dtype = on_gpu(o) ? torch::kBFloat16 : torch::kFloat;
  const int64_t batch = std::max<int64_t>(1, o.attention_tokens / seq);
  const auto opts = torch::TensorOptions().device(o.device).dtype(dtype);
  auto q = torch::randn({batch, o.heads, seq, o.head_dim}, opts).requires_grad_();
  auto k = torch::randn({batch, o.heads, seq, o.head_dim}, opts).requires_grad_();
  auto v = torch::randn({batch, o.heads, seq, o.head_dim}, opts).requires_grad_();
  auto grad = torch::randn({batch, o.heads, seq, o.head_dim}, opts);
  auto forward = [&] { return attention(q, k, v, causal); };
  auto both = [&] { (void)torch::autograd::grad({forward()}, {q, k, v}, {grad}); };
  auto timed = [&](const std::function<void()>& f) {
    f();
    return loop_us(o, f, 5);
  };
  AttentionTimes t;
  t.forward_us = timed([&] { (void)forward(); });
  t.backward_us = std::max(timed(both) - t.forward_us, 1e-3);
  return t;
}

// The efficiencies and by-sequence fractions of one attention backend, counted as the simulator
// counts (plan/cost.cpp): forward 4 x batch x heads x seq^2 x head_dim FLOPs without a mask and
// half that with a causal one, backward 2.5 times the forward. A fraction is the combined
// (forward + backward) rate at its length and mask over the combined rate of the longest sequence
// without a mask, so that the modelled pair of calls takes the measured time at every point.
struct BackendFigures {
  double forward = 0, backward = 0;
  plan::ComputeModel::BySequence by_sequence;
  std::string timings;
};

BackendFigures measure_backend(const TablesOptions& o, double peak) {
  BackendFigures f;
  const int64_t longest = *std::max_element(o.sequences.begin(), o.sequences.end());
  auto flops = [&](int64_t seq, bool causal) {
    const double batch = static_cast<double>(std::max<int64_t>(1, o.attention_tokens / seq)), s = static_cast<double>(seq);
    return 4 * batch * static_cast<double>(o.heads) * s * s * static_cast<double>(o.head_dim) / (causal ? 2 : 1);
  };
  const AttentionTimes reference = time_attention(o, longest, false);
  f.forward = std::min(1.0, flops(longest, false) / (reference.forward_us * 1e6) / peak);
  f.backward = std::min(1.0, 2.5 * flops(longest, false) / (reference.backward_us * 1e6) / peak);
  const double reference_rate = 3.5 * flops(longest, false) / (reference.forward_us + reference.backward_us);
  for (bool causal : {false, true})
    for (int64_t seq : o.sequences) {
      const AttentionTimes t = seq == longest && !causal ? reference : time_attention(o, seq, causal);
      const double rate = 3.5 * flops(seq, causal) / (t.forward_us + t.backward_us);
      (causal ? f.by_sequence.causal : f.by_sequence.full).emplace_back(static_cast<double>(seq), std::min(1.0, rate / reference_rate));
      // Appended piece by piece: g++ 12 warns falsely (-Wstringop-overflow) on the one concatenation.
      f.timings += ' ';
      f.timings += std::to_string(seq);
      f.timings += causal ? "c " : " ";
      f.timings += fixed(t.forward_us, 0);
      f.timings += "+";
      f.timings += fixed(t.backward_us, 0);
      f.timings += " us;";
    }
  return f;
}

#if TORCH_VERSION_MAJOR >= 2
// Which kernel scaled_dot_product_attention picks for these inputs (at::SDPBackend's numbers).
std::string backend_name(int64_t choice) {
  switch (choice) {
    case 0: return "math";
    case 1: return "FlashAttention-2 (flash)";
    case 2: return "memory-efficient";
    case 3: return "cuDNN";
    default: return "backend " + std::to_string(choice);
  }
}
#endif

void measure_attention(const TablesOptions& o, const plan::Device& device, MeasuredTables* out) {
  const Precision p = on_gpu(o) ? Precision::bf16 : Precision::fp32;
  const double peak = peak_at(device, p);
  std::string chosen = "its own choice";
#if TORCH_VERSION_MAJOR >= 2
  {
    const auto opts = torch::TensorOptions().device(o.device).dtype(on_gpu(o) ? torch::kBFloat16 : torch::kFloat);
    auto q = torch::randn({1, o.heads, o.sequences.back(), o.head_dim}, opts);
    chosen = backend_name(at::_fused_sdp_choice(q, q, q, {}, 0.0, true));
  }
#endif
  const BackendFigures own = measure_backend(o, peak);
  auto& c = out->compute;
  c.flash_forward_efficiency = own.forward;
  c.flash_backward_efficiency = own.backward;
  c.flash_by_sequence = own.by_sequence;
  std::string note = "attention (scaled_dot_product_attention, " + chosen + "): forward " + fixed(own.forward * peak, 0) +
                     " and backward " + fixed(own.backward * peak, 0) + " TFLOP/s at " + std::to_string(o.sequences.back()) +
                     " tokens; forward+backward by length (c: causal):" + own.timings;
  out->notes.push_back(note);
  if (o.progress) o.progress(note);
#if TORCH_VERSION_MAJOR >= 2
  if (!on_gpu(o)) return;
  // FlashAttention-2 alone: scaled_dot_product_attention with every other backend switched off.
  auto& ctx = at::globalContext();
  const bool cudnn = ctx.userEnabledCuDNNSDP(), efficient = ctx.userEnabledMemEfficientSDP(), math = ctx.userEnabledMathSDP(),
             flash = ctx.userEnabledFlashSDP();
  auto restore = [&] {
    ctx.setSDPUseCuDNN(cudnn);
    ctx.setSDPUseMemEfficient(efficient);
    ctx.setSDPUseMath(math);
    ctx.setSDPUseFlash(flash);
  };
  ctx.setSDPUseCuDNN(false);
  ctx.setSDPUseMemEfficient(false);
  ctx.setSDPUseMath(false);
  ctx.setSDPUseFlash(true);
  try {
    const BackendFigures fa2 = measure_backend(o, peak);
    restore();
    c.flash2_forward_efficiency = fa2.forward;
    c.flash2_backward_efficiency = fa2.backward;
    c.flash2_by_sequence = fa2.by_sequence;
    note = "attention (FlashAttention-2 alone): forward " + fixed(fa2.forward * peak, 0) + " and backward " +
           fixed(fa2.backward * peak, 0) + " TFLOP/s; by length:" + fa2.timings;
  } catch (const std::exception& e) {
    restore();
    note = std::string("attention (FlashAttention-2 alone): not measured: ") + e.what();
  }
  out->notes.push_back(note.substr(0, 600));
  if (o.progress) o.progress(note);
#endif
}

// A GPU idles at a low clock: a second of large GEMMs first, so that the first shapes are timed
// at the clock the rest are.
void warm_up(const TablesOptions& o) {
  if (!on_gpu(o)) return;
  const auto work = gemm_call(o, Precision::bf16, 4096, 4096, 4096);
  const auto t0 = std::chrono::steady_clock::now();
  while (std::chrono::steady_clock::now() - t0 < std::chrono::seconds(1)) (void)loop_us(o, work, 20);
}

}  // namespace

MeasuredTables measure_compute_tables(const TablesOptions& o, const plan::Device& device) {
  for (Precision p : o.precisions) (void)peak_at(device, p);
  if (device.memory_bandwidth_gb_per_s <= 0 || std::isinf(device.memory_bandwidth_gb_per_s))
    throw std::invalid_argument("the base profile gives no finite device.memory_bandwidth_gb_per_s to read the memory figure against");
  torch::NoGradGuard no_grad_for_gemms;
  warm_up(o);
  MeasuredTables out;
  out.compute.precisions.clear();
  for (Precision p : o.precisions) {
    try {
      out.compute.gemm[p] = measure_grid(o, device, p, &out);
      out.compute.precisions.push_back(p);
    } catch (const std::exception& e) {
      const std::string note = std::string("gemm ") + plan::name(p) + ": not measured: " + e.what();
      out.notes.push_back(note.substr(0, 300));
      if (o.progress) o.progress(note);
    }
  }
  if (out.compute.precisions.empty()) throw std::runtime_error("no GEMM precision could be measured (" + out.notes.back() + ")");
  out.compute.memory_efficiency = measure_memory(o, device, &out);
  {
    torch::AutoGradMode with_grad(true);
    measure_attention(o, device, &out);
  }
  return out;
}

}  // namespace parallax::exec
