#pragma once
// Reading traces: Parallax's own Chrome traces (predicted or measured) back into a Timeline, and
// any other Chrome Trace Event file into generic events on lanes a user recognises. That covers
// PyTorch's profiler in its two shapes: Kineto's object form (each CUDA stream's kernels, NCCL
// kernels on their own lane per stream, memcpy/memset, CPU threads, the CUDA runtime,
// annotations; old and new category names) and the legacy autograd profiler's array form
// (pid "CPU functions" / "CUDA functions"), as well as traces of other tools.
//
// Both forms of the format are read: `{"traceEvents": [...]}` and a bare `[...]`, whose closing
// bracket may be missing (writers that stream events cannot always add it; a trailing comma is
// tolerated too). Phases: X (complete), B/E (matched per pid/tid as a stack, in time order), i/I
// (instants, zero-length), M (process_name/thread_name name the lanes); counters (C), flows,
// async and sample events are skipped (a Parallax trace keeps its plan and its link counters).
// Gzipped files (.json.gz, as PyTorch writes them) are read directly. A malformed or truncated
// file is an InputError with file:line:column, never a crash; B/E events that do not pair up are
// left out and reported in `warnings`.
#include <string>
#include <vector>

#include "timeline/timeline.hpp"

namespace parallax::timeline {

/// Any complete event of any trace, on a named lane.
struct TraceEvent {
  int rank = 0;
  std::string lane;
  std::string name;
  std::string category;
  int64_t start_ns = 0;
  int64_t end_ns = 0;
  bool communication = false;  ///< a send/recv/all-reduce, or an NCCL kernel
  /// Kineto's args.correlation: the same number on a kernel (or copy) and on the CUDA runtime
  /// call that launched it; -1 when the event has none.
  int64_t correlation = -1;
};

struct LoadedTrace {
  std::string path;
  /// "parallax", "kineto" (PyTorch profiler, object form), "pytorch-legacy" (the autograd
  /// profiler's array form) or "chrome" (any other Chrome trace).
  std::string format;
  std::string kind;    ///< parallax: "predicted" or "measured"
  int world_size = 0;
  timeline::Timeline timeline;  ///< parallax traces only: the actions
  std::vector<TraceEvent> events;
  /// ProfilerStep#N annotations as (rank, step, start_ns, end_ns).
  struct Step {
    int rank, step;
    int64_t start_ns, end_ns;
  };
  std::vector<Step> steps;
  /// Events left out, each with its file:line:column (B without E, E without B); at most a few
  /// are listed, then a count of the rest.
  std::vector<std::string> warnings;
};

/// Reads a file; `default_rank` is the rank of traces that do not name one (Kineto's
/// distributedInfo does).
LoadedTrace read_trace(const std::string& path, int default_rank = 0);
/// Parses trace text (already decompressed); `name` is used in error messages.
LoadedTrace parse_trace(const std::string& text, const std::string& name, int default_rank = 0);
/// The file's bytes, gunzipped when it is gzip.
std::string read_file_maybe_gzip(const std::string& path);
/// `bytes` gunzipped when they start with gzip's magic number, else as they are; `name` is used
/// in error messages.
std::string gunzip(const std::string& bytes, const std::string& name);

}  // namespace parallax::timeline
