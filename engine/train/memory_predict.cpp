// Meta-device training steps through a fresh caching allocator (see memory_predict.h).
#include "engine/train/memory_predict.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <map>

#include "engine/core/generator.h"
#include "engine/core/meta_target.h"
#include "engine/dist/shard.h"
#include "engine/memory/device_present.h"
#include "engine/memory/provider.h"
#include "engine/ops/ops.h"
#include "engine/memory/host_scratch.h"
#include "engine/train/meta_session.h"
#include "engine/train/segment_task.h"

namespace kiln::train {

namespace {

// Activation bytes per module path among the live blocks, in the model's module order (pre-order,
// which is forward order for kiln's models); paths outside the tree last.
std::vector<std::pair<std::string, int64_t>> activations_by_module(const CachingAllocator& a, nn::Module& model) {
  std::vector<BlockInfo> blocks;
  for (const SegmentInfo& s : a.segments())
    for (const BlockInfo& b : s.blocks)
      if (b.state == "allocated" && b.tag == MemoryTag::activation) blocks.push_back(b);
  std::sort(blocks.begin(), blocks.end(), [](const BlockInfo& x, const BlockInfo& y) { return x.address < y.address; });
  std::vector<std::pair<std::string, int64_t>> out;
  std::map<std::string, size_t> index;
  for (const BlockInfo& b : blocks) {
    const std::string m = b.module.empty() ? "(top level)" : b.module;
    auto it = index.find(m);
    if (it == index.end()) {
      index[m] = out.size();
      out.emplace_back(m, (int64_t)b.size);
    } else {
      out[it->second].second += (int64_t)b.size;
    }
  }
  std::map<std::string, size_t> order;
  for (auto& [name, m] : model.named_modules()) order.emplace(name.empty() ? "(top level)" : name, order.size());
  auto rank = [&](const std::string& m) {
    auto it = order.find(m);
    return it == order.end() ? order.size() : it->second;
  };
  std::stable_sort(out.begin(), out.end(), [&](const auto& x, const auto& y) { return rank(x.first) < rank(y.first); });
  return out;
}

}  // namespace

StepMemory predict_step_memory(const ModelFactory& make_model, const OptimizerFactory& make_optimizer,
                               const PredictOptions& o) {
  KILN_CHECK(o.batch >= 1 && o.step.accum >= 1 && o.step.accum <= o.batch, "predict memory: batch ", o.batch,
             " and accum ", o.step.accum, " must be >= 1 with accum <= batch");
  KILN_CHECK(!o.input_shape.empty(), "predict memory: no input shape given");
  for (int64_t d : o.input_shape) KILN_CHECK(d >= 1, "predict memory: bad input shape ", shape_str(o.input_shape));
  KILN_CHECK(o.recompute >= 0, "predict memory: recompute segments must be >= 0, got ", o.recompute);
  StepMemory r;
  const Device target = o.target;
  r.target = target.str();
  const AllocatorConfig cfg = meta_policy_for(target, &r.policy_assumed);
  MetaTargetScope imitate(target);
  const uint64_t seed_before = global_rng().seed, offset_before = global_rng().offset;

  MetaSession session(cfg);
  {
    const AllocatorConfig& eff = session.alloc_.config();
    r.expandable = eff.expandable;
    r.granule = eff.expandable ? (int64_t)eff.granule : 0;
    r.policy = eff.expandable
                   ? "expandable arena, granule " + format_bytes((double)eff.granule)
                   : "segments: requests <= " + format_bytes((double)eff.small_max) + " in " +
                         format_bytes((double)eff.small_segment) + " segments, larger ones rounded to " +
                         format_bytes((double)eff.large_round) + " (those under half of " +
                         format_bytes((double)eff.large_segment) + " share segments of that size)";
  }
  {
    // The model is built on the CPU (constructors initialize there) and moved; only the meta
    // copies stay.
    nn::ModulePtr model;
    {
      HostScratchScope scratch;  // the CPU's own allocator sees none of the build
      model = make_model();
    }
    KILN_CHECK(model != nullptr, "predict memory: the model factory returned no model");
    r.num_stages = (int)model->stages().size();
    model->rehome(Device::meta());
    model->train();
    if (o.recompute > 0) model->set_recompute_segments(o.recompute);
    std::unique_ptr<optim::Optimizer> opt = make_optimizer(*model);
    if (o.create_state) opt->create_state();  // as a run makes it: every state tensor at construction
    // A data-parallel rank: the trainer's DataParallel, made where the trainer makes it (after the
    // optimizer, before the class weights), over ranks that exist only in imitation. Its buckets are meta
    // tensors from the imitated allocator and the gradients live in them, as on a real rank.
    std::unique_ptr<dist::ProcessGroup> imitated;
    std::unique_ptr<DataParallel> dp;
    r.ranks = std::max(1, o.ranks);
    if (o.ranks > 1) {
      imitated = dist::make_imitated_process_group(0, o.ranks);
      dp = std::make_unique<DataParallel>(*imitated, *model, o.data_parallel);
      r.buckets = dp->bucket_bytes_total();
    }
    Tensor class_weights;  // the trainer's class-weight tensor (allocated untagged, like train's)
    if (o.loss_weight_classes > 0) class_weights = empty({o.loss_weight_classes}, DType::f32, Device::meta());
    // The trainer's LossScaler (its state tensors come after the class weights, as in training),
    // so under amp autocast's 16-bit weight copies and (f16) the scaler's ops are replayed as well.
    optim::LossScalerOptions so = o.scaler;
    so.enabled = o.amp && o.amp_dtype == DType::f16;
    optim::LossScaler scaler(so, Device::meta());
    // A rank's batch: o.batch rows, or with accumulation its shares of the global micro-batches
    // (engine/dist/shard.h), rank 0's (the first ranks take the extra rows: the largest share).
    std::vector<int64_t> micro_rows;
    const int64_t n_step =
        o.ranks > 1 ? (int64_t)dist::RankShard{0, o.ranks, o.step.accum}
                          .places(dist::global_batch(o.batch, o.ranks), &micro_rows)
                          .size()
                    : o.batch;
    std::vector<int64_t> x_shape = {n_step}, y_shape = {n_step};
    x_shape.insert(x_shape.end(), o.input_shape.begin(), o.input_shape.end());
    y_shape.insert(y_shape.end(), o.target_shape.begin(), o.target_shape.end());

    // The step is the trainer's own train::train_step; only the batch comes from here.
    auto step = [&](bool last) {
      // The loader delivers the whole step's batch before the step; micro-batches are views of it.
      Tensor x_step, y_step;
      {
        MemoryScope ds(MemoryTag::data);
        x_step = empty(x_shape, DType::f32, Device::meta());
        y_step = empty(y_shape, o.target_dtype, Device::meta());
      }
      StepOptions st = o.step;
      st.autocast = o.amp;
      st.autocast_dtype = o.amp_dtype;
      st.data_parallel = dp.get();
      if (o.segmentation) use_segmentation_step(&st, class_weights, o.segmentation_loss);
      if (!st.loss) st.loss = cross_entropy_loss(class_weights);
      if (last)
        st.hooks.after_forward = [&, user = o.step.hooks.after_forward](const MicroBatch& b) {
          if (user) user(b);
          if (b.offset + b.size < n_step) return;  // the end of the last micro-batch's forward
          r.layer_activations = activations_by_module(session.alloc_, *model);
          r.activations = 0;
          for (auto& [n, bytes] : r.layer_activations) r.activations += bytes;
        };
      train_step(*model, *opt, scaler, Batch{x_step, y_step, micro_rows}, st);
    };

    session.begin_step();
    step(false);
    r.first = session.end_step();
    session.begin_step();
    step(!o.detail);
    r.steady = session.end_step();
    if (o.detail) {
      // One more identical step: the event trace and the segment map at the known peak.
      session.alloc_.enable_trace(size_t(1) << 20);
      session.capture_segments_at(r.steady.allocated);
      session.begin_step();
      step(true);
      r.segments_at_peak = session.segments_;
      r.trace = session.alloc_.chrome_trace();
      session.alloc_.enable_trace(0);
    }
    const MemoryStats s = session.alloc_.stats();
    r.params = s.tag_allocated[(int)MemoryTag::param].current;
    r.grads = s.tag_allocated[(int)MemoryTag::grad].current;
    r.optimizer = s.tag_allocated[(int)MemoryTag::optimizer].current;
    r.data = std::max(r.first.tag_peak[(int)MemoryTag::data], r.steady.tag_peak[(int)MemoryTag::data]);
  }
  global_rng().seed = seed_before;
  global_rng().offset = offset_before;
  const StepPeak& hi = r.first.allocated >= r.steady.allocated ? r.first : r.steady;
  r.peak_allocated = hi.allocated;
  r.peak_reserved = std::max(r.first.reserved, r.steady.reserved);
  r.temporaries_at_peak = hi.at_peak[(int)MemoryTag::temporary];
  r.slack = r.peak_reserved - r.peak_allocated;
  return r;
}

int64_t largest_fitting_batch(int64_t cap, const std::function<bool(int64_t)>& fits, int64_t guess) {
  if (cap < 1 || !fits(1)) return 0;
  guess = std::min(std::max<int64_t>(guess, 1), cap);
  int64_t lo = 1, hi = cap + 1;  // lo fits; hi does not (cap + 1: past the cap)
  if (guess > 1 && !fits(guess)) {
    hi = guess;  // gallop down from the guess
    for (int64_t step = 1;; step *= 2) {
      const int64_t n = hi - step;
      if (n <= 1) break;
      if (fits(n)) {
        lo = n;
        break;
      }
      hi = n;
    }
  } else {
    lo = guess;  // gallop up from the guess
    for (int64_t step = 1;; step *= 2) {
      const int64_t n = std::min(lo + step, cap);
      if (n == lo) return cap;  // lo is the cap
      if (!fits(n)) {
        hi = n;
        break;
      }
      lo = n;
    }
  }
  while (hi - lo > 1) {  // bisection: lo fits, hi does not
    const int64_t mid = lo + (hi - lo) / 2;
    if (fits(mid)) lo = mid;
    else hi = mid;
  }
  return lo;
}

MaxBatchResult max_batch_for_budget(const std::function<int64_t(int64_t)>& peak_of, int64_t budget, double margin) {
  KILN_CHECK(margin >= 0 && margin < 1, "--margin must be in [0, 1), got ", margin);
  const double limit = (double)budget * (1.0 - margin);
  MaxBatchResult r;
  r.batch = largest_fitting_batch(int64_t(1) << 24, [&](int64_t b) {
    const int64_t peak = peak_of(b);
    r.probes.emplace_back(b, peak);
    return (double)peak <= limit;
  });
  for (const auto& [b, peak] : r.probes)
    if (b == r.batch) r.peak_reserved = peak;
  return r;
}

int64_t device_budget(Device d) {
  std::string why;
  KILN_CHECK(device_present(d, &why), why, ": give --device-memory (the memory of the card to predict for, e.g. 8G)");
  CachingAllocator* a = caching_allocator_for(d);
  if (a) return (int64_t)a->stats().capacity;
  return (int64_t)sysconf(_SC_PHYS_PAGES) * (int64_t)sysconf(_SC_PAGE_SIZE);
}

}  // namespace kiln::train
