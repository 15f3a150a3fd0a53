#include "schedule/validate.hpp"

#include "schedule/wait_graph.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>

namespace parallax::schedule {
namespace {

using Key = std::tuple<ActionKind, int, int>;  // kind, stage, micro-batch or bucket
struct Place {
  int rank;
  int index;
  int vertex;
};

Key key_of(const Action& a) {
  return {a.kind, a.stage, a.kind == ActionKind::ALLREDUCE ? a.bucket : a.mb};
}

std::string id_of(ActionKind kind, int stage, int n) {
  Action a{kind, stage, n, n};
  return a.id();
}

class Checker {
 public:
  explicit Checker(const Schedule& s) : s_(s) {}

  std::vector<std::string> run() {
    index_actions();
    check_compute();
    check_communication();
    check_reduction();
    if (problems_.empty() && nccl()) check_fifo();
    if (problems_.empty()) check_acyclic();
    return problems_;
  }

 private:
  void problem(const std::string& m) {
    if (problems_.size() < 20) problems_.push_back(m);
  }

  void index_actions() {
    const int stages = s_.stages();
    for (int r = 0; r < static_cast<int>(s_.ranks.size()); ++r) {
      for (int i = 0; i < static_cast<int>(s_.ranks[r].size()); ++i) {
        const Action& a = s_.ranks[r][i];
        const std::string where = "rank " + std::to_string(r) + " action " + std::to_string(i) + " (" + a.id() + ")";
        if (a.stage < 0 || a.stage >= stages) {
          problem(where + ": stage " + std::to_string(a.stage) + " does not exist");
          continue;
        }
        if (s_.rank_of_stage(a.stage) != r) problem(where + ": stage " + std::to_string(a.stage) + " lives on rank " + std::to_string(s_.rank_of_stage(a.stage)));
        if (a.kind == ActionKind::ALLREDUCE) {
          const int n = s_.buckets_per_stage.empty() ? 0 : s_.buckets_per_stage[a.stage];
          if (a.bucket < 0 || a.bucket >= n) problem(where + ": stage " + std::to_string(a.stage) + " has no bucket " + std::to_string(a.bucket));
        } else if (a.kind != ActionKind::OPTIM && (a.mb < 0 || a.mb >= s_.microbatches())) {
          problem(where + ": micro-batch " + std::to_string(a.mb) + " is outside 0.." + std::to_string(s_.microbatches() - 1));
        }
        const int vertex = vertices_++;
        // OVERLAP_F_B stands for its forward and its backward: each is found at its place.
        for (const Action& part : a.parts()) {
          if (part.kind == ActionKind::B && (part.stage < 0 || part.stage >= stages)) {
            problem(where + ": stage " + std::to_string(part.stage) + " does not exist");
            continue;
          }
          if (part.kind == ActionKind::B && s_.rank_of_stage(part.stage) != r)
            problem(where + ": stage " + std::to_string(part.stage) + " lives on rank " + std::to_string(s_.rank_of_stage(part.stage)));
          if (!at_.emplace(key_of(part), Place{r, i, vertex}).second)
            problem(where + ": " + part.id() + " appears more than once");
        }
      }
    }
  }

  std::optional<Place> find(ActionKind kind, int stage, int n) const {
    auto it = at_.find({kind, stage, n});
    if (it == at_.end()) return std::nullopt;
    return it->second;
  }

  // `first` must exist, `second` must exist, and `first` must come earlier on the same rank.
  void require_before(ActionKind k1, int s1, int n1, ActionKind k2, int s2, int n2) {
    auto a = find(k1, s1, n1), b = find(k2, s2, n2);
    if (!a) problem("missing " + id_of(k1, s1, n1) + " (needed before " + id_of(k2, s2, n2) + ")");
    if (!b) problem("missing " + id_of(k2, s2, n2));
    if (a && b && a->rank == b->rank && a->index > b->index)
      problem("rank " + std::to_string(a->rank) + ": " + id_of(k1, s1, n1) + " comes after " + id_of(k2, s2, n2));
  }

  // The action that makes the input gradient of (stage, mb), B or I, and the one that completes
  // its weight gradients, B or W (either found, else B, which is then reported missing).
  ActionKind input_gradient_kind(int s, int mb) const { return find(ActionKind::I, s, mb) ? ActionKind::I : ActionKind::B; }
  ActionKind weight_gradient_kind(int s, int mb) const { return find(ActionKind::W, s, mb) ? ActionKind::W : ActionKind::B; }

