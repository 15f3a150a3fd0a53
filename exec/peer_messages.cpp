#include "exec/peer_messages.hpp"

#include "exec/model.hpp"

namespace parallax::exec {

using schedule::Action;
using schedule::ActionKind;
using timeline::Lane;

PeerMessages::PeerMessages(const plan::Plan& plan, const LaunchInfo& launch, int pipeline_rank, int replica,
                           Communicator& comm, profiler::HostTracer& tracer, torch::Device device,
                           torch::ScalarType dtype)
    : plan_(plan),
      rank_(launch.rank),
      replica_(replica),
      actions_(plan.schedule.ranks[pipeline_rank]),
      comm_(comm),
      tracer_(tracer),
      device_(device),
      dtype_(dtype),
      post_ahead_(plan.schedule.collectives == schedule::Collectives::gloo),
      sends_(comm, tracer),
      receive_window_(static_cast<size_t>(schedule::receive_window(plan.schedule, pipeline_rank))) {}

int PeerMessages::peer(int stage) const {
  const plan::ParallelSpec& p = plan_.scenario.parallel;
  return plan::rank_of(p, {replica_, p.rank_of_stage(stage), 0});
}

int PeerMessages::tag(int send_stage, int mb, bool backward) const {
  return (mb * static_cast<int>(plan_.stages.size()) + send_stage) * 2 + (backward ? 1 : 0);
}

// Gloo: the step's receives are posted ahead of their RECVs, so a peer's send finds its receive
// posted and writes its payload at once. Posted at the RECV, a receive that comes after its
// send costs a round trip through both ranks' event-loop threads (gloo/transport/tcp/pair.cc:
// the send only notifies; the payload moves when the receive's notification comes back): on
// this kind of VM a mean of ~300 us per message, with a long tail, and 1F1B at 8 chunks ran 30%
// slower. Not all of them, though: each holds a buffer, and a later 1F1B stage would hold one
// per micro-batch of the step. The next schedule::receive_window are kept posted, topped up as each
// is taken. The simulator and the memory estimate model the same.
void PeerMessages::start_step() {
  next_receive_ = 0;
  if (post_ahead_) top_up_receives();
}

void PeerMessages::top_up_receives() {
  for (; next_receive_ < actions_.size() && posted_.size() < receive_window_; ++next_receive_) {
    const Action& a = actions_[next_receive_];
    if (schedule::receives_from_peer(plan_.schedule, a)) posted_.emplace(a.id(), post_receive(a));
  }
}

void PeerMessages::send(const Action& a, torch::Tensor t, int64_t t0_ns, int32_t step) {
  const bool fwd = a.kind == ActionKind::SEND_F;
  const int dst = peer(fwd ? a.stage + 1 : a.stage - 1);
  if (dst == rank_) {  // to another stage of this rank: a hand-over
    local_[tag(a.stage, a.mb, !fwd)] = t.clone();  // its own storage, as a received tensor has
    tracer_.span(Lane::send, a, t0_ns, profiler::now_ns(), t.nbytes(), step);
    return;
  }
  const std::string what = a.id() + " to rank " + std::to_string(dst);
  sends_.push({comm_.send(t, dst, tag(a.stage, a.mb, !fwd), what), t, a, dst, t0_ns, step});
}

torch::Tensor PeerMessages::receive(const Action& a, int64_t t0_ns, int32_t step) {
  const bool fwd = a.kind == ActionKind::RECV_F;
  torch::Tensor buf;
  if (const int send_stage = fwd ? a.stage - 1 : a.stage + 1; peer(send_stage) == rank_) {
    buf = local_.at(tag(send_stage, a.mb, !fwd));  // its SEND came first on this rank (the validator's rule)
    local_.erase(tag(send_stage, a.mb, !fwd));
  } else {
    PostedReceive r = posted_.count(a.id()) ? take_posted(a.id()) : post_receive(a);
    if (post_ahead_) top_up_receives();
    comm_.wait(r.work, r.what, {r.src});
    buf = r.buf;
  }
  tracer_.span(Lane::recv, a, t0_ns, profiler::now_ns(), buf.nbytes(), step);
  return buf;
}

PeerMessages::PostedReceive PeerMessages::post_receive(const Action& a) {
  const bool fwd = a.kind == ActionKind::RECV_F;
  const int send_stage = fwd ? a.stage - 1 : a.stage + 1;
  const auto& st = plan_.stages[fwd ? send_stage : a.stage];  // whose last layer's output travels
  PostedReceive r;
  r.src = peer(send_stage);
  const auto shape = output_shape(plan_.layers()[st.first_layer + st.layer_count - 1], plan_.microbatch_size);
  r.buf = torch::empty(shape, torch::TensorOptions().dtype(dtype_).device(device_));
  r.what = a.id() + " from rank " + std::to_string(r.src);
  r.work = comm_.recv(r.buf, r.src, tag(send_stage, a.mb, !fwd), r.what);
  return r;
}

PeerMessages::PostedReceive PeerMessages::take_posted(const std::string& id) {
  auto it = posted_.find(id);
  PostedReceive r = std::move(it->second);
  posted_.erase(it);
  return r;
}

}  // namespace parallax::exec
