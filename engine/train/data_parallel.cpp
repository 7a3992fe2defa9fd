// Gradient buckets and the start-up broadcast of data-parallel training (see data_parallel.h).
#include "engine/train/data_parallel.h"

#include <algorithm>
#include <cstring>

#include "engine/autograd/grad_mode.h"
#include "engine/ops/ops.h"

namespace kiln::train {

std::vector<std::vector<size_t>> plan_buckets(const std::vector<int64_t>& bytes, int64_t cap, int64_t first_cap) {
  KILN_CHECK(cap >= 1 && first_cap >= 1, "plan_buckets: bucket caps must be >= 1 byte (got ", cap, " and ",
             first_cap, ")");
  std::vector<std::vector<size_t>> out;
  int64_t filled = 0;
  for (size_t i = 0; i < bytes.size(); ++i) {
    const int64_t current_cap = out.size() == 1 ? first_cap : cap;  // the bucket being filled: out.back()
    if (out.empty() || filled + bytes[i] > current_cap) {
      out.emplace_back();
      filled = 0;
    }
    out.back().push_back(i);
    filled += bytes[i];
  }
  return out;
}

DataParallel::DataParallel(dist::ProcessGroup& group, nn::Module& model, DataParallelOptions o)
    : group_(group), model_(model), params_(model.parameters()) {
  std::vector<size_t> order;  // trainable parameters, reverse registration order
  for (size_t i = params_.size(); i-- > 0;)
    if (params_[i].requires_grad()) {
      KILN_CHECK(params_[i].dtype() == DType::f32, "data-parallel: parameter ", params_[i].name(), " is ",
                 params_[i].str(), "; gradient buckets hold f32 (master weights) only");
      order.push_back(i);
    }
  std::vector<int64_t> bytes;
  for (size_t i : order) bytes.push_back((int64_t)params_[i].numel() * 4);
  for (const std::vector<size_t>& plan : plan_buckets(bytes, o.bucket_bytes, o.first_bucket_bytes)) {
    Bucket b;
    for (size_t j : plan) {
      b.params.push_back(order[j]);
      b.numel += params_[order[j]].numel();
    }
    buffers_.emplace_back((size_t)(b.numel + (int64_t)b.params.size()));
    buckets_.push_back(std::move(b));
  }
}

int64_t DataParallel::bucket_bytes_total() const {
  int64_t n = 0;
  for (const auto& b : buffers_) n += (int64_t)b.size() * 4;
  return n;
}

void DataParallel::broadcast_state(int root) {
  for (auto& [name, p] : model_.named_parameters()) {
    Tensor t = p;
    group_.broadcast(t, root);
  }
  for (auto& [name, b] : model_.named_buffers()) {
    Tensor t = b;
    group_.broadcast(t, root);
  }
}

void DataParallel::all_reduce_gradients() {
  if (group_.size() == 1) return;
  NoGradGuard no_grad;
  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    const Bucket& b = buckets_[bi];
    std::vector<float>& buf = buffers_[bi];
    float* flags = buf.data() + b.numel;
    // Pack: each gradient (zeros when undefined here) and a flag saying whether it was defined.
    int64_t at = 0;
    for (size_t k = 0; k < b.params.size(); ++k) {
      const Tensor& p = params_[b.params[k]];
      const Tensor g = p.grad();
      const int64_t n = p.numel();
      if (g.defined()) {
        KILN_CHECK(g.dtype() == DType::f32 && g.numel() == n, "data-parallel: the gradient of ", p.name(), " is ",
                   g.str(), ", expected f32 of ", n, " elements");
        const Tensor h = contiguous(to_device(g, Device::cpu()));
        std::memcpy(buf.data() + at, h.data<float>(), (size_t)n * 4);
        flags[k] = 1;
      } else {
        std::fill(buf.data() + at, buf.data() + at + n, 0.0f);
        flags[k] = 0;
      }
      at += n;
    }
    group_.all_reduce_sum(buf.data(), (int64_t)buf.size());
    // Unpack: the sums back into the gradients (defined wherever any rank had one).
    at = 0;
    for (size_t k = 0; k < b.params.size(); ++k) {
      const Tensor& p = params_[b.params[k]];
      const int64_t n = p.numel();
      if (flags[k] > 0) {
        Tensor g = p.grad();
        if (g.defined() && g.device().is_cpu() && g.is_contiguous()) {
          std::memcpy(g.data<float>(), buf.data() + at, (size_t)n * 4);
          g.bump_version();
        } else {
          Tensor h = empty(p.sizes(), DType::f32, Device::cpu(), MemoryFormat::contiguous);
          std::memcpy(h.data<float>(), buf.data() + at, (size_t)n * 4);
          if (g.defined()) copy_(g, h);
          else p.set_grad(to_device(h, p.device()));
        }
      }
      at += n;
    }
  }
}

}  // namespace kiln::train
