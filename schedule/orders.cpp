// The compute orders of the generated schedules, one mini-batch each, as torch.distributed.pipelining
// (2.x) generates them: each function follows the torch class named in its comment, and the
// tests compare them with torch's own lists action for action (tests/schedule/zero_bubble_test.cpp).
#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "schedule/schedule.hpp"

namespace parallax::schedule {

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

namespace {

// What torch's interleaved schedules share (_get_warmup_ops, and the stage of each op in
// _get_1f1b_rank_ops): micro-batches in rounds of `per_round`, rank r's warm-up forwards
// (`hops` for each rank of distance from the last: 2 in interleaved 1F1B, 1 in zero bubble), and
// which of the rank's stages the op-th forward and backward go to.
struct Interleaving {
  Interleaving(int pipeline, int virtual_stages, int chunks, int rank, int hops)
      : p(pipeline), v(virtual_stages), r(rank), per_round(chunks / std::max(1, chunks / pipeline)),
        total(virtual_stages * chunks),
        warmup(std::min((virtual_stages - 1) * per_round + hops * (pipeline - 1 - rank), total)) {}
  int forward_stage(int op) const { return ((op / per_round) % v) * p + r; }
  int backward_stage(int op) const { return (v - 1 - ((op - warmup) / per_round) % v) * p + r; }

