#include "sim/network.hpp"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <limits>
#include <queue>
#include <tuple>

namespace parallax::sim {
namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
}

Network::Network(EventQueue& queue, uint32_t activate_type, uint32_t done_type)
    : queue_(queue), activate_type_(activate_type), done_type_(done_type) {}

int Network::add_link(std::string name, double gb_per_s) {
  Link l;
  l.capacity = gb_per_s;
  links_.push_back(std::move(l));
  names_.push_back(std::move(name));
  scratch_.emplace_back();
  samples_.emplace_back();
  return static_cast<int>(links_.size()) - 1;
}

void Network::start_flow(Time now, Time latency, double bytes, std::span<const int> route, int tag) {
  int id;
  if (!free_flows_.empty()) {
    id = free_flows_.back();
    free_flows_.pop_back();
  } else {
    id = new_flow();
  }
  Flow& f = flows_[id];
  f.remaining = std::max(0.0, bytes);
  f.rate = 0;
  f.old_rate = -1;
  f.tag = tag;
  f.route_size = static_cast<int32_t>(route.size());
  if (route.size() <= 2) {
    // Element by element: std::copy of a span this short became a call to memmove.
    if (!route.empty()) f.short_route[0] = route[0];
    if (route.size() == 2) f.short_route[1] = route[1];
  } else {
    set_long_route(id, route);
  }
  f.active = false;
  // Latency first (the first byte's trip), then the bytes at the shared rate.
  if (latency.count_ns() > 0) {
    // activate() reads these links after the latency: at 8,192 ranks that load missed the caches
    // and was an eighth of the mixed step (perf); fetched now, it arrives in the meantime.
    for (int l : route) __builtin_prefetch(&links_[l], 1);
    queue_.push(now + latency, activate_type_, id);
  } else {
    activate(id, now);
  }
}

// The rare paths of start_flow, kept out of it so that its common one (a recycled flow, a
// point-to-point route) is shorter: 117 -> 101 instructions a call (callgrind, 1,024 ranks).
int Network::new_flow() {
  flows_.emplace_back();
  long_routes_.emplace_back();
  return static_cast<int>(flows_.size()) - 1;
}

void Network::set_long_route(int flow, std::span<const int> route) {
  long_routes_[flow].assign(route.begin(), route.end());  // reuses the recycled flow's buffer
}

std::optional<int> Network::handle(const Event& e) {
  if (e.type == activate_type_ && e.a < 0) {
    resolve_queued_ = false;
    resolving_.swap(pending_seeds_);
    pending_seeds_.clear();
    resolve(resolving_, e.time());
  } else if (e.type == activate_type_) {
    activate(e.a, e.time());
  } else if (e.type == done_type_) {
    Flow& f = flows_[e.a];
    if (f.active && f.version == static_cast<uint32_t>(e.b)) return complete(e.a, e.time());  // else superseded
  }
  return std::nullopt;
}

void Network::set_capacity(int link, double gb_per_s, Time now) {
  Link& l = links_[link];
  if (l.capacity == gb_per_s) return;
  l.capacity = gb_per_s;
  // resolve() first moves every flow of the component up to now at its old rate.
  if (l.flow_count > 0) resolve_soon(std::span<const int>(&link, 1), now);
}

void Network::activate(int id, Time now) {
  Flow& f = flows_[id];
  f.active = true;
  f.last_update_ns = now.count_ns();
  if (f.route_size == 0 || f.remaining <= 0) {
    // Nothing to share: done as soon as it starts.
    f.rate = kInf;
    queue_.push(now, done_type_, id, static_cast<int32_t>(++f.version));
    return;
  }
  if (f.route_size == 2 && activate_alone_pair(f, id, now)) return;
  bool alone = true;
  for (int l : route(id)) {
    add_flow(l, id);
    alone = alone && links_[l].flow_count == 1;
  }
  if (!alone) {
    f.rate = 0;  // until the re-solve at this instant
    resolve_soon(route(id), now);
    return;
  }
  // No other flow on its links (a route of other than two links; a two-link one took
  // activate_alone_pair), so it gets their smallest capacity: resolve()'s answer, without the search.
  double rate = std::numeric_limits<double>::infinity();
  for (int l : route(id)) rate = std::min(rate, links_[l].capacity);
  f.rate = f.old_rate = rate;
  schedule_done(f, id, now);
  for (int l : route(id)) set_link_rate(l, rate, now);
}

// Queues the flow's end at its current rate; an end queued before becomes stale (its version).
void Network::schedule_done(Flow& f, int id, Time now) {
  int64_t eta = 0;
  if (std::isfinite(f.rate) && f.rate > 0) eta = static_cast<int64_t>(std::ceil(f.remaining / f.rate - 1e-9));
  queue_.push(now + Time::ns(std::max<int64_t>(0, eta)), done_type_, id, static_cast<int32_t>(++f.version));
}

