#pragma once
// Schedules (module schedule/, below plan/: it knows no scenario): for every pipeline rank, the ordered list of actions it performs in one optimizer
// step. The same lists drive the simulator and the executor, so they are made once, here.
//
// Stage s lives on pipeline rank s mod p (interleaved: rank r holds r, r+p, ...), or in a V for
// zbv-zero-bubble and dualpipev (rank r holds r and 2p-1-r; pipeline_rank_of_stage). A step runs
// grad_accumulation mini-batches of `chunks` micro-batches each, numbered 0 .. chunks*ga-1; the
// compute order of each mini-batch is the schedule's (gpipe, 1f1b, interleaved-1f1b, looped-bfs,
// interleaved-zero-bubble, zbv-zero-bubble, dualpipev as torch.distributed.pipelining makes
// them, or an imported CSV).
//
// A backward is either one action B, or two: I (the gradient of the stage's input, which the
// previous stage waits for) and later W (the gradients of the stage's weights, which nothing
// downstream waits for, so zero-bubble schedules move it into the bubbles). OVERLAP_F_B runs a
// forward and a full backward of two stages of one rank as one action (DualPipeV's pairs; Megatron-core's combined 1F1B). Lowering then adds the communication around
// each compute action (RECV before it, SEND after it), the DDP all-reduce of each bucket after the
// stage's last backward of the step, and one OPTIM per stage at the end.
//
// For NCCL (the hardware profile's `collectives: nccl`) a send blocks until its receive is posted
// and messages between two ranks match by order, so that placement can deadlock (a stage posts
// SEND_F then RECV_B while its neighbour posts SEND_B then RECV_F). There lowering posts each
// SEND and its RECV at the same point of one order shared by all ranks (see lower_for_nccl).
//
// A CSV may also carry the communication itself (PyTorch's "compute_comms" form, cells such as
// 0SEND_F3 or 1RECV_F3): then lowering keeps it exactly as written, and the validator judges it.
#include <cassert>
#include <optional>
#include <string>
#include <vector>

