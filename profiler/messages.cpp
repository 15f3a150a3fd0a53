#include "profiler/messages.hpp"

#include <algorithm>
#include <map>
#include <tuple>

namespace parallax::profiler {

MessageTiming message_timing(const plan::Timeline& measured, int pipeline) {
  using plan::ActionKind;
  using plan::Lane;
  MessageTiming out;
  int first_step = INT32_MAX;
  for (const auto& e : measured.events) first_step = std::min(first_step, e.step);

  // Each rank's main-thread spans (compute and receives) by start time.
  std::map<int, std::vector<plan::Time>> main_starts;
  for (const auto& e : measured.events)
    if (e.lane == Lane::compute || e.lane == Lane::recv) main_starts[e.rank].push_back(e.start);
  for (auto& [rank, v] : main_starts) std::sort(v.begin(), v.end());

  // When each send's data left its rank: key (step, sending rank, action id).
  std::map<std::tuple<int, int, std::string>, plan::Time> left;
  for (const auto& e : measured.events) {
    if (e.lane != Lane::send) continue;
    const auto& starts = main_starts[e.rank];
    const auto next = std::lower_bound(starts.begin(), starts.end(), e.start);
    if (next == starts.end()) continue;  // the step's last action: nothing to time it by
    left[{e.step, e.rank, e.action.id()}] = *next;
    if (e.step == first_step) continue;
    out.send_us.push_back((*next - e.start).to_us());
    out.bytes.push_back(static_cast<double>(e.bytes));
  }

  for (const auto& e : measured.events) {
    if (e.lane != Lane::recv || e.step == first_step) continue;
    const bool forward = e.action.kind == ActionKind::RECV_F;
    const plan::Action send{forward ? ActionKind::SEND_F : ActionKind::SEND_B, e.action.stage + (forward ? -1 : 1),
                            e.action.mb};
    const int sender = (e.rank / pipeline) * pipeline + send.stage % pipeline;
    const auto it = left.find({e.step, sender, send.id()});
    if (it == left.end() || e.start > it->second) continue;
    out.delivery_us.push_back((e.end - it->second).to_us());
  }
  return out;
}

}  // namespace parallax::profiler
