// The engine-level cuda tests (tests/cuda) in the CPU execution mode: kiln_tests_cuda_cpu compiles the
// tests/cuda files CMakeLists.txt lists (KILN_CUDA_TESTS_IN_CPU_MODE) a second time, and this listener
// installs kiln::cuda_on_cpu as cuda:0 with --kernels kiln for the duration of each of their test cases
// (a test case registered from a file under tests/cuda/), so the same test runs on a GPU (kiln_tests_cuda,
// tools/gpu-check) and here on the CPU. cuBLAS / cuDNN are never asked for: --kernels kiln routes the
// GEMMs, convolutions and bias to kiln's kernels, and a vendor call would throw naming itself. The
// tests/cuda_cpu cases install the mode themselves and are left alone. Must not hold a cuda:0 tensor
// past test_case_end (the guard drops cuda:0's allocator).
#include <doctest/doctest.h>

#include <cstring>
#include <memory>

#include "kernels/common/cuda_backend.h"
#include "kernels/cuda_cpu/install.h"

namespace {

std::unique_ptr<kiln::CudaBackendInstall> g_installed;

bool from_cuda_suite(const doctest::TestCaseData& tc) {
  const char* f = tc.m_file.c_str();
  return std::strstr(f, "tests/cuda/") != nullptr;
}

struct CudaSuiteInCpuMode : doctest::IReporter {
  explicit CudaSuiteInCpuMode(const doctest::ContextOptions&) {}
  void report_query(const doctest::QueryData&) override {}
  void test_run_start() override {}
  void test_run_end(const doctest::TestRunStats&) override {}
  void test_case_start(const doctest::TestCaseData& tc) override {
    if (!from_cuda_suite(tc)) return;
    g_installed = kiln::cuda_on_cpu::install_as_cuda_backend();
    kiln::cuda_backend_or_throw().set_kernels_kiln(true);
  }
  void test_case_reenter(const doctest::TestCaseData&) override {}
  void test_case_end(const doctest::CurrentTestCaseStats&) override {
    if (!g_installed) return;
    kiln::cuda_backend_or_throw().set_kernels_kiln(false);
    g_installed.reset();
  }
  void test_case_exception(const doctest::TestCaseException&) override {}
  void subcase_start(const doctest::SubcaseSignature&) override {}
  void subcase_end() override {}
  void log_assert(const doctest::AssertData&) override {}
  void log_message(const doctest::MessageData&) override {}
  void test_case_skipped(const doctest::TestCaseData&) override {}
};

}  // namespace

DOCTEST_REGISTER_LISTENER("kiln_cuda_suite_in_cpu_mode", 2, CudaSuiteInCpuMode);
