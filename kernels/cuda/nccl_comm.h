// One NCCL communicator for one process and one GPU: the device-memory all-reduce of data-parallel
// training (engine/train/data_parallel_device.cpp), the CUDA counterpart of the MPI group's host
// all-reduce. The unique id is made on rank 0 (make_nccl_id) and reaches the other ranks through the
// MPI group (or no one: one rank alone all-reduces with itself, as on a single-GPU machine and in
// tools/gpu-check's NCCL row). Collectives run on the communicator's own stream, ordered after the
// device's compute stream by an event, and the compute stream waits for them by another event: the
// host never blocks. Built only with the CUDA backend; without NCCL every call throws "built without
// NCCL". Must not know tensors, models or MPI.
// NEVER RUN ON A GPU: no machine with a GPU has executed this file yet (see the README).
#pragma once
#include <cuda_runtime.h>

#include <array>
#include <cstdint>
#include <string>

namespace kiln::cuda {

using NcclId = std::array<char, 128>;  // ncclUniqueId's bytes (NCCL_UNIQUE_ID_BYTES)

// True when this build links NCCL.
bool built_with_nccl();
// "NCCL 2.28.9" (the library loaded at run time), or why there is none.
std::string nccl_version();
// A fresh unique id (rank 0 makes it; every rank passes the same bytes to NcclComm).
NcclId make_nccl_id();

class NcclComm {
 public:
  // Joins the communicator of `nranks` ranks as `rank` on device `dev`; blocks until every rank joined.
  NcclComm(int nranks, int rank, const NcclId& id, int dev);
  ~NcclComm();
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int device() const { return dev_; }
  cudaStream_t stream() const { return stream_; }
  // In place: data (n f32 elements on this device) summed over the ranks. Ordered after everything
  // queued on the device's compute stream so far; the compute stream's later work waits for it, or,
  // with compute_waits false, only from the next compute_waits() on (so backward's remaining kernels run
  // beside the collective; the caller must not touch `data` on the compute stream before that).
  // `what` names the caller in errors (e.g. "data-parallel bucket 3").
  void all_reduce_sum(float* data, int64_t n, const std::string& what, bool compute_waits = true);
  // The compute stream's later work waits for every collective queued so far (host never blocks).
  void compute_waits(const std::string& what);
  // Blocks the host until the communicator's queued work is done; throws on an asynchronous NCCL
  // error (a peer that died) with `what` in the message.
  void wait(const std::string& what);

 private:
  int dev_ = 0, nranks_ = 1, rank_ = 0;
  void* comm_ = nullptr;  // ncclComm_t
  cudaStream_t stream_ = nullptr;
  cudaEvent_t compute_done_ = nullptr, comm_done_ = nullptr;
};

}  // namespace kiln::cuda
