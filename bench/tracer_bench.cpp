// The host tracer's cost per recorded span in the steady state (goal: under 200 ns): each thread
// registers and records a warm-up before the timed part, as the executor's threads do, so the
// figures are the record path alone (buffers allocated and touched beforehand). Prints figures:
// the record with fixed timestamps, and with the two clock reads a span takes, on one thread and
// on two threads recording at once.
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "profiler/host_tracer.hpp"

using namespace parallax;

namespace {

constexpr int kSpans = 2'000'000;  // timed, per thread
constexpr int kWarmUp = 200'000;

// Mean ns per span over the threads, each timing its own loop once all have registered.
double ns_per_span(int threads, bool read_clock) {
  profiler::HostTracer tracer(0, kSpans + kWarmUp);  // per thread: nothing is dropped
  std::atomic<int> ready{0};
  std::vector<double> ns(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      tracer.register_thread();
      const schedule::Action a{schedule::ActionKind::F, 1, 3};
      for (int i = 0; i < kWarmUp; ++i) tracer.span(timeline::Lane::compute, a, i, i + 1, 0, i);
      ready.fetch_add(1);
      while (ready.load() < threads) {
      }
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < kSpans; ++i) {
        const int64_t start = read_clock ? profiler::now_ns() : i;
        tracer.span(timeline::Lane::compute, a, start, read_clock ? profiler::now_ns() : i + 1, 0, i);
      }
      ns[t] = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / kSpans;
    });
  }
  for (auto& t : pool) t.join();
  if (tracer.dropped() != 0) std::fprintf(stderr, "unexpected: %llu spans dropped\n", static_cast<unsigned long long>(tracer.dropped()));
  double sum = 0;
  for (double v : ns) sum += v;
  return sum / threads;
}

}  // namespace

int main() {
  std::printf("host tracer, steady state (%d spans per thread after %d warm-up):\n", kSpans, kWarmUp);
  std::printf("  record only (fixed timestamps), 1 thread:    %6.1f ns per span\n", ns_per_span(1, false));
  std::printf("  two clock reads + record, 1 thread:          %6.1f ns per span\n", ns_per_span(1, true));
  std::printf("  two clock reads + record, 2 threads at once: %6.1f ns per span\n", ns_per_span(2, true));
  return 0;
}
