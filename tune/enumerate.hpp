#pragma once
// The enumeration of a search space: every valid configuration, the coupled knobs formed
// together (the layout's product is the world, the global batch stays, the schedule's own
// knobs and the split derive each other's values, DDP's buckets only with replicas; the table's
// Coupling) and every other tuned knob crossed with them.
#include <functional>
#include <string>
#include <vector>

#include "tune/evaluator.hpp"
#include "tune/space.hpp"

namespace parallax::tune {

/// Every valid configuration of the space (the scenario's rules decide), in a fixed order.
/// `over_memory`, when given: configurations whose parameters and optimizer state alone exceed the
/// device's memory are counted there (once each, without their split and bucket variants) and left out.
/// `bucket_variants`: list each data-parallel configuration once per DDP bucket setting of the space
/// (false: once, with the scenario's; search() simulates the variants in turn).
/// `sample`, when given: keep at most sample->cap configurations, a uniform random sample of the
/// space's (fixed seed): past the cap each kept one is dropped with probability 1/2 and later
/// combinations are kept with half the chance, before their checks, so that a space of hundreds of
/// millions (a MoE job's expert degrees crossed with the rest) costs its combinations' count, not
/// their checks. sample->one_in says how thin the sample is; the counts above are the sample's.
/// sample->stop, when set, is asked every few thousand combinations: true ends the listing with
/// what it holds (Ctrl-C and --time-limit reach a listing of millions).
struct Sample {
  size_t cap = 0;
  size_t one_in = 1;
  std::function<bool()> stop;
};
std::vector<plan::Settings> enumerate(Evaluator& evaluator, const Space& space, size_t* invalid, std::string* invalid_example,
                                      size_t* over_memory = nullptr, bool bucket_variants = true, Sample* sample = nullptr);

}  // namespace parallax::tune
