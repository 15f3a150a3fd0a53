#include "plan/schedule.hpp"

#include <algorithm>
#include <cctype>
#include <limits>
#include <optional>
#include <unordered_map>

#include "plan/schedule_csv.hpp"

namespace parallax::plan {

const char* name(ActionKind k) {
  switch (k) {
    case ActionKind::F: return "F";
    case ActionKind::B: return "B";
    case ActionKind::SEND_F: return "SEND_F";
    case ActionKind::RECV_F: return "RECV_F";
    case ActionKind::SEND_B: return "SEND_B";
    case ActionKind::RECV_B: return "RECV_B";
    case ActionKind::ALLREDUCE: return "ALLREDUCE";
    case ActionKind::OPTIM: return "OPTIM";
  }
  return "?";
}

bool is_compute(ActionKind k) { return k == ActionKind::F || k == ActionKind::B; }

std::string Action::id() const {
  std::string s = std::to_string(stage) + name(kind);
  if (kind == ActionKind::ALLREDUCE) s += std::to_string(bucket);
  else if (kind != ActionKind::OPTIM) s += std::to_string(mb);
  return s;
}

bool parse_action_id(const std::string& text, Action* out) {
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  if (i == 0 || i > 9) return false;
  Action a;
  a.stage = std::stoi(text.substr(0, i));
  // Longest names first, so "SEND_F" is not read as a stray "F".
  static const ActionKind kinds[] = {ActionKind::ALLREDUCE, ActionKind::SEND_F, ActionKind::RECV_F,
                                     ActionKind::SEND_B,    ActionKind::RECV_B, ActionKind::OPTIM,
                                     ActionKind::F,         ActionKind::B};
  bool matched = false;
  for (ActionKind k : kinds) {
    const std::string n = name(k);
    if (text.compare(i, n.size(), n) == 0) {
      a.kind = k;
      i += n.size();
      matched = true;
      break;
    }
  }
  if (!matched) return false;
  const std::string rest = text.substr(i);
  const bool digits = !rest.empty() && rest.size() <= 9 &&
                      std::all_of(rest.begin(), rest.end(), [](unsigned char c) { return std::isdigit(c); });
  if (a.kind == ActionKind::OPTIM) {
    if (!rest.empty()) return false;
  } else {
    if (!digits) return false;
    (a.kind == ActionKind::ALLREDUCE ? a.bucket : a.mb) = std::stoi(rest);
  }
  *out = a;
  return true;
}

ComputeOrder gpipe_order(int pipeline, int chunks) {
  ComputeOrder order(pipeline);
  for (int r = 0; r < pipeline; ++r) {
    for (int mb = 0; mb < chunks; ++mb) order[r].push_back({ActionKind::F, r, mb});
    for (int mb = 0; mb < chunks; ++mb) order[r].push_back({ActionKind::B, r, mb});
  }
  return order;
}

ComputeOrder one_f_one_b_order(int pipeline, int chunks) {
  ComputeOrder order(pipeline);
  for (int r = 0; r < pipeline; ++r) {
    // Warm-up: p-1-r forwards; steady state: one forward, one backward; cool-down: backwards.
    const int warmup = std::min(chunks, pipeline - 1 - r);
    int next_f = 0, next_b = 0;
    for (; next_f < warmup; ++next_f) order[r].push_back({ActionKind::F, r, next_f});
    while (next_f < chunks) {
      order[r].push_back({ActionKind::F, r, next_f++});
      order[r].push_back({ActionKind::B, r, next_b++});
    }
    while (next_b < chunks) order[r].push_back({ActionKind::B, r, next_b++});
  }
  return order;
}

ComputeOrder interleaved_1f1b_order(int pipeline, int virtual_stages, int chunks) {
  // ScheduleInterleaved1F1B._calculate_single_rank_operations and _get_1f1b_rank_ops of
  // torch.distributed.pipelining, without the None padding (it only aligns time steps).
  const int p = pipeline, v = virtual_stages;
  const int rounds = std::max(1, chunks / p);
  const int per_round = chunks / rounds;
  ComputeOrder order(p);
  for (int r = 0; r < p; ++r) {
    const int total = v * chunks;
    const int warmup = std::min((v - 1) * per_round + 2 * (p - 1 - r), total);
    const int fwd_bwd = total - warmup;
    const int cooldown = total - fwd_bwd;
    auto forward_stage = [&](int step) { return ((step / per_round) % v) * p + r; };
    auto backward_stage = [&](int step) { return (v - 1 - ((step - warmup) / per_round) % v) * p + r; };
    std::vector<int> next_f(p * v, 0), next_b(p * v, 0);
    for (int op = 0; op < warmup + fwd_bwd + cooldown; ++op) {
      if (op < warmup + fwd_bwd) {
        const int s = forward_stage(op);
        order[r].push_back({ActionKind::F, s, next_f[s]++});
      }
      if (op >= warmup) {
        const int s = backward_stage(op);
        order[r].push_back({ActionKind::B, s, next_b[s]++});
      }
    }
  }
  return order;
}

namespace {

using Lists = std::vector<std::vector<Action>>;

// The actions of one whole step per rank: the mini-batch order grad_accumulation times, later
// rounds' micro-batches numbered on (chunks x round + i).
Lists repeat_rounds(const ComputeOrder& order, int chunks, int grad_accumulation) {
  Lists step(order.size());
  for (size_t r = 0; r < order.size(); ++r)
    for (int round = 0; round < grad_accumulation; ++round)
      for (Action a : order[r]) {
        a.mb += round * chunks;
        step[r].push_back(a);
      }
  return step;
}

// After the stage's last backward of the step, the all-reduce of its buckets (in gradient-ready
// order) while later backwards of other stages run.
class Emitter {
 public:
  explicit Emitter(const Schedule& s) : s_(s), backwards_done_(s.stages(), 0) {}

