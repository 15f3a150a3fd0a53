#include "schedule/csv.hpp"

#include <algorithm>
#include <fstream>
#include <ostream>
#include <sstream>
#include <utility>

namespace parallax::schedule {

CsvError::CsvError(CsvPlace where, const std::string& message)
    : std::runtime_error(where.file + ":" + std::to_string(where.line) + ":" + std::to_string(where.column) + ": " + message),
      where_(std::move(where)), message_(message) {}


void write_schedule_csv(const Schedule& schedule, std::ostream& out) {
  for (const auto& rank : schedule.ranks) {
    bool first = true;
    for (const Action& a : rank) {
      if (!is_compute(a.kind) || a.mb >= schedule.chunks || (a.kind == ActionKind::OVERLAP_F_B && a.b_mb >= schedule.chunks))
        continue;
      out << (first ? "" : ",") << a.id();
      first = false;
    }
    out << "\n";
  }
}

ComputeOrder read_schedule_csv(const std::string& path, int pipeline, int stages, int chunks, bool v_shape) {
  std::ifstream in(path);
  if (!in) throw CsvError(CsvPlace{path}, "cannot open schedule CSV (does it exist?)");
  std::stringstream text;
  text << in.rdbuf();
  return parse_schedule_csv(text.str(), path, pipeline, stages, chunks, v_shape);
}

namespace {

// One cell's checks against the plan: its stages exist and live on this row's rank, its
// micro-batches exist, and a W follows its I on the row (`row`: the cells before it).
void check_cell(const Action& a, const std::string& cell, const CsvPlace& at, int rank, int pipeline, int stages,
                int chunks, bool v_shape, const std::vector<Action>& row) {
  for (const Action& part : a.parts()) {
    const std::string what = "'" + cell + "': ";
    if (part.stage >= stages)
      throw CsvError(at, what + "stage " + std::to_string(part.stage) + " does not exist; the plan has " +
                               std::to_string(stages) + " stages");
    const int home = pipeline_rank_of_stage(part.stage, pipeline, v_shape);
    if (home != rank)
      throw CsvError(at, what + "stage " + std::to_string(part.stage) + " lives on rank " + std::to_string(home) +
                               ", not on rank " + std::to_string(rank) + " (row " + std::to_string(rank + 1) + ")" +
                               (v_shape ? "" : "; stages are placed round-robin (stage mod pipeline) for CSV schedules"));
    if (part.mb >= chunks)
      throw CsvError(at, what + "micro-batch " + std::to_string(part.mb) + " does not exist; chunks is " +
                               std::to_string(chunks));
  }
  if (a.kind == ActionKind::W &&
      std::find(row.begin(), row.end(), Action{ActionKind::I, a.stage, a.mb}) == row.end())
    throw CsvError(at, "'" + cell + "': a W before its I (" + Action{ActionKind::I, a.stage, a.mb}.id() +
                             " must come earlier on the row): the weight gradient needs the backward through the stage first");
}

}  // namespace

ComputeOrder parse_schedule_csv(const std::string& text, const std::string& file, int pipeline,
                                int stages, int chunks, bool v_shape) {
  // The cells are plain tokens without commas or quotes, so splitting lines on ',' is the whole
  // CSV grammar needed here; Python's csv module writes them unquoted.
  ComputeOrder order;
  std::istringstream lines(text);
  int line_no = 0;
  for (std::string line; std::getline(lines, line);) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t,") == std::string::npos && order.size() >= static_cast<size_t>(pipeline)) continue;
    const int rank = static_cast<int>(order.size());
    if (rank >= pipeline)
      throw CsvError(CsvPlace{file, line_no, 1}, "more rows than pipeline ranks (" + std::to_string(pipeline) +
                                                       "); the CSV needs one row per rank");
    order.emplace_back();
    size_t start = 0;
    while (start <= line.size()) {
      size_t end = line.find(',', start);
      if (end == std::string::npos) end = line.size();
      std::string cell = line.substr(start, end - start);
      const size_t b = cell.find_first_not_of(" \t\"");
      const size_t e = cell.find_last_not_of(" \t\"");
      cell = b == std::string::npos ? "" : cell.substr(b, e - b + 1);
      const CsvPlace at{file, line_no, static_cast<int>(start) + 1};
      // torch's single-stage schedules end each row with REDUCE_GRAD (its DDP reduction);
      // Parallax places its all-reduces itself.
      if (cell.size() > 11 && cell.ends_with("REDUCE_GRAD")) cell.clear();
      if (!cell.empty()) {
        Action a;
        if (!parse_action_id(cell, &a) || a.kind == ActionKind::ALLREDUCE || a.kind == ActionKind::OPTIM)
          throw CsvError(at, "'" + cell + "' is not a compute or point-to-point action; cells must be like 0F3 "
                                   "(forward), 1B2 (backward), 1I2 and later 1W2 (backward split into input and weight "
                                   "gradients), (0F3;3B1)OVERLAP_F_B, or, to give the communication yourself, 0SEND_F3, "
                                   "1RECV_F3, 1SEND_B3, 0RECV_B3; Parallax adds ALLREDUCE and OPTIM itself (and skips "
                                   "torch's REDUCE_GRAD), and UNSHARD/RESHARD are not supported");
        check_cell(a, cell, at, rank, pipeline, stages, chunks, v_shape, order.back());
        order.back().push_back(a);
      }
      start = end + 1;
    }
  }
  if (order.size() != static_cast<size_t>(pipeline))
    throw CsvError(CsvPlace{file, line_no, 0}, "the CSV has " + std::to_string(order.size()) + " rows, but the plan has " +
                                                    std::to_string(pipeline) + " pipeline ranks; it needs one row per rank");
  return order;
}

}  // namespace parallax::schedule
