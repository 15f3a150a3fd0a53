// The action vocabulary: kinds, ids as torch.distributed.pipelining prints them, and the
// schedule kinds' names.
#include "schedule/schedule.hpp"

#include <algorithm>
#include <cctype>
#include <sstream>

namespace parallax::schedule {

const char* name(ActionKind k) {
  switch (k) {
    case ActionKind::F: return "F";
    case ActionKind::B: return "B";
    case ActionKind::SEND_F: return "SEND_F";
    case ActionKind::RECV_F: return "RECV_F";
    case ActionKind::SEND_B: return "SEND_B";
    case ActionKind::RECV_B: return "RECV_B";
    case ActionKind::ALLREDUCE: return "ALLREDUCE";
    case ActionKind::OPTIM: return "OPTIM";
    case ActionKind::I: return "I";
    case ActionKind::W: return "W";
    case ActionKind::OVERLAP_F_B: return "OVERLAP_F_B";
    case ActionKind::ALL_TO_ALL: return "ALL_TO_ALL";
    case ActionKind::ALL_GATHER: return "ALL_GATHER";
  }
  return "?";
}

bool is_compute(ActionKind k) {
  return k == ActionKind::F || k == ActionKind::B || k == ActionKind::I || k == ActionKind::W ||
         k == ActionKind::OVERLAP_F_B;
}
bool is_measured_inside(ActionKind k) { return k == ActionKind::ALL_TO_ALL || k == ActionKind::ALL_GATHER; }
bool makes_input_gradient(ActionKind k) { return k == ActionKind::B || k == ActionKind::I; }
bool makes_weight_gradient(ActionKind k) { return k == ActionKind::B || k == ActionKind::W; }

FewOf<Action, 2> Action::parts() const {
  FewOf<Action, 2> out;
  if (kind == ActionKind::OVERLAP_F_B) {
    out.push_back(forward_part());
    out.push_back(backward_part());
  } else {
    out.push_back(*this);
  }
  return out;
}

// Built by appending and a stream: g++ 12 warns falsely (-Wrestrict) on "(" + ... + ")" and
// "." + std::to_string, and on appending the parts' ids once it inlines this call into itself.
std::string Action::id() const {
  if (kind == ActionKind::OVERLAP_F_B) {
    std::ostringstream pair;
    pair << '(' << forward_part().id() << ';' << backward_part().id() << ")OVERLAP_F_B";
    return pair.str();
  }
  std::string s = std::to_string(stage);
  s += name(kind);
  if (kind == ActionKind::ALLREDUCE) s += std::to_string(bucket);
  else if (kind != ActionKind::OPTIM && !(kind == ActionKind::ALL_GATHER && mb < 0)) s += std::to_string(mb);
  if (is_measured_inside(kind)) {
    s += '.';
    s += std::to_string(exchange);
  }
  return s;
}

namespace {

// torch's "(0F3;3B1)OVERLAP_F_B": a forward and a full backward of one rank, run as one action.
bool parse_overlap(const std::string& text, Action* out) {
  const std::string tail = ")OVERLAP_F_B";
  if (text.size() <= tail.size() + 1 || text.front() != '(' || !text.ends_with(tail)) return false;
  const std::string inner = text.substr(1, text.size() - tail.size() - 1);
  const size_t semi = inner.find(';');
  Action f, b;
  if (semi == std::string::npos || !parse_action_id(inner.substr(0, semi), &f) || !parse_action_id(inner.substr(semi + 1), &b))
    return false;
  if (f.kind != ActionKind::F || b.kind != ActionKind::B) return false;
  *out = Action{ActionKind::OVERLAP_F_B, f.stage, f.mb, -1, b.stage, b.mb};
  return true;
}

}  // namespace

bool parse_action_id(const std::string& text, Action* out) {
  if (!text.empty() && text.front() == '(') return parse_overlap(text, out);
  size_t i = 0;
  while (i < text.size() && std::isdigit(static_cast<unsigned char>(text[i]))) ++i;
  if (i == 0 || i > 9) return false;
  Action a;
  a.stage = std::stoi(text.substr(0, i));
  // Longest names first, so "SEND_F" is not read as a stray "F".
  static const ActionKind kinds[] = {ActionKind::ALL_TO_ALL, ActionKind::ALL_GATHER, ActionKind::ALLREDUCE, ActionKind::SEND_F,
                                     ActionKind::RECV_F,     ActionKind::SEND_B,    ActionKind::RECV_B,
                                     ActionKind::OPTIM,      ActionKind::F,         ActionKind::B,
                                     ActionKind::I,          ActionKind::W};
  bool matched = false;
  for (ActionKind k : kinds) {
    const std::string n = name(k);
    if (text.compare(i, n.size(), n) == 0) {
      a.kind = k;
      i += n.size();
      matched = true;
      break;
    }
  }
  if (!matched) return false;
  const std::string rest = text.substr(i);
  auto number = [](const std::string& t, int* n) {
    if (t.empty() || t.size() > 9 || !std::all_of(t.begin(), t.end(), [](unsigned char c) { return std::isdigit(c); })) return false;
    *n = std::stoi(t);
    return true;
  };
  const size_t dot = rest.find('.');
  bool ok = true;
  switch (a.kind) {
    case ActionKind::OPTIM: ok = rest.empty(); break;
    case ActionKind::ALLREDUCE: ok = number(rest, &a.bucket); break;
    case ActionKind::ALL_TO_ALL:  // "3.2": micro-batch 3, exchange 2
      ok = dot != std::string::npos && number(rest.substr(0, dot), &a.mb) && number(rest.substr(dot + 1), &a.exchange);
      break;
    case ActionKind::ALL_GATHER:  // "3.2": micro-batch 3, gather 2; ".4": OPTIM's gather 4
      ok = dot != std::string::npos && (dot == 0 || number(rest.substr(0, dot), &a.mb)) && number(rest.substr(dot + 1), &a.exchange);
      break;
    default: ok = number(rest, &a.mb);
  }
  if (!ok) return false;
  *out = a;
  return true;
}

const char* name(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::gpipe: return "gpipe";
    case ScheduleKind::one_f_one_b: return "1f1b";
    case ScheduleKind::interleaved_1f1b: return "interleaved-1f1b";
    case ScheduleKind::csv: return "csv";
    case ScheduleKind::looped_bfs: return "looped-bfs";
    case ScheduleKind::interleaved_zero_bubble: return "interleaved-zero-bubble";
    case ScheduleKind::zbv_zero_bubble: return "zbv-zero-bubble";
    case ScheduleKind::dualpipev: return "dualpipev";
  }
  return "?";
}

bool v_shaped(ScheduleKind k) { return k == ScheduleKind::zbv_zero_bubble || k == ScheduleKind::dualpipev; }
bool splits_backward(ScheduleKind k) { return k == ScheduleKind::interleaved_zero_bubble || v_shaped(k); }

std::optional<double> textbook_bubble_fraction(ScheduleKind k, int pipeline, int virtual_stages, int chunks) {
  const double p = pipeline, m = chunks;
  if (k == ScheduleKind::gpipe || k == ScheduleKind::one_f_one_b) return (p - 1) / (m + p - 1);
  if (k == ScheduleKind::interleaved_1f1b && chunks >= pipeline) return (p - 1) / (virtual_stages * m + p - 1);
  return std::nullopt;
}

const char* name(Collectives c) { return c == Collectives::nccl ? "nccl" : "gloo"; }

}  // namespace parallax::schedule