  void compute(std::vector<Action>& out, const Action& a) {
    out.push_back(a);
    all_reduce_after(out, a);
  }

  void all_reduce_after(std::vector<Action>& out, const Action& a) {
    if (a.kind != ActionKind::B || s_.buckets_per_stage.empty()) return;
    if (++backwards_done_[a.stage] != s_.microbatches()) return;
    for (int b = 0; b < s_.buckets_per_stage[a.stage]; ++b) out.push_back({ActionKind::ALLREDUCE, a.stage, -1, b});
  }

 private:
  const Schedule& s_;
  std::vector<int> backwards_done_;
};

// The receive a compute action needs first, if any: RECV_F for a forward after stage 0, RECV_B
// for a backward before the last stage.
std::optional<Action> input_of(const Action& a, int last_stage) {
  if (a.kind == ActionKind::F && a.stage > 0) return Action{ActionKind::RECV_F, a.stage, a.mb};
  if (a.kind == ActionKind::B && a.stage < last_stage) return Action{ActionKind::RECV_B, a.stage, a.mb};
  return std::nullopt;
}

// The send that carries a compute action's result on, and the receive that takes it, if any.
std::optional<std::pair<Action, Action>> output_of(const Action& a, int last_stage) {
  if (a.kind == ActionKind::F && a.stage < last_stage)
    return std::make_pair(Action{ActionKind::SEND_F, a.stage, a.mb}, Action{ActionKind::RECV_F, a.stage + 1, a.mb});
  if (a.kind == ActionKind::B && a.stage > 0)
    return std::make_pair(Action{ActionKind::SEND_B, a.stage, a.mb}, Action{ActionKind::RECV_B, a.stage - 1, a.mb});
  return std::nullopt;
}

// Gloo: each RECV right before the compute that needs it, each SEND right after the compute that
// made its data. Sends never wait there, so this is the earliest every message can leave.
Lists lower_locally(const Lists& step, const Schedule& s) {
  Lists out(step.size());
  Emitter emit(s);
  const int last = s.stages() - 1;
  for (size_t r = 0; r < step.size(); ++r) {
    for (const Action& a : step[r]) {
      if (auto in = input_of(a, last)) out[r].push_back(*in);
      out[r].push_back(a);
      if (auto msg = output_of(a, last)) out[r].push_back(msg->first);
      emit.all_reduce_after(out[r], a);
    }
  }
  return out;
}

// A CSV that gives the communication itself: taken as written, the validator judges it.
Lists as_written(const Lists& step, const Schedule& s) {
  Lists out(step.size());
  Emitter emit(s);
  for (size_t r = 0; r < step.size(); ++r)
    for (const Action& a : step[r]) {
      if (is_compute(a.kind)) emit.compute(out[r], a);
      else out[r].push_back(a);
    }
  return out;
}

// NCCL: a send blocks until the peer posts the receive, and two ranks' messages match in the order
// they are posted. Posting each SEND and its RECV at the same point of one order that all ranks
// share makes any schedule safe: that shared order is itself a run in which every pair meets, and
// both peers see their messages in the same order. PyTorch's _add_send_recv builds its
// compute_comms schedules the same way. We order rather than group the pair as batch_isend_irecv
// does: grouping would be a new kind of action that the simulator and the executor would both have
// to learn, while ordering keeps the schedule in the actions both already perform.
//
// The shared order comes from playing the compute order on a clock with rough costs (F 1, B 2,
// messages free): a message is posted on both sides when its data is ready, so its RECV lands
// where the receiver would be at that moment, not before compute it could still do.
// Unit costs, not the stages' estimated times: with exact times each RECV lands just as the
// receiver starts a compute, so the blocked sender waits it out (interleaved 1F1B on t4-pcie
// simulated 263 ms a step that way, 218 ms with unit costs, 176 ms under Gloo's rules).
class NcclLowering {
 public:
  NcclLowering(const Lists& step, const Schedule& s)
      : step_(step),
        s_(s),
        emit_(s),
        out_(step.size()),
        next_(step.size(), 0),
        clock_(step.size(), 0),
        arrival_(slots(), kNotYet),
        pending_ready_(slots(), kNotYet) {}

