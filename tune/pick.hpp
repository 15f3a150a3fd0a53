#pragma once
// The tuner's pick and why: which configuration a search recommends (the fastest measured when
// its candidates ran for real, else the best predicted) and what the full simulation says of it
// against the scenario as given. `parallax tune` prints it and writes it; the GUI shows the same.
#include <string>
#include <vector>

#include "tune/search.hpp"

namespace parallax::tune {

/// What the full simulation says about one configuration, for a ranked table and the "why".
struct Detail {
  double bubble = 0;        ///< mean over ranks, fraction of the step
  double imbalance = 0;     ///< the part of `bubble` that is imbalance (timeline/metrics.hpp)
  plan::Time exposed;       ///< exposed communication, the largest of any rank
  std::string critical_path;  ///< its three largest parts: "stage 3 backward 41%, ..."
};
Detail detail_of(Evaluator& evaluator, const plan::Settings& config);
/// detail_of each ranked row, in order, on `threads` threads (0: one per core); `progress` gets
/// the rows done about ten times a second. A full simulation of a 2,048-GPU plan takes seconds:
/// ten of them were half a minute of silence after the search.
std::vector<Detail> ranked_details(Evaluator& evaluator, const SearchResult& result, int threads = 1,
                                   const std::function<void(size_t done)>& progress = {});

struct Pick {
  const Evaluation* best = nullptr;
  Detail detail;          ///< the pick's
  Detail given;           ///< the scenario's as given
  double vs_given = 0;    ///< the given step / the pick's
  double vs_defaults = 0;  ///< PyTorch's defaults' step / the pick's; NaN when they were not simulated
  std::string why;        ///< bubble and exposed communication against the given, and the critical path
};

/// The pick of a search with ranked rows: `measured_best` (the fastest of the candidates run for
/// real, fit::fastest) when given, else the best prediction. `details`: ranked_details of it.
Pick pick(Evaluator& evaluator, const SearchResult& result, const Evaluation* measured_best,
          const std::vector<Detail>& details);

}  // namespace parallax::tune
