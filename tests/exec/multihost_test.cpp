// Two hosts on one machine: two network namespaces joined by a veth pair, with addresses of a
// private range (10.250.0.0/24) that exist only inside them. Rank 0 runs in one namespace and
// rank 1 in the other, joined as torchrun would join them (RANK, WORLD_SIZE, LOCAL_RANK,
// MASTER_ADDR on rank 0's veth, MASTER_PORT), with Gloo bound to each side's veth through
// GLOO_SOCKET_IFNAME. Neither rank can reach the other over loopback, so the job trains only if
// the store and every Gloo pair cross the veth; its losses must equal a local run's.
//
// Creating namespaces needs root (CAP_NET_ADMIN) and iproute2; where either is missing the test
// says so in one line and passes without running.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "exec/launcher.hpp"
#include "tests/test_util.hpp"

namespace {

namespace fs = std::filesystem;

bool sh(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0; }

std::string slurp(const fs::path& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// Two namespaces "pxa<pid>" and "pxb<pid>" with a veth pair between them, removed (with the veth,
// which dies with its namespace) when this goes out of scope.
struct TwoHosts {
  const std::string tag = std::to_string(getpid());
  const std::string a = "pxa" + tag, b = "pxb" + tag;  // namespace names, also the veth ends' names
  const std::string addr_a = "10.250.0.1", addr_b = "10.250.0.2";
  bool ok = false;
  std::string why;

  TwoHosts() {
    if (geteuid() != 0) {
      why = "not root: creating network namespaces needs CAP_NET_ADMIN";
      return;
    }
    if (!sh("ip -V")) {
      why = "iproute2's ip is not installed (scripts/setup.sh installs it)";
      return;
    }
    if (!sh("ip netns add " + a) || !sh("ip netns add " + b)) {
      why = "this machine does not let us create network namespaces (ip netns add failed)";
      return;
    }
    ok = sh("ip link add " + a + " netns " + a + " type veth peer name " + b + " netns " + b) &&
         sh("ip -n " + a + " addr add " + addr_a + "/24 dev " + a) &&
         sh("ip -n " + b + " addr add " + addr_b + "/24 dev " + b) && sh("ip -n " + a + " link set " + a + " up") &&
         sh("ip -n " + b + " link set " + b + " up") && sh("ip -n " + a + " link set lo up") &&
         sh("ip -n " + b + " link set lo up");
    if (!ok) why = "could not join the namespaces with a veth pair";
  }
  ~TwoHosts() {
    sh("ip netns del " + a);
    sh("ip netns del " + b);
  }

  // `parallax run <args> --json` as rank `rank` of 2 in its namespace, with its stderr in `err`.
  std::string rank_command(int rank, const std::string& args, const fs::path& err) const {
    const std::string& ns = rank == 0 ? a : b;
    return "ip netns exec " + ns + " env RANK=" + std::to_string(rank) +
           " WORLD_SIZE=2 LOCAL_RANK=0 MASTER_ADDR=" + addr_a + " MASTER_PORT=29500 GLOO_SOCKET_IFNAME=" + ns +
           " OMP_NUM_THREADS=1 " + PARALLAX_BINARY + " run " + args + " 2>" + err.string();
  }
};

std::vector<double> losses_of(const std::string& json_text) {
  const auto report = nlohmann::json::parse(json_text);
  std::vector<double> out;
  for (const auto& s : report.at("steps")) out.push_back(s.at("loss"));
  return out;
}

}  // namespace

TEST_CASE("exec: ranks in two network namespaces train with the local run's losses", "[exec][run][multihost]") {
  INFO("Fashion-MNIST is missing: scripts/setup.sh installs dataset-fashion-mnist");
  REQUIRE(fs::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz"));
  TwoHosts hosts;
  if (!hosts.ok) parallax::test::skip("netns", hosts.why);
  const fs::path dir = fs::temp_directory_path() / ("parallax_multihost_" + hosts.tag);
  fs::create_directories(dir);
  const std::string scenario = std::string(PARALLAX_SOURCE_DIR) + "/scenarios/mlp-fashion-mnist-ddp2.yaml";
  // DDP (all-reduce) and a 1F1B pipeline (point-to-point): both kinds of traffic cross the veth.
  for (const std::string layout : {"--set parallel.data=2 --set parallel.pipeline=1",
                                   "--set parallel.data=1 --set parallel.pipeline=2 --set parallel.chunks=4 "
                                   "--set parallel.schedule=1f1b --set data.batch_size=128"}) {
    const std::string args = scenario + " " + layout +
                             " --set data.steps=3 --set model.layers=3 --set model.hidden=32 --timeout 30 --json";
    const auto local = parallax::test::run_parallax("run " + args);
    REQUIRE(local.code == 0);

    // Rank 1 in the background; rank 0 in the foreground prints the job's JSON.
    const std::string cmd = "(" + hosts.rank_command(1, args, dir / "rank1.err") + " >/dev/null &) ; " +
                            hosts.rank_command(0, args, dir / "rank0.err");
    const auto remote = parallax::test::run_shell(cmd);
    INFO(layout << "\nrank 0 stderr:\n" << slurp(dir / "rank0.err") << "\nrank 1 stderr:\n" << slurp(dir / "rank1.err"));
    REQUIRE(remote.code == 0);
    const auto want = losses_of(local.out), got = losses_of(remote.out);
    REQUIRE(got.size() == want.size());
    REQUIRE(want.size() == 3);
    for (size_t i = 0; i < want.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-5));
  }
  fs::remove_all(dir);
}

TEST_CASE("exec: GLOO_SOCKET_IFNAME naming a missing interface is a clear error", "[exec][run][multihost]") {
  // Rank 0 of a world of 1: the rendezvous completes at once, then Gloo must refuse the device.
  const std::string scenario = std::string(PARALLAX_SOURCE_DIR) + "/scenarios/mlp-fashion-mnist-ddp2.yaml";
  const std::string env = "RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT=" +
                          std::to_string(parallax::exec::free_port()) + " GLOO_SOCKET_IFNAME=no-such-if0";
  const auto r = parallax::test::run_parallax(
      "run " + scenario + " --set parallel.data=1 --set data.steps=1 --timeout 10", env, true);
  CHECK(r.code == 1);
  CHECK_THAT(r.out, Catch::Contains("GLOO_SOCKET_IFNAME names interface 'no-such-if0'"));
}
