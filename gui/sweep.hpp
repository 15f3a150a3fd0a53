#pragma once
// A sweep: the predicted step time of every configuration on a grid of two knobs (chunks against
// bucket_cap_mb, or chunks against partition_len), everything else as the knobs are. The grid's
// values are what the scenario allows: chunks that divide the batch (the 12 nearest the current
// chunks), the stage splits of the model's layers around the current one, which is always on it. Cells are evaluated by the tuner's engine: the scenario
// with the knobs applied is parsed once into a tune::Evaluator, and each cell is a typed
// plan::Settings simulated step-only (no YAML and no string overrides per cell).
#include <cmath>
#include <string>
#include <vector>

#include "gui/knobs.hpp"
#include "gui/plan_session.hpp"
#include "tune/evaluator.hpp"

namespace parallax::gui {

enum class SweepKind { chunks_by_bucket_cap, chunks_by_partition_len };

struct SweepAxis {
  std::string key;                  ///< "parallel.bucket_cap_mb"
  std::vector<std::string> values;  ///< YAML values: "25", "[4, 6]"
  /// What a column's heading says where the value is too long to read ("s3→s4": one layer moved
  /// from stage 3 to stage 4 of the current split); empty: the values.
  std::vector<std::string> labels;
  /// The value the knobs stand on where their own does not name it (partition_len: balanced, as
  /// the plan resolved it); -1: none.
  int current = -1;
  const std::string& label(int i) const { return labels.empty() ? values.at(i) : labels.at(i); }
};

struct SweepCell {
  plan::Time step;    ///< the predicted step; 0 until simulated, or when rejected
  std::string error;  ///< why the configuration is not valid
  bool done = false;
  bool fits = true;          ///< every rank's peak within its device's memory
  int64_t peak_memory = 0;   ///< bytes, the fullest rank's
  bool valid() const { return done && step > plan::Time(); }
};

struct SweepGrid {
  SweepKind kind = SweepKind::chunks_by_bucket_cap;
  SweepAxis x;  ///< columns
  SweepAxis y;  ///< rows: chunks
  std::vector<SweepCell> cells;  ///< row-major: cells[row * columns + column]

  int columns() const { return static_cast<int>(x.values.size()); }
  int rows() const { return static_cast<int>(y.values.size()); }
  /// The cell with the smallest predicted step time of those that fit device memory, -1 while none has one.
  int best() const;
  /// The knobs of a cell: `base` with the two swept values set.
  KnobValues knobs_of(int cell, const KnobValues& base) const;
  /// The configuration of a cell: `base` (the knobs' own, as parsed) with the two swept values set.
  plan::Settings config_of(int cell, const plan::Settings& base) const;
  /// The cell `knobs` is on, -1 when off the grid.
  int cell_of(const KnobValues& knobs) const;
};

/// The grid for the plan being looked at.
SweepGrid make_sweep(SweepKind kind, const plan::Plan& plan, const KnobValues& knobs);

/// Simulates one cell on the sweep's evaluator (any thread); a rejected configuration gets its error.
SweepCell evaluate_cell(tune::Evaluator& evaluator, const plan::Settings& config);

}  // namespace parallax::gui
