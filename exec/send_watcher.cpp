#include "exec/send_watcher.hpp"

namespace parallax::exec {

SendWatcher::SendWatcher(const Communicator& comm, profiler::HostTracer& tracer)
    : comm_(comm), tracer_(tracer), thread_([this] { loop(); }) {}

SendWatcher::~SendWatcher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    for (auto& ps : queue_) ps.work->abort();
    if (current_) current_->abort();
  }
  cv_.notify_all();
  thread_.join();
}

void SendWatcher::push(PendingSend ps) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(ps));
  }
  cv_.notify_all();
}

void SendWatcher::drain() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [this] { return (queue_.empty() && !current_) || error_; });
  if (error_) std::rethrow_exception(error_);
}

void SendWatcher::loop() {
  tracer_.register_thread();
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    PendingSend ps = std::move(queue_.front());
    queue_.pop_front();
    current_ = ps.work;
    lock.unlock();
    std::exception_ptr failure;
    try {
      comm_.wait(ps.work, ps.action.id() + " to rank " + std::to_string(ps.peer), {ps.peer});
      tracer_.span(timeline::Lane::send, ps.action, ps.start_ns, profiler::now_ns(), ps.tensor.nbytes(), ps.step);
    } catch (...) {
      failure = std::current_exception();
    }
    lock.lock();
    current_.reset();
    if (failure && !error_) error_ = failure;
    cv_.notify_all();
  }
}

}  // namespace parallax::exec