  // The lists, or nothing when the compute order cannot run at all (an input nobody produces, or
  // ranks that need each other's results first): the validator then says what is wrong.
  std::optional<Lists> run() {
    while (true) {
      int rank = -1;
      int64_t start = 0;
      for (int r = 0; r < static_cast<int>(step_.size()); ++r) {
        const auto t = ready_at(r);
        if (t && (rank < 0 || *t < start)) rank = r, start = *t;
      }
      if (rank < 0) break;
      post_messages_ready_by(start);
      play(rank, start);
    }
    for (size_t r = 0; r < step_.size(); ++r)
      if (next_[r] < step_[r].size()) return std::nullopt;
    post_messages_ready_by(std::numeric_limits<int64_t>::max());
    return std::move(out_);
  }

 private:
  struct Message {
    int from, to;
    Action send, recv;
    int64_t ready;
  };

  // When rank r's next compute could start, or nothing if its input has not been made yet.
  std::optional<int64_t> ready_at(int r) const {
    if (next_[r] >= step_[r].size()) return std::nullopt;
    const auto in = input_of(step_[r][next_[r]], s_.stages() - 1);
    if (!in) return clock_[r];
    const size_t slot = slot_of(*in);
    if (arrival_[slot] != kNotYet) return std::max(clock_[r], arrival_[slot]);
    if (pending_ready_[slot] != kNotYet) return std::max(clock_[r], pending_ready_[slot]);
    return std::nullopt;
  }

  void play(int r, int64_t start) {
    const Action a = step_[r][next_[r]++];
    emit_.compute(out_[r], a);
    clock_[r] = start + (a.kind == ActionKind::F ? 1 : 2);
    const auto msg = output_of(a, s_.stages() - 1);
    if (!msg) return;
    const int to = s_.rank_of_stage(msg->second.stage);
    if (to != r) {
      pending_.push_back({r, to, msg->first, msg->second, clock_[r]});
      pending_ready_[slot_of(msg->second)] = clock_[r];
      return;
    }
    // To a stage on the same rank (pipeline 1) it is a local copy: posted at once, nothing waits.
    out_[r].push_back(msg->first);
    out_[r].push_back(msg->second);
    arrival_[slot_of(msg->second)] = clock_[r];
  }

