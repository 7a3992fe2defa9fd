// Gradient buckets and the start-up broadcast of data-parallel training (see data_parallel.h).
#include "engine/train/data_parallel.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "engine/autograd/grad_mode.h"
#include "engine/ops/batch_norm_sync.h"
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
  bucket_of_.assign(params_.size(), SIZE_MAX);
  for (const std::vector<size_t>& plan : plan_buckets(bytes, o.bucket_bytes, o.first_bucket_bytes)) {
    Bucket b;
    for (size_t j : plan) {
      b.params.push_back(order[j]);
      b.numel += params_[order[j]].numel();
      bucket_of_[order[j]] = buckets_.size();
    }
    buffers_.emplace_back((size_t)(b.numel + (int64_t)b.params.size()));
    buckets_.push_back(std::move(b));
  }
  for (size_t i = 0; i < params_.size(); ++i) param_of_[params_[i].impl()] = i;
  ready_.assign(params_.size(), 0);
  left_.assign(buckets_.size(), 0);
  // Overlap needs host gradients (packed with memcpy on the backward's thread) and a group that takes
  // calls from the communication thread.
  bool cpu = true;
  for (const Tensor& p : params_) cpu = cpu && p.device().is_cpu();
  overlap_ = o.overlap && cpu && group_.size() > 1 && group_.allows_other_threads() && !buckets_.empty();
  if (overlap_) comm_ = std::thread([this] { comm_loop(); });
  begin_step();
}

DataParallel::~DataParallel() {
  if (sync_bn_) set_batch_norm_reducer(nullptr, BnParamGrads::local);
  if (comm_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    comm_.join();
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

void DataParallel::comm_loop() {
  for (;;) {
    size_t b;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (stop_ && queue_.empty()) return;
      b = queue_.front();
      queue_.pop_front();
    }
    try {
      group_.all_reduce_sum(buffers_[b].data(), (int64_t)buffers_[b].size());
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      ++done_;
    }
    cv_.notify_all();
  }
}

void DataParallel::begin_step() {
  // A step that ended early (an exception in backward) may have left buckets in flight: let them land.
  if (overlap_) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return done_ == next_start_; });
    done_ = 0;
    error_ = nullptr;
  }
  std::fill(ready_.begin(), ready_.end(), 0);
  for (size_t b = 0; b < buckets_.size(); ++b) left_[b] = buckets_[b].params.size();
  next_start_ = 0;
  started_in_backward_ = 0;
}

GradAccumulatedHook DataParallel::backward_hook() {
  if (!overlap_) return nullptr;
  return [this](const TensorImpl* leaf) { gradient_ready(leaf); };
}

void DataParallel::gradient_ready(const TensorImpl* leaf) {
  const auto it = param_of_.find(leaf);
  if (it == param_of_.end()) return;  // a leaf that is not a parameter of this model (an input)
  const size_t i = it->second, b = bucket_of_[i];
  if (b == SIZE_MAX || ready_[i]) return;
  ready_[i] = 1;
  if (--left_[b] > 0) return;
  // Start every complete bucket from the next one in order: bucket k never starts before k-1.
  while (next_start_ < buckets_.size() && left_[next_start_] == 0) {
    start(next_start_);
    ++started_in_backward_;
  }
}

void DataParallel::pack(size_t bi) {
  const Bucket& b = buckets_[bi];
  std::vector<float>& buf = buffers_[bi];
  float* flags = buf.data() + b.numel;
  int64_t at = 0;
  for (size_t k = 0; k < b.params.size(); ++k) {
    const Tensor& p = params_[b.params[k]];
    const Tensor g = p.grad();
    const int64_t n = p.numel();
    if (g.defined()) {
      KILN_CHECK(g.dtype() == DType::f32 && g.numel() == n, "data-parallel: the gradient of ", p.name(), " is ",
                 g.str(), ", expected f32 of ", n, " elements");
      if (g.device().is_cpu() && g.is_contiguous()) {
        std::memcpy(buf.data() + at, g.data<float>(), (size_t)n * 4);
      } else {
        const Tensor h = contiguous(to_device(g, Device::cpu()));
        std::memcpy(buf.data() + at, h.data<float>(), (size_t)n * 4);
      }
      flags[k] = 1;
    } else {
      std::fill(buf.data() + at, buf.data() + at + n, 0.0f);
      flags[k] = 0;
    }
    at += n;
  }
}

void DataParallel::start(size_t bi) {
  pack(bi);
  next_start_ = bi + 1;
  if (!overlap_) {
    group_.all_reduce_sum(buffers_[bi].data(), (int64_t)buffers_[bi].size());
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(bi);
  }
  cv_.notify_all();
}

void DataParallel::unpack(size_t bi) {
  const Bucket& b = buckets_[bi];
  const std::vector<float>& buf = buffers_[bi];
  const float* flags = buf.data() + b.numel;
  int64_t at = 0;
  for (size_t k = 0; k < b.params.size(); ++k) {
    const Tensor& p = params_[b.params[k]];
    const int64_t n = p.numel();
    if (flags[k] > 0) {  // defined wherever any rank had a gradient
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

void DataParallel::all_reduce_gradients() {
  if (group_.size() == 1) return;
  NoGradGuard no_grad;
  // What backward did not start (a rank without rows, unused parameters, no overlap): in bucket order.
  while (next_start_ < buckets_.size()) start(next_start_);
  if (overlap_) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return done_ == buckets_.size(); });
    if (error_) std::rethrow_exception(error_);
  }
  for (size_t b = 0; b < buckets_.size(); ++b) unpack(b);
  const int64_t in_backward = started_in_backward_;
  begin_step();
  started_in_backward_ = in_backward;  // kept for started_during_backward()
}

void DataParallel::all_reduce_in_order(double* data, int64_t n) {
  if (group_.size() == 1) return;
  if (overlap_) {  // let the buckets already queued land first: one thread in MPI at a time, same order everywhere
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return done_ == next_start_; });
  }
  group_.all_reduce_sum(data, n);
}

void DataParallel::sync_batch_norm() {
  sync_bn_ = true;
  // dgamma and dbeta: the global sums on rank 0, zeros elsewhere, so the buckets' f32 sum is the global
  // sum rounded once (one process's value) rather than a sum of the ranks' rounded parts.
  set_batch_norm_reducer([this](double* data, int64_t n) { all_reduce_in_order(data, n); },
                         group_.rank() == 0 ? BnParamGrads::global : BnParamGrads::zero);
}

}  // namespace kiln::train
