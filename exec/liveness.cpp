#include "exec/liveness.hpp"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

namespace parallax::exec {

struct Liveness::State {
  c10::intrusive_ptr<c10d::Store> store;
  int rank = 0, world_size = 1;
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false, stopped = false;
  std::set<int> verdict;  // the job's lost ranks as last posted in the store
  std::set<int> lost;     // whom this rank found lost (passed on in its report)
  std::vector<std::string> actions;  // the rank's action ids (under mu)
  std::atomic<int64_t> step{-1};     // where the rank is (Liveness::at), -1 before its first step
  std::atomic<int> action{0};
};

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr milliseconds kBeat{250};           // heartbeat period
constexpr milliseconds kWatch{1500};         // how long a silent peer is watched before it counts as lost
constexpr milliseconds kExplainLimit{2000};  // all of explain(), store trouble included
constexpr milliseconds kReportLimit{1000};
constexpr milliseconds kStoreTimeout{2000};
const std::string kAlive = "parallax/alive/", kFailed = "parallax/failed/", kLost = "parallax/lost", kAt = "parallax/at/";

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

std::set<int> parse_ranks(const std::string& s) {
  std::set<int> out;
  std::istringstream in(s);
  for (int r; in >> r;) out.insert(r);
  return out;
}

std::string format_ranks(const std::set<int>& ranks) {
  std::string out;
  for (int r : ranks) out += std::to_string(r) + " ";
  return out;
}

// "rank 2" or "ranks 2, 5"
std::string rank_list(const std::set<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (int r : ranks) out += (out.back() == ' ' ? "" : ", ") + std::to_string(r);
  return out;
}

std::string first_line(std::string s) {
  if (const auto nl = s.find('\n'); nl != std::string::npos) s.resize(nl);
  return s;
}

// Runs `task` on a thread of its own and waits at most `limit` for it: nullopt when it did not
// finish (the thread is left to finish or die with the process), its exception when it threw.
template <typename T>
std::optional<T> within(milliseconds limit, std::function<T()> task) {
  auto promise = std::make_shared<std::promise<T>>();
  std::future<T> result = promise->get_future();
  std::thread([promise, task = std::move(task)] {
    try {
      promise->set_value(task());
    } catch (...) {
      promise->set_exception(std::current_exception());
    }
  }).detach();
  if (result.wait_for(limit) != std::future_status::ready) return std::nullopt;
  return result.get();
}

// Where a rank is, in words: "at 0F3 of step 3", "done with step 3's actions" (steps 1-based, as
// the progress lines count them).
std::string place(const Liveness::State& s, int64_t step, int action) {
  if (step < 0) return "before its first step";
  const std::string of = " step " + std::to_string(step + 1);
  if (action >= 0 && action < static_cast<int>(s.actions.size())) return "at " + s.actions[static_cast<size_t>(action)] + " of" + of;
  return "done with" + of + "'s actions";
}

void heartbeat(const std::shared_ptr<Liveness::State>& s) {
  const std::string key = kAlive + std::to_string(s->rank);
  std::pair<int64_t, int> posted{-2, -2};
  std::unique_lock<std::mutex> lock(s->mu);
  while (!s->stop) {
    const std::pair<int64_t, int> now{s->step.load(std::memory_order_relaxed), s->action.load(std::memory_order_relaxed)};
    const std::string where = now != posted ? place(*s, now.first, now.second) : "";
    lock.unlock();
    std::optional<std::set<int>> verdict;
    try {
      if (!where.empty()) s->store->set(kAt + std::to_string(s->rank), bytes(where));
      posted = now;
      s->store->add(key, 1);
      if (s->store->check({kLost})) verdict = parse_ranks(text(s->store->get(kLost)));
    } catch (const std::exception&) {
      // The store is gone or slow; peers that look then find this rank silent, as it may well be.
    }
    lock.lock();
    if (verdict) s->verdict = *verdict;
    s->cv.wait_for(lock, kBeat, [&] { return s->stop; });
  }
  s->stopped = true;
  s->cv.notify_all();
}

struct Peer {
  bool failed = false, alive = false;
  std::string at;       // where it last said it was (Liveness::at), when alive
  std::set<int> lost;   // whom it found lost, when it failed
  std::string message;  // its error, when it failed
};

// The peers' reports and heartbeats, watched until each has reported or beaten, or kWatch passed.
std::map<int, Peer> observe(c10d::Store& store, int me, const std::vector<int>& peers) {
  std::map<int, Peer> view;
  std::map<int, int64_t> beats;
  for (int q : peers)
    if (q != me) beats[q] = store.add(kAlive + std::to_string(q), 0);
  for (const auto end = Clock::now() + kWatch;;) {
    bool undecided = false;
    for (const auto& [q, first] : beats) {
      Peer& p = view[q];
      if (p.failed || p.alive) continue;
      const std::string key = kFailed + std::to_string(q);
      if (store.check({key})) {
        const std::string report = text(store.get(key));
        p.failed = true;
        p.lost = parse_ranks(first_line(report));
        p.message = report.substr(std::min(report.size(), report.find('\n') + 1));
      } else if (store.add(kAlive + std::to_string(q), 0) > first) {
        p.alive = true;
        if (const std::string at = kAt + std::to_string(q); store.check({at})) p.at = text(store.get(at));
      } else {
        undecided = true;
      }
    }
    if (!undecided || Clock::now() >= end) return view;
    std::this_thread::sleep_for(milliseconds(100));
  }
}

struct Finding {
  std::set<int> lost;
  std::string text;
};

Finding judge(const std::map<int, Peer>& view) {
  std::set<int> silent;
  std::vector<std::string> others;
  Finding f;
  for (const auto& [q, p] : view) {
    if (p.failed) {
      f.lost.insert(p.lost.begin(), p.lost.end());
      others.push_back("rank " + std::to_string(q) + " failed first" +
                       (p.lost.empty() ? ": " + p.message.substr(0, 200) : ", having lost " + rank_list(p.lost)));
    } else if (p.alive) {
      others.push_back("rank " + std::to_string(q) + " is still running (waiting on another rank, or slow" +
                       (p.at.empty() ? "" : "; " + p.at) + ")");
    } else {
      silent.insert(q);
    }
  }
  f.lost.insert(silent.begin(), silent.end());
  if (!silent.empty()) f.text = "lost " + rank_list(silent) + " (it stopped without reporting an error: killed, crashed or hung)";
  for (const auto& o : others) f.text += (f.text.empty() ? "" : "; ") + o;
  return f;
}

}  // namespace