  // Every forward, then either its B or its I and after it its W, never both forms.
  void check_compute() {
    for (int s = 0; s < s_.stages(); ++s)
      for (int mb = 0; mb < s_.microbatches(); ++mb) {
        const bool split = find(ActionKind::I, s, mb) || find(ActionKind::W, s, mb);
        if (split && find(ActionKind::B, s, mb))
          problem(id_of(ActionKind::B, s, mb) + " and its split form (I, W) both appear; a backward runs once");
        if (!split) {
          require_before(ActionKind::F, s, mb, ActionKind::B, s, mb);
          continue;
        }
        require_before(ActionKind::F, s, mb, ActionKind::I, s, mb);
        require_before(ActionKind::I, s, mb, ActionKind::W, s, mb);
      }
  }

  void check_communication() {
    const int last = s_.stages() - 1;
    for (int s = 0; s < s_.stages(); ++s) {
      for (int mb = 0; mb < s_.microbatches(); ++mb) {
        const ActionKind input_grad = input_gradient_kind(s, mb);
        if (s > 0) {
          require_before(ActionKind::RECV_F, s, mb, ActionKind::F, s, mb);
          require_before(input_grad, s, mb, ActionKind::SEND_B, s, mb);
        } else if (find(ActionKind::RECV_F, s, mb) || find(ActionKind::SEND_B, s, mb)) {
          problem("stage 0 has no previous stage to receive from or send to (micro-batch " + std::to_string(mb) + ")");
        }
        if (s < last) {
          require_before(ActionKind::F, s, mb, ActionKind::SEND_F, s, mb);
          require_before(ActionKind::RECV_B, s, mb, input_grad, s, mb);
        } else if (find(ActionKind::SEND_F, s, mb) || find(ActionKind::RECV_B, s, mb)) {
          problem("the last stage has no next stage to send to or receive from (micro-batch " + std::to_string(mb) + ")");
        }
      }
    }
  }

  void check_reduction() {
    for (int s = 0; s < s_.stages(); ++s) {
      const int buckets = s_.buckets_per_stage.empty() ? 0 : s_.buckets_per_stage[s];
      for (int mb = 0; mb < s_.microbatches(); ++mb) {
        const ActionKind weight_grad = weight_gradient_kind(s, mb);
        for (int b = 0; b < buckets; ++b) require_before(weight_grad, s, mb, ActionKind::ALLREDUCE, s, b);
        require_before(weight_grad, s, mb, ActionKind::OPTIM, s, -1);
      }
      for (int b = 0; b < buckets; ++b) require_before(ActionKind::ALLREDUCE, s, b, ActionKind::OPTIM, s, -1);
    }
  }

  // --- point-to-point matching and deadlock ---

  // A SEND's RECV, or a RECV's SEND.
  static Action partner(const Action& a) {
    switch (a.kind) {
      case ActionKind::SEND_F: return {ActionKind::RECV_F, a.stage + 1, a.mb};
      case ActionKind::SEND_B: return {ActionKind::RECV_B, a.stage - 1, a.mb};
      case ActionKind::RECV_F: return {ActionKind::SEND_F, a.stage - 1, a.mb};
      case ActionKind::RECV_B: return {ActionKind::SEND_B, a.stage + 1, a.mb};
      default: return a;
    }
  }
  static bool is_send(ActionKind k) { return k == ActionKind::SEND_F || k == ActionKind::SEND_B; }
  static bool is_recv(ActionKind k) { return k == ActionKind::RECV_F || k == ActionKind::RECV_B; }
  bool nccl() const { return s_.collectives == Collectives::nccl; }

  static std::string ordinal(size_t i) {
    const size_t n = i + 1;
    const char* suffix = (n % 100 >= 11 && n % 100 <= 13) ? "th"
                         : n % 10 == 1                     ? "st"
                         : n % 10 == 2                     ? "nd"
                         : n % 10 == 3                     ? "rd"
                                                           : "th";
    return std::to_string(n) + suffix;
  }

  // NCCL ignores tags: the k-th message rank a sends to rank b is the k-th that b receives from a.
  // So each rank's sends to a peer must be that peer's receives from it, in the same order.
  void check_fifo() {
    const int p = static_cast<int>(s_.ranks.size());
    for (int from = 0; from < p; ++from)
      for (int to = 0; to < p; ++to)
        if (from != to) check_fifo(from, to);  // a message to itself is a local copy
  }

