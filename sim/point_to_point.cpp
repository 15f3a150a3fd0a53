// Point-to-point: part of the Simulation in sim/simulation.hpp.
#include "sim/simulation.hpp"

namespace parallax::sim::detail {

int Simulation::peer_rank(int rank, int stage) const {
  return ranks_[rank].replica * sched_.pipeline + stage_places_[stage].pipeline_rank;
}

// Slot of the transfer that the rank of `replica` and stage `recv_stage` receives for (direction,
// micro-batch).
// Ordered by micro-batch, stage and direction, then by pipeline rank and replica: the replicas
// of a stage handle one micro-batch at about the same time, and their slots then share cache
// lines (four to a line) rather than lying a rank's whole table apart. At 8,192 ranks the table
// is 16 MiB and the order decides whether it is read from the caches or from memory.
size_t Simulation::rendezvous_slot(int replica, bool forward, int recv_stage, int mb) const {
  // ((mb * virtual_stages + local) * 2 + forward) * played_ + pipeline_rank * played_replicas_ +
  // replica, with the per-stage part looked up (StagePlace::first_slot).
  return static_cast<size_t>(mb) * slots_per_microbatch_ + stage_places_[recv_stage].first_slot[forward] +
         static_cast<size_t>(replica);
}

int Simulation::send_peer(int rank, const Action& send) const {
  return peer_rank(rank, send.kind == ActionKind::SEND_F ? send.stage + 1 : send.stage - 1);
}

size_t Simulation::send_slot(int rank, const Action& send) const {
  const bool forward = send.kind == ActionKind::SEND_F;
  const int recv_stage = forward ? send.stage + 1 : send.stage - 1;
  return rendezvous_slot(ranks_[rank].replica, forward, recv_stage, send.mb);
}

// The sender's time in the send call, where the payload is written: its receive is posted
// (Gloo: ahead of it; NCCL: the send waited for it).
Time Simulation::send_call(const Action& a) const {
  const StageCost& c = costs_[a.stage];
  return a.kind == ActionKind::SEND_F ? c.send_forward_call : c.send_backward_call;
}

void Simulation::on_send_call_done(int rank, Time now) {
  RankState& st = ranks_[rank];
  const Action& a = sched_.ranks[st.pipeline_rank][st.pc];
  post_send(rank, a, st.send_called, now);
  ++st.pc;
  advance(rank, now);
}

// `called` is when the sender entered the send call, `now` when the data can leave.
void Simulation::post_send(int rank, const Action& a, Time called, Time now) {
  const bool forward = a.kind == ActionKind::SEND_F;
  const int recv_stage = forward ? a.stage + 1 : a.stage - 1;
  const int dst = peer_rank(rank, recv_stage);
  const size_t slot = rendezvous_slot(ranks_[rank].replica, forward, recv_stage, a.mb);
  Rendezvous& rv = rendezvous_[slot];
  rv.sent = true;
  const Posted send{called, ranks_[rank].last_compute};  // the compute that produced the data
  // Transports (Gloo's TCP pairs, NCCL) move a message once both sides have posted.
  if (!rv.received) {
    rv.hold(send);
    return;
  }
  start_transfer(rank, dst, a, recv_stage, slot, now, send, preposted_receives_ ? Posted{} : rv.first());
}

void Simulation::post_recv(int rank, const Action& a, Time now) {
  const bool forward = a.kind == ActionKind::RECV_F;
  const int send_stage = forward ? a.stage - 1 : a.stage + 1;
  const int src = peer_rank(rank, send_stage);
  const size_t slot = rendezvous_slot(ranks_[rank].replica, forward, a.stage, a.mb);
  Rendezvous& rv = rendezvous_[slot];
  rv.received = true;
  const Posted recv{now, ranks_[rank].last_done};
  if (rv.sent) {
    const Action send{forward ? ActionKind::SEND_F : ActionKind::SEND_B, send_stage, a.mb};
    start_transfer(src, rank, send, a.stage, slot, now, rv.first(), recv);
    return;
  }
  rv.hold(recv);
  const RankState& sender = ranks_[src];
  if (sender.in_send && sched_.ranks[sender.pipeline_rank][sender.pc] ==
                            Action{forward ? ActionKind::SEND_F : ActionKind::SEND_B, send_stage, a.mb})
    queue_.push(now, kRecvPosted, src);
}

// Gloo: the rank posts receives ahead, in its list's order, until `receive_window` are posted and
// not yet reached; a send held for one of them (its receive was not posted) moves now.
void Simulation::post_receives_ahead(int rank, Time now) {
  RankState& st = ranks_[rank];
  const auto& list = sched_.ranks[st.pipeline_rank];
  for (; st.next_receive < list.size() && st.receives_ahead < receive_window_[st.pipeline_rank]; ++st.next_receive) {
    const Action& a = list[st.next_receive];
    if (!schedule::receives_from_peer(sched_, a)) continue;
    ++st.receives_ahead;
    const bool forward = a.kind == ActionKind::RECV_F;
    const size_t slot = rendezvous_slot(st.replica, forward, a.stage, a.mb);
    Rendezvous& rv = rendezvous_[slot];
    rv.received = true;
    if (!rv.sent) continue;
    const int send_stage = forward ? a.stage - 1 : a.stage + 1;
    const Action send{forward ? ActionKind::SEND_F : ActionKind::SEND_B, send_stage, a.mb};
    start_transfer(peer_rank(rank, send_stage), rank, send, a.stage, slot, now, rv.first(), Posted{});
  }
}

// Gloo: the rank reaches a RECV (posted ahead, see post_receives_ahead): the next goes up.
void Simulation::receive_reached(int rank, Time now) {
  if (!schedule::receives_from_peer(sched_, sched_.ranks[ranks_[rank].pipeline_rank][ranks_[rank].pc])) return;
  --ranks_[rank].receives_ahead;
  post_receives_ahead(rank, now);
}

// Gloo: the rank reaches a RECV whose receive was posted ahead. Returns true (and
// records the receive) when the data has already arrived.
bool Simulation::reach_recv(int rank, const Action& a, Time now) {
  const bool forward = a.kind == ActionKind::RECV_F;
  Rendezvous& rv = rendezvous_[rendezvous_slot(ranks_[rank].replica, forward, a.stage, a.mb)];
  rv.reached = true;
  if (!rv.arrived) {
    rv.first_at = now;  // the transfer reads it when it ends
    return false;
  }
  const int32_t send_ev = rv.first_dep;
  const int32_t recv_ev = record(rank, Lane::recv, a, now, now, transfer_bytes(forward, forward ? a.stage - 1 : a.stage + 1));
  // The data was there first: what released the receive last is the rank's own earlier work,
  // so a critical path through it stays on this rank.
  depend(send_ev, end_of(send_ev));
  depend(ranks_[rank].last_done, now);
  wait_on(ranks_[rank], recv_ev);
  ranks_[rank].last_done = recv_ev;
  return true;
}

int64_t Simulation::transfer_bytes(bool forward, int send_stage) const {
  const StageCost& c = costs_[send_stage];
  return forward ? c.send_forward_bytes : c.send_backward_bytes;
}

// NCCL: the receive a blocked sender waited for is posted; the send goes on from here.
void Simulation::on_recv_posted(int rank, Time now) {
  RankState& st = ranks_[rank];
  const Rendezvous& rv = rendezvous_[send_slot(rank, sched_.ranks[st.pipeline_rank][st.pc])];
  st.in_send = false;
  if (rv.first_dep >= 0) {  // the receive's, posted first
    wait_on(st, rv.first_dep);  // the sender could not go on before the receiver got here
    st.last_done = rv.first_dep;
  }
  advance(rank, now);
}

// Both sides have posted: the payload moves, after the route's latency. `recv` is none (Posted{})
// for a receive posted ahead (Gloo).
void Simulation::start_transfer(int src, int dst, const Action& send, int recv_stage, size_t slot, Time now,
                    const Posted& send_post, const Posted& recv) {
  int id;
  if (!free_transfers_.empty()) {
    id = free_transfers_.back();
    free_transfers_.pop_back();
  } else {
    id = static_cast<int>(transfers_.size());
    transfers_.emplace_back();
  }
  Transfer& t = transfers_[id];  // written in place, as the timeline's events are
  t.src = src;
  t.dst = dst;
  t.send_kind = send.kind;
  t.send_stage = send.stage;
  t.recv_stage = recv_stage;
  t.mb = send.mb;
  t.bytes = transfer_bytes(send.kind == ActionKind::SEND_F, send.stage);
  t.send_dep = send_post.dep;
  t.recv_dep = recv.dep;
  t.recv_post = recv.at;
  t.slot = slot;
  t.start = send_post.at;
  const Route route = topo_.p2p(src, dst);
  network_.start_flow(now, route.latency, static_cast<double>(t.bytes), route.links, id);
  comm_kernel(src, +1, now);
  comm_kernel(dst, +1, now);
}

void Simulation::on_transfer_done(int id, Time now) {
  const Transfer& t = transfers_[id];  // freed below, before anything can start another transfer
  comm_kernel(t.src, -1, now);
  comm_kernel(t.dst, -1, now);
  const bool forward = t.send_kind == ActionKind::SEND_F;
  const int32_t send_ev = record(t.src, Lane::send, {t.send_kind, t.send_stage, t.mb}, t.start, now, t.bytes);
  depend(t.send_dep, end_of(t.send_dep));
  if (t.recv_dep >= 0) depend(t.recv_dep, end_of(t.recv_dep));
  Rendezvous& rv = rendezvous_[t.slot];
  const Action recv{forward ? ActionKind::RECV_F : ActionKind::RECV_B, t.recv_stage, t.mb};
  if (preposted_receives_ && !rv.reached) {  // the receiver gets there later (reach_recv)
    rv.arrived = true;
    rv.first_dep = send_ev;
    free_transfers_.push_back(id);
    return;
  }
  const Time recv_posted = preposted_receives_ ? rv.first_at : t.recv_post;  // Gloo: when reached
  const int32_t recv_ev = record(t.dst, Lane::recv, recv, std::max(t.start, recv_posted), now, t.bytes);
  depend(send_ev, now);
  RankState& dst = ranks_[t.dst];
  assert(dst.waiting && sched_.ranks[dst.pipeline_rank][dst.pc] == recv);
  wait_on(dst, recv_ev);
  dst.last_done = recv_ev;
  ++dst.pc;
  const int receiver = t.dst;
  free_transfers_.push_back(id);
  advance(receiver, now);
}

}  // namespace parallax::sim::detail
