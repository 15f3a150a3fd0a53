#include "exec/comm.hpp"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <thread>

#include "exec/gpu.hpp"
#include "profiler/host_tracer.hpp"

namespace parallax::exec {
namespace {

std::string first_line(std::string text) {
  if (const auto nl = text.find('\n'); nl != std::string::npos) text.resize(nl);
  return text;
}

bool env_int(const char* name, int* out) {
  const char* v = std::getenv(name);
  if (!v || !*v) return false;
  *out = std::atoi(v);
  return true;
}

// The network devices Gloo binds to, chosen as PyTorch's Python front end chooses them (its
// ProcessGroupGloo constructor in torch/csrc/distributed/c10d/init.cpp; the C++ class leaves it to
// the caller): every interface named in GLOO_SOCKET_IFNAME (comma-separated, used round-robin),
// else loopback for a local job, else the address this host's name resolves to, which Gloo
// replaces with loopback when it cannot bind there. Across machines (or network namespaces) whose
// host name does not resolve to the interface the peers reach, GLOO_SOCKET_IFNAME is the fix.
std::vector<std::shared_ptr<::gloo::transport::Device>> gloo_devices(const LaunchInfo& launch) {
  std::vector<std::shared_ptr<::gloo::transport::Device>> devices;
  if (const char* names = std::getenv("GLOO_SOCKET_IFNAME"); names && *names) {
    std::string list = names;
    for (size_t start = 0; start <= list.size();) {
      const size_t comma = std::min(list.find(',', start), list.size());
      const std::string name = list.substr(start, comma - start);
      if (!name.empty()) {
        try {
          devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(name));
        } catch (const std::exception& e) {
          throw std::runtime_error("GLOO_SOCKET_IFNAME names interface '" + name +
                                   "', which Gloo cannot use on this host: " + first_line(e.what()));
        }
      }
      start = comma + 1;
    }
  }
  if (!devices.empty()) return devices;
  if (launch.master_addr == "127.0.0.1" || launch.master_addr == "localhost")
    devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  else
    devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
  return devices;
}

GroupPtr make_group(const c10::intrusive_ptr<c10d::Store>& store, const std::string& prefix, int rank, int size,
                    const LaunchInfo& launch, bool nccl) {
  if (nccl)
    return gpu::make_nccl_group(c10::make_intrusive<c10d::PrefixStore>(prefix, store), rank, size,
                                std::chrono::milliseconds(launch.timeout));
  auto options = c10d::ProcessGroupGloo::Options::create(std::chrono::milliseconds(launch.timeout));
  options->devices = gloo_devices(launch);
  return c10::make_intrusive<c10d::ProcessGroupGloo>(c10::make_intrusive<c10d::PrefixStore>(prefix, store), rank,
                                                     size, options);
}

// Every rank counts itself in; rank 0 waits until all have, within the launch's timeout. The
// TCPStore's own wait for its workers (waitWorkers) took twice the timeout before it gave up (a
// rank started alone under --timeout 5 failed after 12 s, LibTorch 1.13), where the message and
// docs/executor.md say the timeout bounds the rendezvous.
void wait_for_ranks(c10d::Store& store, const LaunchInfo& launch) {
  const std::string key = "parallax/joined";
  int64_t joined = store.add(key, 1);
  if (launch.rank != 0) return;  // the others' waits are their groups' (make_group), bounded alike
  const auto deadline = std::chrono::steady_clock::now() + launch.timeout;
  while (joined < launch.world_size) {
    if (std::chrono::steady_clock::now() > deadline)
      throw std::runtime_error(std::to_string(joined) + " of " + std::to_string(launch.world_size) + " ranks joined");
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    joined = store.add(key, 0);
  }
}

}  // namespace

bool LaunchInfo::from_environment(LaunchInfo* out) {
  LaunchInfo info;
  if (!env_int("RANK", &info.rank) || !env_int("WORLD_SIZE", &info.world_size)) return false;
  if (!env_int("LOCAL_RANK", &info.local_rank)) info.local_rank = info.rank;
  if (const char* a = std::getenv("MASTER_ADDR")) info.master_addr = a;
  env_int("MASTER_PORT", &info.master_port);
  int timeout = 0;
  if (env_int("PARALLAX_TIMEOUT", &timeout) && timeout > 0) info.timeout = std::chrono::seconds(timeout);
  *out = info;
  return true;
}