  int p, v, r, per_round;
  int total;   ///< forwards (and backwards) of the rank in a mini-batch
  int warmup;  ///< forwards before the first backward
};

}  // namespace

ComputeOrder interleaved_1f1b_order(int pipeline, int virtual_stages, int chunks) {
  // ScheduleInterleaved1F1B._calculate_single_rank_operations and _get_1f1b_rank_ops of
  // torch.distributed.pipelining, without the None padding (it only aligns time steps).
  ComputeOrder order(pipeline);
  for (int r = 0; r < pipeline; ++r) {
    const Interleaving shape(pipeline, virtual_stages, chunks, r, 2);
    std::vector<int> next_f(pipeline * virtual_stages, 0), next_b(pipeline * virtual_stages, 0);
    for (int op = 0; op < shape.warmup + shape.total; ++op) {
      if (op < shape.total) {
        const int s = shape.forward_stage(op);
        order[r].push_back({ActionKind::F, s, next_f[s]++});
      }
      if (op >= shape.warmup) {
        const int s = shape.backward_stage(op);
        order[r].push_back({ActionKind::B, s, next_b[s]++});
      }
    }
  }
  return order;
}

ComputeOrder combined_1f1b_order(int pipeline, int virtual_stages, int chunks) {
  // Megatron-core's combined 1F1B (--overlap-moe-expert-parallel-comm; its user guide,
  // docs/user-guide/features/moe_a2a_overlap.md): interleaved 1F1B with one more warm-up forward,
  // so that the forward and the backward of each steady-state step belong to different
  // micro-batches, even on the last stage, and run as one OVERLAP_F_B whose all-to-alls hide
  // behind the other's compute. Without pipelining (one rank, one stage) that is F0, then
  // (F1;B0), (F2;B1), ..., and B(n-1) alone.
  ComputeOrder order(pipeline);
  for (int r = 0; r < pipeline; ++r) {
    Interleaving shape(pipeline, virtual_stages, chunks, r, 2);
    shape.warmup = std::min(shape.warmup + 1, shape.total);
    std::vector<int> next_f(pipeline * virtual_stages, 0), next_b(pipeline * virtual_stages, 0);
    for (int op = 0; op < shape.warmup + shape.total; ++op) {
      const bool forward = op < shape.total, backward = op >= shape.warmup;
      const int fs = forward ? shape.forward_stage(op) : -1, bs = backward ? shape.backward_stage(op) : -1;
      if (forward && backward && (fs != bs || next_f[fs] != next_b[bs])) {
        order[r].push_back({ActionKind::OVERLAP_F_B, fs, next_f[fs]++, -1, bs, next_b[bs]++});
        continue;
      }
      if (forward) order[r].push_back({ActionKind::F, fs, next_f[fs]++});
      if (backward) order[r].push_back({ActionKind::B, bs, next_b[bs]++});
    }
  }
  return order;
}

ComputeOrder looped_bfs_order(int pipeline, int virtual_stages, int chunks) {
  // ScheduleLoopedBFS._calculate_single_rank_operations: each local stage's forwards in turn,
  // then the stages' backwards from the last, micro-batches in reverse.
  ComputeOrder order(pipeline);
  for (int r = 0; r < pipeline; ++r) {
    for (int v = 0; v < virtual_stages; ++v)
      for (int mb = 0; mb < chunks; ++mb) order[r].push_back({ActionKind::F, v * pipeline + r, mb});
    for (int v = virtual_stages - 1; v >= 0; --v)
      for (int mb = chunks - 1; mb >= 0; --mb) order[r].push_back({ActionKind::B, v * pipeline + r, mb});
  }
  return order;
}

ComputeOrder interleaved_zero_bubble_order(int pipeline, int virtual_stages, int chunks) {
  // ScheduleInterleavedZeroBubble (ZB1P of Qi et al. 2024): interleaved 1F1B's order with one
  // hop of warm-up per rank instead of two, each backward an I, and the W of the backward
  // `rank` backwards earlier after each I (_get_1f1b_rank_ops with enable_zero_bubble); the
  // W still owed run at the end. torch's _add_bubbles_to_actions only pads time steps.
  ComputeOrder order(pipeline);
  for (int r = 0; r < pipeline; ++r) {
    const Interleaving shape(pipeline, virtual_stages, chunks, r, 1);
    const int stages = pipeline * virtual_stages;
    std::vector<int> next_f(stages, 0), next_i(stages, 0), next_w(stages, 0);
    std::vector<int> backward_ops;  // the op number of each I, for its W
    size_t weights_done = 0;
    auto weight = [&] {
      const int s = shape.backward_stage(backward_ops[weights_done++]);
      order[r].push_back({ActionKind::W, s, next_w[s]++});
    };
    for (int op = 0; op < shape.warmup + shape.total; ++op) {
      if (op < shape.total) {
        const int s = shape.forward_stage(op);
        order[r].push_back({ActionKind::F, s, next_f[s]++});
      }
      if (op < shape.warmup) continue;
      const int s = shape.backward_stage(op);
      order[r].push_back({ActionKind::I, s, next_i[s]++});
      backward_ops.push_back(op);
      if (op - shape.warmup >= r) weight();
    }
    while (weights_done < backward_ops.size()) weight();
  }
  return order;
}

ComputeOrder zbv_zero_bubble_order(int pipeline, int chunks) {
  // ScheduleZBVZeroBubble._calculate_single_rank_operations (Qi et al. 2024, section 6): rank r
  // holds stage r (chunk 0) and 2p-1-r (chunk 1). Planned for at least 2p-1 micro-batches; the
  // actions of micro-batches beyond `chunks` are then left out, as torch leaves them idle.
  const int p = pipeline, n = std::max(2 * p - 1, chunks);
  ComputeOrder order(p);
  for (int r = 0; r < p; ++r) {
    const int s0 = r, s1 = 2 * p - 1 - r;
    int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
    std::vector<Action> ops;
    auto add = [&](ActionKind k, int stage, int mb) { ops.push_back({k, stage, mb}); };
    for (int i = 0; i < 2 * (p - r) - 1; ++i) add(ActionKind::F, s0, f0++);
    for (int i = 0; i < r; ++i) add(ActionKind::F, s1, f1++), add(ActionKind::F, s0, f0++);
    for (int i = 0; i < p - r; ++i) {
      add(ActionKind::F, s1, f1++);
      add(ActionKind::I, s1, b1);
      add(ActionKind::W, s1, b1++);
    }
    while (f1 < f0 || f0 < n) {
      if (f0 < n) add(ActionKind::F, s0, f0++);
      add(ActionKind::I, s0, b0);
      add(ActionKind::W, s0, b0++);
      add(ActionKind::F, s1, f1++);
      add(ActionKind::I, s1, b1);
      add(ActionKind::W, s1, b1++);
    }
    int w0 = b0, w1 = b1;
    for (int i = 0; i < r; ++i) add(ActionKind::I, s0, b0++), add(ActionKind::I, s1, b1++);
    for (int i = 0; i < p - r; ++i) add(ActionKind::I, s0, b0++), add(ActionKind::W, s0, w0++);
    while (w1 < b1) add(ActionKind::W, s1, w1++);
    while (w0 < b0) add(ActionKind::W, s0, w0++);
    for (const Action& a : ops)
      if (a.mb < chunks) order[r].push_back(a);
  }
  return order;
}

namespace {

// One rank's DualPipeV actions (ScheduleDualPipeV._calculate_single_rank_operations, after
// DeepSeek's DualPipe): micro-batch numbers come from per-stage counters, a B counts as an I and
// a W, and each I queues its W for the next free slot.
class DualPipeVRank {
 public:
  DualPipeVRank(int pipeline, int rank) : s0_(rank), s1_(2 * pipeline - 1 - rank), f_(2 * pipeline), i_(2 * pipeline) {}

