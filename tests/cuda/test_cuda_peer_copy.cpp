// A copy between two GPUs (issue 33, defect 1): it must wait for the work that produces the source on
// the source's stream, and the source's block must not be reused by the source device before the copy
// has read it. Needs two GPUs: with fewer each test prints one line and passes (NEVER RUN ON A GPU yet:
// no machine with two GPUs has run it).
#include <doctest/doctest.h>

#include <vector>

#include "engine/ops/ops.h"

#if defined(KILN_WITH_CUDA)
#include "support/cuda_test.h"
#include "kernels/cuda/runtime.h"

using namespace kiln;

TEST_CASE("cuda peer copy: waits for the source's producer and keeps its block until read") {
  if (kiln_test::skip_without_gpu()) return;
  if (cuda::device_count() < 2) {
    MESSAGE("cuda peer copy skipped: needs 2 GPUs, this machine has " << cuda::device_count());
    return;
  }
  const int64_t n = 1 << 22;
  Tensor dst;
  {
    Tensor src = full({n}, 1.0, DType::f32, Device::cuda(0));
    cuda::DeviceGuard g(0);
    cuda::sleep_on_stream(cuda::compute_stream(0), 200000);  // cuda:0 busy for ~0.2 s
    fill_(src, 7.0);                                           // queued behind the sleep
    dst = to_device(src, Device::cuda(1));
  }  // src freed on cuda:0's stream: its block is free for the next allocation there
  Tensor reuse = full({n}, -1.0, DType::f32, Device::cuda(0));
  const std::vector<float> got = kiln_test::back(dst).to_vector<float>();
  int64_t wrong = 0;
  for (float v : got) wrong += v != 7.0f;
  CHECK(wrong == 0);
  CHECK(kiln_test::back(reuse).to_vector<float>()[0] == -1.0f);
}
#endif
