#pragma once
// What point-to-point messages cost inside a measured run, read off its timeline (clock-aligned
// across ranks). Gloo's TCP transport moves a message only once both sides have posted
// (gloo/transport/tcp/pair.cc: a send without a posted receive sends NOTIFY_SEND_READY and
// waits for NOTIFY_RECV_READY), so the costs differ by which side came first:
// - receive posted first: the sender writes the payload in its own send call. Measured: the
//   sender's main-thread time for the SEND, from the SEND span's start (the runtime stamps it
//   before converting and posting the tensor) to the start of that rank's next compute or
//   receive; and delivery, from that moment to the end of the matching RECV.
// - send posted first: the send call only notifies; when the receive is posted, the receiver
//   notifies back and the sender's event-loop thread writes the payload. Measured: the sender's
//   main-thread time as above, and the whole RECV span (post to data in hand).
// calibrate fits both from its probe run; they hold what a ping-pong between idle ranks misses
// (threads waking on busy shared cores).
#include <vector>

#include "plan/timeline.hpp"

namespace parallax::profiler {

struct MessageTiming {
  // Receive posted first.
  std::vector<double> send_us;      ///< one per SEND followed by main-thread work
  std::vector<double> bytes;        ///< the sizes of those sends
  std::vector<double> delivery_us;  ///< one per such message
  // Send posted first.
  std::vector<double> unposted_send_us;  ///< one per SEND followed by main-thread work
  std::vector<double> late_receive_us;   ///< one per such RECV: post to data in hand
  std::vector<double> late_bytes;        ///< the sizes of those messages
};

/// Over the steps after the first. `pipeline` maps a stage to its rank within a replica.
MessageTiming message_timing(const plan::Timeline& measured, int pipeline);

}  // namespace parallax::profiler