// Frees a flow whose last byte arrived; returns its tag. Its route stays where it is (the
// flow's own line, or long_routes_[id]) until start_flow reuses the flow.
int Network::free_flow(Flow& f, int id) {
  f.remaining = 0;
  f.active = false;
  f.route_size = 0;
  free_flows_.push_back(id);
  return f.tag;
}

// The flow of most pipeline sends: two links (its ports) that no other flow uses. The general
// path's answer, written out: it reloads the links' and flows' arrays after every store (they may
// alias, for all the compiler knows), and its loops and checks made activate and complete ~230
// instructions each (callgrind, 1,024 ranks), the largest part of every transfer.
bool Network::activate_alone_pair(Flow& f, int id, Time now) {
  Link& a = links_[f.short_route[0]];
  Link& b = links_[f.short_route[1]];
  if (a.flow_count != 0 || b.flow_count != 0 || &a == &b) return false;
  a.flow_count = b.flow_count = 1;
  a.first_flows[0] = b.first_flows[0] = id;
  const double rate = std::min(a.capacity, b.capacity);
  f.rate = f.old_rate = rate;
  schedule_done(f, id, now);
  set_link_rate(a, rate, now);
  set_link_rate(b, rate, now);
  return true;
}

// complete()'s answer for a flow alone on its two links (activate_alone_pair's).
bool Network::complete_alone_pair(Flow& f, Time now) {
  Link& a = links_[f.short_route[0]];
  Link& b = links_[f.short_route[1]];
  if (a.flow_count != 1 || b.flow_count != 1 || &a == &b) return false;
  a.bytes += f.remaining;
  b.bytes += f.remaining;
  a.flow_count = b.flow_count = 0;
  set_link_rate(a, 0.0, now);
  set_link_rate(b, 0.0, now);
  return true;
}

int Network::complete(int id, Time now) {
  Flow& f = flows_[id];
  if (f.route_size == 2 && complete_alone_pair(f, now)) return free_flow(f, id);
  // Read after the flow is freed below: nothing here reuses it, so its route needs no copy.
  const std::span<const int> links = route(id);
  // The last bytes arrive now; count them exactly so every link's total is conserved.
  for (int l : links) {
    links_[l].bytes += f.remaining;
    remove_flow(l, id);
  }
  const int tag = free_flow(f, id);
  bool emptied = true;  // no flow left on its links: nothing to re-share
  for (int l : links) emptied = emptied && links_[l].flow_count == 0;
  if (emptied) {
    for (int l : links) set_link_rate(l, 0.0, now);
  } else {
    resolve_soon(links, now);
  }
  return tag;
}

// Identical replicas start and end their transfers at the same instants; one re-solve after all
// of an instant's changes gives the same rates as one after each (no time passes between them, so
// no flow moves a byte at a stale rate) at a fraction of the cost: re-solving a component that an
// all-reduce spans over every replica, once per change, made steps quadratic in the replicas.
void Network::resolve_soon(std::span<const int> seeds, Time now) {
  pending_seeds_.insert(pending_seeds_.end(), seeds.begin(), seeds.end());
  if (resolve_queued_) return;
  resolve_queued_ = true;
  queue_.push(now, activate_type_, -1);
}

void Network::add_flow(int link, int flow) {
  Link& l = links_[link];
  if (l.flow_count < 2) {
    l.first_flows[l.flow_count++] = flow;
    return;
  }
  if (l.overflow < 0) {
    l.overflow = static_cast<int32_t>(overflow_.size());
    overflow_.emplace_back();
  }
  overflow_[l.overflow].push_back(flow);
  ++l.flow_count;
}

// Swaps the flow with the link's last one, then drops the last.
void Network::remove_flow(int link, int flow) {
  Link& l = links_[link];
  int* last = l.flow_count > 2 ? &overflow_[l.overflow].back() : &l.first_flows[l.flow_count - 1];
  int* slot = nullptr;
  for (int i = 0; i < std::min(l.flow_count, 2) && !slot; ++i)
    if (l.first_flows[i] == flow) slot = &l.first_flows[i];
  if (!slot && l.flow_count > 2) {
    auto& more = overflow_[l.overflow];
    const auto it = std::find(more.begin(), more.end(), flow);
    if (it != more.end()) slot = &*it;
  }
  if (!slot) return;  // not on this link
  *slot = *last;
  if (l.flow_count > 2) overflow_[l.overflow].pop_back();
  --l.flow_count;
}

