// Data-parallel training over a dist::ProcessGroup: the gradient buckets and the start-up broadcast.
// - Buckets: the model's trainable parameters in reverse registration order (the order backward
//   finishes them), in flat f32 buckets of at most bucket_bytes (the first one, the first gradients
//   backward completes, at most first_bucket_bytes; a parameter larger than the cap gets a bucket of its
//   own). With more than one rank each bucket is one tensor on the parameters' device from kiln's
//   allocator (tagged grad, so `kiln mem` and the memory report count it):
//     bucket k : (numel_k + P_k,) f32   the bucket's gradients back to back, then one "defined" flag per
//                                        parameter (1 where this rank has the gradient, 0 where it counts zeros)
//   Every gradient lives in its bucket: each parameter's grad slot (Tensor::grad_slot) is its view there,
//   so backward writes the gradient into the bucket (no allocation of its own, no packing copy) and the
//   all-reduce sums it in place. A gradient made some other way (set_grad) is copied in and back.
//   Every gradient is summed over the ranks, bucket by bucket, always in bucket order (MPI and NCCL match
//   collectives by their order, so every rank starts bucket k before bucket k+1).
//   A gradient undefined on a rank (a rank with no sample in a short last batch, or a parameter its
//   forward did not use) counts as zeros; after the sum it is defined (the slot) on every rank where it
//   was defined on any.
// - Devices: CPU buckets go through the group's (MPI) all-reduce; CUDA buckets through NCCL
//   (device_buckets.h, never run on a GPU); meta buckets (the memory predictor, over an imitated group)
//   hold no values and are only allocated, so a prediction makes the allocations of a real rank.
// - Overlap (options.overlap; a CPU model needs a group that allows calls from another thread): during
//   the step's last backward, backward_hook() sees each parameter's gradient completed
//   (engine/autograd/grad_hook.h); when a bucket is complete (and every bucket before it started) it is
//   flagged on the backward's thread and its all-reduce runs on a communication thread (CPU) or is queued
//   on NCCL's stream after the compute stream's work so far (CUDA, never run) while backward goes on.
//   all_reduce_gradients() then starts what is left (in order), waits (CUDA: the compute stream waits),
//   and defines the gradients that only other ranks had. Without overlap it does all of it after backward.
// - Times (comm_times()): per step, how long the training thread waited after backward for the
//   all-reduces (the communication backward did not hide) and how long the all-reduce calls took in all.
// - Timeout: the group's (ProcessGroup::set_timeout); a bucket's all-reduce past it is an Error naming the
//   bucket, the step and this rank (a peer died or hangs); the caller aborts the job.
// - broadcast_state(): rank 0's parameters and buffers on every rank (at start, after --init or --resume).
// - sync_batch_norm() (--sync-bn): every BatchNorm2d in training mode sums its statistics over the ranks
//   (engine/ops/batch_norm_sync.h; the process-wide reducer, cleared by the destructor) through
//   all_reduce_in_order(), which runs on the training thread after the buckets already started have
//   landed (the communication thread is then idle), so every rank makes the same collectives in order.
// The data rule (which rows a rank takes, the loss weight) is engine/dist/shard.h; train_step and fit
// apply it when StepOptions::data_parallel is set. Must not know the CLI, files or data sources.
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/autograd/grad_hook.h"
#include "engine/dist/process_group.h"
#include "engine/nn/module.h"
#include "engine/train/device_buckets.h"
#include "engine/train/step_plan.h"

namespace kiln::train {

struct DataParallelOptions {
  int64_t bucket_bytes = 25ll << 20;       // PyTorch DDP's default bucket_cap_mb = 25
  int64_t first_bucket_bytes = 1ll << 20;  // a small first bucket, so the first all-reduce starts early
  bool overlap = true;                     // all-reduce during backward (CPU: a communication thread; CUDA: NCCL's stream)
};

// Bucket plan over gradient sizes in bytes, given in bucket order (reverse registration order):
// consecutive runs, each at most cap bytes (the first at most first_cap) or one oversized entry.
// Returns the indices (into `bytes`) of each bucket. Pure function: the unit tests pin it.
std::vector<std::vector<size_t>> plan_buckets(const std::vector<int64_t>& bytes, int64_t cap, int64_t first_cap);
// The buckets of a model's parameters: each bucket's indices into `params` (trainable f32 ones, reverse
// registration order, plan_buckets' runs). DataParallel and the memory predictor both use it.
std::vector<std::vector<size_t>> gradient_buckets(const std::vector<Tensor>& params, const DataParallelOptions& o);
// Bytes the buckets of `plan` hold on one rank: every gradient and one f32 defined-flag per parameter.
int64_t gradient_bucket_bytes(const std::vector<Tensor>& params, const std::vector<std::vector<size_t>>& plan);

class DataParallel {
 public:
  DataParallel(dist::ProcessGroup& group, nn::Module& model, DataParallelOptions options = {});
  ~DataParallel();  // stops the communication thread; the parameters keep no grad slot
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;
  dist::ProcessGroup& group() const { return group_; }
  int rank() const { return group_.rank(); }
  int size() const { return group_.size(); }
  bool overlaps() const { return overlap_; }

