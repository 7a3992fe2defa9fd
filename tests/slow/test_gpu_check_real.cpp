// tools/gpu-check over this build's own programs (kiln_tests_cuda, the GPU benchmarks, kiln) on a machine
// with no GPU, with only nvidia-smi faked (it lists an H200): what kiln's real programs print when there is no
// device must turn every GPU row into FAIL, SKIP or "not run", and the exit status non-zero. Programs this
// build lacks show as FAIL/not run too. No configure, no build (--prebuilt); seconds to a minute, mostly one
// process per cuda test case.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "support/shell.h"

namespace {

using Run = kiln_test::ShellRun;
using kiln_test::read_text;
using kiln_test::run_shell;

}  // namespace

TEST_CASE("gpu-check over the real programs of this build without a GPU: no row ok and cuda tests FAIL with exit 1") {
  const std::string src = KILN_SOURCE_DIR, bin = KILN_BINARY_DIR, d = bin + "/gpu-check-real-test";
  // Only the fake nvidia-smi (and nvcc where this machine has none) is put on PATH: python3, compute-sanitizer
  // and everything else are this machine's.
  const Run mk = run_shell("rm -rf '" + d + "' && bash '" + src + "/tests/support/gpu_check/make_fakes.sh' '" + d +
                           "/fakes' && mkdir -p '" + d + "/bin' && cp '" + d + "/fakes/bin/nvidia-smi' '" + d + "/bin/' && " +
                           "{ command -v nvcc || [ -x /usr/local/cuda/bin/nvcc ] || cp '" + d + "/fakes/bin/nvcc' '" + d +
                           "/bin/'; }");
  REQUIRE_MESSAGE(mk.status == 0, mk.out);
  const Run r = run_shell("env PATH='" + d + "/bin':\"$PATH\" KILN_GPU_CHECK_OUT='" + d + "/out' bash '" + src +
                          "/tools/gpu-check' --prebuilt '" + bin + "'");
  INFO(r.out);
  CHECK(r.status == 1);
  std::ifstream f(d + "/out/table.txt");
  REQUIRE(f.good());
  std::string line;
  bool body = false, saw_cuda_tests = false;
  int rows = 0;
  while (std::getline(f, line)) {
    if (line.rfind("check ", 0) == 0) { body = true; continue; }
    if (!body || line.size() < 47 || line.rfind("total ", 0) == 0 || line.rfind("====", 0) == 0) continue;
    ++rows;
    const std::string result = line.substr(37, 9);
    INFO(line);
    CHECK(result.rfind("ok ", 0) != 0);
    if (line.rfind("cuda tests ", 0) == 0) {
      saw_cuda_tests = true;
      CHECK(result.rfind("FAIL", 0) == 0);
    }
  }
  CHECK(rows >= 20);
  CHECK(saw_cuda_tests);
}

TEST_CASE("gpu-check --sanitize over this build's kiln_tests_cuda without a GPU: every case runs, every row FAIL") {
  // A compute-sanitizer stand-in that records its command and runs the real test program under it: the
  // memcheck, synccheck and initcheck rows must run every case of kiln_tests_cuda, racecheck's file filter
  // must select some (a pattern that matched no file would run none), and the skip line the real cases
  // print without a GPU must make each row FAIL.
  const std::string src = KILN_SOURCE_DIR, bin = KILN_BINARY_DIR, d = bin + "/gpu-check-real-sanitize-test";
  const Run mk = run_shell("rm -rf '" + d + "' && bash '" + src + "/tests/support/gpu_check/make_fakes.sh' '" + d +
                           "/fakes' && mkdir -p '" + d + "/bin' && cp '" + d + "/fakes/bin/nvidia-smi' '" + d +
                           "/fakes/bin/compute-sanitizer' '" + d + "/bin/' && { command -v nvcc || [ -x " +
                           "/usr/local/cuda/bin/nvcc ] || cp '" + d + "/fakes/bin/nvcc' '" + d + "/bin/'; }");
  REQUIRE_MESSAGE(mk.status == 0, mk.out);
  // "[doctest] unskipped test cases passing the current filters: N"
  const Run list = run_shell("'" + bin + "/kiln_tests_cuda' --count");
  const size_t colon = list.out.rfind(':');
  const int n_all = list.status == 0 && colon != std::string::npos ? std::atoi(list.out.c_str() + colon + 1) : 0;
  if (n_all == 0) {
    MESSAGE("kiln_tests_cuda has no cases in this build (CPU-only): nothing to run under the stand-in");
    return;
  }
  const Run r = run_shell("env PATH='" + d + "/bin':\"$PATH\" FAKE_SANITIZER=record FAKE_SANITIZER_LOG='" + d +
                          "/cmds.txt' KILN_GPU_CHECK_OUT='" + d + "/out' bash '" + src + "/tools/gpu-check' --sanitize " +
                          "--prebuilt '" + bin + "'");
  INFO(r.out);
  CHECK(r.status == 1);
  CHECK(n_all > 10);
  for (const char* tool : {"memcheck", "racecheck", "synccheck", "initcheck"}) {
    INFO(tool);
    const std::string log = read_text(d + "/out/compute_sanitizer_" + tool + ".log");
    const size_t at = log.rfind("test cases:");
    REQUIRE(at != std::string::npos);
    const int ran = std::stoi(log.substr(at + 11));
    if (std::string(tool) == "racecheck") {
      CHECK(ran > 0);
      CHECK(ran < n_all);
    } else {
      CHECK(ran == n_all);
    }
    CHECK(log.find("cuda tests skipped:") != std::string::npos);
  }
  const std::string table = read_text(d + "/out/table.txt");
  for (const char* row : {"compute-sanitizer memcheck ", "compute-sanitizer racecheck ", "compute-sanitizer synccheck ",
                          "compute-sanitizer initcheck "}) {
    const size_t at = table.find(row);
    REQUIRE(at != std::string::npos);
    CHECK(table.substr(at + 37, 4) == "FAIL");
  }
}
