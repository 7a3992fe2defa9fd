// Gradient buckets in device memory, summed over the ranks with NCCL: the CUDA half of
// data_parallel.h (whose host buckets go through MPI). Each bucket is one f32 tensor on the model's
// device from kiln's caching allocator (tagged grad, so `kiln mem` and the memory report count it):
//   bucket k : (numel_k + P_k,)  the bucket's gradients back to back, then one "defined" flag per
//                                 parameter (1 where this rank has the gradient, 0 where it counted zeros)
// pack/all-reduce/unpack run in the device's compute-stream order: copies on the compute stream, the
// NCCL all-reduce on the communicator's stream between two events (kernels/cuda/nccl_comm.h); the host
// never waits. The NCCL unique id is made on rank 0 and broadcast through the process group (MPI).
// One rank alone all-reduces with itself (a single-GPU machine, tools/gpu-check's NCCL row).
// Built only with the CUDA backend; must not know the CLI, files or data.
// NEVER RUN ON A GPU: no machine with a GPU has executed this file yet (see the README).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "engine/dist/process_group.h"
#include "engine/tensor/tensor.h"

namespace kiln::cuda {
class NcclComm;
}

namespace kiln::train {

class DeviceBuckets {
 public:
  // params: the model's parameters; plan: each bucket's indices into params (data_parallel.h's plan),
  // every one an f32 parameter on the same CUDA device.
  DeviceBuckets(dist::ProcessGroup& group, const std::vector<Tensor>& params,
                const std::vector<std::vector<size_t>>& plan);
  ~DeviceBuckets();
  DeviceBuckets(const DeviceBuckets&) = delete;
  DeviceBuckets& operator=(const DeviceBuckets&) = delete;

  // Every bucket's gradients summed over the ranks, in bucket order (a gradient undefined on a rank
  // counts as zeros; after the sum it is defined where any rank defined it).
  void all_reduce();
  int64_t bytes() const;  // device bytes the buckets hold

 private:
  const std::vector<Tensor>& params_;
  std::vector<std::vector<size_t>> plan_;
  std::vector<Tensor> buffers_;
  std::unique_ptr<cuda::NcclComm> comm_;
};

// The bucket tensors of `plan` on `dev` (kiln's allocator, tagged grad): DeviceBuckets' buffers, and the
// memory predictor's on the meta device, so `kiln mem` counts what a rank allocates.
//   bucket k : (numel_k + P_k,) f32
std::vector<Tensor> make_bucket_buffers(const std::vector<Tensor>& params, const std::vector<std::vector<size_t>>& plan,
                                        Device dev);

// Whether every trainable parameter is an f32 tensor on one CUDA device (the device path applies).
bool params_on_one_cuda_device(const std::vector<Tensor>& params);

}  // namespace kiln::train
