// The host tracer's cost per recorded span (goal: under 200 ns), single-threaded and with two
// threads recording at once. Prints figures.
#include <chrono>
#include <cstdio>
#include <thread>

#include "profiler/host_tracer.hpp"

using namespace parallax;

namespace {

double ns_per_span(int threads, int spans_per_thread) {
  profiler::HostTracer tracer(0, static_cast<size_t>(spans_per_thread));  // per thread
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&tracer, spans_per_thread] {
      const plan::Action a{plan::ActionKind::F, 1, 3};
      for (int i = 0; i < spans_per_thread; ++i) {
        const int64_t start = profiler::now_ns();
        tracer.span(plan::Lane::compute, a, start, profiler::now_ns(), 0, i);
      }
    });
  }
  for (auto& t : pool) t.join();
  const double ns = std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count();
  return ns / spans_per_thread;  // wall time per span per thread, both clock reads included
}

}  // namespace

int main() {
  const int n = 2'000'000;
  std::printf("host tracer: %.1f ns per span (1 thread, two clock reads + record)\n", ns_per_span(1, n));
  std::printf("host tracer: %.1f ns per span (2 threads recording at once)\n", ns_per_span(2, n));
  return 0;
}
