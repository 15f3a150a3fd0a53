#pragma once
// Links and the flows that share them, in the manner of SimGrid: a flow moves its bytes across
// every link of its route at one rate; the rates are max-min fair (progressive filling: the link
// with the smallest fair share fixes the rate of its flows, their share is taken off their other
// links, repeat). Rates are recomputed when a flow starts or ends, but only for the flows
// connected to it through shared links, so a 16k-rank step does not re-solve the whole machine
// for every pipeline send, and once per instant for all the flows that start or end at it. Bandwidths are in GB/s, which is bytes per nanosecond.
#include <optional>
#include <span>
#include <tuple>
#include <string>
#include <vector>

#include "sim/event_queue.hpp"

namespace parallax::sim {

// What the event loop touches on every flow, in one cache line; the name and the rate samples,
// read once at the end, live apart (Network::name, Network::samples). At 8,192 ranks the links
// outgrow the caches, and loading a link was an eighth of the step (perf, --mixed --replicas
// 512); one line per link is one miss, where 88 bytes at any offset were often two.
struct alignas(64) Link {
  double capacity = 0;  ///< bytes per ns (= GB/s); may be +inf
  double bytes = 0;     ///< moved so far
  double rate = 0;      ///< current total rate
  double peak = 0;      ///< highest total rate seen
  int64_t busy_ns = 0;  ///< time with at least one flow moving
  int64_t last_change_ns = 0;
  /// Active flows crossing it: the first two here (a device port rarely carries more at once),
  /// the others in the network's overflow list `overflow` (Network::for_each_flow). Written out
  /// rather than a small_vector: Boost's (1.74) takes 32 bytes for two or three inline ints,
  /// which with the 48 bytes above would no longer fit one line.
  int32_t flow_count = 0;
  int32_t overflow = -1;
  int32_t first_flows[2] = {-1, -1};
};
static_assert(sizeof(Link) == 64);

class Network {
 public:
  /// The network schedules its own events in `queue` with the two given type numbers; the owner
  /// forwards those events to handle().
  Network(EventQueue& queue, uint32_t activate_type, uint32_t done_type);

  int add_link(std::string name, double gb_per_s);
  void reserve_links(size_t n) {
    links_.reserve(n);
    scratch_.reserve(n);
    names_.reserve(n);
    samples_.reserve(n);
  }
  /// Moves `bytes` across every link of `route`, starting after `latency`.
  void start_flow(Time now, Time latency, double bytes, std::span<const int> route, int tag);
  /// Plays one of the network's events; when a flow's last byte arrives with it, returns the
  /// flow's tag (a direct return rather than a callback: this is the simulator's hottest call).
  std::optional<int> handle(const Event& e);
  /// Changes a link's capacity from `now` on; its flows are re-shared at this instant.
  void set_capacity(int link, double gb_per_s, Time now);

  /// Record every link's rate over time (for traces and the GUI; costs memory at scale).
  void record_samples(bool on) { record_samples_ = on; }
  const std::vector<Link>& links() const { return links_; }
  const std::string& name(int link) const { return names_[link]; }
  /// The link's total rate over time, when recorded.
  const std::vector<std::pair<Time, double>>& samples(int link) const { return samples_[link]; }
  /// Closes the busy-time accounting at the end of the run.
  void finish(Time now);

 private:
  // One cache line: every network event reads its flow.
  struct alignas(64) Flow {
    double remaining = 0;
    double rate = 0;
    double old_rate = -1;  // rate before the current re-solve; -1 when no completion is scheduled
    int64_t last_update_ns = 0;
    uint32_t version = 0;
    uint32_t mark = 0;
    uint32_t fixed = 0;
    int tag = 0;
    bool active = false;
    // Its links: a point-to-point route's two here, a longer route (a collective's phase) in
    // long_routes_[flow] (Network::route).
    int32_t route_size = 0;
    int32_t short_route[2] = {-1, -1};
  };
  static_assert(sizeof(Flow) == 64);

  /// The links a flow crosses.
  std::span<const int> route(int flow) const {
    const Flow& f = flows_[flow];
    if (f.route_size <= 2) return {f.short_route, static_cast<size_t>(f.route_size)};
    return long_routes_[flow];
  }

  // Inlined into handle(), with their fast paths (with Simulation::record likewise, the 1,024-rank
  // simulate went from 239.5 M to 222.3 M instructions, callgrind).
  [[gnu::always_inline]] inline void activate(int flow, Time now);
  [[gnu::always_inline]] inline int complete(int flow, Time now);
  void settle(int flow, Time now);
  void resolve(std::span<const int> seed_links, Time now);
  /// Re-solves the links in `seeds` later at `now`, once for every change made at that instant.
  void resolve_soon(std::span<const int> seeds, Time now);
  void set_link_rate(int link, double rate, Time now);
  void set_link_rate(Link& link, double rate, Time now);
  [[gnu::always_inline]] inline bool activate_alone_pair(Flow& f, int id, Time now);
  [[gnu::always_inline]] inline bool complete_alone_pair(Flow& f, Time now);
  [[gnu::always_inline]] inline void schedule_done(Flow& f, int id, Time now);
  [[gnu::always_inline]] inline int free_flow(Flow& f, int id);
  [[gnu::noinline]] void record_sample(int link, double rate, Time now);
  [[gnu::noinline]] int new_flow();
  [[gnu::noinline]] void set_long_route(int flow, std::span<const int> route);
  void add_flow(int link, int flow);
  void remove_flow(int link, int flow);
  /// Calls `visit(flow)` for every active flow on the link.
  template <typename Visit>
  void for_each_flow(int link, Visit&& visit) const {
    const Link& l = links_[link];
    const int inline_count = l.flow_count < 2 ? l.flow_count : 2;
    for (int i = 0; i < inline_count; ++i) visit(l.first_flows[i]);
    if (l.flow_count > 2)
      for (int f : overflow_[l.overflow]) visit(f);
  }

  EventQueue& queue_;
  uint32_t activate_type_, done_type_;
  std::vector<Link> links_;
  // The solver's per-link scratch, apart from Link: most flows never reach the solver (the fast
  // path in activate), and Link stays smaller for them.
  struct LinkScratch {
    uint32_t mark = 0;
    uint32_t heap_version = 0;
    double residual = 0;
    int unfixed = 0;
  };
  std::vector<LinkScratch> scratch_;
  std::vector<std::string> names_;
  std::vector<std::vector<std::pair<Time, double>>> samples_;
  std::vector<Flow> flows_;
  std::vector<std::vector<int>> long_routes_;  // per flow, its route when longer than two links
  std::vector<std::vector<int>> overflow_;  // flows past a link's first two (Link::overflow)
  std::vector<int> free_flows_;
  bool record_samples_ = false;
  uint32_t epoch_ = 0;
  std::vector<int> comp_links_, comp_flows_, stack_;
  // Links whose flows changed at the current instant and wait for one re-solve (an activate
  // event with flow -1, queued behind the changes already due at that instant).
  std::vector<int> pending_seeds_, resolving_;
  bool resolve_queued_ = false;
  std::vector<std::tuple<double, int, uint32_t>> heap_;  // share, link, version
};

}  // namespace parallax::sim