Communicator::Communicator(const LaunchInfo& launch, bool nccl) : launch_(launch), nccl_(nccl) {
  // Gloo writes to its peers with plain writev(), which raises SIGPIPE when the peer has died: a
  // C++ process then ends by the signal, silently, before Gloo's error reaches the runtime that
  // would name the lost rank (a CI run saw it once under load). Python ignores SIGPIPE at start,
  // so PyTorch's ranks get the write's EPIPE as an error; so does a rank here.
  std::signal(SIGPIPE, SIG_IGN);
  c10d::TCPStoreOptions opts;
  opts.port = static_cast<uint16_t>(launch.master_port);
  opts.isServer = launch.rank == 0;
  opts.numWorkers = launch.world_size;
  opts.waitWorkers = false;  // wait_for_ranks, bounded by the timeout
  opts.timeout = std::chrono::milliseconds(launch.timeout);
  try {
    store_ = c10::make_intrusive<c10d::TCPStore>(launch.master_addr, opts);
    wait_for_ranks(*store_, launch);
    world_ = make_group(store_, "world/", launch.rank, launch.world_size, launch, nccl);
  } catch (const std::exception& e) {
    throw std::runtime_error("rank " + std::to_string(launch.rank) + ": rendezvous at " + launch.master_addr + ":" +
                             std::to_string(launch.master_port) + " failed within " +
                             std::to_string(launch.timeout.count()) + " s: " + e.what());
  }
}

Communicator::Communicator(const plan::Plan& plan, const LaunchInfo& launch)
    : Communicator(launch, plan.scenario.hardware.collectives == schedule::Collectives::nccl) {
  const auto& p = plan.scenario.parallel;
  stage_groups_.resize(plan.stages.size());
  stage_ranks_.resize(plan.stages.size());
  for (const auto& st : plan.stages)
    for (int replica = 0; replica < p.data; ++replica) stage_ranks_[st.index].push_back(plan::rank_of(p, {replica, st.pipeline_rank, 0}));
  liveness_ = std::make_unique<Liveness>(launch.master_addr, launch.master_port, launch.rank, launch.world_size);
  if (p.data > 1) {
    // Every member creates its stage groups in stage order, so their rendezvous line up; a rank's
    // place in its stage's group is its replica.
    const plan::RankPlan& me = plan.ranks[launch.rank];
    for (const auto& st : plan.stages) {
      if (me.pipeline_rank != st.pipeline_rank) continue;
      stage_groups_[st.index] = make_group(store_, "ddp-stage-" + std::to_string(st.index) + "/",
                                           me.replica, p.data, launch, nccl_);
    }
  }
  expert_groups_.resize(plan.stages.size());
  if (p.expert > 1) {
    const plan::RankPlan& me = plan.ranks[launch.rank];
    const int ep = p.expert, group = me.replica / ep, expert_rank = me.replica % ep;
    for (const auto& st : plan.stages) {
      if (me.pipeline_rank != st.pipeline_rank) continue;
      auto g = std::make_unique<ExpertGroups>();
      g->rank = expert_rank;
      const std::string stage = std::to_string(st.index);
      for (int r = 0; r < ep; ++r) g->expert_ranks.push_back(stage_ranks_[st.index][group * ep + r]);
      for (int r = expert_rank; r < p.data; r += ep) g->expert_data_ranks.push_back(stage_ranks_[st.index][r]);
      g->experts = make_group(store_, "experts-stage-" + stage + "-" + std::to_string(group) + "/", expert_rank, ep, launch, nccl_);
      if (p.data > ep)
        g->expert_data = make_group(store_, "expert-data-stage-" + stage + "-" + std::to_string(expert_rank) + "/", group,
                                    p.data / ep, launch, nccl_);
      expert_groups_[st.index] = std::move(g);
    }
  }
}

const Communicator::ExpertGroups* Communicator::expert_groups(int stage) const { return expert_groups_.at(stage).get(); }

Communicator::Work Communicator::send(torch::Tensor& t, int dst, int tag, const std::string& what) {
  std::vector<torch::Tensor> v{t};
  try {
    return world_->send(v, dst, tag);
  } catch (const std::exception& e) {
    fail("could not start " + what, e, {dst});
  }
}