  void check_fifo(int from, int to) {
    std::vector<Action> sends, recvs;
    for (const Action& a : s_.ranks[from])
      if (is_send(a.kind) && s_.rank_of_stage(partner(a).stage) == to) sends.push_back(a);
    for (const Action& a : s_.ranks[to])
      if (is_recv(a.kind) && s_.rank_of_stage(partner(a).stage) == from) recvs.push_back(a);
    for (size_t k = 0; k < std::min(sends.size(), recvs.size()); ++k) {
      if (partner(sends[k]) == recvs[k]) continue;
      problem("rank " + std::to_string(from) + "'s " + ordinal(k) + " send to rank " + std::to_string(to) + " is " +
              sends[k].id() + ", but rank " + std::to_string(to) + "'s " + ordinal(k) + " receive from rank " +
              std::to_string(from) + " is " + recvs[k].id() +
              ": NCCL matches messages between two ranks by their order, so both must post them in the same order");
      return;
    }
  }

  // One vertex per action (its posting); an edge u -> v when v cannot be posted before u. On each
  // rank an action follows the one before it. The action after a RECV waits for its SEND to be
  // posted; with NCCL the action after a SEND also waits for its RECV to be posted (the send blocks
  // until then). A cycle is a deadlock (find_cycle).
  void check_acyclic() {
    WaitGraph g(vertices_);
    places_.assign(vertices_, {});
    for (const auto& [key, place] : at_) places_[place.vertex] = place;
    for (const Place& place : places_) {
      if (auto next = next_on_rank(place)) boost::add_edge(place.vertex, *next, g);
      const Action& a = action(place);
      if (!is_send(a.kind)) continue;
      const Action r = partner(a);
      const Place recv = *find(r.kind, r.stage, r.mb);
      if (auto after = next_on_rank(recv)) boost::add_edge(place.vertex, *after, g);
      if (nccl() && recv.rank != place.rank)
        if (auto after = next_on_rank(place)) boost::add_edge(recv.vertex, *after, g);
    }
    const std::vector<int> cycle = find_cycle(g);
    if (!cycle.empty()) problem(describe_cycle(cycle));
  }

  const Action& action(const Place& p) const { return s_.ranks[p.rank][p.index]; }
  std::optional<int> next_on_rank(const Place& p) const {
    if (p.index + 1 >= static_cast<int>(s_.ranks[p.rank].size())) return std::nullopt;
    return p.vertex + 1;  // vertices are numbered in rank order
  }

  // Names each wait around the cycle: every edge that is not a rank's own order crosses from an
  // action one rank posts to the action after another rank's SEND or RECV, which waits for it.
  // "rank 1 waits in 1SEND_B0 until rank 0 posts 0RECV_B0, which comes after 0SEND_F1; ..."
  std::string describe_cycle(const std::vector<int>& cycle) const {
    struct Wait {
      Place waiter;  // the SEND or RECV a rank is stuck in
      Place posted;  // the peer's action it needs posted
    };
    std::vector<Wait> waits;
    for (size_t i = 0; i < cycle.size(); ++i) {
      const Place& u = places_[cycle[i]];
      const Place& v = places_[cycle[(i + 1) % cycle.size()]];
      if (u.rank == v.rank && v.index == u.index + 1) continue;
      waits.push_back({places_[v.vertex - 1], u});
    }
    std::string m = "deadlock: ";
    for (size_t i = 0; i < waits.size(); ++i) {
      const Wait& w = waits[i];
      const Wait& before = waits[(i + waits.size() - 1) % waits.size()];  // where the posting rank waits first
      m += (i ? "; rank " : "rank ") + std::to_string(w.waiter.rank) + " waits in " + action(w.waiter).id() +
           " until rank " + std::to_string(w.posted.rank) + " posts " + action(w.posted).id() + ", which comes after " +
           action(before.waiter).id();
    }
    m += nccl() ? " (with NCCL a send blocks until its receive is posted: post each pair in the same order on both ranks)"
                : " (a receive is ordered before the send it depends on)";
    return m;
  }

  const Schedule& s_;
  std::map<Key, Place> at_;
  int vertices_ = 0;
  std::vector<std::string> problems_;
  std::vector<Place> places_;  // by vertex
};

}  // namespace

std::vector<std::string> validate_schedule(const Schedule& schedule) { return Checker(schedule).run(); }

}  // namespace parallax::schedule
