// Data-parallel training over TCP (label mpi): the 2 ranks as two "nodes", each in its own network
// namespace joined by a veth pair (ip netns, root with CAP_NET_ADMIN), mpirun in the first, its orted
// started in the second through a plm_rsh_agent script (`ip netns exec NS sh -c CMD` in place of ssh), the
// ranks talking over OpenMPI's TCP BTL on the veth subnet only (--mca btl tcp,self). And, on any machine,
// the TCP BTL over loopback (--mca btl tcp,self: not shared memory). Both must train the bytes of the
// shared-memory run (a sum of two addends is the same in either order), and the veth pair must have
// carried at least the gradients (the byte counters of its ends). The namespace test is skipped with a
// one-line reason where `ip netns add` is not permitted (not root, no CAP_NET_ADMIN, no iproute2).
#include <doctest/doctest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "engine/dist/process_group.h"
#include "engine/io/safetensors.h"
#include "support/cli/run_kiln.h"
#include "support/mpi_run.h"

using kiln_test::contains;
using kiln_test::kMpiEnv;
namespace fs = std::filesystem;

namespace {

const char* kNetNet = R"json({
  "format": "kiln-model-1",
  "description": "a small conv net without BatchNorm and dropout (data-parallel network tests)",
  "layers": [
    {"name": "conv1", "type": "conv2d", "out_channels": 16, "kernel": 3, "padding": 1},
    {"name": "relu1", "type": "relu"},
    {"name": "pool1", "type": "max_pool", "kernel": 2},
    {"name": "flatten", "type": "flatten"},
    {"name": "fc1", "type": "linear", "out_features": 64},
    {"name": "relu2", "type": "relu"},
    {"name": "fc2", "type": "linear", "out_features": "num_classes"}
  ]
}
)json";

struct Dirs {
  std::string dir, data, net;
};
const Dirs& dirs() {
  static const Dirs d = [] {
    Dirs x;
    x.dir = kiln_test::cli_temp_dir("mpi_network");
    x.data = x.dir + "/data";
    fs::create_directories(x.data);
    kiln_test::make_npy_folder(x.data, 49, 1, 8, 3);
    x.net = x.dir + "/net.json";
    std::ofstream(x.net) << kNetNet;
    return x;
  }();
  return d;
}

// 2 epochs of 4 steps (global batch 16); gradients: 16*9+16 + 256*64+64 + 64*3+3 floats (~67 KB) a step.
std::string args(const std::string& out) {
  const Dirs& d = dirs();
  return "train --model " + d.net + " --data " + d.data + " --epochs 2 --batch 8 --seed 9 --threads 1 --device cpu " +
         "--optimizer sgd --lr 0.05 --momentum 0.9 --out " + out + " --save " + out + "/w.safetensors";
}
constexpr int64_t kSteps = 8;
constexpr int64_t kGradientBytes = (16 * 9 + 16 + 256 * 64 + 64 + 64 * 3 + 3) * 4;

std::string kiln_binary() { return std::string(KILN_BINARY_DIR) + "/kiln "; }

bool same_bytes(const std::string& a, const std::string& b) {
  const kiln::SafetensorsFile fa = kiln::read_safetensors(a), fb = kiln::read_safetensors(b);
  if (fa.tensors.size() != fb.tensors.size()) return false;
  for (size_t i = 0; i < fa.tensors.size(); ++i)
    if (fa.tensors[i].name != fb.tensors[i].name || fa.tensors[i].array.bytes != fb.tensors[i].array.bytes) return false;
  return true;
}

// The shared-memory run (OpenMPI's default on one machine) both TCP runs must reproduce.
const std::string& shared_memory_weights() {
  static const std::string w = [] {
    const std::string out = dirs().dir + "/shm";
    auto r = kiln_test::run_command(std::string(kMpiEnv) + " timeout 120 mpirun -n 2 " + kiln_binary() + args(out) + " 2>&1");
    REQUIRE_MESSAGE(r.status == 0, r.output);
    return out + "/w.safetensors";
  }();
  return w;
}

int run_quiet(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()); }

// Bytes `dev` in namespace `ns` has received (rx) or sent (tx), from that namespace's /proc/net/dev:
// "dev: rx_bytes packets errs drop fifo frame compressed multicast tx_bytes ...".
int64_t counter(const std::string& ns, const std::string& dev, bool sent) {
  const std::string file = dirs().dir + "/net_dev.txt";
  if (std::system(("ip netns exec " + ns + " cat /proc/net/dev > " + file + " 2>/dev/null").c_str()) != 0) return -1;
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string name = line.substr(0, colon);
    name.erase(0, name.find_first_not_of(' '));
    if (name != dev) continue;
    std::istringstream fields(line.substr(colon + 1));
    int64_t v[9] = {};
    for (int64_t& x : v) fields >> x;
    return sent ? v[8] : v[0];
  }
  return -1;
}

