#include "schedule/wait_graph.hpp"

#include <boost/graph/depth_first_search.hpp>

#include <algorithm>
#include <optional>
#include <utility>

namespace parallax::schedule {

namespace {

// Depth-first search: a back edge u -> v closes a cycle, and the tree edges lead from v to u.
struct CycleFinder : boost::default_dfs_visitor {
  std::vector<int>* parent;
  std::optional<std::pair<int, int>>* back;
  template <class Edge, class Graph>
  void tree_edge(Edge e, const Graph& g) {
    (*parent)[boost::target(e, g)] = static_cast<int>(boost::source(e, g));
  }
  template <class Edge, class Graph>
  void back_edge(Edge e, const Graph& g) {
    if (!*back) *back = std::make_pair(static_cast<int>(boost::source(e, g)), static_cast<int>(boost::target(e, g)));
  }
};

}  // namespace

std::vector<int> find_cycle(const WaitGraph& g) {
  std::vector<int> parent(boost::num_vertices(g), -1);
  std::optional<std::pair<int, int>> back;
  CycleFinder finder;
  finder.parent = &parent;
  finder.back = &back;
  boost::depth_first_search(g, boost::visitor(finder));
  if (!back) return {};
  std::vector<int> cycle = {back->first};  // u, parent(u), ... up to v, the back edge's target
  while (cycle.back() != back->second) cycle.push_back(parent[cycle.back()]);
  std::reverse(cycle.begin(), cycle.end());
  return cycle;
}

}  // namespace parallax::schedule
