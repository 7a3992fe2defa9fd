// Gradient buckets and the start-up broadcast of data-parallel training (see data_parallel.h).
#include "engine/train/data_parallel.h"

#include "engine/core/generator.h"

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "engine/autograd/grad_mode.h"
#include "engine/memory/tag.h"
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

namespace {
// The bucket tensors of `plan` on `dev` (kiln's allocator, tagged grad):
//   bucket k : (numel_k + P_k,) f32
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
}  // namespace

DataParallel::DataParallel(dist::ProcessGroup& group, nn::Module& model, DataParallelOptions o)
    : group_(group), model_(model), params_(model.parameters()) {
  bucket_of_.assign(params_.size(), SIZE_MAX);
  const std::vector<std::vector<size_t>> plan = gradient_buckets(params_, o);
  for (const std::vector<size_t>& indices : plan) {
    Bucket b;
    for (size_t i : indices) {
      b.params.push_back(i);
      b.numel += params_[i].numel();
      bucket_of_[i] = buckets_.size();
    }
    buckets_.push_back(std::move(b));
  }
  for (size_t i = 0; i < params_.size(); ++i) param_of_[params_[i].impl()] = i;
  ready_.assign(params_.size(), 0);
  left_.assign(buckets_.size(), 0);
  if (group_.size() > 1 && !buckets_.empty()) {
    // The buckets on the parameters' one device; each gradient's slot is its view there.
    const Tensor& first = params_[buckets_.front().params.front()];
    const Device dev = first.device();
    for (const Bucket& b : buckets_)
      for (size_t i : b.params)
        KILN_CHECK(params_[i].device() == dev, "data-parallel: parameter ", params_[i].name(), " is on ",
                   params_[i].device().str(), " and ", first.name(), " on ", dev.str(),
                   "; the gradient buckets need every trainable parameter on one device");
    buffers_ = make_bucket_buffers(params_, plan, dev);
    slots_.assign(params_.size(), Tensor());
    for (size_t bi = 0; bi < buckets_.size(); ++bi) {
      int64_t at = 0;
      for (size_t i : buckets_[bi].params) {
        const int64_t n = params_[i].numel();
        slots_[i] = view(narrow(buffers_[bi], 0, at, n), params_[i].sizes());
        params_[i].set_grad_slot(slots_[i]);
        at += n;
      }
    }
    meta_ = dev.is_meta();
    if (dev.is_cuda()) device_ = std::make_unique<DeviceBuckets>(group_, dev);
    // Overlap: host buckets (MPI) on a communication thread, which the group must allow; CUDA buckets
    // (NCCL) are queued from backward's hook on the communicator's stream, no thread needed.
    comm_thread_ = o.overlap && dev.is_cpu() && group_.allows_other_threads();
    overlap_ = comm_thread_ || (o.overlap && dev.is_cuda());
  }
  if (comm_thread_) comm_ = std::thread([this] { comm_loop(); });
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
  // Gradients made after this are the parameters' own again (those that are slots keep the bucket alive).
  for (size_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].defined() && params_[i].grad_slot().impl() == slots_[i].impl()) params_[i].set_grad_slot(Tensor());
}