namespace parallax::schedule {

enum class ScheduleKind {
  gpipe,
  one_f_one_b,
  interleaved_1f1b,
  csv,
  looped_bfs,               ///< torch's ScheduleLoopedBFS
  interleaved_zero_bubble,  ///< torch's ScheduleInterleavedZeroBubble (ZB-H1 with virtual stages)
  zbv_zero_bubble,          ///< torch's ScheduleZBVZeroBubble: two stages per rank, V-shaped
  dualpipev,                ///< torch's ScheduleDualPipeV (DeepSeek's DualPipe, V-shaped)
};
const char* name(ScheduleKind k);
/// Schedules whose stages sit on the ranks in a V: rank r holds stages r and 2p-1-r, so the last
/// stage is back on rank 0 (torch's generate_stage_to_rank_mapping(style="v")). Others loop:
/// stage s on rank s mod p.
bool v_shaped(ScheduleKind k);
/// Schedules that split backwards into I and W: interleaved-zero-bubble, zbv-zero-bubble,
/// dualpipev (a CSV may too; its cells say).
bool splits_backward(ScheduleKind k);
/// The bubble fraction the papers give a schedule with uniform stages and free communication:
/// (p-1)/(m+p-1) for GPipe and 1F1B, (p-1)/(v*m+p-1) for interleaved 1F1B with m >= p (Narayanan
/// et al. 2021), m the chunks of one mini-batch (each accumulation round fills and drains alike);
/// nullopt for the other schedules and for interleaved 1F1B with m < p.
std::optional<double> textbook_bubble_fraction(ScheduleKind k, int pipeline, int virtual_stages, int chunks);
/// The pipeline rank that holds `stage`, for `pipeline` ranks, looped or V-shaped. Either way it
/// is the rank's (stage / pipeline)-th stage.
inline int pipeline_rank_of_stage(int stage, int pipeline, bool v_shape) {
  const int pos = stage % pipeline;
  return v_shape && (stage / pipeline) % 2 == 1 ? pipeline - 1 - pos : pos;
}

/// The communication library a machine's ranks use, as `init_process_group(backend=...)` names it.
/// It decides how point-to-point messages match: Gloo by tag, with sends that never wait for the
/// receiver; NCCL by order per peer, with sends that block until the peer posts the receive (for
/// messages larger than its buffers, which stage-to-stage activations are).
enum class Collectives { gloo, nccl };
const char* name(Collectives c);

// New kinds go at the end: measured traces store the kind as its number.
/// ALL_TO_ALL: a MoE block's token exchange inside a compute action; ALL_GATHER: a sharded layer's
/// parameters gathered (parallel.shard) inside a compute action or OPTIM. Both are measured by the
/// executor; the simulator folds them into the actions they run in, and schedules never list them.
enum class ActionKind { F, B, SEND_F, RECV_F, SEND_B, RECV_B, ALLREDUCE, OPTIM, I, W, OVERLAP_F_B, ALL_TO_ALL, ALL_GATHER };
inline constexpr int kActionKinds = static_cast<int>(ActionKind::ALL_GATHER) + 1;  ///< follows the last kind
/// The collectives the executor measures inside other actions (ALL_TO_ALL, ALL_GATHER): numbered
/// by their place in the step (Action::exchange), not planned.
bool is_measured_inside(ActionKind k);
const char* name(ActionKind k);
bool is_compute(ActionKind k);
/// Makes the gradient of the stage's input (what SEND_B carries): B, I.
bool makes_input_gradient(ActionKind k);
/// Completes the gradients of the stage's weights (what DDP's buckets wait for): B, W.
bool makes_weight_gradient(ActionKind k);

struct Action;

/// A list of at most N items held in place: the lists every action yields while schedules are
/// lowered and simulated (its parts, its receives, its sends) have one or two items, and the
/// tuner lowers a schedule for every configuration it plans: on the heap, malloc and free were
/// the largest part of its profile.
template <typename T, int N>
struct FewOf {
  T items[N];
  int count = 0;
  void push_back(const T& x) {
    assert(count < N);
    items[count++] = x;
  }
  const T* begin() const { return items; }
  const T* end() const { return items + count; }
  int size() const { return count; }
};

struct Action {
  ActionKind kind = ActionKind::F;
  int stage = 0;
  int mb = -1;      ///< micro-batch for F/B/I/W/SEND/RECV (OVERLAP_F_B: its forward's), -1 otherwise
  int bucket = -1;  ///< bucket for ALLREDUCE, -1 otherwise
  int b_stage = -1, b_mb = -1;  ///< OVERLAP_F_B: the stage and micro-batch of its full backward
  /// ALL_TO_ALL: its place among the exchanges of micro-batch `mb` on `stage` in the step, from 0:
  /// forward, MoE block by block, dispatch then combine; then backward's (combine first), and a
  /// recomputed forward's where it runs. ALL_GATHER: its place among the gathers of micro-batch
  /// `mb` on `stage` (mb -1: those of the stage's OPTIM), in the order they were waited for.
  int exchange = -1;

  /// Stable printable id, as torch.distributed.pipelining prints actions: "2F5", "1I2", "0SEND_F3",
  /// "(0F3;3B1)OVERLAP_F_B", "1ALLREDUCE3" (bucket 3 of stage 1), "1OPTIM", "1ALL_TO_ALL3.2"
  /// (exchange 2 of micro-batch 3 on stage 1), "1ALL_GATHER3.0", "1ALL_GATHER.4" (gather 4 of
  /// stage 1's OPTIM).
  std::string id() const;
  /// OVERLAP_F_B's two halves: its forward, and its full backward.
  Action forward_part() const { return {ActionKind::F, stage, mb}; }
  Action backward_part() const { return {ActionKind::B, b_stage, b_mb}; }
  /// The action itself, or OVERLAP_F_B's two halves.
  FewOf<Action, 2> parts() const;
  bool operator==(const Action&) const = default;
};

/// Parses an id made by Action::id(); returns false when it is not one.
bool parse_action_id(const std::string& text, Action* out);

struct Schedule {
  ScheduleKind kind = ScheduleKind::gpipe;
  Collectives collectives = Collectives::gloo;  ///< whose point-to-point rules it must obey
  int pipeline = 1;         ///< pipeline ranks
  int virtual_stages = 1;   ///< stages per rank
  int chunks = 1;           ///< micro-batches per mini-batch
  int grad_accumulation = 1;
  std::vector<int> buckets_per_stage;  ///< empty without data parallelism
  std::vector<std::vector<Action>> ranks;  ///< per pipeline rank, in execution order

