#include "plan/schedule.hpp"

#include <algorithm>
#include <cctype>

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

Schedule lower(const ComputeOrder& order, ScheduleKind kind, int pipeline, int virtual_stages,
               int chunks, int grad_accumulation, const std::vector<int>& buckets_per_stage) {
  Schedule s;
  s.kind = kind;
  s.pipeline = pipeline;
  s.virtual_stages = virtual_stages;
  s.chunks = chunks;
  s.grad_accumulation = grad_accumulation;
  s.buckets_per_stage = buckets_per_stage;
  s.ranks.resize(pipeline);
  const int last_stage = s.stages() - 1;
  for (int r = 0; r < pipeline; ++r) {
    auto& out = s.ranks[r];
    std::vector<int> backwards_done(s.stages(), 0);
    for (int round = 0; round < grad_accumulation; ++round) {
      for (const Action& a : order[r]) {
        const int mb = a.mb + round * chunks;
        if (a.kind == ActionKind::F) {
          if (a.stage > 0) out.push_back({ActionKind::RECV_F, a.stage, mb});
          out.push_back({ActionKind::F, a.stage, mb});
          if (a.stage < last_stage) out.push_back({ActionKind::SEND_F, a.stage, mb});
          continue;
        }
        if (a.stage < last_stage) out.push_back({ActionKind::RECV_B, a.stage, mb});
        out.push_back({ActionKind::B, a.stage, mb});
        if (a.stage > 0) out.push_back({ActionKind::SEND_B, a.stage, mb});
        // The stage's gradients are complete after its last backward of the step: all-reduce
        // its buckets (in gradient-ready order) while later backwards of other stages run.
        if (++backwards_done[a.stage] == s.microbatches() && !buckets_per_stage.empty()) {
          for (int b = 0; b < buckets_per_stage[a.stage]; ++b)
            out.push_back({ActionKind::ALLREDUCE, a.stage, -1, b});
        }
      }
    }
    for (int stage = r; stage < s.stages(); stage += pipeline) out.push_back({ActionKind::OPTIM, stage});
  }
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