void Network::settle(int flow, Time now) {
  Flow& f = flows_[flow];
  const int64_t dt = now.count_ns() - f.last_update_ns;
  f.last_update_ns = now.count_ns();
  if (dt <= 0 || f.rate <= 0 || std::isinf(f.rate)) return;
  const double moved = std::min(f.remaining, f.rate * static_cast<double>(dt));
  f.remaining -= moved;
  for (int l : route(flow)) links_[l].bytes += moved;
}

void Network::set_link_rate(int link, double rate, Time now) { set_link_rate(links_[link], rate, now); }

void Network::set_link_rate(Link& l, double rate, Time now) {
  if (l.rate > 0) l.busy_ns += now.count_ns() - l.last_change_ns;
  l.last_change_ns = now.count_ns();
  if (rate == l.rate) return;
  l.rate = rate;
  if (std::isfinite(rate)) l.peak = std::max(l.peak, rate);
  if (record_samples_) record_sample(static_cast<int>(&l - links_.data()), rate, now);
}

// Apart from set_link_rate, which every flow calls twice: inlined there, the vector's growth
// made it save six registers on each call (39 instructions a call before, at 1,024 ranks).
void Network::record_sample(int link, double rate, Time now) {
  auto& samples = samples_[link];
  if (!samples.empty() && samples.back().first == now) samples.back().second = rate;
  else samples.emplace_back(now, rate);
}

void Network::resolve(std::span<const int> seed_links, Time now) {
  // 1. The connected component: links and flows reachable from the seeds through shared use.
  ++epoch_;
  comp_links_.clear();
  comp_flows_.clear();
  stack_.clear();
  for (int l : seed_links) {
    if (scratch_[l].mark != epoch_) {
      scratch_[l].mark = epoch_;
      stack_.push_back(l);
    }
  }
  while (!stack_.empty()) {
    const int l = stack_.back();
    stack_.pop_back();
    comp_links_.push_back(l);
    for_each_flow(l, [&](int fid) {
      Flow& f = flows_[fid];
      if (f.mark == epoch_) return;
      f.mark = epoch_;
      comp_flows_.push_back(fid);
      for (int l2 : route(fid)) {
        if (scratch_[l2].mark != epoch_) {
          scratch_[l2].mark = epoch_;
          stack_.push_back(l2);
        }
      }
    });
  }
  // 2. Bring every affected flow's progress up to now at its old rate.
  for (int fid : comp_flows_) settle(fid, now);

  // 3. Progressive filling, with a min-heap of fair shares (stale entries skipped by version).
  const auto later = std::greater<std::tuple<double, int, uint32_t>>();
  auto push = [&](double share, int l, uint32_t version) {
    heap_.emplace_back(share, l, version);
    std::push_heap(heap_.begin(), heap_.end(), later);
  };
  heap_.clear();
  for (int l : comp_links_) {
    LinkScratch& link = scratch_[l];
    link.residual = links_[l].capacity;
    link.unfixed = links_[l].flow_count;
    ++link.heap_version;
    if (link.unfixed > 0) push(link.residual / link.unfixed, l, link.heap_version);
  }
  while (!heap_.empty()) {
    std::pop_heap(heap_.begin(), heap_.end(), later);
    const auto [share, l, version] = heap_.back();
    heap_.pop_back();
    LinkScratch& link = scratch_[l];
    if (version != link.heap_version || link.unfixed == 0) continue;
    for_each_flow(l, [&](int fid) {
      Flow& f = flows_[fid];
      if (f.fixed == epoch_) return;
      f.fixed = epoch_;
      f.rate = share;
      for (int l2 : route(fid)) {
        if (l2 == l) continue;
        LinkScratch& other = scratch_[l2];
        if (std::isfinite(share)) other.residual = std::max(0.0, other.residual - share);
        if (--other.unfixed > 0) push(other.residual / other.unfixed, l2, ++other.heap_version);
        else ++other.heap_version;
      }
    });
    link.unfixed = 0;
  }

  // 4. New completion times for flows whose rate changed (their older events become stale; a
  //    flow at an unchanged rate keeps its event) and the links' total rates.
  for (int fid : comp_flows_) {
    Flow& f = flows_[fid];
    if (f.old_rate == f.rate) continue;
    f.old_rate = f.rate;
    schedule_done(f, fid, now);
  }
  for (int l : comp_links_) {
    double total = 0;
    for_each_flow(l, [&](int fid) { total += flows_[fid].rate; });
    set_link_rate(l, total, now);
  }
}

void Network::finish(Time now) {
  for (size_t l = 0; l < links_.size(); ++l) set_link_rate(static_cast<int>(l), 0.0, now);
}

}  // namespace parallax::sim
