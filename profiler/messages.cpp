#include "profiler/messages.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <tuple>

namespace parallax::profiler {

namespace {

using schedule::ActionKind;
using timeline::Lane;
using plan::Time;

struct Send {
  Time start;
  std::optional<Time> left;  // start of the rank's next main-thread span: the send call is over
  int64_t bytes = 0;
};

}  // namespace

MessageTiming message_timing(const timeline::Timeline& measured, const plan::ParallelSpec& parallel) {
  MessageTiming out;
  int first_step = INT32_MAX;
  for (const auto& e : measured.events) first_step = std::min(first_step, e.step);

  // Each rank's main-thread spans (compute and receives) by start time.
  std::map<int, std::vector<Time>> main_starts;
  for (const auto& e : measured.events)
    if (e.lane == Lane::compute || e.lane == Lane::recv) main_starts[e.rank].push_back(e.start);
  for (auto& [rank, v] : main_starts) std::sort(v.begin(), v.end());

  // Sends by (step, sending rank, action id).
  std::map<std::tuple<int, int, std::string>, Send> sends;
  for (const auto& e : measured.events) {
    if (e.lane != Lane::send || e.step == first_step) continue;
    Send s{e.start, std::nullopt, e.bytes};
    const auto& starts = main_starts[e.rank];
    const auto next = std::lower_bound(starts.begin(), starts.end(), e.start);
    if (next != starts.end()) s.left = *next;  // else the step's last action: nothing to time it by
    sends[{e.step, e.rank, e.action.id()}] = s;
  }

  for (const auto& e : measured.events) {
    if (e.lane != Lane::recv || e.step == first_step) continue;
    const bool forward = e.action.kind == ActionKind::RECV_F;
    const schedule::Action send{forward ? ActionKind::SEND_F : ActionKind::SEND_B, e.action.stage + (forward ? -1 : 1),
                            e.action.mb};
    const plan::Placement receiver = plan::placement_of(parallel, e.rank);
    const int sender = plan::rank_of(parallel, {receiver.replica, parallel.rank_of_stage(send.stage), receiver.tensor_rank});
    const auto it = sends.find({e.step, sender, send.id()});
    if (it == sends.end()) continue;
    const Send& s = it->second;
    if (!s.left) continue;  // the step's last action: nothing to time it by
    out.send_us.push_back((*s.left - s.start).to_us());
    out.bytes.push_back(static_cast<double>(s.bytes));
    if (e.start <= s.start) out.delivery_us.push_back((e.end - *s.left).to_us());  // the receiver waited
  }
  return out;
}

}  // namespace parallax::profiler
