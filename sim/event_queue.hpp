#pragma once
// The simulator's clock. Events are small plain records ordered by time, then by the order they
// were scheduled (as in ns-3), so the same scenario replays identically, to the byte. A binary
// heap of PODs: no allocation per event and no virtual calls; the simulator dispatches on `type`.
#include <cstdint>
#include <queue>
#include <vector>

#include "plan/time.hpp"

namespace parallax::sim {

using plan::Time;

struct Event {
  int64_t time_ns = 0;
  uint64_t seq = 0;  ///< insertion order: breaks ties between events at the same time
  uint32_t type = 0;
  int32_t a = 0, b = 0, c = 0;  ///< payload; meaning depends on type

  Time time() const { return Time::ns(time_ns); }
};

class EventQueue {
 public:
  void push(Time at, uint32_t type, int32_t a = 0, int32_t b = 0, int32_t c = 0) {
    heap_.push(Event{at.count_ns(), next_seq_++, type, a, b, c});
  }
  bool empty() const { return heap_.empty(); }
  /// Removes and returns the earliest event.
  Event pop() {
    Event e = heap_.top();
    heap_.pop();
    ++popped_;
    return e;
  }
  uint64_t popped() const { return popped_; }

 private:
  struct Later {
    bool operator()(const Event& x, const Event& y) const {
      return x.time_ns > y.time_ns || (x.time_ns == y.time_ns && x.seq > y.seq);
    }
  };
  std::priority_queue<Event, std::vector<Event>, Later> heap_;
  uint64_t next_seq_ = 0;
  uint64_t popped_ = 0;
};

}  // namespace parallax::sim
