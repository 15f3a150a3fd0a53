#pragma once
// Proof that a schedule can run: complete (every forward and backward of every stage and
// micro-batch exactly once, on the rank that holds the stage, each backward after its forward,
// every receive with its send, every bucket all-reduced after the stage's last backward and before
// its optimizer step) and free of deadlock (the graph of "must happen before" edges — each rank's
// order, and each send before its receive — has no cycle; sends are asynchronous, receives wait).
// For NCCL (schedule.collectives) also: between two ranks, the sends of one match the receives of
// the other in order (NCCL ignores tags), and a send waits for its receive to be posted, so the
// deadlock check adds those waits; a deadlock is reported with its cycle of ranks and actions.
#include <string>
#include <vector>

#include "schedule/schedule.hpp"

namespace parallax::schedule {

/// Everything wrong with the schedule, one sentence each; empty when it is valid.
std::vector<std::string> validate_schedule(const Schedule& schedule);

}  // namespace parallax::schedule