Communicator::Work Communicator::recv(torch::Tensor& t, int src, int tag, const std::string& what) {
  std::vector<torch::Tensor> v{t};
  try {
    return world_->recv(v, src, tag);
  } catch (const std::exception& e) {
    fail("could not start " + what, e, {src});
  }
}

Group* Communicator::stage_group(int stage) const { return stage_groups_.at(stage).get(); }

void Communicator::wait(const Work& work, const std::string& what, const std::vector<int>& peers) const {
  try {
    wait_work(*work, nccl_, std::chrono::milliseconds(launch_.timeout));
  } catch (const std::exception& e) {
    const int64_t step = liveness_ ? liveness_->step() : -1;  // said as the peers' places are, 1-based
    fail("gave up waiting at " + what + (step >= 0 ? " of step " + std::to_string(step + 1) : "") + " (timeout " +
             std::to_string(launch_.timeout.count()) + " s)",
         e, peers);
  }
}

void Communicator::wait(const Work& work, const std::string& what) const { wait(work, what, {}); }

void Communicator::fail(const std::string& doing, const std::exception& e, const std::vector<int>& peers) const {
  std::vector<int> everyone;
  if (peers.empty())
    for (int r = 0; r < launch_.world_size; ++r) everyone.push_back(r);
  const std::string found = liveness_ ? liveness_->explain(peers.empty() ? everyone : peers) : "";
  throw std::runtime_error("rank " + std::to_string(launch_.rank) + " " + doing + ": " + first_line(e.what()) +
                           (found.empty() ? "" : "; " + found));
}

void Communicator::report_failure(const std::string& message) const noexcept {
  if (liveness_) liveness_->report(message);
}

void Communicator::barrier(const std::string& what) { wait(world_->barrier(), what); }

std::vector<profiler::RoundTrip> Communicator::clock_round_trips(const std::string& round, int count) {
  auto key = [&](const char* what, int rank, int k) {
    return "parallax/clock/" + round + "/" + what + "/" + std::to_string(rank) + "/" + std::to_string(k);
  };
  std::vector<profiler::RoundTrip> trips;
  if (launch_.rank == 0) {
    for (int r = 1; r < launch_.world_size; ++r) {
      for (int k = 0; k < count; ++k) {
        store_->get(key("ask", r, k));  // blocks until rank r asks
        const std::string now = std::to_string(profiler::now_ns());
        store_->set(key("answer", r, k), std::vector<uint8_t>(now.begin(), now.end()));
      }
    }
    return trips;
  }
  for (int k = 0; k < count; ++k) {
    profiler::RoundTrip t;
    t.local_send = profiler::now_ns();
    store_->set(key("ask", launch_.rank, k), std::vector<uint8_t>{1});
    const auto answer = store_->get(key("answer", launch_.rank, k));
    t.local_receive = profiler::now_ns();
    t.reference = std::stoll(std::string(answer.begin(), answer.end()));
    trips.push_back(t);
  }
  return trips;
}

std::string Communicator::share_from_rank0(const std::string& key, const std::string& value) {
  if (launch_.rank == 0) {
    store_->set(key, std::vector<uint8_t>(value.begin(), value.end()));
    return value;
  }
  try {
    const auto bytes = store_->get(key);  // waits for rank 0, up to the store's timeout
    return std::string(bytes.begin(), bytes.end());
  } catch (const std::exception& e) {
    throw std::runtime_error("rank " + std::to_string(launch_.rank) + " gave up waiting for rank 0's " + key +
                             " (rank 0 holds the job's store): " + first_line(e.what()));
  }
}

std::vector<std::string> Communicator::gather_to_rank0(const std::string& mine) {
  const std::string key = "parallax/result/";
  if (launch_.rank != 0) {
    store_->set(key + std::to_string(launch_.rank), std::vector<uint8_t>(mine.begin(), mine.end()));
    // Stay until rank 0 has read everything: the store lives in rank 0's process.
    wait(world_->barrier(), "the end of the run");
    return {};
  }
  std::vector<std::string> all = {mine};
  for (int r = 1; r < launch_.world_size; ++r) {
    try {
      const auto bytes = store_->get(key + std::to_string(r));
      all.emplace_back(bytes.begin(), bytes.end());
    } catch (const std::exception& e) {
      throw std::runtime_error("rank 0 gave up waiting for rank " + std::to_string(r) + "'s results: " + e.what());
    }
  }
  wait(world_->barrier(), "the end of the run");
  return all;
}

}  // namespace parallax::exec
