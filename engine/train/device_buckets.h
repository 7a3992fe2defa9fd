// The NCCL communicator that sums data-parallel gradient buckets in device memory: the CUDA half of
// data_parallel.h (whose host buckets go through the process group's MPI all-reduce). DataParallel owns
// the bucket tensors (the gradients live in them as views); this file only sums one in place, on the
// communicator's stream after an event on the compute stream, so a bucket's all-reduce started during
// backward overlaps the rest of backward, and finish() makes the compute stream wait for all of them
// (kernels/cuda/nccl_comm.h); the host never waits. The NCCL unique id is made on rank 0 and broadcast through the process group (MPI).
// One rank alone all-reduces with itself (a single-GPU machine, tools/gpu-check's NCCL row).
// Built only with the CUDA backend; must not know models, the CLI, files or data.
// NEVER RUN ON A GPU: no machine with a GPU has executed this file yet (see the README).
#pragma once
#include <cstdint>
#include <memory>

#include "engine/dist/process_group.h"
#include "engine/tensor/tensor.h"

namespace kiln::cuda {
class NcclComm;
}

namespace kiln::train {

class DeviceBuckets {
 public:
  // A communicator over the group's ranks on CUDA device `dev` (one process per GPU).
  DeviceBuckets(dist::ProcessGroup& group, Device dev);
  ~DeviceBuckets();
  DeviceBuckets(const DeviceBuckets&) = delete;
  DeviceBuckets& operator=(const DeviceBuckets&) = delete;

  // In place: the sum over the ranks of `bucket` (a contiguous f32 tensor on the device), queued on the
  // communicator's stream after the compute stream's work so far (the bucket's gradients), and running
  // beside the compute stream's later work (the rest of backward) until finish(); `index` names it in
  // errors. The host does not wait.
  void all_reduce(Tensor& bucket, size_t index);
  // The compute stream's later work (the optimizer step, the flags' read) waits for every bucket queued.
  void finish();

 private:
  std::unique_ptr<cuda::NcclComm> comm_;
};

}  // namespace kiln::train