int64_t DataParallel::bucket_bytes_total() const {
  int64_t n = 0;
  for (const Tensor& b : buffers_) n += b.numel() * 4;
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
    if (device_) device_->all_reduce(buffers_[b], b);
    else if (!meta_) group_.all_reduce_sum(buffers_[b].data<float>(), buffers_[b].numel());
  } catch (const dist::Timeout&) {
    throw Error(str_cat("data-parallel: the all-reduce of bucket ", b + 1, " of ", buckets_.size(), " (step ",
                        steps_done_.load() + 1, ") did not complete within ", group_.timeout(), " s: ",
                        group_.stall_reason(), " (--dist-timeout ", group_.timeout(), ")"));
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void DataParallel::plan_step(StepPlan& p) {
  const int64_t micro = p.size();
  p.ranks = size();
  p.rank = rank();
  p.rows_of.assign((size_t)(micro * p.ranks), 0);
  p.live.assign((size_t)micro, 0);
  for (int64_t k = 0; k < micro; ++k) {
    p.rows_of[(size_t)(k * p.ranks + p.rank)] = p.micro[(size_t)k].size;
    p.live[(size_t)k] = p.micro[(size_t)k].runs() ? 1 : 0;
  }
  // Every rank has the same number of micro-batches (shard_pieces of the same global batch, or accum of
  // its own rows), so the counts line up: [used, rows, rows (k, rank)..., live k...].
  std::vector<int64_t> counts = {p.used, p.samples};
  counts.insert(counts.end(), p.rows_of.begin(), p.rows_of.end());
  counts.insert(counts.end(), p.live.begin(), p.live.end());
  group_.all_reduce_sum(counts.data(), (int64_t)counts.size());
  p.used = counts[0];
  p.samples = counts[1];
  std::copy(counts.begin() + 2, counts.begin() + 2 + micro * p.ranks, p.rows_of.begin());
  std::copy(counts.begin() + 2 + micro * p.ranks, counts.end(), p.live.begin());
  p.undefined_micro_batches = 0;  // the global micro-batches with rows and no rank to run them
  for (int64_t k = 0; k < micro; ++k) {
    int64_t rows = 0;
    for (int q = 0; q < p.ranks; ++q) rows += p.rows_of[(size_t)(k * p.ranks + q)];
    if (rows > 0 && p.live[(size_t)k] == 0) ++p.undefined_micro_batches;
    if (p.live[(size_t)k] != 0 && p.live[(size_t)k] != p.ranks) p.same_forwards = false;
  }
  // With --sync-bn every rank runs every micro-batch that some rank runs (its rows, maybe none or left
  // out, with a backward of weight 0), so the ranks make the same batch-norm reductions in the same order.
  p.join_all = sync_bn_;
  p.last_backward_hook = backward_hook();
}

void DataParallel::end_backward(const StepPlan& p) {
  all_reduce_gradients();  // gradients of the global batch from here on, the same on every rank
  // After the buckets landed (the communication thread is idle): rank 0's generator offset everywhere.
  if (!p.join_all && !p.same_forwards) {
    int64_t offset = rank() == 0 ? (int64_t)global_rng().offset : 0;
    group_.all_reduce_sum(&offset, 1);
    global_rng().offset = (uint64_t)offset;
  }
}

void DataParallel::begin_step() {
  // A step that ended early (an exception in backward) may have left buckets in flight: let them land.
  if (comm_thread_) {
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
  if (b == SIZE_MAX) return;
  // A gradient accumulated again after its bucket's all-reduce started would race with the sum and leave
  // this rank's second part out of it: an error, never a silent wrong gradient.
  KILN_CHECK(!(ready_[i] && next_start_ > b), "data-parallel: the gradient of ", params_[i].name(),
             " was accumulated again after its bucket ", b, " started its all-reduce (a second backward inside "
             "the step's last backward); run it before the last backward, or without overlap");
  if (ready_[i]) return;
  ready_[i] = 1;
  if (--left_[b] > 0) return;
  // Start every complete bucket from the next one in order: bucket k never starts before k-1.
  while (next_start_ < buckets_.size() && left_[next_start_] == 0) {
    start(next_start_);
    ++started_in_backward_;
  }
}

void DataParallel::pack(size_t bi) {
  if (meta_) return;  // meta buckets hold no values
  const Bucket& b = buckets_[bi];
  Tensor& buf = buffers_[bi];
  const bool host = buf.device().is_cpu();
  for (size_t k = 0; k < b.params.size(); ++k) {
    const size_t i = b.params[k];
    const Tensor& p = params_[i];
    Tensor slot = slots_[i];
    const Tensor g = p.grad();
    if (g.defined()) {
      KILN_CHECK(g.dtype() == DType::f32 && g.numel() == p.numel(), "data-parallel: the gradient of ", p.name(),
                 " is ", g.str(), ", expected f32 of ", p.numel(), " elements");
      if (g.impl() != slot.impl()) copy_(slot, g);  // made outside backward's slot (set_grad): copied in
    } else {
      zero_(slot);  // counts as zeros in the sum
    }
    const float flag = g.defined() ? 1.0f : 0.0f;
    if (host) {
      buf.data<float>()[b.numel + (int64_t)k] = flag;
    } else {
      Tensor f = narrow(buf, 0, b.numel + (int64_t)k, 1);
      fill_(f, flag);
    }
  }
}

void DataParallel::start(size_t bi) {
  pack(bi);
  next_start_ = bi + 1;
  if (!comm_thread_) {  // in place, or (CUDA) queued on the communicator's stream
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
  if (meta_) return;  // every rank imitated alike: the gradients stay as this rank defined them
  const Bucket& b = buckets_[bi];
  Tensor& buf = buffers_[bi];
  buf.bump_version();  // summed in place by the all-reduce
  // The flags summed over the ranks: > 0 where any rank had the gradient.
  const Tensor flags = buf.device().is_cpu()
                           ? narrow(buf, 0, b.numel, (int64_t)b.params.size())
                           : to_device(narrow(buf, 0, b.numel, (int64_t)b.params.size()), Device::cpu());
  const float* flag = flags.data<float>();
  for (size_t k = 0; k < b.params.size(); ++k) {
    if (!(flag[k] > 0)) continue;  // no rank had it: it stays undefined
    const size_t i = b.params[k];
    const Tensor& p = params_[i];
    Tensor g = p.grad();
    if (!g.defined()) p.set_grad(slots_[i]);  // only other ranks had it: the sum is in the slot
    else if (g.impl() != slots_[i].impl()) copy_(g, slots_[i]);  // a foreign gradient takes the sum back
  }
}

void DataParallel::all_reduce_gradients() {
  if (group_.size() == 1) return;
  NoGradGuard no_grad;
  // From here the training thread waits for communication: backward is over (the unhidden time).
  const auto t_wait = std::chrono::steady_clock::now();
  double all_reduce_s = 0;
  // What backward did not start (a rank without rows, unused parameters, no overlap): in bucket order.
  // CUDA buckets: NCCL on its stream, those started in backward beside backward's kernels; the compute
  // stream waits for them all from here on (device_->finish). Their host time is the queueing only, the
  // device's share is not measured here.
  while (next_start_ < buckets_.size()) start(next_start_);
  if (device_) device_->finish();
  if (comm_thread_) {
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
  for (size_t b = 0; b < buckets_.size(); ++b) unpack(b);
  const int64_t in_backward = started_in_backward_;
  begin_step();
  started_in_backward_ = in_backward;  // kept for started_during_backward()
}

void DataParallel::all_reduce_in_order(double* data, int64_t n) {
  if (group_.size() == 1) return;
  UrgentGuard urgent(group_);  // the training thread waits: no sleeping polls
  if (comm_thread_) {  // let the buckets already queued land first: one thread in MPI at a time, same order everywhere
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
