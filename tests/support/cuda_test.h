// Shared by the cuda test suite (tests/cuda): the one visible line a test prints when no GPU can
// run it, the device the tests use, and the copy back to the host that every GPU-vs-CPU
// comparison starts from. Meaningful in a build with CUDA (kiln_tests_cuda: the real backend), and in
// the CPU-mode binary (kiln_tests_cuda_cpu, KILN_CUDA_TESTS_IN_CPU_MODE: the tests/cuda files listed in
// CMakeLists.txt run with kiln::cuda_on_cpu installed as cuda:0, tests/cuda_cpu/cuda_suite_in_cpu_mode.cpp).
// A GPU is "present" when the cuda backend in force (kernels/common/cuda_backend.h) counts a device, so
// the same test runs on a real GPU and in the CPU execution mode. Must not include kernels/cuda in the
// CPU-mode binary (its names are the real backend's, not the CPU mode's).
#pragma once
#if defined(KILN_WITH_CUDA) || defined(KILN_CUDA_TESTS_IN_CPU_MODE)
#include <doctest/doctest.h>

#include <string>

#include "engine/ops/ops.h"
#include "kernels/common/cuda_backend.h"
#if !defined(KILN_CUDA_TESTS_IN_CPU_MODE)
#include "kernels/cuda/runtime.h"
#endif

namespace kiln_test {

// The number of cuda devices the backend in force reports (0 without one).
inline int cuda_devices() {
  const kiln::CudaBackend* b = kiln::cuda_backend();
  if (!b || !b->runtime || !b->runtime->device_count) return 0;
  return b->runtime->device_count();
}

// True, after printing "cuda tests skipped: <reason>", when no GPU (nor the CPU mode) can run the test.
// In the CPU-mode binary the mode is installed for every tests/cuda case, so no device there is a failure
// (a test that did not run must not pass).
inline bool skip_without_gpu() {
  if (cuda_devices() > 0) return false;
#if defined(KILN_CUDA_TESTS_IN_CPU_MODE)
  FAIL("cuda tests in the CPU mode: no cuda device, the CPU execution mode is not installed");
#endif
#if !defined(KILN_CUDA_TESTS_IN_CPU_MODE)
  if (kiln::cuda_backend() == kiln::real_cuda_backend()) {
    MESSAGE("cuda tests skipped: " << kiln::cuda::unavailable_reason());
    return true;
  }
#endif
  MESSAGE("cuda tests skipped: the cuda backend in force ("
          << (kiln::cuda_backend() ? kiln::cuda_backend()->name : "none") << ") counts no device");
  return true;
}

// True when cuda:0 is the CPU execution mode (kiln_tests_cuda_cpu), not a GPU: a case that needs
// cuBLAS / cuDNN checks this and is left out there.
inline bool cpu_mode() {
#if defined(KILN_CUDA_TESTS_IN_CPU_MODE)
  return true;
#else
  return false;
#endif
}

inline const kiln::Device kGpu = kiln::Device::cuda(0);

// A detached host copy of t (the GPU result, to compare with the CPU reference).
inline kiln::Tensor back(const kiln::Tensor& t) { return kiln::to_device(t.detach(), kiln::Device::cpu()); }

}  // namespace kiln_test
#endif
