#pragma once
// Reading traces: Parallax's own Chrome traces (predicted or measured) back into a Timeline, and
// PyTorch profiler (Kineto) traces into generic events on lanes a user recognises: each CUDA
// stream's kernels, NCCL kernels on their own lane per stream, memcpy/memset, CPU threads, the
// CUDA runtime and annotations. Gzipped files (.json.gz, as PyTorch writes them) are read
// directly. A malformed or truncated file is an InputError with file:line:column, never a crash.
#include <string>
#include <vector>

#include "plan/timeline.hpp"

namespace parallax::profiler {

/// Any complete event of any trace, on a named lane.
struct TraceEvent {
  int rank = 0;
  std::string lane;
  std::string name;
  std::string category;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  bool communication = false;  ///< a send/recv/all-reduce, or an NCCL kernel
};

struct LoadedTrace {
  std::string path;
  std::string format;  ///< "parallax" or "kineto"
  std::string kind;    ///< parallax: "predicted" or "measured"
  int world_size = 0;
  plan::Timeline timeline;  ///< parallax traces only: the actions
  std::vector<TraceEvent> events;
  /// Kineto: ProfilerStep#N annotations as (rank, step, start_ns, end_ns).
  struct Step {
    int rank, step;
    int64_t start_ns, end_ns;
  };
  std::vector<Step> steps;
};

/// Reads a file; `default_rank` is used for Kineto traces without distributedInfo.
LoadedTrace read_trace(const std::string& path, int default_rank = 0);
/// Parses trace text (already decompressed); `name` is used in error messages.
LoadedTrace parse_trace(const std::string& text, const std::string& name, int default_rank = 0);
/// The file's bytes, gunzipped when it is gzip.
std::string read_file_maybe_gzip(const std::string& path);

}  // namespace parallax::profiler
