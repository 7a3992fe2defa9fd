// The NCCL communicator of device gradient buckets (see device_buckets.h). NEVER RUN ON A GPU.
#include "engine/train/device_buckets.h"

#include "engine/core/error.h"

#if defined(KILN_WITH_CUDA)
#include "kernels/cuda/nccl_comm.h"
#endif

namespace kiln::train {

#if defined(KILN_WITH_CUDA)

DeviceBuckets::DeviceBuckets(dist::ProcessGroup& group, Device dev) {
  KILN_CHECK(dev.is_cuda(), "data-parallel: NCCL buckets need a CUDA device, got ", dev.str());
  cuda::NcclId id{};
  if (group.rank() == 0) id = cuda::make_nccl_id();
  group.broadcast_bytes(id.data(), (int64_t)id.size(), 0);
  comm_ = std::make_unique<cuda::NcclComm>(group.size(), group.rank(), id, dev.index);
}

DeviceBuckets::~DeviceBuckets() = default;

void DeviceBuckets::all_reduce(Tensor& bucket, size_t index) {
  KILN_CHECK(bucket.device().is_cuda() && bucket.dtype() == DType::f32 && bucket.is_contiguous(),
             "data-parallel: NCCL all-reduce of bucket ", index + 1, " needs a contiguous f32 CUDA tensor, got ",
             bucket.str());
  comm_->all_reduce_sum(bucket.data<float>(), bucket.numel(), str_cat("data-parallel bucket ", index + 1), false);
  bucket.bump_version();
}

void DeviceBuckets::finish() { comm_->compute_waits("data-parallel gradient buckets"); }

#else  // no CUDA backend: no device has parameters, so nothing constructs this

}  // namespace kiln::train
namespace kiln::cuda {
class NcclComm {};  // never made without CUDA; complete here so unique_ptr can name its destructor
}  // namespace kiln::cuda
namespace kiln::train {

DeviceBuckets::DeviceBuckets(dist::ProcessGroup&, Device) {
  throw Error("data-parallel: device buckets need the CUDA backend (this build has none)");
}
DeviceBuckets::~DeviceBuckets() = default;
void DeviceBuckets::all_reduce(Tensor&, size_t) {}
void DeviceBuckets::finish() {}

#endif

}  // namespace kiln::train