  // Every parameter and buffer of the model takes root's values.
  void broadcast_state(int root = 0);
  // train_step's named points, in order:
  // plan_step: completes a rank's plan over all ranks in one small all-reduce (rows and used rows of the
  // global batch, each micro-batch's rows per rank and the ranks that run it with a loss; --sync-bn: run
  // every micro-batch some rank runs), and sets the hook that starts the buckets during the last backward.
  void plan_step(StepPlan& plan);
  // Starts a step: no bucket started, no gradient seen (train_step calls it after zero_grad).
  void begin_step();
  // After the step's last backward: the gradients of the global batch on every rank (all_reduce_gradients),
  // and, when the ranks ran different forwards without --sync-bn (so dropout may have reserved
  // differently), every rank takes rank 0's generator offset.
  void end_backward(const StepPlan& plan);
  // The step's read-back values (loss and metric sums) summed over the ranks.
  void sum_step_values(double* values, int64_t n) { group_.all_reduce_sum(values, n); }
  // The hook to install (GradAccumulatedHookGuard) around the step's last backward; null without overlap.
  GradAccumulatedHook backward_hook();
  // The sum over ranks of every trainable parameter's gradient (see the header comment).
  void all_reduce_gradients();
  // Sums n doubles over the ranks now (training thread), after the buckets already started have landed.
  void all_reduce_in_order(double* data, int64_t n);
  // --sync-bn: installs all_reduce_in_order as the statistics reducer of batch norm (until destruction).
  // train_step then has every rank run the same forward passes (see train_step.h).
  void sync_batch_norm();
  bool syncs_batch_norm() const { return sync_bn_; }

  struct Bucket {
    std::vector<size_t> params;  // indices into model.parameters()
    int64_t numel = 0;           // f32 elements of the flat buffer (without the defined flags)
  };
  const std::vector<Bucket>& buckets() const { return buckets_; }
  int64_t bucket_bytes_total() const;  // bytes the buckets hold (0 with one rank: none are made)
  const std::vector<Tensor>& bucket_tensors() const { return buffers_; }  // (numel_k + P_k,) f32 each
  // Buckets whose all-reduce started during backward in the last step (overlap), for tests and reports.
  int64_t started_during_backward() const { return started_in_backward_; }

  // Communication times, summed over the steps since construction or reset_comm_times().
  struct CommTimes {
    int64_t steps = 0;            // steps measured (all_reduce_gradients calls with more than one rank)
    double wait_s = 0;            // the training thread waiting for the sums after backward: not hidden
    double all_reduce_s = 0;      // the buckets' all-reduce calls (communication thread or not), end to end
    double last_wait_s = 0;       // the last step's
    double last_all_reduce_s = 0;
    double mean_wait_s() const { return steps > 0 ? wait_s / (double)steps : 0.0; }
    double mean_all_reduce_s() const { return steps > 0 ? all_reduce_s / (double)steps : 0.0; }
  };
  CommTimes comm_times() const { return times_; }
  void reset_comm_times() { times_ = CommTimes{}; }
  // Optimizer steps done before the next all_reduce_gradients (a resumed run), for messages: 1-based steps.
  void set_steps_done(int64_t steps) {
    steps_done_ = steps;
    group_.set_context(str_cat("step ", steps + 1));
  }

 private:
  void gradient_ready(const TensorImpl* leaf);
  void pack(size_t bucket);    // the defined flags; zeros for undefined gradients, copies of foreign ones
  void start(size_t bucket);  // pack, then all-reduce (queued to the communication thread with overlap)
  void unpack(size_t bucket);  // gradients defined on another rank only become their slots
  void comm_loop();
  double reduce(size_t bucket);  // one bucket's all-reduce: its seconds; a Timeout becomes an Error naming it

  dist::ProcessGroup& group_;
  nn::Module& model_;
  bool overlap_ = false;      // buckets start during backward (CPU: on comm_; CUDA: NCCL's stream)
  bool comm_thread_ = false;  // host buckets: MPI on the communication thread comm_
  std::vector<Tensor> params_;        // model.parameters(), registration order
  std::vector<Bucket> buckets_;
  std::vector<Tensor> buffers_;            // bucket k: (numel_k + P_k,) f32 (none with one rank)
  std::vector<Tensor> slots_;              // per parameter: its gradient's view in its bucket (or undefined)
  std::unique_ptr<DeviceBuckets> device_;  // CUDA buckets: the NCCL communicator that sums them
  bool meta_ = false;                      // meta buckets: allocated, never read or summed
  // Per step: which parameters' gradients are complete, per bucket how many are left, the next bucket to start.
  std::unordered_map<const TensorImpl*, size_t> param_of_;  // leaf -> index into params_
  std::vector<size_t> bucket_of_;                           // param index -> bucket (SIZE_MAX: frozen)
  std::vector<char> ready_;
  std::vector<size_t> left_;
  size_t next_start_ = 0;
  int64_t started_in_backward_ = 0;
  // The communication thread: buckets to all-reduce, how many are done, the first error.
  std::thread comm_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<size_t> queue_;
  size_t done_ = 0;
  bool stop_ = false;
  std::exception_ptr error_;
  double step_all_reduce_s_ = 0;  // this step's all-reduce seconds (under mu_ with overlap)
  CommTimes times_;
  std::atomic<int64_t> steps_done_{0};
  bool sync_bn_ = false;
};

}  // namespace kiln::train
