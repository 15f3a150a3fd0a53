#include "plan/schedule_validate.hpp"

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/depth_first_search.hpp>
#include <map>
#include <optional>
#include <tuple>

namespace parallax::plan {
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
        if (!at_.emplace(key_of(a), Place{r, i, vertices_++}).second) problem(where + ": appears more than once");
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

  void check_compute() {
    for (int s = 0; s < s_.stages(); ++s)
      for (int mb = 0; mb < s_.microbatches(); ++mb) require_before(ActionKind::F, s, mb, ActionKind::B, s, mb);
  }

  void check_communication() {
    const int last = s_.stages() - 1;
    for (int s = 0; s < s_.stages(); ++s) {
      for (int mb = 0; mb < s_.microbatches(); ++mb) {
        if (s > 0) {
          require_before(ActionKind::RECV_F, s, mb, ActionKind::F, s, mb);
          require_before(ActionKind::B, s, mb, ActionKind::SEND_B, s, mb);
        } else if (find(ActionKind::RECV_F, s, mb) || find(ActionKind::SEND_B, s, mb)) {
          problem("stage 0 has no previous stage to receive from or send to (micro-batch " + std::to_string(mb) + ")");
        }
        if (s < last) {
          require_before(ActionKind::F, s, mb, ActionKind::SEND_F, s, mb);
          require_before(ActionKind::RECV_B, s, mb, ActionKind::B, s, mb);
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
        for (int b = 0; b < buckets; ++b) require_before(ActionKind::B, s, mb, ActionKind::ALLREDUCE, s, b);
        require_before(ActionKind::B, s, mb, ActionKind::OPTIM, s, -1);
      }
      for (int b = 0; b < buckets; ++b) require_before(ActionKind::ALLREDUCE, s, b, ActionKind::OPTIM, s, -1);
    }
  }

  // Finds a cycle with a depth-first search: a back edge closes one.
  struct CycleFinder : boost::default_dfs_visitor {
    std::optional<std::pair<int, int>>* found;
    template <class Edge, class Graph>
    void back_edge(Edge e, const Graph& g) {
      if (!*found) *found = std::make_pair(static_cast<int>(boost::source(e, g)), static_cast<int>(boost::target(e, g)));
    }
  };

  void check_acyclic() {
    using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS>;
    Graph g(vertices_);
    std::vector<std::string> names(vertices_);
    for (const auto& [key, place] : at_) {
      names[place.vertex] = "rank " + std::to_string(place.rank) + " " + s_.ranks[place.rank][place.index].id();
      if (place.index + 1 < static_cast<int>(s_.ranks[place.rank].size()))
        boost::add_edge(place.vertex, at_.at(key_of(s_.ranks[place.rank][place.index + 1])).vertex, g);
      const auto& [kind, stage, mb] = key;
      if (kind == ActionKind::SEND_F) boost::add_edge(place.vertex, find(ActionKind::RECV_F, stage + 1, mb)->vertex, g);
      if (kind == ActionKind::SEND_B) boost::add_edge(place.vertex, find(ActionKind::RECV_B, stage - 1, mb)->vertex, g);
    }
    std::optional<std::pair<int, int>> found;
    CycleFinder finder;
    finder.found = &found;
    boost::depth_first_search(g, boost::visitor(finder));
    if (found)
      problem("deadlock: the ranks wait on each other in a cycle through " + names[found->second] + " and " +
              names[found->first] + " (a receive is ordered before the send it depends on)");
  }

  const Schedule& s_;
  std::map<Key, Place> at_;
  int vertices_ = 0;
  std::vector<std::string> problems_;
};

}  // namespace

std::vector<std::string> validate_schedule(const Schedule& schedule) { return Checker(schedule).run(); }

}  // namespace parallax::plan
