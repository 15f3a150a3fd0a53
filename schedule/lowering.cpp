// Lowering: a compute order repeated over the step, with its communication, all-reduces and
// optimizer steps added (the rules in schedule.hpp).
#include "schedule/schedule.hpp"

#include <algorithm>
#include <limits>
#include <functional>
#include <optional>
#include <tuple>

namespace parallax::schedule {

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
        if (a.kind == ActionKind::OVERLAP_F_B) a.b_mb += round * chunks;
        step[r].push_back(a);
      }
  return step;
}

// The receives a compute action needs first: RECV_F for a forward after stage 0, RECV_B for an
// input gradient (B or I) before the last stage; both for OVERLAP_F_B's halves; none for W.
FewOf<Action, 2> inputs_of(const Action& a, int last_stage) {
  FewOf<Action, 2> in;
  for (const Action& part : a.parts()) {
    if (part.kind == ActionKind::F && part.stage > 0) in.push_back({ActionKind::RECV_F, part.stage, part.mb});
    if (makes_input_gradient(part.kind) && part.stage < last_stage) in.push_back({ActionKind::RECV_B, part.stage, part.mb});
  }
  return in;
}

struct Message {
  Action send, recv;
};

// The sends that carry a compute action's results on, each with the receive that takes it.
FewOf<Message, 2> outputs_of(const Action& a, int last_stage) {
  FewOf<Message, 2> out;
  for (const Action& part : a.parts()) {
    if (part.kind == ActionKind::F && part.stage < last_stage)
      out.push_back({{ActionKind::SEND_F, part.stage, part.mb}, {ActionKind::RECV_F, part.stage + 1, part.mb}});
    if (makes_input_gradient(part.kind) && part.stage > 0)
      out.push_back({{ActionKind::SEND_B, part.stage, part.mb}, {ActionKind::RECV_B, part.stage - 1, part.mb}});
  }
  return out;
}

