#include <catch2/catch.hpp>
#include <algorithm>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "sim/network.hpp"

using namespace parallax;
using sim::Time;

namespace {

// A network on its own clock: runs flows to completion and reports when each finished.
struct Bench {
  sim::EventQueue queue;
  std::map<int, Time> done;
  sim::Network net{queue, 1, 2};

  void run() {
    while (!queue.empty()) {
      const sim::Event e = queue.pop();
      if (const auto tag = net.handle(e)) done[*tag] = e.time();
    }
  }
};

}  // namespace

TEST_CASE("sim::Network: a lone flow takes latency + bytes / bandwidth", "[sim]") {
  Bench b;
  const int l = b.net.add_link("l", 2.0);  // 2 GB/s = 2 bytes/ns
  b.net.start_flow(Time(), Time::us(5), 1e6, std::vector<int>{l}, 7);
  b.run();
  CHECK(b.done.at(7) == Time::us(5) + Time::ns(500000));
  CHECK(b.net.links()[l].bytes == Approx(1e6));
}

TEST_CASE("sim::Network: flows sharing a link split it fairly and both slow down", "[sim]") {
  Bench b;
  const int shared = b.net.add_link("shared", 1.0);
  const int a_only = b.net.add_link("a", 1.0);
  const int c_only = b.net.add_link("c", 1.0);
  b.net.start_flow(Time(), Time(), 1000, std::vector<int>{a_only, shared}, 0);
  b.net.start_flow(Time(), Time(), 3000, std::vector<int>{shared, c_only}, 1);
  b.run();
  // Half each until flow 0 ends at 2000 ns; flow 1 then has 2000 bytes left at full rate.
  CHECK(b.done.at(0) == Time::ns(2000));
  CHECK(b.done.at(1) == Time::ns(4000));
  // Bytes are conserved on every link.
  CHECK(b.net.links()[shared].bytes == Approx(4000));
  CHECK(b.net.links()[a_only].bytes == Approx(1000));
  CHECK(b.net.links()[c_only].bytes == Approx(3000));
}

TEST_CASE("sim::Network: max-min fairness gives a flow the capacity others cannot use", "[sim]") {
  // Flow 0 crosses a slow link (1) and the shared one (10); flow 1 only the shared one. Max-min:
  // flow 0 gets 1, flow 1 gets the remaining 9 (not 5).
  Bench b;
  const int slow = b.net.add_link("slow", 1.0);
  const int shared = b.net.add_link("shared", 10.0);
  b.net.start_flow(Time(), Time(), 1000, std::vector<int>{slow, shared}, 0);
  b.net.start_flow(Time(), Time(), 9000, std::vector<int>{shared}, 1);
  b.run();
  CHECK(b.done.at(0) == Time::ns(1000));
  CHECK(b.done.at(1) == Time::ns(1000));
  CHECK(b.net.links()[shared].peak == Approx(10.0));
}

TEST_CASE("sim::Network: many flows on one link, with routes of three links, end as processor sharing says",
          "[sim]") {
  // Four flows of 1000, 2000, 3000 and 4000 bytes share a 10 bytes/ns link, each also crossing a
  // private link and a fast link they all share (routes longer than two links, and more flows on
  // a link than it keeps inline). Processor sharing: flow i ends at
  // t_i = t_(i-1) + (s_i - s_(i-1)) * (flows left) / capacity. Started in an order that is not
  // their ending order, so flows leave the links' lists from the middle.
  Bench b;
  const int shared = b.net.add_link("shared", 10.0);
  const int fast = b.net.add_link("fast", 1000.0);
  const std::vector<double> size = {3000, 1000, 4000, 2000};
  for (int i = 0; i < 4; ++i) {
    const int own = b.net.add_link("own" + std::to_string(i), 1000.0);
    b.net.start_flow(Time(), Time(), size[i], std::vector<int>{own, shared, fast}, i);
  }
  b.run();
  std::vector<double> sorted = size;
  std::sort(sorted.begin(), sorted.end());
  double t = 0, before = 0;
  std::map<double, double> ends;  // size -> analytic end (ns)
  for (size_t k = 0; k < sorted.size(); ++k) {
    t += (sorted[k] - before) * static_cast<double>(sorted.size() - k) / 10.0;
    before = sorted[k];
    ends[sorted[k]] = t;
  }
  for (int i = 0; i < 4; ++i) CHECK(static_cast<double>(b.done.at(i).count_ns()) == Approx(ends.at(size[i])).margin(1));
  CHECK(b.net.links()[shared].bytes == Approx(10000));
  CHECK(b.net.links()[fast].bytes == Approx(10000));
  CHECK(b.net.links()[shared].busy_ns == 1000);  // busy from 0 to the last end, never idle
}

