// Shared by the cuda test suite (tests/cuda): the one visible line a test prints when no GPU can
// run it, the device the tests use, and the copy back to the host that every GPU-vs-CPU
// comparison starts from. Only meaningful in a build with CUDA.
#pragma once
#if defined(KILN_WITH_CUDA)
#include <doctest/doctest.h>

#include "engine/ops/ops.h"
#include "kernels/cuda/runtime.h"

namespace kiln_test {

// True, after printing "cuda tests skipped: <reason>", when no GPU can run the test.
inline bool skip_without_gpu() {
  if (kiln::cuda::device_count() > 0) return false;
  MESSAGE("cuda tests skipped: " << kiln::cuda::unavailable_reason());
  return true;
}

inline const kiln::Device kGpu = kiln::Device::cuda(0);

// A detached host copy of t (the GPU result, to compare with the CPU reference).
inline kiln::Tensor back(const kiln::Tensor& t) { return kiln::to_device(t.detach(), kiln::Device::cpu()); }

}  // namespace kiln_test
#endif
