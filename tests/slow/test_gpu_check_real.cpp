// tools/gpu-check over this build's own programs (kiln_tests_cuda, the GPU benchmarks, kiln) on a machine
// with no GPU, with only nvidia-smi faked (it lists an H200): what kiln's real programs print when there is no
// device must turn every GPU row into FAIL, SKIP or "not run", and the exit status non-zero. Programs this
// build lacks show as FAIL/not run too. No configure, no build (--prebuilt); seconds to a minute, mostly one
// process per cuda test case.
#include <doctest/doctest.h>

#include <sys/wait.h>

#include <cstdio>
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
