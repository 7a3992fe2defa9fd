// NCCL communicator wrapper (see nccl_comm.h). NEVER RUN ON A GPU.
#include "kernels/cuda/nccl_comm.h"

#include <cstring>

#include "engine/core/error.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/nccl_args.h"
#include "kernels/cuda/runtime.h"

#if defined(KILN_WITH_NCCL)
#include <nccl.h>
#endif

namespace kiln::cuda {

#if defined(KILN_WITH_NCCL)

namespace {

static_assert(sizeof(ncclUniqueId) == sizeof(NcclId), "NcclId must hold ncclUniqueId's bytes");

void nccl_check(ncclResult_t r, const char* call, const std::string& what) {
  if (r == ncclSuccess) return;
  throw Error(str_cat(what, ": ", call, " failed: ", ncclGetErrorString(r), " (", (int)r, ")"));
}

ncclComm_t as_comm(void* p) { return static_cast<ncclComm_t>(p); }

}  // namespace

bool built_with_nccl() { return true; }

std::string nccl_version() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "NCCL (version unknown)";
  return nccl_version_string(v);  // both encodings (before and from NCCL 2.9): nccl_args.h
}

NcclId make_nccl_id() {
  ncclUniqueId id;
  nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId", "make_nccl_id");
  NcclId out;
  std::memcpy(out.data(), &id, sizeof(id));
  return out;
}

NcclComm::NcclComm(int nranks, int rank, const NcclId& id, int dev) : dev_(dev), nranks_(nranks), rank_(rank) {
  KILN_CHECK(nccl_rank_valid(nranks, rank), "NcclComm: rank ", rank, " of ", nranks, " ranks");
  const std::string what = str_cat("NCCL communicator (rank ", rank, " of ", nranks, ", cuda:", dev, ")");
  DeviceGuard guard(dev);
  ncclUniqueId uid;
  std::memcpy(&uid, id.data(), sizeof(uid));
  ncclComm_t c = nullptr;
  nccl_check(ncclCommInitRank(&c, nranks, uid, rank), "ncclCommInitRank", what);
  comm_ = c;
  KILN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), what);
  KILN_CUDA_CHECK(cudaEventCreateWithFlags(&compute_done_, cudaEventDisableTiming), what);
  KILN_CUDA_CHECK(cudaEventCreateWithFlags(&comm_done_, cudaEventDisableTiming), what);
}

NcclComm::~NcclComm() {
  DeviceGuard guard(dev_);
  if (stream_) cudaStreamSynchronize(stream_);
  if (comm_) ncclCommDestroy(as_comm(comm_));
  if (compute_done_) cudaEventDestroy(compute_done_);
  if (comm_done_) cudaEventDestroy(comm_done_);
  if (stream_) cudaStreamDestroy(stream_);
}

void NcclComm::all_reduce_sum(float* data, int64_t n, const std::string& what, bool compute_waits) {
  if (n == 0) return;
  DeviceGuard guard(dev_);
  const std::string w = str_cat(what, ": NCCL all-reduce of ", n, " f32 on cuda:", dev_, " (rank ", rank_, " of ",
                                nranks_, ")");
  cudaStream_t compute = compute_stream(dev_);
  KILN_CUDA_CHECK(cudaEventRecord(compute_done_, compute), w);
  KILN_CUDA_CHECK(cudaStreamWaitEvent(stream_, compute_done_, 0), w);
  const NcclAllReduceArgs a = nccl_all_reduce_args(n, w);  // in place, f32, sum: the only kind kiln queues
  static_assert(sizeof(float) == 4, "ncclFloat32 is float");
  nccl_check(ncclAllReduce(data, data, a.count, ncclFloat32, ncclSum, as_comm(comm_), stream_), "ncclAllReduce", w);
  if (!compute_waits) return;
  KILN_CUDA_CHECK(cudaEventRecord(comm_done_, stream_), w);
  KILN_CUDA_CHECK(cudaStreamWaitEvent(compute, comm_done_, 0), w);
}

void NcclComm::compute_waits(const std::string& what) {
  DeviceGuard guard(dev_);
  KILN_CUDA_CHECK(cudaEventRecord(comm_done_, stream_), what);
  KILN_CUDA_CHECK(cudaStreamWaitEvent(compute_stream(dev_), comm_done_, 0), what);
}

void NcclComm::wait(const std::string& what) {
  DeviceGuard guard(dev_);
  KILN_CUDA_CHECK(cudaStreamSynchronize(stream_), what);
  ncclResult_t async = ncclSuccess;
  nccl_check(ncclCommGetAsyncError(as_comm(comm_), &async), "ncclCommGetAsyncError", what);
  nccl_check(async, "a queued NCCL collective", what);
}

#else  // built without NCCL

namespace {
[[noreturn]] void no_nccl(const char* what) {
  throw Error(str_cat(what, ": this build has no NCCL (the CUDA toolkit's libnccl was not found at configure time)"));
}
}  // namespace

bool built_with_nccl() { return false; }
std::string nccl_version() { return "no NCCL in this build"; }
NcclId make_nccl_id() { no_nccl("make_nccl_id"); }
NcclComm::NcclComm(int, int, const NcclId&, int) { no_nccl("NcclComm"); }
NcclComm::~NcclComm() = default;
void NcclComm::all_reduce_sum(float*, int64_t, const std::string&, bool) { no_nccl("NcclComm::all_reduce_sum"); }
void NcclComm::compute_waits(const std::string&) { no_nccl("NcclComm::compute_waits"); }
void NcclComm::wait(const std::string&) { no_nccl("NcclComm::wait"); }

#endif

}  // namespace kiln::cuda