  // Posts, in the order their data became ready, every message ready by `time`: the SEND on its
  // sender and the RECV on its receiver, at the same point of the shared order.
  void post_messages_ready_by(int64_t time) {
    std::stable_sort(pending_.begin(), pending_.end(), [](const Message& a, const Message& b) { return a.ready < b.ready; });
    auto it = pending_.begin();
    for (; it != pending_.end() && it->ready <= time; ++it) {
      out_[it->from].push_back(it->send);
      out_[it->to].push_back(it->recv);
      arrival_[slot_of(it->recv)] = it->ready;
      pending_ready_[slot_of(it->recv)] = kNotYet;
    }
    pending_.erase(pending_.begin(), it);
  }

  const Lists& step_;
  const Schedule& s_;
  Emitter emit_;
  Lists out_;
  std::vector<size_t> next_;     // next compute of each rank
  std::vector<int64_t> clock_;   // when each rank's last compute ends, in rough units
  std::vector<Message> pending_;  // made, not yet posted
  // By receive (slot_of), dense rather than keyed by action id: tune lowers a schedule for every
  // configuration it plays, and hashing id strings took a third of its time at 1,024 ranks.
  static constexpr int64_t kNotYet = -1;
  std::vector<int64_t> arrival_;        // posted receives: when their data was ready
  std::vector<int64_t> pending_ready_;  // made, not yet posted: when their data was ready

  size_t slots() const { return static_cast<size_t>(2 * s_.stages()) * static_cast<size_t>(s_.microbatches()); }
  size_t slot_of(const Action& recv) const {
    const size_t direction = recv.kind == ActionKind::RECV_B ? 1 : 0;
    return (direction * s_.stages() + recv.stage) * static_cast<size_t>(s_.microbatches()) + recv.mb;
  }
};

}  // namespace

bool has_communication(const ComputeOrder& order) {
  for (const auto& rank : order)
    for (const Action& a : rank)
      if (!is_compute(a.kind)) return true;
  return false;
}

Schedule lower(const ComputeOrder& order, ScheduleKind kind, int pipeline, int virtual_stages,
               int chunks, int grad_accumulation, const std::vector<int>& buckets_per_stage,
               Collectives collectives) {
  Schedule s;
  s.kind = kind;
  s.collectives = collectives;
  s.pipeline = pipeline;
  s.virtual_stages = virtual_stages;
  s.chunks = chunks;
  s.grad_accumulation = grad_accumulation;
  s.buckets_per_stage = buckets_per_stage;
  const Lists step = repeat_rounds(order, chunks, grad_accumulation);
  if (has_communication(order)) {
    s.ranks = as_written(step, s);
  } else if (collectives == Collectives::nccl) {
    auto lists = NcclLowering(step, s).run();
    s.ranks = lists ? std::move(*lists) : lower_locally(step, s);
  } else {
    s.ranks = lower_locally(step, s);
  }
  s.ranks.resize(pipeline);
  for (int r = 0; r < pipeline; ++r)
    for (int stage = r; stage < s.stages(); stage += pipeline) s.ranks[r].push_back({ActionKind::OPTIM, stage});
  return s;
}

ComputeOrder compute_order(const Scenario& scenario) {
  const ParallelSpec& p = scenario.parallel;
  switch (p.schedule) {
    case ScheduleKind::gpipe: return gpipe_order(p.pipeline, p.chunks);
    case ScheduleKind::one_f_one_b: return one_f_one_b_order(p.pipeline, p.chunks);
    case ScheduleKind::interleaved_1f1b: return interleaved_1f1b_order(p.pipeline, p.virtual_stages, p.chunks);
    case ScheduleKind::csv: return read_schedule_csv(p.schedule_csv, p.pipeline, p.stages(), p.chunks);
  }
  return {};
}

}  // namespace parallax::plan
