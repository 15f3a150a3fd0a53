#pragma once
// The sends of a rank's step, waited on off the training loop. Gloo's send works only learn they
// are done when waited on, so a thread waits on them in order and records each span's end as it
// returns; the training loop never blocks on a send until the end of the step (drain). A failed
// wait is kept and rethrown there.
#include <torch/torch.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "exec/comm.hpp"
#include "profiler/host_tracer.hpp"
#include "schedule/schedule.hpp"

namespace parallax::exec {

/// A send posted by the training loop, with what its span needs.
struct PendingSend {
  Communicator::Work work;
  torch::Tensor tensor;  // kept alive until sent
  schedule::Action action;
  int peer = 0;
  int64_t start_ns = 0;
  int32_t step = 0;
};

class SendWatcher {
 public:
  SendWatcher(const Communicator& comm, profiler::HostTracer& tracer);
  ~SendWatcher();
  void push(PendingSend ps);
  /// Waits until every send so far is done; rethrows the first failure.
  void drain();

 private:
  void loop();

  const Communicator& comm_;
  profiler::HostTracer& tracer_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<PendingSend> queue_;
  Communicator::Work current_;
  std::exception_ptr error_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace parallax::exec
