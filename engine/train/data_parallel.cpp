// Gradient buckets and the start-up broadcast of data-parallel training (see data_parallel.h).
#include "engine/train/data_parallel.h"

#include <algorithm>
#include <chrono>
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

std::vector<std::vector<size_t>> gradient_buckets(const std::vector<Tensor>& params, const DataParallelOptions& o) {
  std::vector<size_t> order;  // trainable parameters, reverse registration order
  for (size_t i = params.size(); i-- > 0;)
    if (params[i].requires_grad()) {
      KILN_CHECK(params[i].dtype() == DType::f32, "data-parallel: parameter ", params[i].name(), " is ",
                 params[i].str(), "; gradient buckets hold f32 (master weights) only");
      order.push_back(i);
    }
  std::vector<int64_t> bytes;
  for (size_t i : order) bytes.push_back((int64_t)params[i].numel() * 4);
  std::vector<std::vector<size_t>> out;
  for (const std::vector<size_t>& plan : plan_buckets(bytes, o.bucket_bytes, o.first_bucket_bytes)) {
    out.emplace_back();
    for (size_t j : plan) out.back().push_back(order[j]);
  }
  return out;
}

int64_t gradient_bucket_bytes(const std::vector<Tensor>& params, const std::vector<std::vector<size_t>>& plan) {
  int64_t n = 0;
  for (const auto& b : plan)
    for (size_t i : b) n += params[i].numel() + 1;  // the gradient, then its defined flag
  return n * 4;
}

DataParallel::DataParallel(dist::ProcessGroup& group, nn::Module& model, DataParallelOptions o)
    : group_(group), model_(model), params_(model.parameters()) {
  bucket_of_.assign(params_.size(), SIZE_MAX);
  // CUDA parameters: the buckets live on the device and NCCL sums them (device_buckets.h); else host
  // buckets and the group's (MPI) all-reduce.
  const bool on_device = group_.size() > 1 && params_on_one_cuda_device(params_);
  for (const std::vector<size_t>& plan : gradient_buckets(params_, o)) {
    Bucket b;
    for (size_t i : plan) {
      b.params.push_back(i);
      b.numel += params_[i].numel();
      bucket_of_[i] = buckets_.size();
    }
    buffers_.emplace_back(on_device ? 0 : (size_t)(b.numel + (int64_t)b.params.size()));
    buckets_.push_back(std::move(b));
  }
  if (on_device) {
    std::vector<std::vector<size_t>> plan;
    for (const Bucket& b : buckets_) plan.push_back(b.params);
    device_ = std::make_unique<DeviceBuckets>(group_, params_, plan);
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
  return device_ ? n + device_->bytes() : n;
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

namespace {
// While the training thread waits for communication (nothing else to run), the group's polls do not sleep.
struct UrgentGuard {
  explicit UrgentGuard(dist::ProcessGroup& g) : group(g) { group.set_urgent(true); }
  ~UrgentGuard() { group.set_urgent(false); }
  dist::ProcessGroup& group;
};
}  // namespace

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
    bool failed = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      failed = error_ != nullptr;
    }
    double seconds = 0;
    try {
      if (!failed) seconds = reduce(b);  // after a failure, the later buckets are not started (the job ends)
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      step_all_reduce_s_ += seconds;
      ++done_;
    }
    cv_.notify_all();
  }
}

double DataParallel::reduce(size_t b) {
  const auto t0 = std::chrono::steady_clock::now();
  try {
    group_.all_reduce_sum(buffers_[b].data(), (int64_t)buffers_[b].size());
  } catch (const dist::Timeout&) {
    throw Error(str_cat("data-parallel: the all-reduce of bucket ", b + 1, " of ", buckets_.size(), " (step ",
                        steps_done_.load() + 1, ") did not complete within ", group_.timeout(), " s: ",
                        group_.stall_reason(), " (--dist-timeout ", group_.timeout(), ")"));
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void DataParallel::begin_step() {
  // A step that ended early (an exception in backward) may have left buckets in flight: let them land.
  if (overlap_) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return done_ == next_start_; });
    done_ = 0;
    error_ = nullptr;
  }
  step_all_reduce_s_ = 0;
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
    step_all_reduce_s_ += reduce(bi);
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
  // From here the training thread waits for communication: backward is over (the unhidden time).
  const auto t_wait = std::chrono::steady_clock::now();
  double all_reduce_s = 0;
  if (device_) {
    // NCCL on the device, in compute-stream order (no overlap with backward yet); the host time is the
    // queueing only, the device's share is not measured here.
    device_->all_reduce();
    all_reduce_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_wait).count();
  }
  // What backward did not start (a rank without rows, unused parameters, no overlap): in bucket order.
  while (!device_ && next_start_ < buckets_.size()) start(next_start_);
  if (device_) {
  } else if (overlap_) {
    UrgentGuard urgent(group_);  // backward is over: the communication thread polls without sleeping
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return done_ == buckets_.size(); });
    if (error_) std::rethrow_exception(error_);
    all_reduce_s = step_all_reduce_s_;
    step_all_reduce_s_ = 0;
  } else {
    all_reduce_s = step_all_reduce_s_;
    step_all_reduce_s_ = 0;
  }
  times_.last_wait_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_wait).count();
  times_.last_all_reduce_s = all_reduce_s;
  times_.wait_s += times_.last_wait_s;
  times_.all_reduce_s += all_reduce_s;
  ++times_.steps;
  ++steps_done_;
  group_.set_context(str_cat("step ", steps_done_.load() + 1));
  if (!device_)
    for (size_t b = 0; b < buckets_.size(); ++b) unpack(b);
  const int64_t in_backward = started_in_backward_;
  begin_step();
  started_in_backward_ = in_backward;  // kept for started_during_backward()
}

void DataParallel::all_reduce_in_order(double* data, int64_t n) {
  if (group_.size() == 1) return;
  UrgentGuard urgent(group_);  // the training thread waits: no sleeping polls
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
