// What-if by kernel kind: the host's and device's share of each action from a run's launch lane,
// and GEMM, attention, memory-bound and communication kernels of measured traces against the
// compute model's (fit/from_trace.hpp).
#include "fit/from_trace.hpp"

#include <algorithm>
#include <cctype>
#include <map>
#include <sstream>
#include <tuple>

#include "plan/cost.hpp"
#include "timeline/step_statistic.hpp"

namespace parallax::fit {
namespace {

using schedule::Action;
using schedule::ActionKind;

std::string number(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// A Kineto trace's kernels, each given to the action whose span (PP:<action>, or a phase) holds
// the CUDA call that launched it: Kineto writes the same args.correlation on a kernel and on its
// launch (as HolisticTraceAnalysis pairs them), a runtime call (cudaLaunchKernel) or a driver one
// (cuLaunchKernel: Triton's, so torch.compile's kernels). A kernel whose launch no action holds is
// left out.
std::vector<timeline::DeviceSpan> kineto_kernels(const timeline::LoadedTrace& t, const timeline::Timeline& actions) {
  std::map<std::pair<int, int64_t>, int64_t> launched;  // (rank, correlation): the launch's start
  for (const auto& e : t.events)
    if ((e.category == "cuda_runtime" || e.category == "cuda_driver") && e.correlation >= 0)
      launched[{e.rank, e.correlation}] = e.start_ns;
  std::map<int, std::vector<const timeline::TimelineEvent*>> computed;  // by rank, in start order
  for (const auto& a : actions.events)
    if (a.lane == timeline::Lane::compute) computed[a.rank].push_back(&a);
  for (auto& [rank, v] : computed)
    std::sort(v.begin(), v.end(), [](const auto* a, const auto* b) { return a->start < b->start; });
  std::vector<timeline::DeviceSpan> out;
  for (const auto& e : t.events) {
    if (e.category != "kernel" || e.correlation < 0) continue;
    const auto launch = launched.find({e.rank, e.correlation});
    const auto mine = computed.find(e.rank);
    if (launch == launched.end() || mine == computed.end()) continue;
    const plan::Time at = plan::Time::ns(launch->second);
    const auto after = std::upper_bound(mine->second.begin(), mine->second.end(), at,
                                        [](plan::Time when, const auto* a) { return when < a->start; });
    if (after == mine->second.begin() || at > (*std::prev(after))->end) continue;
    const timeline::TimelineEvent& a = **std::prev(after);
    timeline::DeviceSpan d;
    d.rank = e.rank;
    d.lane = e.lane;
    d.name = e.name;
    d.start = plan::Time::ns(e.start_ns);
    d.end = plan::Time::ns(e.end_ns);
    d.attributed = true;
    d.action = a.action;
    d.step = a.step;
    out.push_back(std::move(d));
  }
  return out;
}

}  // namespace

std::vector<LaunchShare> launch_shares(const std::vector<timeline::LoadedTrace>& traces) {
  struct Samples {
    std::vector<double> host, device, after;
  };
  std::map<ActionKind, Samples> by_kind;
  for (const auto& t : traces) {
    if (t.format != "parallax") continue;
    std::map<std::tuple<int, int32_t, std::string>, const timeline::DeviceSpan*> launch;  // (rank, step, action)
    for (const auto& d : t.timeline.device)
      if (d.lane == timeline::kHostLaunchLane && d.attributed && d.step > 0) launch[{d.rank, d.step, d.action.id()}] = &d;
    if (launch.empty()) continue;
    for (const auto& e : t.timeline.events) {
      if (e.lane != timeline::Lane::compute) continue;
      const auto it = launch.find({e.rank, e.step, e.action.id()});
      if (it == launch.end()) continue;
      Samples& s = by_kind[e.action.kind];
      s.host.push_back((it->second->end - it->second->start).to_us());
      s.device.push_back((e.end - e.start).to_us());
      s.after.push_back((e.end - it->second->end).to_us());
    }
  }
  std::vector<LaunchShare> out;
  for (const auto& [kind, s] : by_kind)
    out.push_back({kind, timeline::median(s.host), timeline::median(s.device), timeline::median(s.after),
                   static_cast<int>(s.host.size())});
  return out;
}

namespace {

// A kernel's own name: lower case, without its template arguments and parameter lists (what is
// inside <> and ()) and without FBGEMM's name. The whole demangled name had been searched, and
// "gemm" matched in fbgemm_gpu's embedding and permute kernels, and in elementwise kernels whose
// template arguments name an fbgemm functor: on a TorchRec trace 57-68% of "GEMM" time was theirs.
std::string own_name(const std::string& name) {
  std::string n(name.size(), ' ');
  std::transform(name.begin(), name.end(), n.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (const char* noise : {"(anonymous namespace)", "fbgemm"})
    for (size_t at; (at = n.find(noise)) != std::string::npos;) n.erase(at, std::string(noise).size());
  std::string out;
  int depth = 0;
  for (size_t i = 0; i < n.size(); ++i) {
    const char c = n[i];
    if (c == '<' || c == '(') ++depth;
    else if ((c == '>' && (i == 0 || n[i - 1] != '-')) || c == ')') depth = std::max(0, depth - 1);
    else if (depth == 0) out += c;
  }
  return out;
}

}  // namespace

KernelKind kernel_kind(const std::string& name) {
  const std::string n = own_name(name);
  auto has = [&](const char* s) { return n.find(s) != std::string::npos; };
  if (has("nccl")) return KernelKind::communication;
  if (has("memcpy") || has("memset")) return KernelKind::copy;
  if (has("flash") || has("fmha")) return KernelKind::flash;
  // cuBLAS 12.8 and later name many of its GEMM kernels nvjet_* (an H200 with CUDA 13: nvjet_sm90_tst_...);
  // cutlass::Kernel<cutlass_80_tensorop_s1688gemm_...> is a GEMM by its launcher's name; gemv is
  // cuBLAS's matrix-vector product.
  if (has("gemm") || has("gemv") || has("cutlass") || has("xmma") || has("cublas") || has("wgmma") || has("matmul") || has("nvjet"))
    return KernelKind::gemm;
  return KernelKind::memory;
}

plan::FittedCosts::Kernels fit_kernel_kinds(const plan::Plan& plan, const std::vector<timeline::LoadedTrace>& traces,
                                            std::vector<std::string>* said, const std::vector<timeline::Timeline>* measured_actions_of) {
  const auto& s = plan.scenario;
  // Each stage's model times by kind, forward and backward (a recompute's forward inside B).
  const auto modelled = plan::stage_kernel_classes(plan);
  if (!modelled) {
    said->push_back(std::string("kernels: not fitted (") + s.hardware.name + " has no compute model at " +
                    plan::name(s.parallel.precision) + " to set them against)");
    return {};
  }
  const std::vector<plan::LayerKernelClasses>& stage = *modelled;
  plan::KernelClassTimes measured, model;
  std::set<std::tuple<int, int32_t, std::string>> actions;  // (rank, step, action) with kernels
  for (size_t i = 0; i < traces.size(); ++i) {
    const timeline::LoadedTrace& t = traces[i];
    // Parallax's CUPTI traces attribute their kernels as they record them; a Kineto trace's are
    // attributed here, through their launches.
    std::vector<timeline::DeviceSpan> attributed;
    if (t.format == "kineto") attributed = kineto_kernels(t, measured_actions_of ? measured_actions_of->at(i) : measured_actions(t, plan));
    else if (t.format != "parallax") continue;
    const std::vector<timeline::DeviceSpan>& spans = t.format == "kineto" ? attributed : t.timeline.device;
    // The job's first step, 0, is its warm-up (timeline::steps_after_warmup): Parallax's step 0, a
    // profiler's ProfilerStep#0; a window that starts later has none.
    int32_t first = std::numeric_limits<int32_t>::max();
    for (const auto& d : spans)
      if (d.attributed) first = std::min(first, d.step);
    const bool warmup = first == 0;
    for (const auto& d : spans) {
      // Kernels only: not the actions' CUDA-event spans nor the host's launch spans beside them.
      if (d.lane == timeline::kCudaEventLane || d.lane == timeline::kHostLaunchLane) continue;
      if (!d.attributed || (warmup && d.step == first) || (d.action.kind != ActionKind::F && d.action.kind != ActionKind::B)) continue;
      const double us = (d.end - d.start).to_us();
      switch (kernel_kind(d.name)) {
        case KernelKind::gemm: measured.gemm += us; break;
        case KernelKind::flash: measured.flash += us; break;
        case KernelKind::memory: measured.memory += us; break;
        default: continue;
      }
      if (!actions.insert({d.rank, d.step, d.action.id()}).second) continue;
      const auto& c = d.action.kind == ActionKind::F ? stage[d.action.stage].forward : stage[d.action.stage].backward;
      model.gemm += c.gemm, model.flash += c.flash, model.memory += c.memory;
    }
  }
  if (actions.empty()) {
    said->push_back("kernels: not fitted (no trace shows the GPU's kernels of its F and B after its first step: Parallax's "
                    "measured GPU traces with CUPTI do, and PyTorch profiler traces with their kernels and launches)");
    return {};
  }
  plan::FittedCosts::Kernels k;
  auto fit = [&](double m, double q, double* f, const char* what) {
    if (m > 0 && q > 0) {
      *f = m / q;
      said->push_back(std::string("kernels: ") + what + " " + number(m / 1e3) + " ms measured over " + number(q / 1e3) +
                      " ms modelled, x" + number(*f) + " (" + std::to_string(actions.size()) + " F and B actions)");
    } else {
      said->push_back(std::string("kernels: ") + what + " kept (" + (m > 0 ? "none modelled" : "none in the traces") + ")");
    }
  };
  fit(measured.gemm, model.gemm, &k.gemm, "GEMMs");
  fit(measured.flash, model.flash, &k.flash, "flash attention");
  fit(measured.memory, model.memory, &k.memory, "memory-bound");
  return k;
}

}  // namespace parallax::fit