Liveness::Liveness(const std::string& master_addr, int master_port, int rank, int world_size)
    : state_(std::make_shared<State>()) {
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(master_port);
  opts.isServer = false;
  opts.waitWorkers = false;
  opts.timeout = kStoreTimeout;
  state_->store = c10::make_intrusive<c10d::TCPStore>(master_addr, opts);
  state_->rank = rank;
  state_->world_size = world_size;
  std::thread([s = state_] { heartbeat(s); }).detach();
}

Liveness::~Liveness() {
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->stop = true;
  state_->cv.notify_all();
  // Normally the thread stops at once; one stuck in a store call is left to end on its own.
  state_->cv.wait_for(lock, milliseconds(500), [&] { return state_->stopped; });
}

std::string Liveness::explain(const std::vector<int>& peers) {
  const auto s = state_;
  std::optional<Finding> found;
  try {
    found = within<Finding>(kExplainLimit, [s, peers] {
      Finding f = judge(observe(*s->store, s->rank, peers));
      if (!f.lost.empty()) s->store->set(kLost, bytes(format_ranks(f.lost)));
      return f;
    });
  } catch (const std::exception&) {
    // The store is gone (closed with rank 0's process): fall back on the verdict last seen.
  }
  std::lock_guard<std::mutex> lock(s->mu);
  if (!found) {
    if (!s->verdict.empty())
      found = Finding{s->verdict, "lost " + rank_list(s->verdict) + " (as found before the job's store on rank 0 went away)"};
    else if (s->rank != 0)
      found = Finding{{0}, "lost rank 0 (the job's store, which it holds, is gone or does not answer)"};
    else
      return "";
  }
  s->lost.insert(found->lost.begin(), found->lost.end());
  return found->text;
}

void Liveness::set_actions(std::vector<std::string> actions) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->actions = std::move(actions);
}

void Liveness::at(int64_t step, int action) noexcept {
  state_->action.store(action, std::memory_order_relaxed);
  state_->step.store(step, std::memory_order_relaxed);
}

int64_t Liveness::step() const noexcept { return state_->step.load(std::memory_order_relaxed); }

void Liveness::report(const std::string& message) noexcept {
  try {
    const auto s = state_;
    std::set<int> lost;
    {
      std::lock_guard<std::mutex> lock(s->mu);
      lost = s->lost;
    }
    const std::string payload = format_ranks(lost) + "\n" + first_line(message);
    within<bool>(kReportLimit, [s, payload] {
      s->store->set(kFailed + std::to_string(s->rank), bytes(payload));
      return true;
    });
    if (s->rank != 0) return;
    // Keep the store up a moment for the ranks that fail when this process exits.
    within<bool>(kReportLimit, [s, lost] {
      for (const auto end = Clock::now() + kReportLimit; Clock::now() < end;) {
        bool all = true;
        for (int r = 1; r < s->world_size && all; ++r)
          all = lost.count(r) || s->store->check({kFailed + std::to_string(r)});
        if (all) break;
        std::this_thread::sleep_for(milliseconds(100));
      }
      return true;
    });
  } catch (...) {
    // Nobody to tell: the peers will find this rank silent instead.
  }
}

}  // namespace parallax::exec
