#pragma once
// A rank's pipeline messages: the SEND_F / SEND_B and RECV_F / RECV_B actions of its schedule.
// Sends go to the send watcher (exec/send_watcher.hpp), which waits on them off the training
// loop. Under Gloo, receives are posted ahead of their RECVs, a window of them at a time
// (schedule::receive_window). A message between two stages of this rank (a V schedule's turn, or
// pipeline 1) is handed over in memory. Both sides number a message alike: one tag per (sending
// stage, micro-batch, direction).
#include <torch/torch.h>

#include <string>
#include <unordered_map>

#include "exec/comm.hpp"
#include "exec/send_watcher.hpp"
#include "plan/plan.hpp"
#include "profiler/host_tracer.hpp"

namespace parallax::exec {

class PeerMessages {
 public:
  /// The messages of `replica`'s pipeline rank `pipeline_rank`, whose tensors travel as `dtype`
  /// on `device`.
  PeerMessages(const plan::Plan& plan, const LaunchInfo& launch, int pipeline_rank, int replica, Communicator& comm,
               profiler::HostTracer& tracer, torch::Device device, torch::ScalarType dtype);

  /// At a step's start: posts the window's first receives (Gloo).
  void start_step();
  /// SEND_F or SEND_B of `t` (the stage's output, or its input's gradient), started at `t0_ns`.
  void send(const schedule::Action& a, torch::Tensor t, int64_t t0_ns, int32_t step);
  /// RECV_F or RECV_B, started at `t0_ns`: the message once it is here, as sent.
  torch::Tensor receive(const schedule::Action& a, int64_t t0_ns, int32_t step);
  /// At a step's end: waits for every send; rethrows the first failure.
  void drain() { sends_.drain(); }

 private:
  struct PostedReceive {
    Communicator::Work work;
    torch::Tensor buf;
    int src = 0;
    std::string what;
  };

  int peer(int stage) const;
  int tag(int send_stage, int mb, bool backward) const;
  void top_up_receives();
  PostedReceive post_receive(const schedule::Action& a);
  PostedReceive take_posted(const std::string& id);

  const plan::Plan& plan_;
  int rank_, replica_;
  const std::vector<schedule::Action>& actions_;
  Communicator& comm_;
  profiler::HostTracer& tracer_;
  torch::Device device_;
  torch::ScalarType dtype_;
  bool post_ahead_;  // Gloo; NCCL keeps receives at their action (its lowering orders them)
  SendWatcher sends_;
  std::unordered_map<std::string, PostedReceive> posted_;  // by action id
  std::unordered_map<int, torch::Tensor> local_;            // sent to a stage of this rank, by tag
  size_t receive_window_ = 2;  // receives kept posted ahead (schedule::receive_window)
  size_t next_receive_ = 0;    // the next action to look at for a receive to post
};

}  // namespace parallax::exec
