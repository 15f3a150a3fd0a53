#pragma once
// Who waits for whom: a directed graph (Boost.Graph) where an edge u -> v means v cannot go on
// before u. The schedule validator builds one over posted actions, the simulator over stalled
// ranks; a cycle is a deadlock.
#include <boost/graph/adjacency_list.hpp>

#include <vector>

namespace parallax::schedule {

using WaitGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS>;

/// A cycle of `g`, each vertex followed by the next and the last by the first; empty if none.
std::vector<int> find_cycle(const WaitGraph& g);

}  // namespace parallax::schedule
