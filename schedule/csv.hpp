#pragma once
// PyTorch pipelining's CSV form of a schedule (PipelineScheduleMulti._dump_csv / _load_csv,
// format "compute_only"): one row per pipeline rank, one cell per action ("0F3", "1B2", "1I2",
// "1W2", "(0F3;3B1)OVERLAP_F_B"), empty cells for idle time steps. Parallax writes one mini-batch's compute order and derives the
// communication itself when it reads one back. A hand-written CSV may instead give the
// communication too (format "compute_comms": also 0SEND_F3, 1RECV_F3, 1SEND_B3, 0RECV_B3); then
// it is taken as written.
#include <iosfwd>
#include <stdexcept>
#include <string>

#include "schedule/schedule.hpp"

namespace parallax::schedule {

/// Where in a CSV: 1-based line and column, 0 where not known.
struct CsvPlace {
  std::string file;
  int line = 0;
  int column = 0;
};

/// A CSV that cannot be taken, with where and why. The scenario that names the CSV turns it into
/// its own InputError (plan::schedule_order), so the CLI reports it as any bad input: exit 2.
class CsvError : public std::runtime_error {
 public:
  CsvError(CsvPlace where, const std::string& message);
  const CsvPlace& where() const { return where_; }
  const std::string& message() const { return message_; }

 private:
  CsvPlace where_;
  std::string message_;
};

/// Writes the compute actions of the first mini-batch (micro-batches 0 .. chunks-1).
void write_schedule_csv(const Schedule& schedule, std::ostream& out);

/// Reads a compute-only or compute_comms CSV; bad cells are CsvErrors at file:line:column. Checks the row count,
/// that each action's stage lives on its row's rank (looped, or V-shaped with `v_shape`), that
/// micro-batches are < chunks, and that no W comes before its I on the row; the completeness
/// and deadlock checks are the validator's, after lowering.
ComputeOrder read_schedule_csv(const std::string& path, int pipeline, int stages, int chunks, bool v_shape = false);
ComputeOrder parse_schedule_csv(const std::string& text, const std::string& file, int pipeline,
                                int stages, int chunks, bool v_shape = false);

}  // namespace parallax::schedule
