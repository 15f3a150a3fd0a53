#pragma once
// What `parallax` does without a command: the main job on the built-in default scenario.
#include <string>

namespace parallax::cli {

/// Plans the default scenario, predicts it on its own hardware and on this machine (calibrated
/// once, kept in parallax-out/), runs it for real on this machine's CPU, compares, and leaves
/// the traces and reports in parallax-out/<scenario>/. Calls the commands' own functions.
int main_job();

}  // namespace parallax::cli
