#include "exec/runtime.hpp"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <thread>

#include "exec/device.hpp"
#include "exec/evaluation.hpp"
#include "exec/faults.hpp"
#include "exec/host_memory.hpp"
#include "exec/host_probe.hpp"
#include "exec/rank_runtime.hpp"

namespace parallax::exec {
namespace {

using timeline::Lane;

}  // namespace

// Room for every span of the run: each action of every step, plus slack; capped at 4M spans
// (256 MB a thread, and a quarter as many marks), beyond which spans are counted as dropped. A run
// that keeps no trace records none and reserves nothing (a long run without -o had reserved the cap,
// ~580 MB a rank).
size_t tracer_capacity(const plan::Plan& plan, const RunOptions& options) {
  if (!options.trace) return 0;
  size_t most = 0;
  for (const auto& actions : plan.schedule.ranks) most = std::max(most, actions.size());
  const size_t want = most * static_cast<size_t>(plan.scenario.data.steps) + 1024;
  return std::min<size_t>(want, size_t{1} << 22);
}

Runtime::Runtime(const plan::Plan& plan, const LaunchInfo& launch, const RunOptions& options)
    : plan_(plan),
      launch_(launch),
      options_(options),
      p_(plan.scenario.parallel),
      pipeline_rank_(plan.ranks[launch.rank].pipeline_rank),
      replica_(plan.ranks[launch.rank].replica),
      actions_(plan.schedule.ranks[pipeline_rank_]),
      train_device_(rank_device(plan.scenario, launch.local_rank)),
      tracer_(launch.rank, tracer_capacity(plan, options)),
      data_(plan),
      comm_(plan, launch),
      dtype_(compute_dtype(p_.precision)),
      messages_(plan, launch, pipeline_rank_, replica_, comm_, tracer_, train_device_, dtype_) {
  tracer_.register_thread();  // the training loop's thread (the send watcher registers its own)
  std::vector<std::string> ids;
  for (const Action& a : actions_) ids.push_back(a.id());
  comm_.set_actions(std::move(ids));
  // PARALLAX_TRACE=0 turns the tracer off, to measure its overhead (bench/exec_bench.sh).
  if (const char* t = std::getenv("PARALLAX_TRACE"); !options.trace || (t && std::string(t) == "0")) tracer_.set_enabled(false);
  const int threads = std::max(1u, std::thread::hardware_concurrency()) / std::max(1, launch.world_size);
  torch::set_num_threads(std::max(1, threads));
  demote_helper_threads(threads_before_comm_);  // Gloo's loop and the send watcher: see exec/threads.hpp
  memory_.rank = launch.rank;
  // Data and process groups are set up: what tensors hold from here on is the training's, which
  // is what the plan's estimate is of. A GPU rank's memory is the GPU's: the caching allocator's
  // peak of allocated bytes from here on (its baseline 0).
  if (train_device_.is_cuda()) {
    gpu::reset_peak_memory(train_device_.index());
  } else {
    reset_peak_tensor_bytes();
    memory_.baseline_bytes = tensor_bytes();
  }
  for (int s : plan.ranks[launch.rank].stages) build_stage(s);
  // A sharded stage is built whole and then keeps its shards only (torchtitan builds it on the
  // meta device instead): the peak counts from the sharded state, as the plan's estimate does.
  if (p_.shard != plan::Shard::none && !train_device_.is_cuda()) reset_peak_tensor_bytes();
  slots_.resize(plan.stages.size());
  for (auto& v : slots_) v.resize(plan.schedule.microbatches());
  if (auto scaler = scaler_options(p_.precision)) scaler_.emplace(*scaler);
  if (train_device_.is_cuda()) gpu_timer_ = gpu::make_compute_timer();
  // A run on the CPU launches no GPU work: CUPTI stays closed (and says nothing about the driver).
  if (train_device_.is_cuda()) gpu_activity_ = GpuActivity::start(launch.rank);
}

RankResult Runtime::run() {
  RankResult result;
  result.rank = launch_.rank;
  const auto clock_start = comm_.clock_round_trips("start", kClockRoundTrips);
  const int64_t start = options_.resume && !options_.checkpoint_dir.empty() ? resume() : 0;
  const int64_t steps = plan_.scenario.data.steps;
  for (int64_t step = start; step < steps; ++step) {
    maybe_inject_fault(launch_.rank, step, FaultPoint::step_start);
    // Before the step's mark and first action: its ~30 us fall outside the step's spans.
    result.host_probe.emplace_back(static_cast<int32_t>(step), host_probe_us());
    const int64_t t0 = profiler::now_ns();
    tracer_.instant("step", t0, static_cast<int32_t>(step));
    StepRecord rec = run_step(step);
    rec.step_time = plan::Time::ns(profiler::now_ns() - t0);
    report(rec, steps);
    result.steps.push_back(rec);
    // Every K steps, and at the last step, as torchtitan and Megatron-LM save at the end of training.
    if (options_.checkpoint_every > 0 && ((step + 1) % options_.checkpoint_every == 0 || step + 1 == steps)) checkpoint(step + 1);
  }
  // Before evaluation.
  memory_.peak_bytes = train_device_.is_cuda() ? gpu::peak_allocated_bytes(train_device_.index()) : peak_tensor_bytes();
  memory_.peak_rss_bytes = peak_resident_bytes();
  result.memory = memory_;
  if (data_.has_test_set()) {
    std::map<int, Stage*> modules;
    for (auto& [index, st] : stages_) {
      if (st.sharded) st.sharded->gather_all();
      modules[index] = &st.module;
    }
    evaluate_test_set(plan_, data_, replica_, modules, train_device_, dtype_, comm_, &result.correct, &result.tested);
  }
  const auto clock_end = comm_.clock_round_trips("end", kClockRoundTrips);
  result.events = tracer_.events();
  result.instants = tracer_.instants();
  result.device = std::move(device_);
  result.dropped = tracer_.dropped();
  align_to_rank0(clock_start, clock_end, &result);
  return result;
}

void Runtime::build_stage(int s) {
  StageState st;
  st.experts = expert_exchange(s);
  st.module = Stage(plan_, s, plan_.scenario.data.seed, st.experts.get());
  st.module->to(train_device_);  // before the optimizer and the DDP buckets take its parameters
  if (p_.shard != plan::Shard::none && p_.data > 1) {  // a rank's place in its stage's group is its replica
    st.sharded = std::make_unique<ShardedStage>(plan_, plan_.stages[s], st.module, comm_.stage_group(s), replica_, p_.data,
                                                comm_, tracer_);
    st.sharded->traced = [this](int64_t begin, int64_t end, int64_t bytes) {
      trace_inside(ActionKind::ALL_GATHER, Lane::all_gather, begin, end, bytes);
    };
  }
  st.optimizer = make_optimizer(plan_.scenario.optimizer, stepped_parameters(st));
  if (p_.data > 1 && !p_.sharded(plan::Shard::gradients))
    st.reducer = std::make_unique<BucketReducer>(plan_.stages[s], plan_.layers(), st.module, comm_.stage_group(s), p_.data, tracer_,
                                                 expert_reduction(s));
  st.split = std::any_of(actions_.begin(), actions_.end(), [&](const Action& a) { return a.kind == ActionKind::I && a.stage == s; });
  if (st.split && p_.activation_checkpointing != plan::Recompute::none)
    throw plan::InputError(plan_.scenario.where("parallel.activation_checkpointing"),
                           "the schedule splits backwards (I, W), which the executor does not combine with activation checkpointing yet");
  stages_.emplace(s, std::move(st));
}

std::unique_ptr<ExpertExchange> Runtime::expert_exchange(int s) {
  const Communicator::ExpertGroups* g = p_.expert > 1 ? comm_.expert_groups(s) : nullptr;
  if (!g) return nullptr;
  auto ex = std::make_unique<ExpertExchange>();
  ex->group = g->experts.get();
  ex->size = p_.expert;
  ex->rank = g->rank;
  ex->comm = &comm_;
  ex->peers = g->expert_ranks;
  ex->traced = [this](int64_t begin, int64_t end, int64_t bytes) {
    trace_inside(ActionKind::ALL_TO_ALL, Lane::all_to_all, begin, end, bytes);
  };
  return ex;
}

// An exchange or gather is an action of its own, named after the action it runs in (schedule.hpp).
void Runtime::trace_inside(ActionKind kind, Lane lane, int64_t begin, int64_t end, int64_t bytes) {
  if (!computing_) return;
  Action a{kind, computing_->stage, computing_->mb};
  a.exchange = places_[{kind, a.stage, a.mb}]++;
  tracer_.span(lane, a, begin, end, bytes, static_cast<int32_t>(step_));
}

ExpertReduction Runtime::expert_reduction(int s) const {
  ExpertReduction r;
  if (p_.expert <= 1) return r;
  const plan::Stage& st = plan_.stages[s];
  for (int l = st.first_layer; l < st.first_layer + st.layer_count; ++l)
    for (const auto& prm : plan_.layers()[l].params)
      if (prm.expert) r.params.insert(prm.name);
  r.group = comm_.expert_groups(s)->expert_data.get();
  return r;
}

StepRecord Runtime::run_step(int64_t step) {
  step_ = step;
  StepRecord rec;
  rec.step = step;
  rec.loss_scale = scaler_ ? scaler_->scale() : 0.0;
  loss_total_ = torch::Tensor();
  loss_count_ = 0;
  overflow_checked_ = false;
  for (auto& [s, st] : stages_) st.backwards = 0;
  places_.clear();
  messages_.start_step();
  if (gpu_timer_) {
    torch::cuda::synchronize(train_device_.index());  // the anchor event must run at once
    gpu_timer_->start_step(profiler::now_ns());
  }
  for (size_t i = 0; i < actions_.size(); ++i) {
    comm_.at(step, static_cast<int>(i));
    if (gpu_activity_) gpu_activity_->enter(step, i, actions_.size());
    perform(actions_[i], step);
    if (gpu_activity_) gpu_activity_->leave();
  }
  comm_.at(step, static_cast<int>(actions_.size()));
  computing_.reset();
  messages_.drain();
  // A GPU rank's host spans end when their kernels are queued; the step ends when they are done.
  if (train_device_.is_cuda()) torch::cuda::synchronize(train_device_.index());
  const std::vector<timeline::DeviceSpan> timed = gpu_timer_ ? collect_gpu_times(step) : std::vector<timeline::DeviceSpan>{};
  if (gpu_activity_) gpu_activity_->collect(step, launch_.rank, actions_, timed, &device_);
  for (auto& v : slots_)
    for (auto& slot : v) slot = Slot{};
  rec.loss_sum = loss_total_.defined() ? loss_total_.item<double>() : 0.0;  // on a GPU, the step's kernels are done
  rec.loss_count = loss_count_;
  rec.skipped = scaler_ && !scaled_step_ok_;
  return rec;
}

void Runtime::perform(const Action& a, int64_t step) {
  const auto step32 = static_cast<int32_t>(step);
  Slot& slot = a.kind == ActionKind::OPTIM || a.kind == ActionKind::ALLREDUCE ? dummy_ : slots_[a.stage][a.mb];
  if (a.kind == ActionKind::OVERLAP_F_B) {  // one action: its forward, then its backward
    const int64_t t0 = profiler::now_ns();
    forward(a.forward_part(), slot, step);
    backward(a.backward_part(), slots_[a.b_stage][a.b_mb]);
    tracer_.span(Lane::compute, a, t0, profiler::now_ns(), 0, static_cast<int32_t>(step));
    return;
  }
  // OPTIM first waits for the stage's all-reduces; the wait is idle time, not OPTIM's. With a
  // loss scaler the rank's first OPTIM also unscales all its stages and agrees on overflow.
  if (a.kind == ActionKind::OPTIM) {
    if (scaler_) {
      if (!overflow_checked_) check_overflow();
    } else {
      StageState& st = stages_.at(a.stage);
      if (st.reducer) st.reducer->wait(comm_);
      if (st.sharded) st.sharded->wait_reductions();
    }
  }
  const int64_t t0 = profiler::now_ns();
  const bool compute = schedule::is_compute(a.kind) || a.kind == ActionKind::OPTIM;
  if (gpu_timer_ && compute) {
    gpu_timer_->begin();
    timed_.push_back(a);
  }
  switch (a.kind) {
    case ActionKind::F: forward(a, slot, step); break;
    case ActionKind::B: backward(a, slot); break;
    case ActionKind::I: backward_input(a, slot); break;
    case ActionKind::W: backward_weight(a, slot); break;
    case ActionKind::OVERLAP_F_B: break;  // above
    case ActionKind::SEND_F:
    case ActionKind::SEND_B: {
      const bool fwd = a.kind == ActionKind::SEND_F;
      messages_.send(a, (fwd ? slot.output : slot.grad_in).detach().to(dtype_).contiguous(), t0, step32);
      if (!fwd) slot.grad_in = torch::Tensor();  // the send keeps its own reference until sent
      return;
    }
    case ActionKind::RECV_F:
    case ActionKind::RECV_B: {
      const torch::Tensor buf = messages_.receive(a, t0, step32);
      if (a.kind == ActionKind::RECV_F) slot.input = buf.to(torch::kFloat).requires_grad_(true);
      else slot.grad_out = buf.to(torch::kFloat);
      return;
    }
    case ActionKind::ALLREDUCE: return;  // started by the bucket's gradient hooks during B
    case ActionKind::ALL_TO_ALL:
    case ActionKind::ALL_GATHER: return;  // measured inside other actions, never scheduled
    case ActionKind::OPTIM: {
      computing_ = a;  // its parameter gathers (shard optimizer, gradients) are its
      StageState& st = stages_.at(a.stage);
      if (st.reducer && !scaler_) st.reducer->apply();  // with a scaler, check_overflow applied it
      if (st.sharded && !scaler_) st.sharded->gradients_to_shards();
      if (!scaler_ || scaled_step_ok_) st.optimizer->step();
      // As torch 2.x's zero_grad(set_to_none=True), on both LibTorch lines (1.13's zeroes them):
      // the next backward takes each first gradient as it comes instead of adding it to zeros,
      // which held a second copy of a layer's gradient during backward.
      for (auto& p : st.module->parameters()) p.mutable_grad() = torch::Tensor();
      for (auto& p : stepped_parameters(st)) p.mutable_grad() = torch::Tensor();
      if (st.sharded) st.sharded->shards_to_parameters();
      break;
    }
  }
  if (gpu_timer_) gpu_timer_->end();
  tracer_.span(Lane::compute, a, t0, profiler::now_ns(), 0, step32);
}

// This step's compute actions as the GPU ran them (CUDA events), as device spans on the host
// clock; measured_timeline makes them the actions' compute spans (result.cpp). Returns them.
std::vector<timeline::DeviceSpan> Runtime::collect_gpu_times(int64_t step) {
  const size_t first = device_.size();
  append_timed_actions(gpu_timer_->collect(), timed_, launch_.rank, step, &device_);
  timed_.clear();
  return {device_.begin() + static_cast<std::ptrdiff_t>(first), device_.end()};
}

void Runtime::report(const StepRecord& rec, int64_t steps) {
  // The first replica's last stage knows the loss; it speaks for the job.
  if (replica_ != 0 || !stages_.count(static_cast<int>(plan_.stages.size()) - 1)) return;
  const int64_t now = profiler::now_ns();
  if (rec.step + 1 < steps && now - last_report_ns_ < 1'000'000'000) return;
  last_report_ns_ = now;
  // Its own micro-batches' loss: the report's, over every replica's, comes once the job ends.
  char line[160];
  std::snprintf(line, sizeof line, "step %lld/%lld  loss %.4f%s  %.1f ms/step", static_cast<long long>(rec.step + 1),
                static_cast<long long>(steps), rec.loss_count ? rec.loss_sum / rec.loss_count : 0.0,
                p_.data > 1 ? " (replica 0's)" : "", rec.step_time.to_ms());
  progress(line);
}

std::vector<StageShard> Runtime::shards() {
  std::vector<StageShard> out;
  for (auto& [s, st] : stages_) {
    if (st.sharded) out.push_back({s, &st.sharded->shards(), st.optimizer.get(), st.sharded->shard_rank()});
    else if (st.experts)  // the expert rank's file, written by its first replica (replica = expert rank)
      out.push_back({s, st.module.ptr().get(), st.optimizer.get(), st.experts->rank, replica_ == st.experts->rank});
    else out.push_back({s, st.module.ptr().get(), st.optimizer.get()});
  }
  return out;
}

// The loss scaler's state is the same on every rank (they agree on every overflow): it rides
// in the checkpoint's marker.
void Runtime::checkpoint(int64_t step) {
  char state[96] = "";
  if (scaler_)
    std::snprintf(state, sizeof state, "loss_scale %.17g growth_tracker %d", scaler_->scale(), scaler_->growth_tracker());
  save_job_checkpoint(comm_, options_.checkpoint_dir, step, replica_, shards(), state,
                      [&] { maybe_inject_fault(launch_.rank, step, FaultPoint::checkpoint_save); }, checkpoint_layout(plan_));
}

// The first step to run: the newest complete checkpoint's, with the loss scaler's state.
int64_t Runtime::resume() {
  const Resumed r = resume_job(comm_, options_.checkpoint_dir, shards(), [&](const std::string& m) { progress(m); });
  for (auto& [s, st] : stages_)
    if (st.sharded && r.step > 0) st.sharded->shards_to_parameters();
  if (r.step == 0 || !scaler_) return r.step;
  double scale = 0;
  int tracker = 0;
  if (std::sscanf(r.state.c_str(), "loss_scale %lf growth_tracker %d", &scale, &tracker) == 2)
    scaler_->restore(scale, tracker);
  else
    progress("checkpoint step " + std::to_string(r.step) + " has no loss scaler state; starting from the initial scale");
  return r.step;
}

std::vector<RankResult> run_rank(const plan::Plan& plan, const LaunchInfo& launch, const RunOptions& options) {
  keep_freed_memory();
  count_tensor_memory();
  auto runtime = std::make_unique<Runtime>(plan, launch, options);
  try {
    const RankResult mine = runtime->run();
    std::vector<RankResult> all;
    for (const std::string& text : runtime->comm().gather_to_rank0(result_to_json(mine)))
      all.push_back(result_from_json(text));
    if (launch.rank != 0) all = {mine};
    return all;
  } catch (const std::exception& e) {
    runtime->comm().report_failure(e.what());
    // Left standing on purpose: a process group's destructor waits for every collective still
    // queued behind the failed one, each up to the timeout again, which would hold a failed
    // rank for a multiple of --timeout. The caller ends the process.
    (void)runtime.release();
    throw;
  }
}

}  // namespace parallax::exec
