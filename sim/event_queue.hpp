#pragma once
// The simulator's clock. Events are small plain records ordered by time, then by the order they
// were scheduled (as in ns-3), so the same scenario replays identically, to the byte. A heap of
// plain keys: no allocation per event and no virtual calls; the simulator dispatches on `type`.
// Written out rather than std::priority_queue for speed (see the comments on pop and Key).
#include <cstdint>
#include <stdexcept>
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
    uint32_t slot;
    if (!free_slots_.empty()) {
      slot = free_slots_.back();
      free_slots_.pop_back();
    } else {
      if (payloads_.size() >= kMaxPending) throw std::length_error("event queue: more than 2^24 pending events");
      slot = static_cast<uint32_t>(payloads_.size());
      payloads_.emplace_back();
    }
    if (next_seq_ >= kMaxSeq) throw std::length_error("event queue: more than 2^40 events scheduled");
    payloads_[slot] = Payload{type, a, b, c};
    const Key k = (Key{order_bits(at.count_ns())} << 64) | (Key{next_seq_++} << kSlotBits) | slot;
    heap_.emplace_back();
    sift_up(heap_.size() - 1, k);
  }
  bool empty() const { return heap_.empty(); }
  size_t size() const { return heap_.size(); }
  /// Removes and returns the earliest event.
  Event pop() {
    const Key top = heap_.front();
    const Key last = heap_.back();
    heap_.pop_back();
    ++popped_;
    const size_t n = heap_.size();
    if (n > 0) {
      // Floyd's bottom-up pop: walk the hole down to a leaf along the earliest child, then sift
      // the last key up from there. The last key nearly always belongs near the bottom, so this
      // saves the comparison with it on every level.
      size_t hole = 0;
      for (size_t first = 1; first < n; first = kArity * hole + 1) {
        const size_t end = first + kArity < n ? first + kArity : n;
        size_t least = first;
        for (size_t c = first + 1; c < end; ++c)
          if (heap_[c] < heap_[least]) least = c;
        heap_[hole] = heap_[least];
        hole = least;
      }
      sift_up(hole, last);
    }
    const auto slot = static_cast<uint32_t>(top & ((Key{1} << kSlotBits) - 1));
    free_slots_.push_back(slot);
    const Payload& p = payloads_[slot];
    const auto time_ns = static_cast<int64_t>(static_cast<uint64_t>(top >> 64) ^ kSignBit);
    const auto seq = static_cast<uint64_t>(top >> kSlotBits) & (kMaxSeq - 1);
    return Event{time_ns, seq, p.type, p.a, p.b, p.c};
  }
  uint64_t popped() const { return popped_; }

 private:
  // The heap holds only 16-byte keys, (time, seq, payload slot) as one 128-bit number: a
  // comparison is one branch-free subtraction, and a node's four children share one cache line.
  // The payloads stay put in `payloads_`. About 2x the pop+push rate of std::priority_queue at 1,024
  // pending events (parallax_sim_bench --queue).
  using Key = unsigned __int128;
  struct Payload {
    uint32_t type = 0;
    int32_t a = 0, b = 0, c = 0;
  };
  static constexpr size_t kArity = 4;
  static constexpr int kSlotBits = 24;
  static constexpr uint64_t kMaxPending = uint64_t{1} << kSlotBits;
  static constexpr uint64_t kMaxSeq = uint64_t{1} << (64 - kSlotBits);
  static constexpr uint64_t kSignBit = uint64_t{1} << 63;
  // Flipping the sign bit makes signed times order as unsigned numbers.
  static uint64_t order_bits(int64_t time_ns) { return static_cast<uint64_t>(time_ns) ^ kSignBit; }
  void sift_up(size_t hole, Key k) {
    while (hole > 0) {
      const size_t parent = (hole - 1) / kArity;
      if (!(k < heap_[parent])) break;
      heap_[hole] = heap_[parent];
      hole = parent;
    }
    heap_[hole] = k;
  }
  std::vector<Key> heap_;
  std::vector<Payload> payloads_;
  std::vector<uint32_t> free_slots_;
  uint64_t next_seq_ = 0;
  uint64_t popped_ = 0;
};

}  // namespace parallax::sim