// Two namespaces A and B, a veth pair between them (10.N.0.1 in A, 10.N.0.2 in B); removed at the end.
struct TwoNodes {
  std::string a, b, dev_a, dev_b, ip_a, ip_b, subnet, reason;
  bool ok = false;
  TwoNodes() {
    const std::string tag = std::to_string(::getpid() % 100000);
    a = "kiln_na" + tag;
    b = "kiln_nb" + tag;
    dev_a = "kva" + tag;  // interface names: at most 15 characters
    dev_b = "kvb" + tag;
    const std::string net = "10.211." + std::to_string(::getpid() % 250 + 1) + ".";
    ip_a = net + "1";
    ip_b = net + "2";
    subnet = net + "0/24";
    if (std::system("command -v ip >/dev/null 2>&1") != 0) {
      reason = "no `ip` command (iproute2)";
      return;
    }
    if (run_quiet("ip netns add " + a) != 0) {
      reason = "`ip netns add` is not permitted here (needs root with CAP_NET_ADMIN)";
      return;
    }
    const bool made = run_quiet("ip netns add " + b) == 0 &&
                      run_quiet("ip link add " + dev_a + " type veth peer name " + dev_b) == 0 &&
                      run_quiet("ip link set " + dev_a + " netns " + a) == 0 &&
                      run_quiet("ip link set " + dev_b + " netns " + b) == 0 &&
                      run_quiet("ip -n " + a + " addr add " + ip_a + "/24 dev " + dev_a) == 0 &&
                      run_quiet("ip -n " + b + " addr add " + ip_b + "/24 dev " + dev_b) == 0 &&
                      run_quiet("ip -n " + a + " link set " + dev_a + " up") == 0 &&
                      run_quiet("ip -n " + b + " link set " + dev_b + " up") == 0 &&
                      run_quiet("ip -n " + a + " link set lo up") == 0 && run_quiet("ip -n " + b + " link set lo up") == 0;
    if (!made) reason = "a veth pair between two network namespaces could not be set up";
    ok = made;
  }
  ~TwoNodes() {
    run_quiet("ip netns del " + a);  // deleting a namespace deletes its end of the veth pair, and so the pair
    run_quiet("ip netns del " + b);
  }
};

}  // namespace

TEST_CASE("mpi: 2 ranks in two network namespaces (a veth pair, TCP BTL) train the bytes of the shared-memory run") {
  if (!kiln_test::mpi_can_run()) return;
  TwoNodes nodes;
  if (!nodes.ok) {
    MESSAGE("skipped: ", nodes.reason);
    return;
  }
  shared_memory_weights();
  // mpirun's "ssh": `AGENT HOST CMD...` runs CMD in HOST's namespace.
  const std::string agent = dirs().dir + "/netns_agent.sh";
  std::ofstream(agent) << "#!/bin/sh\nhost=$1; shift\ncase \"$host\" in " << nodes.ip_a << ") ns=" << nodes.a << ";; "
                       << nodes.ip_b << ") ns=" << nodes.b << ";; *) echo \"netns_agent: unknown host $host\" >&2; "
                       << "exit 1;; esac\nexec ip netns exec \"$ns\" /bin/sh -c \"$*\"\n";
  fs::permissions(agent, fs::perms::owner_all);
  const int64_t sent_before = counter(nodes.a, nodes.dev_a, true), got_before = counter(nodes.a, nodes.dev_a, false);
  const std::string out = dirs().dir + "/netns";
  const std::string cmd = std::string(kMpiEnv) + " timeout 120 ip netns exec " + nodes.a + " mpirun -n 2 --host " + nodes.ip_a +
                          "," + nodes.ip_b + " --mca plm_rsh_agent " + agent + " --mca oob_tcp_if_include " +
                          nodes.subnet + " --mca btl tcp,self --mca btl_tcp_if_include " + nodes.subnet + " " + kiln_binary() +
                          args(out) + " 2>&1";
  auto r = kiln_test::run_command(cmd);
  REQUIRE_MESSAGE(r.status == 0, r.output);
  CHECK(contains(r.output, "data-parallel: 2 ranks (mpi)"));
  CHECK(same_bytes(shared_memory_weights(), out + "/w.safetensors"));
  // Each step's all-reduce moved every gradient across the pair (at least once each way).
  const int64_t sent = counter(nodes.a, nodes.dev_a, true) - sent_before,
                got = counter(nodes.a, nodes.dev_a, false) - got_before;
  MESSAGE("veth ", nodes.dev_a, ": sent ", sent, " bytes, received ", got, " (gradients: ", kSteps * kGradientBytes,
          " bytes over the run)");
  CHECK(sent_before >= 0);
  CHECK(sent >= kSteps * kGradientBytes);
  CHECK(got >= kSteps * kGradientBytes);
}

TEST_CASE("mpi: 2 ranks over OpenMPI's TCP BTL on loopback (not shared memory) train the bytes of the shared-memory run") {
  if (!kiln_test::mpi_can_run()) return;
  shared_memory_weights();
  const std::string out = dirs().dir + "/tcp_loopback";
  auto r = kiln_test::run_command(std::string(kMpiEnv) + " timeout 120 mpirun -n 2 --mca btl tcp,self --mca " +
                                  "btl_tcp_if_include lo " + kiln_binary() + args(out) + " 2>&1");
  REQUIRE_MESSAGE(r.status == 0, r.output);
  CHECK(same_bytes(shared_memory_weights(), out + "/w.safetensors"));
  // The communication times: per epoch on the log, over the run in the ledger's end record.
  CHECK(contains(r.output, "data-parallel: communication per step (mean of 4): "));
  const nlohmann::json end = kiln_test::last_ledger_line(out + "/runs.jsonl");
  REQUIRE_MESSAGE(end.contains("data_parallel"), end.dump());
  const nlohmann::json& dp = end["data_parallel"];
  CHECK(dp.value("steps", 0) == kSteps);
  CHECK(dp.value("all_reduce_s", -1.0) > 0);  // 8 all-reduces over TCP take time
  CHECK(dp.value("comm_wait_s", -1.0) >= 0);
  CHECK(dp.value("comm_wait_s", -1.0) < 60);
}
