#pragma once
// Fault injection, a testing aid. PARALLAX_FAULT=RANK:STEP:MODE makes rank RANK fail on purpose. `exit` and `hang`
// strike at the start of step STEP (0-based); `save` dies in the middle of writing checkpoint
// step-STEP: a rank that writes a shard dies after its temporary file is written and before the
// rename, any other rank where it would have written; `overflow` (with a loss scaler) makes one
// of the rank's gradients inf at step STEP, as an fp16 overflow would.
#include <cstdint>
#include <string>

namespace parallax::exec {

enum class FaultPoint { step_start, checkpoint_save };

/// The mode PARALLAX_FAULT asks of `rank` at `step`, or "" when it asks nothing of it.
std::string fault_mode(int rank, int64_t step);

/// Ends (exit, save) or stops (hang) this process when PARALLAX_FAULT asks it of `rank` at `step`
/// and point `at`; returns otherwise (overflow is the loss scaler's to inject).
void maybe_inject_fault(int rank, int64_t step, FaultPoint at);

}  // namespace parallax::exec