// Gloo: each RECV right before the compute that needs it, each SEND right after the compute that
// made its data. Sends never wait there, so this is the earliest every message can leave.
Lists lower_locally(const Lists& step, const Schedule& s) {
  Lists out(step.size());
  const int last = s.stages() - 1;
  for (size_t r = 0; r < step.size(); ++r) {
    for (const Action& a : step[r]) {
      for (const Action& in : inputs_of(a, last)) out[r].push_back(in);
      out[r].push_back(a);
      for (const Message& msg : outputs_of(a, last)) out[r].push_back(msg.send);
    }
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
// The shared order comes from playing the compute order on a clock with rough costs (F, I and W 1,
// B 2, messages free): a message is posted on both sides when its data is ready, so its RECV lands
// where the receiver would be at that moment, not before compute it could still do.
// Unit costs, not the stages' estimated times: with exact times each RECV lands just as the
// receiver starts a compute, so the blocked sender waits it out (interleaved 1F1B on t4-pcie
// simulated 263 ms a step that way, 218 ms with unit costs, 176 ms under Gloo's rules).
class NcclLowering {
 public:
  NcclLowering(const Lists& step, const Schedule& s)
      : step_(step),
        s_(s),
        out_(step.size()),
        next_(step.size(), 0),
        clock_(step.size(), 0),
        ready_(step.size()),
        stale_(step.size(), true),
        version_(step.size(), 0),
        arrival_(slots(), kNotYet),
        pending_ready_(slots(), kNotYet) {}

  // The lists, or nothing when the compute order cannot run at all (an input nobody produces, or
  // ranks that need each other's results first): the validator then says what is wrong.
  std::optional<Lists> run() {
    for (int r = 0; r < static_cast<int>(step_.size()); ++r) stale_ranks_.push_back(r);
    while (true) {
      refresh_stale();
      if (ready_queue_.empty()) break;
      const auto [start, rank, version] = ready_queue_.front();  // the earliest, the lowest rank among equals
      post_messages_ready_by(start);
      play(rank, start);
    }
    for (size_t r = 0; r < step_.size(); ++r)
      if (next_[r] < step_[r].size()) return std::nullopt;
    post_messages_ready_by(std::numeric_limits<int64_t>::max());
    return std::move(out_);
  }

 private:
  struct Pending {
    int from, to;
    Action send, recv;
    int64_t ready;
  };

  // A rank whose ready time may have changed: computed again before the next pick.
  void mark_stale(int r) {
    if (stale_[r]) return;
    stale_[r] = true;
    stale_ranks_.push_back(r);
  }

  void refresh_stale() {
    for (int r : stale_ranks_) {
      ready_[r] = ready_at(r);
      stale_[r] = false;
      ++version_[r];  // the rank's earlier entries in the queue are out of date
      if (ready_[r]) {
        ready_queue_.push_back({*ready_[r], r, version_[r]});
        std::push_heap(ready_queue_.begin(), ready_queue_.end(), std::greater<>());
      }
    }
    stale_ranks_.clear();
    while (!ready_queue_.empty() && std::get<2>(ready_queue_.front()) != version_[std::get<1>(ready_queue_.front())]) {
      std::pop_heap(ready_queue_.begin(), ready_queue_.end(), std::greater<>());
      ready_queue_.pop_back();
    }
  }

  // When rank r's next compute could start, or nothing if an input has not been made yet.
  std::optional<int64_t> ready_at(int r) const {
    if (next_[r] >= step_[r].size()) return std::nullopt;
    int64_t at = clock_[r];
    for (const Action& in : inputs_of(step_[r][next_[r]], s_.stages() - 1)) {
      const size_t slot = slot_of(in);
      if (arrival_[slot] != kNotYet) at = std::max(at, arrival_[slot]);
      else if (pending_ready_[slot] != kNotYet) at = std::max(at, pending_ready_[slot]);
      else return std::nullopt;
    }
    return at;
  }

  static int64_t rough_cost(const Action& a) {
    int64_t units = 0;
    for (const Action& part : a.parts()) units += part.kind == ActionKind::B ? 2 : 1;
    return units;
  }

  void play(int r, int64_t start) {
    const Action a = step_[r][next_[r]++];
    mark_stale(r);
    out_[r].push_back(a);
    clock_[r] = start + rough_cost(a);
    for (const Message& msg : outputs_of(a, s_.stages() - 1)) {
      const int to = s_.rank_of_stage(msg.recv.stage);
      if (to != r) {
        // Kept in the order their data becomes ready, those ready together in the order made.
        const auto at = std::upper_bound(pending_.begin(), pending_.end(), clock_[r],
                                         [](int64_t ready, const Pending& p) { return ready < p.ready; });
        pending_.insert(at, {r, to, msg.send, msg.recv, clock_[r]});
        pending_ready_[slot_of(msg.recv)] = clock_[r];
        mark_stale(to);
        continue;
      }
      // To a stage on the same rank (pipeline 1, or a V's turn) it is a local copy: posted at
      // once, nothing waits.
      out_[r].push_back(msg.send);
      out_[r].push_back(msg.recv);
      arrival_[slot_of(msg.recv)] = clock_[r];
    }
  }

  // Posts, in the order their data became ready, every message ready by `time`: the SEND on its
  // sender and the RECV on its receiver, at the same point of the shared order.
  void post_messages_ready_by(int64_t time) {
    auto it = pending_.begin();
    for (; it != pending_.end() && it->ready <= time; ++it) {
      out_[it->from].push_back(it->send);
      out_[it->to].push_back(it->recv);
      arrival_[slot_of(it->recv)] = it->ready;
      pending_ready_[slot_of(it->recv)] = kNotYet;
      mark_stale(it->to);
    }
    pending_.erase(pending_.begin(), it);
  }

  const Lists& step_;
  const Schedule& s_;
  Lists out_;
  std::vector<size_t> next_;     // next compute of each rank
  std::vector<int64_t> clock_;   // when each rank's last compute ends, in rough units
  // ready_at of each rank, computed again only after what it reads changed (the rank played, or a
  // message to it was made or posted), and the ranks that can play ordered by it: each turn picks
  // the earliest without asking every rank (a scan of all of them per turn was most of a 64-stage,
  // 512-chunk lowering, which the tuner does for every configuration it plans).
  std::vector<std::optional<int64_t>> ready_;
  std::vector<bool> stale_;
  std::vector<int> stale_ranks_;
  // A min-heap of (ready time, rank, version); an entry whose version is no longer its rank's is
  // dropped when it reaches the top (a heap in one vector: no allocation per turn, as a set has).
  std::vector<std::tuple<int64_t, int, uint64_t>> ready_queue_;
  std::vector<uint64_t> version_;
  std::vector<Pending> pending_;  // made, not yet posted, by when their data is ready
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

int receive_window(const Schedule& schedule, int pipeline_rank) {
  int inflight = 0, peak = 0;
  for (const Action& action : schedule.ranks[pipeline_rank])
    for (const Action& a : action.parts()) {
      if (a.kind == ActionKind::F) peak = std::max(peak, ++inflight);
      if (makes_weight_gradient(a.kind)) --inflight;
    }
  return std::max(2, 2 * peak);
}

bool receives_from_peer(const Schedule& schedule, const Action& recv) {
  if (recv.kind != ActionKind::RECV_F && recv.kind != ActionKind::RECV_B) return false;
  const int send_stage = recv.kind == ActionKind::RECV_F ? recv.stage - 1 : recv.stage + 1;
  if (send_stage < 0 || send_stage >= schedule.stages()) return false;
  return schedule.rank_of_stage(send_stage) != schedule.rank_of_stage(recv.stage);
}

bool has_communication(const ComputeOrder& order) {
  for (const auto& rank : order)
    for (const Action& a : rank)
      if (!is_compute(a.kind)) return true;
  return false;
}

BareSchedule lower_bare(const ComputeOrder& order, ScheduleKind kind, int pipeline, int virtual_stages, int chunks,
                        int grad_accumulation, Collectives collectives) {
  BareSchedule bare;
  Schedule& s = bare.schedule;
  s.kind = kind;
  s.collectives = collectives;
  s.pipeline = pipeline;
  s.virtual_stages = virtual_stages;
  s.chunks = chunks;
  s.grad_accumulation = grad_accumulation;
  s.v_shape = v_shaped(kind);
  const Lists step = repeat_rounds(order, chunks, grad_accumulation);
  std::optional<Lists> nccl;
  if (has_communication(order)) {
    s.ranks = step;  // a CSV that gives the communication itself: taken as written, the validator judges it
  } else if (collectives == Collectives::nccl && (nccl = NcclLowering(step, s).run())) {
    s.ranks = std::move(*nccl);
  } else {
    s.ranks = lower_locally(step, s);
    bare.sends_first = true;
  }
  s.ranks.resize(pipeline);
  for (int stage = 0; stage < s.stages(); ++stage) s.ranks[s.rank_of_stage(stage)].push_back({ActionKind::OPTIM, stage});
  return bare;
}

Schedule with_all_reduces(const BareSchedule& bare, const std::vector<int>& buckets_per_stage) {
  const Schedule& from = bare.schedule;
  if (buckets_per_stage.empty()) return from;
  Schedule s{.kind = from.kind, .collectives = from.collectives, .pipeline = from.pipeline, .virtual_stages = from.virtual_stages,
             .chunks = from.chunks, .grad_accumulation = from.grad_accumulation, .buckets_per_stage = buckets_per_stage,
             .ranks = std::vector<std::vector<Action>>(from.ranks.size()), .v_shape = from.v_shape};
  // A stage runs on one rank, so counting its weight gradients along that rank's list finds its last.
  std::vector<int> backwards_done(s.stages(), 0);
  int all_reduces = 0;
  for (int n : buckets_per_stage) all_reduces += n;
  for (size_t r = 0; r < from.ranks.size(); ++r) {
    const std::vector<Action>& in = from.ranks[r];
    std::vector<Action>& out = s.ranks[r];
    out.reserve(in.size() + static_cast<size_t>(all_reduces));
    for (size_t i = 0; i < in.size(); ++i) {
      const Action& a = in[i];
      out.push_back(a);
      bool sends_copied = false;
      for (const Action& part : a.parts()) {
        if (!makes_weight_gradient(part.kind) || ++backwards_done[part.stage] != s.microbatches()) continue;
        if (bare.sends_first && !sends_copied)  // lower_locally put the compute's sends right after it
          for (size_t n = outputs_of(a, s.stages() - 1).size(); n > 0; --n) out.push_back(in[++i]);
        sends_copied = true;
        for (int b = 0; b < buckets_per_stage[part.stage]; ++b) out.push_back({ActionKind::ALLREDUCE, part.stage, -1, b});
      }
    }
  }
  return s;
}

Schedule lower(const ComputeOrder& order, ScheduleKind kind, int pipeline, int virtual_stages,
               int chunks, int grad_accumulation, const std::vector<int>& buckets_per_stage,
               Collectives collectives) {
  return with_all_reduces(lower_bare(order, kind, pipeline, virtual_stages, chunks, grad_accumulation, collectives),
                          buckets_per_stage);
}
}  // namespace parallax::schedule
