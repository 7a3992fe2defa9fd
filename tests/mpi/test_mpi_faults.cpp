// Data-parallel faults under mpirun (label mpi): a rank that hangs (it stops itself with SIGSTOP before a
// step: KILN_TEST_HANG_RANK=R:S, tools/train_loop.cpp) or dies (SIGKILL: KILN_TEST_KILL_RANK=R:S) must end
// the job within --dist-timeout plus a margin, with one message naming the stalled rank, leaving no
// process behind; and the last training-state file written before the fault must be whole: resumed by 2
// ranks it ends on the bytes of an uninterrupted run. A small conv net without BatchNorm and dropout
// (per-rank state and draws would make "the bytes of an uninterrupted run" depend on the ranks' streams).
// Skipped, with a message, in a build without MPI or where mpirun is missing.
#include <doctest/doctest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "engine/dist/process_group.h"
#include "engine/io/safetensors.h"
#include "support/cli/run_kiln.h"
#include "support/mpi_run.h"

using kiln_test::contains;
using kiln_test::kMpiEnv;
namespace fs = std::filesystem;

namespace {

const char* kFaultNet = R"json({
  "format": "kiln-model-1",
  "description": "a small conv net without BatchNorm and dropout (data-parallel fault tests)",
  "layers": [
    {"name": "conv1", "type": "conv2d", "out_channels": 8, "kernel": 3, "padding": 1},
    {"name": "relu1", "type": "relu"},
    {"name": "pool1", "type": "max_pool", "kernel": 2},
    {"name": "flatten", "type": "flatten"},
    {"name": "fc1", "type": "linear", "out_features": "num_classes"}
  ]
}
)json";

struct Dirs {
  std::string dir, data, net;
};
const Dirs& dirs() {
  static const Dirs d = [] {
    Dirs x;
    x.dir = kiln_test::cli_temp_dir("mpi_faults");
    x.data = x.dir + "/data";
    fs::create_directories(x.data);
    kiln_test::make_npy_folder(x.data, 49, 1, 8, 3);  // 49 samples: 4 global steps of 16 an epoch (the last 1 row)
    x.net = x.dir + "/net.json";
    std::ofstream(x.net) << kFaultNet;
    return x;
  }();
  return d;
}

std::string args(const std::string& out, const std::string& extra) {
  const Dirs& d = dirs();
  return "train --model " + d.net + " --data " + d.data + " --epochs 3 --batch 8 --seed 5 --threads 1 --device cpu " +
         "--optimizer sgd --lr 0.05 --momentum 0.9 --out " + out + " --save " + out + "/w.safetensors " + extra;
}

struct Timed {
  kiln_test::CliRun run;
  double seconds = 0;
};
// `PREFIX mpirun -n 2 kiln ARGS` under `timeout 120` (a hang the code under test misses fails, not blocks).
Timed run2(const std::string& a, const std::string& prefix = "") {
  const auto t0 = std::chrono::steady_clock::now();
  Timed t;
  t.run = kiln_test::run_command(std::string(kMpiEnv) + " " + prefix + " timeout 120 mpirun -n 2 " +
                                 std::string(KILN_BINARY_DIR) + "/kiln " + a + " 2>&1");
  t.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return t;
}

bool same_bytes(const std::string& a, const std::string& b) {
  const kiln::SafetensorsFile fa = kiln::read_safetensors(a), fb = kiln::read_safetensors(b);
  if (fa.tensors.size() != fb.tensors.size()) return false;
  for (size_t i = 0; i < fa.tensors.size(); ++i)
    if (fa.tensors[i].name != fb.tensors[i].name || fa.tensors[i].array.bytes != fb.tensors[i].array.bytes) return false;
  return true;
}

// The uninterrupted run every resumed one must end on.
const std::string& reference() {
  static const std::string w = [] {
    const std::string out = dirs().dir + "/reference";
    const Timed r = run2(args(out, ""));
    REQUIRE_MESSAGE(r.run.status == 0, r.run.output);
    return out + "/w.safetensors";
  }();
  return w;
}

// Resumes `state` with 2 ranks; the final weights must be the reference's bytes.
void check_resumes_to_reference(const std::string& state, const std::string& out, const char* expect_at) {
  REQUIRE(fs::exists(state));
  const Timed r = run2(args(out, "--resume " + state));
  REQUIRE_MESSAGE(r.run.status == 0, r.run.output);
  CHECK_MESSAGE(contains(r.run.output, expect_at), r.run.output);
  CHECK(same_bytes(reference(), out + "/w.safetensors"));
}

int leftover_ranks(const std::string& out) {
  // A rank of this test's job still running (stopped or not): its command line names the --out folder.
  return std::system(("pgrep -f -- '[-]-out " + out + " ' >/dev/null 2>&1").c_str()) == 0 ? 1 : 0;
}

}  // namespace

TEST_CASE("mpi: a rank that hangs (SIGSTOP) ends the job within --dist-timeout, naming it, and the last state file resumes to the bytes of an uninterrupted run") {
  if (!kiln_test::mpi_can_run()) return;
  reference();
  const std::string out = dirs().dir + "/hang";
  // Rank 1 stops itself before step 7; rank 0 wrote the state of step 6 and waits in step 7's first
  // all-reduce: after 4 s it names rank 1 and aborts the job (mpirun ends the stopped rank too).
  const Timed r = run2(args(out, "--checkpoint-every 3steps --dist-timeout 4"), "KILN_TEST_HANG_RANK=1:7");
  MESSAGE("hang: the job ended after ", r.seconds, " s (status ", r.run.status, ")");
  CHECK(r.run.status != 0);
  CHECK(r.run.status != 124);  // not the test's own timeout
  CHECK(r.seconds < 4 + 40);
  CHECK_MESSAGE(contains(r.run.output, "kiln: error: rank 0 of 2: dist: MPI_Iallreduce of 5 elements (step 7) did not "
                                       "complete within 4 s: rank 1 died or hangs (--dist-timeout 4)"),
                r.run.output);
  CHECK(leftover_ranks(out) == 0);
  check_resumes_to_reference(out + "/checkpoint.safetensors", dirs().dir + "/hang_resumed", "step 6");
}

TEST_CASE("mpi: a rank killed with SIGKILL ends the job (mpirun names it), and the last state file resumes to the bytes of an uninterrupted run") {
  if (!kiln_test::mpi_can_run()) return;
  reference();
  const std::string out = dirs().dir + "/killed";
  const Timed r = run2(args(out, "--checkpoint-every 3steps --dist-timeout 4"), "KILN_TEST_KILL_RANK=1:7");
  MESSAGE("kill: the job ended after ", r.seconds, " s (status ", r.run.status, ")");
  CHECK(r.run.status != 0);
  CHECK(r.run.status != 124);
  CHECK(r.seconds < 4 + 40);
  CHECK_MESSAGE(contains(r.run.output, "rank 1") , r.run.output);
  CHECK(leftover_ranks(out) == 0);
  // Rank 0 may have been ended while writing step 6's state: the file is then step 3's (writes are atomic).
  check_resumes_to_reference(out + "/checkpoint.safetensors", dirs().dir + "/killed_resumed", ", step ");
}
