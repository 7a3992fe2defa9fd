// NCCL on one GPU: a communicator of one rank all-reduces with itself (the sum over one rank is the
// identity, bit for bit, NaN, inf, -0 and subnormals included), and the data-parallel device buckets'
// communicator (engine/train/device_buckets.h) over a one-process group leaves a bucket unchanged
// (DataParallel's pack/unpack around it are device-generic tensor ops, run on the CPU by tests/unit and
// tests/mpi; on CUDA tensors they need two GPUs). This is tools/gpu-check's NCCL row; the 2-rank equality on GPUs needs a
// machine with two GPUs (tests/mpi runs it on the CPU). Without a GPU each test prints one line
// "cuda tests skipped: <reason>" and passes.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "engine/dist/process_group.h"
#include "engine/ops/ops.h"

#if defined(KILN_WITH_CUDA)
#include "engine/train/device_buckets.h"
#include "kernels/cuda/nccl_comm.h"
#include "support/cuda_test.h"

using namespace kiln;
using kiln_test::back;
using kiln_test::kGpu;
using kiln_test::skip_without_gpu;

namespace {

// Adversarial values: NaN, +-inf, -0, the largest finite, subnormals, and a ramp.
std::vector<float> adversarial(int64_t n) {
  std::vector<float> v((size_t)n);
  const float special[] = {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity(), -0.0f, std::numeric_limits<float>::max(),
                           std::numeric_limits<float>::denorm_min(), -1e-40f, 3.0f};
  for (int64_t i = 0; i < n; ++i) v[(size_t)i] = i < 8 ? special[i] : (float)((i * 7919) % 1000 - 500) * 0.37f;
  return v;
}

bool same_bits(const std::vector<float>& a, const float* b) {
  return std::memcmp(a.data(), b, a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("nccl: one rank all-reduces with itself, bit for bit (NaN, inf, -0, subnormals)") {
  if (skip_without_gpu()) return;
  REQUIRE_MESSAGE(cuda::built_with_nccl(), "this CUDA build has no NCCL");
  MESSAGE(cuda::nccl_version());
  const cuda::NcclId id = cuda::make_nccl_id();
  cuda::NcclComm comm(1, 0, id, 0);
  for (int64_t n : {int64_t{1}, int64_t{8}, int64_t{1000}, int64_t{(1 << 20) + 3}}) {
    const std::vector<float> v = adversarial(n);
    Tensor h = empty({n}, DType::f32, Device::cpu());
    std::memcpy(h.data<float>(), v.data(), v.size() * 4);
    Tensor d = to_device(h, kGpu);
    comm.all_reduce_sum(d.data<float>(), n, "test_cuda_nccl");
    comm.wait("test_cuda_nccl");
    const Tensor r = back(d);
    CHECK_MESSAGE(same_bits(v, r.data<float>()), "n = " << n);
  }
}

TEST_CASE("nccl: the data-parallel device buckets' communicator over one process leaves a bucket as it was") {
  if (skip_without_gpu()) return;
  REQUIRE(cuda::built_with_nccl());
  std::unique_ptr<dist::ProcessGroup> group = dist::make_single_process_group();
  train::DeviceBuckets buckets(*group, kGpu);
  for (int64_t n : {int64_t{3}, int64_t{315}, int64_t{(1 << 18) + 5}}) {
    const std::vector<float> v = adversarial(n);
    Tensor h = empty({n}, DType::f32, Device::cpu());
    std::memcpy(h.data<float>(), v.data(), v.size() * 4);
    Tensor d = to_device(h, kGpu);
    const uint64_t version = d.version();
    buckets.all_reduce(d, 0);
    CHECK(d.version() > version);
    CHECK_MESSAGE(same_bits(v, back(d).data<float>()), "n = " << n);
  }
}

#endif