  std::vector<Action> run(int p, int r, int chunks) {
    for (int k = 0; k < 2 * (p - r - 1); ++k) add(ActionKind::F, s0_);
    for (int k = 0; k < r + 1; ++k) add(ActionKind::F, s0_), add(ActionKind::F, s1_);
    for (int k = 0; k < p - r - 1; ++k) add(ActionKind::I, s1_), weight(), add(ActionKind::F, s1_);
    for (int k = 0; k < chunks - 2 * p + r + 1; ++k) {
      if (k == 0 && r == p - 1) add(ActionKind::F, s0_), add(ActionKind::B, s1_);  // not overlapped: a smaller bubble
      else overlap(s0_, s1_);
      overlap(s1_, s0_);
    }
    for (int k = 0; k < p - r - 1; ++k) add(ActionKind::B, s1_), overlap(s1_, s0_);
    // The second half of the last backwards is split, so that their W fill the tail.
    const int last = r + 1;
    bool split = false;
    for (int k = 0; k < last; ++k) {
      if (k == last / 2 && r % 2 == 1) split = true;
      add(split ? ActionKind::I : ActionKind::B, s1_);
      if (k == last / 2 && r % 2 == 0) split = true;
      add(split ? ActionKind::I : ActionKind::B, s0_);
    }
    for (int k = 0; k < p - r - 1; ++k) weight(), add(split ? ActionKind::I : ActionKind::B, s0_);
    for (int k = 0; k < r + 1; ++k) weight();
    return std::move(out_);
  }

 private:
  void add(ActionKind k, int stage) {
    if (k == ActionKind::F) {
      out_.push_back({k, stage, f_[stage]++});
      return;
    }
    const int mb = i_[stage]++;
    out_.push_back({k, stage, mb});
    if (k == ActionKind::I) weights_.push_back({stage, mb});
  }
  void overlap(int forward_stage, int backward_stage) {
    out_.push_back({ActionKind::OVERLAP_F_B, forward_stage, f_[forward_stage]++, -1, backward_stage, i_[backward_stage]++});
  }
  void weight() {
    if (weights_.empty()) return;
    out_.push_back({ActionKind::W, weights_.front().first, weights_.front().second});
    weights_.erase(weights_.begin());
  }

  int s0_, s1_;
  std::vector<int> f_, i_;  // next forward and next backward micro-batch of each stage
  std::vector<std::pair<int, int>> weights_;  // (stage, micro-batch) of the I whose W is owed
  std::vector<Action> out_;
};

}  // namespace

ComputeOrder dualpipev_order(int pipeline, int chunks) {
  // Below 2p micro-batches the rank's phases above count past `chunks` (its warm-up alone takes
  // 2p - r - 1 of stage r's), and the order would name micro-batches that do not exist.
  if (chunks < 2 * pipeline)
    throw std::invalid_argument("dualpipev needs at least as many micro-batches as stages (2 x pipeline = " +
                                std::to_string(2 * pipeline) + "), got " + std::to_string(chunks));
  ComputeOrder order(pipeline);
  for (int r = 0; r < pipeline; ++r) order[r] = DualPipeVRank(pipeline, r).run(pipeline, r, chunks);
  return order;
}

ComputeOrder generated_order(ScheduleKind kind, int p, int v, int chunks) {
  switch (kind) {
    case ScheduleKind::gpipe: return gpipe_order(p, chunks);
    case ScheduleKind::one_f_one_b: return one_f_one_b_order(p, chunks);
    case ScheduleKind::interleaved_1f1b: return interleaved_1f1b_order(p, v, chunks);
    case ScheduleKind::looped_bfs: return looped_bfs_order(p, v, chunks);
    case ScheduleKind::interleaved_zero_bubble: return interleaved_zero_bubble_order(p, v, chunks);
    case ScheduleKind::zbv_zero_bubble: return zbv_zero_bubble_order(p, chunks);
    case ScheduleKind::dualpipev: return dualpipev_order(p, chunks);
    case ScheduleKind::csv: break;
  }
  return {};
}

}  // namespace parallax::schedule
