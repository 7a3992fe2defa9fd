// Source checks of the CPU execution mode's contract: every kernel in kernels/cuda states its
// __launch_bounds__ through KILN_KERNEL_BOUNDS (the CPU mode reads them from there), no kernel is
// launched with <<<>>> outside the one launch helper (kernels/cuda/kernel_launch.h), and shared memory
// is declared through KILN_SHARED / KILN_DYNAMIC_SHARED (the CPU mode's checked buffers). And the
// ASan mutation: an out-of-bounds shared-memory write is reported by AddressSanitizer (sanitizer build).
#include <doctest/doctest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cuda_cpu/prelude.h"
#include "kernels/cuda/kernel_launch.h"

namespace fs = std::filesystem;

#if defined(__SANITIZE_ADDRESS__)
#define KILN_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define KILN_TEST_ASAN 1
#endif
#endif

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

TEST_CASE("CPU mode sources: every kernel states KILN_KERNEL_BOUNDS, launches only through launch_kernel") {
  int kernels = 0;
  const std::regex global(R"(__global__\s+void\s+(\w+))");
  for (const auto& e : fs::directory_iterator(fs::path(KILN_SOURCE_DIR) / "kernels/cuda")) {
    const std::string ext = e.path().extension().string(), name = e.path().filename().string();
    if (ext != ".cu" && ext != ".h" && ext != ".cuh") continue;
    const std::string text = read_text(e.path());
    for (std::sregex_iterator it(text.begin(), text.end(), global), end; it != end; ++it) {
      ++kernels;
      CHECK_MESSAGE((*it)[1].str() == "KILN_KERNEL_BOUNDS", name, ": a __global__ without KILN_KERNEL_BOUNDS");
    }
    if (name != "kernel_launch.h") {
      CHECK_MESSAGE(text.find("<<<") == std::string::npos, name, ": a <<<>>> launch outside launch_kernel");
      CHECK_MESSAGE(text.find("__shared__") == std::string::npos, name, ": __shared__ instead of KILN_SHARED");
    }
  }
  MESSAGE(kernels, " __global__ kernel templates in kernels/cuda");
  CHECK(kernels >= 48);
}

namespace {

__global__ void KILN_KERNEL_BOUNDS(32) oob_kernel(float* out) {
  KILN_SHARED(float, s, 32);
  s[threadIdx.x + 1] = 1.f;  // thread 31 writes s[32]: one past the end
  __syncthreads();
  out[threadIdx.x] = s[threadIdx.x];
}

const bool registered_oob = kiln::cuda_on_cpu::register_kernel_bounds("oob_kernel", 32);

}  // namespace

TEST_CASE("CPU mode mutation: an out-of-bounds shared-memory write is caught by AddressSanitizer") {
  REQUIRE(registered_oob);
#if defined(KILN_TEST_ASAN)
  // In a child process: ASan ends it, and its report names the overflow.
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    dup2(fds[1], 2);
    std::vector<float> out(32);
    kiln::cuda_on_cpu::launch_kernel("oob_kernel", oob_kernel, 1, 32, 0, nullptr, out.data());
    _exit(0);
  }
  close(fds[1]);
  std::string report;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) report.append(buf, (size_t)n);
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(!(WIFEXITED(status) && WEXITSTATUS(status) == 0));
  CHECK(report.find("heap-buffer-overflow") != std::string::npos);
  CHECK(report.find("oob_kernel") != std::string::npos);
#else
  (void)oob_kernel;
  MESSAGE("out-of-bounds check skipped: not an AddressSanitizer build (scripts/test.sh runs it in build-asan)");
#endif
}