  int stages() const { return pipeline * virtual_stages; }
  int microbatches() const { return chunks * grad_accumulation; }
  bool v_shape = false;     ///< stages placed in a V (v_shaped)
  int rank_of_stage(int stage) const { return pipeline_rank_of_stage(stage, pipeline, v_shape); }
};

/// Order of one mini-batch for each pipeline rank: F and B only, or (from a compute_comms CSV)
/// with SEND/RECV too.
using ComputeOrder = std::vector<std::vector<Action>>;
ComputeOrder gpipe_order(int pipeline, int chunks);
ComputeOrder one_f_one_b_order(int pipeline, int chunks);
ComputeOrder interleaved_1f1b_order(int pipeline, int virtual_stages, int chunks);
/// Megatron-core's combined 1F1B (--overlap-moe-expert-parallel-comm): interleaved 1F1B with one
/// more warm-up forward, each steady-state forward and backward one OVERLAP_F_B. One stage on one
/// rank: F0, (F1;B0), ..., B(n-1).
ComputeOrder combined_1f1b_order(int pipeline, int virtual_stages, int chunks);
ComputeOrder looped_bfs_order(int pipeline, int virtual_stages, int chunks);
ComputeOrder interleaved_zero_bubble_order(int pipeline, int virtual_stages, int chunks);
ComputeOrder zbv_zero_bubble_order(int pipeline, int chunks);
/// Needs chunks >= 2 x pipeline (std::invalid_argument otherwise), as every stage's warm-up does.
ComputeOrder dualpipev_order(int pipeline, int chunks);
/// The generated order of a schedule kind (not csv).
ComputeOrder generated_order(ScheduleKind kind, int pipeline, int virtual_stages, int chunks);

/// Repeats a mini-batch order grad_accumulation times and adds communication (unless the order
/// already has it), all-reduces and optimizer steps. buckets_per_stage is empty when there is no DDP.
Schedule lower(const ComputeOrder& order, ScheduleKind kind, int pipeline, int virtual_stages,
               int chunks, int grad_accumulation, const std::vector<int>& buckets_per_stage,
               Collectives collectives = Collectives::gloo);
/// lower() in two steps, for a caller that lowers one order for many bucket counts (the tuner,
/// plan::LoweredSchedules): no rule of lowering reads the buckets, so one bare lowering serves
/// them all. lower_bare: the step's compute, communication and optimizer steps, no all-reduces.
struct BareSchedule {
  Schedule schedule;         ///< buckets_per_stage empty
  /// Lowered locally (Gloo's rules, or NCCL's when its shared order cannot be played): a
  /// compute's sends come right after it, before its all-reduces.
  bool sends_first = false;
};
BareSchedule lower_bare(const ComputeOrder& order, ScheduleKind kind, int pipeline, int virtual_stages, int chunks,
                        int grad_accumulation, Collectives collectives);
/// The bare schedule with each stage's buckets_per_stage[stage] all-reduces (none when empty):
/// after the stage's last weight gradient of the step (its last B or W) and, lowered locally, that
/// action's sends, in gradient-ready order, while later backwards of other stages run.
Schedule with_all_reduces(const BareSchedule& bare, const std::vector<int>& buckets_per_stage);

/// Gloo: how many receives a pipeline rank keeps posted ahead of its RECV actions (the executor
/// posts them in its action list's order, the next as each is taken). Twice the most micro-batches
/// the rank's schedule has in flight (forward done, weight gradients not yet), at least 2: enough
/// that a peer's send finds its receive posted (a receive posted after its send costs a round trip
/// through both ranks' Gloo threads), few enough that 1F1B keeps its bound of p - s micro-batches
/// on stage s instead of holding a buffer for every micro-batch of the step.
int receive_window(const Schedule& schedule, int pipeline_rank);
/// Whether a RECV's data comes from another pipeline rank (not a hand-over between two stages
/// of one rank).
bool receives_from_peer(const Schedule& schedule, const Action& recv);

/// Whether an order carries its own SEND/RECV actions (a compute_comms CSV).
bool has_communication(const ComputeOrder& order);

}  // namespace parallax::schedule
