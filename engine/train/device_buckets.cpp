// Device gradient buckets over NCCL (see device_buckets.h). NEVER RUN ON A GPU.
#include "engine/train/device_buckets.h"

#include "engine/autograd/grad_mode.h"
#include "engine/core/error.h"
#include "engine/memory/tag.h"
#include "engine/ops/ops.h"

#if defined(KILN_WITH_CUDA)
#include "kernels/cuda/nccl_comm.h"
#endif

namespace kiln::train {

bool params_on_one_cuda_device(const std::vector<Tensor>& params) {
  int dev = -1;
  bool any = false;
  for (const Tensor& p : params) {
    if (!p.requires_grad()) continue;
    if (!p.device().is_cuda() || p.dtype() != DType::f32) return false;
    if (dev >= 0 && p.device().index != dev) return false;
    dev = p.device().index;
    any = true;
  }
  return any;
}

std::vector<Tensor> make_bucket_buffers(const std::vector<Tensor>& params, const std::vector<std::vector<size_t>>& plan,
                                        Device dev) {
  MemoryScope scope(MemoryTag::grad, "data-parallel buckets");
  std::vector<Tensor> out;
  for (const auto& b : plan) {
    int64_t n = (int64_t)b.size();
    for (size_t i : b) n += params[i].numel();
    out.push_back(empty({n}, DType::f32, dev));
  }
  return out;
}

#if defined(KILN_WITH_CUDA)

DeviceBuckets::DeviceBuckets(dist::ProcessGroup& group, const std::vector<Tensor>& params,
                             const std::vector<std::vector<size_t>>& plan)
    : params_(params), plan_(plan) {
  KILN_CHECK(params_on_one_cuda_device(params), "data-parallel: device buckets need every trainable parameter "
             "as f32 on one CUDA device");
  const Device dev = params[plan_.front().front()].device();
  buffers_ = make_bucket_buffers(params, plan_, dev);
  cuda::NcclId id{};
  if (group.rank() == 0) id = cuda::make_nccl_id();
  group.broadcast_bytes(id.data(), (int64_t)id.size(), 0);
  comm_ = std::make_unique<cuda::NcclComm>(group.size(), group.rank(), id, dev.index);
}

DeviceBuckets::~DeviceBuckets() = default;

int64_t DeviceBuckets::bytes() const {
  int64_t n = 0;
  for (const Tensor& b : buffers_) n += b.numel() * 4;
  return n;
}

void DeviceBuckets::all_reduce() {
  NoGradGuard no_grad;
  for (size_t bi = 0; bi < plan_.size(); ++bi) {
    Tensor& buf = buffers_[bi];
    const std::vector<size_t>& b = plan_[bi];
    int64_t grads = 0;
    for (size_t i : b) grads += params_[i].numel();
    // pack: (numel_k,) gradients, then (P_k,) flags
    int64_t at = 0;
    for (size_t k = 0; k < b.size(); ++k) {
      const Tensor& p = params_[b[k]];
      const int64_t n = p.numel();
      Tensor dst = narrow(buf, 0, at, n);
      Tensor flag = narrow(buf, 0, grads + (int64_t)k, 1);
      const Tensor g = p.grad();
      if (g.defined()) {
        copy_(dst, reshape(g, {n}));
        fill_(flag, 1.0);
      } else {
        zero_(dst);
        zero_(flag);
      }
      at += n;
    }
    comm_->all_reduce_sum(buf.data<float>(), buf.numel(), str_cat("data-parallel bucket ", bi));
    // unpack: a flag > 0 means some rank had the gradient
    const Tensor flags = to_device(narrow(buf, 0, grads, (int64_t)b.size()), Device::cpu());
    at = 0;
    for (size_t k = 0; k < b.size(); ++k) {
      const Tensor& p = params_[b[k]];
      const int64_t n = p.numel();
      if (flags.data<float>()[k] > 0) {
        const Tensor src = view(narrow(buf, 0, at, n), p.sizes());
        Tensor g = p.grad();
        if (g.defined()) copy_(g, src);
        else {
          MemoryScope scope(MemoryTag::grad);
          Tensor fresh = empty(p.sizes(), DType::f32, p.device());
          copy_(fresh, src);
          Tensor(p).set_grad(fresh);
        }
      }
      at += n;
    }
  }
}

#else  // no CUDA backend: no device has parameters, so nothing constructs this

}  // namespace kiln::train
namespace kiln::cuda {
class NcclComm {};  // never made without CUDA; complete here so unique_ptr can name its destructor
}  // namespace kiln::cuda
namespace kiln::train {

DeviceBuckets::DeviceBuckets(dist::ProcessGroup&, const std::vector<Tensor>& params,
                             const std::vector<std::vector<size_t>>& plan)
    : params_(params), plan_(plan) {
  throw Error("data-parallel: device buckets need the CUDA backend (this build has none)");
}
DeviceBuckets::~DeviceBuckets() = default;
int64_t DeviceBuckets::bytes() const { return 0; }
void DeviceBuckets::all_reduce() { (void)params_; }

#endif

}  // namespace kiln::train