TEST_CASE("sim::Network: free links move any amount at once", "[sim]") {
  Bench b;
  const int l = b.net.add_link("free", std::numeric_limits<double>::infinity());
  b.net.start_flow(Time::ns(10), Time(), 1e12, std::vector<int>{l}, 3);
  b.run();
  CHECK(b.done.at(3) == Time::ns(10));
}

TEST_CASE("sim::EventQueue: ties break by insertion order", "[sim]") {
  sim::EventQueue q;
  q.push(Time::ns(5), 0, 1);
  q.push(Time::ns(3), 0, 2);
  q.push(Time::ns(5), 0, 3);
  q.push(Time::ns(3), 0, 4);
  std::vector<int> order;
  while (!q.empty()) order.push_back(q.pop().a);
  CHECK(order == std::vector<int>{2, 4, 1, 3});
}

TEST_CASE("sim::EventQueue: pops in (time, insertion) order, as a stable sort would", "[sim]") {
  // Interleaved pushes and pops with many ties and negative times, checked against a reference
  // kept as a plain list: each pop must be the earliest time, first inserted among equals. As in
  // the simulator, nothing is pushed before the last event popped; far-off times mix with near
  // ones so that keys move down many of the queue's buckets.
  sim::EventQueue q;
  int64_t now = -20;
  std::vector<std::tuple<int64_t, int, uint32_t>> pending;  // time, id, type
  uint64_t state = 7;
  auto next = [&] { return state = state * 6364136223846793005ULL + 1442695040888963407ULL; };
  int id = 0;
  for (int round = 0; round < 20000; ++round) {
    if (pending.empty() || next() % 3 != 0) {
      const uint64_t r = next();
      const int64_t t = now + (r % 4 == 0 ? static_cast<int64_t>(r >> 24) : static_cast<int64_t>(r >> 60));
      const auto type = static_cast<uint32_t>(next() % 6);
      q.push(Time::ns(t), type, id, -id, 2 * id);
      pending.emplace_back(t, id++, type);
      continue;
    }
    auto earliest = std::min_element(pending.begin(), pending.end(), [](const auto& x, const auto& y) {
      return std::get<0>(x) < std::get<0>(y) || (std::get<0>(x) == std::get<0>(y) && std::get<1>(x) < std::get<1>(y));
    });
    const sim::Event e = q.pop();
    now = e.time_ns;
    REQUIRE(e.time_ns == std::get<0>(*earliest));
    REQUIRE(e.a == std::get<1>(*earliest));
    CHECK(e.type == std::get<2>(*earliest));
    CHECK(e.b == -e.a);
    CHECK(e.c == 2 * e.a);
    pending.erase(earliest);
  }
  CHECK(q.size() == pending.size());
}

TEST_CASE("sim::EventQueue: an event before the current time is refused", "[sim]") {
  sim::EventQueue q;
  q.push(Time::ns(10), 0, 1);
  q.pop();
  CHECK_THROWS_AS(q.push(Time::ns(9), 0, 2), std::logic_error);
  q.push(Time::ns(10), 0, 3);  // the same instant is fine
  CHECK(q.pop().a == 3);
}
