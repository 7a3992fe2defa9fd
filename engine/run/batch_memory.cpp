// Batches sized by predicted memory (see batch_memory.h).
#include "engine/run/batch_memory.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine/autograd/grad_mode.h"
#include "engine/dist/shard.h"
#include "engine/memory/alloc_config.h"
#include "engine/memory/caching_allocator.h"
#include "engine/nn/init.h"
#include "engine/ops/ops.h"
#include "engine/train/memory_peak.h"
#include "engine/run/mem_predict.h"
#include "engine/run/run_model.h"

namespace kiln {

namespace {

std::string human(int64_t b) {
  char buf[32];
  return format_bytes(b, buf, sizeof buf);
}

// The model must take every bucket size: a meta forward (no grad) of one image at each size and at
// one size more (so that a single bucket does not hide a fixed-size model), the model built for the
// smallest size (a fixed-size model's classifier is smallest there: small_cnn's for 512 px alone
// would take 512 MiB); the outputs must agree in shape.
void check_any_size(const RunConfig& c, int64_t num_classes, int64_t channels, std::vector<int> sizes) {
  const int built = sizes.front();
  sizes.push_back(sizes.back() + kBucketMultiple);
  nn::ModulePtr m;
  {
    nn::init::SkipRandomInitGuard structure_only;  // shapes only
    m = build_model(c.model, num_classes, channels, built);
  }
  m->to(Device::meta());
  m->eval();
  NoGradGuard no_grad;
  Shape out_shape;
  for (int s : sizes) {
    Shape got;
    try {
      got = m->forward(empty({1, channels, s, s}, DType::f32, Device::meta())).sizes();
    } catch (const Error& e) {
      throw Error(str_cat("--batch-memory: model ", c.model, " does not take ", s, "x", s, " px inputs (built for ",
                          built, "x", built, "): ", e.what(), ". Batches sized by memory keep each size bucket at ",
                          "its own resolution, so the model must be fully convolutional or end in adaptive pooling ",
                          "(resnet18, resnet34, resnet50, ...); a fixed-size model (small_cnn, or a model file: it takes ",
                          "the one size it is built for) cannot train on it"));
    }
    if (out_shape.empty()) out_shape = got;
    KILN_CHECK(got == out_shape, "--batch-memory: model ", c.model, " gives output ", shape_str(got), " for ", s, "x",
               s, " px inputs but ", shape_str(out_shape), " for ", sizes.front(), "x", sizes.front(),
               ": the model must be fully convolutional or end in adaptive pooling");
  }
}

}  // namespace

BatchMemoryRun::BatchMemoryRun(const RunConfig& c, int64_t num_classes, BucketedImageSource& train,
                               BucketedImageSource* val, Device device, std::ostream& log)
    : train_(train), device_(device) {
  KILN_CHECK(c.accum == 1, "--batch-memory: --accum ", c.accum, " is refused: each step's batch is already sized "
             "to the memory budget (give a larger --batch-memory for bigger batches)");
  KILN_CHECK(!c.drop_last, "--batch-memory: --drop-last is refused: every bucket's last batch is kept (shorter)");
  const int segments = parse_recompute_option(c.recompute);
  KILN_CHECK(segments >= 0, "--batch-memory: --recompute auto is refused (give a segment count: the budget then "
             "sizes the batches)");
  budget_ = (int64_t)parse_bytes(c.batch_memory);
  KILN_CHECK(budget_ > 0, "--batch-memory ", c.batch_memory, ": the budget must be > 0 bytes");
  std::vector<int> sizes;
  for (const SizeBucket& b : train.buckets()) sizes.push_back(b.size);
  if (val)
    for (const SizeBucket& b : val->buckets()) sizes.push_back(b.size);
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  KILN_CHECK(!sizes.empty(), "--batch-memory: no training images");
  check_any_size(c, num_classes, train.channels(), sizes);

  MemConfig mc;
  mc.train = c;
  mc.train.num_classes = num_classes;
  mc.train.device = device.str();
  mc.train.accum = 1;
  mc.in_channels = train.channels();
  mc.num_classes = num_classes;
  mc.recompute = segments;
  // Data-parallel: the budget is each rank's; a rank's batch is searched (its prediction counts the
  // gradient buckets) and the planned global batch is that times the ranks.
  ranks_ = (int)std::max<int64_t>(1, c.ranks);
  mc.ranks = ranks_;
  // Predictions cached per (size, batch): the search's probes, the buckets' short last batches.
  std::map<std::pair<int, int64_t>, MemPrediction> cache;
  auto predict = [&](int size, int64_t batch) -> const MemPrediction& {
    auto it = cache.find({size, batch});
    if (it != cache.end()) return it->second;
    MemConfig k = mc;
    k.image_size = size;
    k.train.batch = batch;
    return cache.emplace(std::make_pair(size, batch), predict_memory(k)).first->second;
  };
  // A batch too small for the model's batch norm (N x H x W = 1 at some layer: a training-mode batch norm has
  // nothing to normalize over) is no batch at all: the search starts above it, and a bucket whose short last
  // batch would be one is given another batch.
  auto valid = [&](int size, int64_t b) {
    try {
      (void)predict(size, b);
      return true;
    } catch (const Error& e) {
      if (!is_batch_too_small_for_batch_norm(e)) throw;
      return false;
    }
  };
  auto smallest_valid = [&](int size, int64_t cap) {
    for (int64_t b = 1; b <= cap; ++b)
      if (valid(size, b)) return b;
    return cap + 1;
  };
  auto fits = [&](int size) {
    return [&, size](int64_t b) { return predict(size, b).peak_allocated <= budget_; };
  };
  // The largest size first: its smallest batch must fit, or nothing is planned.
  {
    const int s = sizes.back();
    const int64_t least = smallest_valid(s, 64);
    KILN_CHECK(least <= 64, "--batch-memory: ", s, "x", s, " px images are too small for ", c.model,
               "'s batch norm at any batch up to 64 (it normalizes over 1 value per channel)");
    const MemPrediction& one = predict(s, least);
    KILN_CHECK(one.peak_allocated <= budget_, "--batch-memory ", c.batch_memory, ": one ", s, "x", s,
               " px image (the largest size bucket) does not fit: its predicted peak allocated is ",
               human(one.peak_allocated), " (params ", human(one.params), ", activations ", human(one.activations),
               ") against the budget of ", human(budget_), " (", budget_, " bytes); give a larger --batch-memory, ",
               "--amp or --recompute N, or leave the largest images out");
  }
  std::map<int, int64_t> batch_of;  // per size
  for (int s : sizes) {
    int64_t cap = 0;  // the most images of this size in one epoch's bucket
    for (const SizeBucket& b : train.buckets())
      if (b.size == s) cap = std::max<int64_t>(cap, (int64_t)b.members.size());
    if (val)
      for (const SizeBucket& b : val->buckets())
        if (b.size == s) cap = std::max<int64_t>(cap, (int64_t)b.members.size());
    cap = std::max<int64_t>(1, (cap + ranks_ - 1) / ranks_);  // per rank
    // First guess: peak allocated is close to affine in the batch (bytes per sample from batch 1
    // and 2); the search then settles the exact answer on the meta device.
    const int64_t least = smallest_valid(s, cap);  // the smallest batch batch norm can train on
    KILN_CHECK(least <= cap, "--batch-memory: the ", s, "x", s, " px bucket has ", cap, " images per rank, fewer "
               "than the ", least, " that ", c.model, "'s batch norm needs at that size (it would normalize over 1 "
               "value per channel): leave those images out or use larger ones");
    int64_t guess = least;
    if (cap >= least + 1 && predict(s, least).peak_allocated <= budget_) {
      const int64_t p1 = predict(s, least).peak_allocated, per = predict(s, least + 1).peak_allocated - p1;
      guess = per > 0 ? least + (budget_ - p1) / per : cap;
    }
    // The search over [least, cap], shifted to largest_fitting_batch's [1, n].
    const auto fit = fits(s);
    int64_t batch = largest_fitting_batch(
        cap - least + 1, [&](int64_t k) { return fit(k + least - 1); }, guess - least + 1);
    KILN_CHECK(batch >= 1, "--batch-memory ", c.batch_memory, ": ", least, " ", s, "x", s, " px image",
               least > 1 ? "s (the fewest batch norm can train on) do" : " does", " not fit: the predicted peak "
               "allocated is ", human(predict(s, least).peak_allocated), " against the budget of ", human(budget_));
    batch += least - 1;
    // Every bucket of this size must not end its epoch with a batch below `least` rows.
    for (const SizeBucket& b : train.buckets()) {
      if (b.size != s) continue;
      const int64_t n = (int64_t)b.members.size();
      int64_t t = batch;
      while (t > least && n % t != 0 && n % t < least) --t;
      if (n % t != 0 && n % t < least)
        throw Error(str_cat("--batch-memory: the ", s, "x", s, " px bucket of ", n, " images ends every batch size "
                            "from ", least, " to ", batch, " with a last batch too small for ", c.model,
                            "'s batch norm (fewer than ", least, " images)"));
      if (t != batch)
        log << "batch-memory: " << s << "x" << s << " px: batch " << t << " instead of " << batch << ", so the "
            << "epoch's last batch (" << n % t << " images) is not too small for batch norm\n";
      batch = t;
    }
    batch_of[s] = batch;
  }
  std::vector<int64_t> batches;
  for (const SizeBucket& b : train.buckets()) batches.push_back(batch_of[b.size] * ranks_);
  train.set_batches(batches);
  if (val) {
    // Evaluation needs less than a training step (no gradients, no saved activations): the same batches fit
    // (a rank's: validation runs on rank 0 alone).
    std::vector<int64_t> vb;
    for (const SizeBucket& b : val->buckets()) vb.push_back(batch_of[b.size]);
    val->set_batches(vb);
  }

  log << "batch-memory: budget " << human(budget_) << " for each step's predicted peak allocated bytes (meta-device "
      << "runs of the training step; reserved shown beside); lr rule: the loss is the mean over each batch's samples "
      << "and --lr " << c.lr << " is used for every batch size (not scaled with the batch)"
      << (ranks_ > 1 ? str_cat("; the budget and batches are each rank's, ", ranks_, " ranks per step") : "") << "\n";
  const int64_t capacity = device_budget(device);
  for (const SizeBucket& b : train.buckets()) {
    BucketMemory m;
    m.size = b.size;
    m.images = (int64_t)b.members.size();
    m.batch = b.batch / ranks_;
    const MemPrediction& p = predict(b.size, m.batch);
    m.predicted_first = p.first.allocated;
    m.predicted_steady = p.steady.allocated;
    m.predicted_reserved = p.peak_reserved;
    // The bucket's short last batch, predicted now (before the real model exists: on a simulated
    // device the meta run's throwaway model shares its memory).
    // Data-parallel: rank 0's share of it (the first ranks take the extra rows), the rank that reports.
    if (b.members.size() % (size_t)b.batch)
      predict(b.size, dist::shard_range((int64_t)(b.members.size() % (size_t)b.batch), 0, ranks_).rows);
    log << "batch-memory: " << b.size << "x" << b.size << " px: " << m.images << " images, batch " << m.batch
        << (ranks_ > 1 ? str_cat(" per rank (", b.batch, " per step)") : "") << " ("
        << (m.images + b.batch - 1) / b.batch << " steps/epoch), predicted peak allocated "
        << (ranks_ > 1 ? "per rank " : "") << human(p.peak_allocated) << ", reserved " << human(p.peak_reserved)
        << "\n";
    if (p.peak_reserved > capacity)
      log << "warning: --batch-memory: the " << b.size << " px batches' predicted peak reserved "
          << human(p.peak_reserved) << " exceeds the device's " << human(capacity)
          << " (the budget covers allocated bytes; the allocator's slack comes on top)\n";
    buckets_.push_back(m);
  }
  // Short batches (a bucket's last, or one with bad samples) by (size, samples), for after_step.
  for (auto& [key, p] : cache) short_.emplace(key, std::make_pair(p.first.allocated, p.steady.allocated));
}


void BatchMemoryRun::after_step(const train::FitStep& fs) {
  const size_t k = train_.current_bucket();
  if (k >= buckets_.size() || !fs.result) return;
  BucketMemory& m = buckets_[k];
  last_samples_ = fs.result->used_samples;  // the step's (global) batch
  last_size_ = m.size;
  ++samples_per_step_[last_samples_];
  // This rank's rows (what its prediction is for); none when the step's loss was left out (no forward).
  const int64_t n = fs.result->undefined ? 0 : fs.rows;
  const int64_t peak = peak_memory_bytes(device_);
  int64_t reserved = -1;
  if (CachingAllocator* a = caching_allocator_for(device_)) reserved = a->stats().total.reserved.peak;
  epoch_peak_ = std::max(epoch_peak_, peak);
  const bool first = steps_++ == 0;
  if (peak < 0) return;
  if (first) first_step_peak_ = peak;
  max_over_budget_ = std::max(max_over_budget_, peak - budget_);
  // A resumed run's first step starts with the saved optimizer state but no gradients: neither
  // predicted state (first step, later steps), so it is not compared.
  if (first && fs.global_step > 0) return;
  auto it = short_.find({m.size, n});
  if (it == short_.end()) return;  // a batch shortened by bad samples: not predicted
  const int64_t predicted = first ? it->second.first : it->second.second;
  if (n == m.batch && !first) {
    ++m.steps;
    m.measured_min = m.measured_min < 0 ? peak : std::min(m.measured_min, peak);
    m.measured_max = std::max(m.measured_max, peak);
    m.measured_reserved_max = std::max(m.measured_reserved_max, reserved);
  }
  const double rel = predicted > 0 ? (double)(peak - predicted) / (double)predicted : 0.0;
  worst_over_ = std::max(worst_over_, rel);
  worst_under_ = std::min(worst_under_, rel);
  ++compared_;
}

std::string BatchMemoryRun::progress_text() const {
  return last_samples_ > 0 ? str_cat("  batch ", last_samples_, " x ", last_size_, "px") : "";
}

int64_t BatchMemoryRun::take_epoch_peak() {
  taken_peak_ = epoch_peak_;
  epoch_peak_ = -1;
  return taken_peak_;
}

std::string BatchMemoryRun::epoch_text() const {
  char line[200];
  std::snprintf(line, sizeof line, "largest step peak %s allocated, budget %s; measured vs predicted %+.2f%% to %+.2f%% "
                "over %lld steps so far", human(taken_peak_).c_str(), human(budget_).c_str(), 100 * worst_under_,
                100 * worst_over_, (long long)compared_);
  return line;
}

nlohmann::json BatchMemoryRun::to_json() const {
  nlohmann::json j;
  j["budget_bytes"] = budget_;
  j["rule"] = str_cat("size buckets: shorter side rounded down to a multiple of ", kBucketMultiple,
                      " px; per bucket the largest batch whose predicted peak allocated fits the budget");
  j["lr_rule"] = "loss = mean over each batch's samples; lr not scaled with the batch";
  j["ranks"] = ranks_;  // > 1: the budget, batches and peaks are each rank's (rank 0's measured)
  j["buckets"] = nlohmann::json::array();
  for (const BucketMemory& m : buckets_)
    j["buckets"].push_back({{"size", m.size},
                            {"images", m.images},
                            {"batch", m.batch},
                            {"predicted_peak_allocated_first_step", m.predicted_first},
                            {"predicted_peak_allocated", m.predicted_steady},
                            {"predicted_peak_reserved", m.predicted_reserved},
                            {"full_steps_measured", m.steps},
                            {"measured_peak_allocated_min", m.measured_min},
                            {"measured_peak_allocated_max", m.measured_max},
                            {"measured_peak_reserved_max", m.measured_reserved_max}});
  nlohmann::json d = nlohmann::json::object();
  for (const auto& [n, count] : samples_per_step_) d[std::to_string(n)] = count;
  j["samples_per_step"] = d;  // the effective batch's distribution: samples -> steps
  j["steps"] = steps_;
  j["steps_compared"] = compared_;
  j["first_step_peak_allocated"] = first_step_peak_;
  j["measured_vs_predicted_max"] = worst_over_;   // (measured - predicted) / predicted, largest
  j["measured_vs_predicted_min"] = worst_under_;  // and smallest, over every compared step
  j["max_measured_minus_budget"] = max_over_budget_;  // <= 0: every step within the budget
  return j;
}

}  // namespace kiln
