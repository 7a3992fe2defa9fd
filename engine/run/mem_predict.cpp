// `kiln mem` / `kiln train` configurations as engine/train memory predictions (see mem_predict.h).
#include "engine/run/mem_predict.h"

#include <algorithm>
#include <cmath>

#include "engine/nn/init.h"
#include "engine/nn/recompute.h"
#include "engine/ops/ops.h"
#include "engine/train/memory_peak.h"
#include "engine/core/devices.h"
#include "kernels/cpu/threads.h"
#include "models/registry.h"
#include "models/unet.h"
#include "engine/run/run_model.h"

namespace kiln {

namespace {

int64_t num_classes_of(const MemConfig& c) { return c.train.num_classes > 0 ? c.train.num_classes : c.num_classes; }

}  // namespace

// depth + 1 for a UNet (its recompute levels), else 0.
int unet_recompute_levels(const std::string& model, int64_t num_classes, int64_t in_channels, int64_t image_size) {
  if (!models::is_segmentation_model(model)) return 0;
  nn::ModulePtr m = build_model(model, num_classes, in_channels, image_size);
  auto* u = dynamic_cast<models::UNet*>(m.get());
  return u ? (int)u->options().depth + 1 : 0;
}

int model_num_stages(const MemConfig& c) {
  nn::ModulePtr m = build_model(c.train.model, num_classes_of(c), c.in_channels, c.image_size);
  return (int)m->stages().size();
}

MemPrediction predict_memory(const MemConfig& c) {
  KILN_CHECK(c.train.batch >= 1 && c.train.accum >= 1 && c.train.accum <= c.train.batch, "mem: --batch ",
             c.train.batch, " and --accum ", c.train.accum, " must be >= 1 with accum <= batch");
  KILN_CHECK(c.image_size >= 1 && c.in_channels >= 1, "mem: bad --image-size ", c.image_size, " or --in-channels ",
             c.in_channels);
  KILN_CHECK(c.recompute >= 0, "mem: --checkpoint must be >= 0, got ", c.recompute);
  train::PredictOptions o;
  o.batch = c.train.batch;
  o.input_shape = {c.in_channels, c.image_size, c.image_size};
  // Segmentation models (unet*): per-pixel logits (N, K, H, W) and a class-index mask per sample.
  if (models::is_segmentation_model(c.train.model)) o.target_shape = {c.image_size, c.image_size};
  o.loss_weight_classes = c.train.class_weights.empty() ? 0 : num_classes_of(c);
  if (c.train.task == "segment") {  // masks (B, H, W) and the per-pixel step of engine/train/segment_task.h
    o.target_shape = {c.image_size, c.image_size};
    o.segmentation = true;
    o.segmentation_loss = c.train.loss;
  }
  o.recompute = c.recompute;
  o.amp = c.train.amp;
  o.amp_dtype = c.train.amp_dtype;
  o.scaler.init_scale = c.train.amp_init_scale;
  o.scaler.growth_interval = c.train.amp_growth_interval;
  o.step.accum = c.train.accum;
  o.step.clip = c.train.clip;
  o.step.lr = c.train.lr;
  o.target = c.train.device == "auto" ? resolve_device("auto") : Device::parse(c.train.device);
  RunConfig layout = c.train;  // a run's config arrives resolved (no change); kiln mem's is resolved here
  resolve_channels_last(&layout, o.target);
  o.step.channels_last = layout.channels_last;
  o.detail = c.detail;
  o.create_state = true;  // a run's optimizer (engine/run/run_setup.h)
  o.ranks = c.ranks;
  o.data_parallel.bucket_bytes = std::max<int64_t>(1, std::llround(c.train.bucket_mb * (1 << 20)));
  o.data_parallel.first_bucket_bytes = std::min<int64_t>(o.data_parallel.bucket_bytes, 1 << 20);
  // The CPU convolution's scratch depends on the thread count (kernels/cpu/conv2d.h): predict with
  // the run's (--threads; 0: the current count, kiln's default).
  cpu::ThreadScope threads(o.target.is_cpu() ? c.train.threads : 0);
  MemPrediction r;
  r.cpu_threads = o.target.is_cpu() ? cpu::num_threads() : 0;
  static_cast<StepMemory&>(r) = train::predict_step_memory(
      [&] {
        nn::init::SkipRandomInitGuard structure_only;  // the meta step needs shapes, not values
        return build_model(c.train.model, num_classes_of(c), c.in_channels, c.image_size);
      },
      [&](nn::Module& m) { return build_optimizer(c.train, m); }, o);
  r.config = c;
  return r;
}

int recomputed_stages(int stages, int segments) {
  if (segments <= 1 || stages <= 0) return 0;
  const auto b = nn::segment_bounds((size_t)stages, segments);
  return (int)b.back().first;
}

int64_t step_peak_of(const MemConfig& c) {
  MemConfig k = c;
  k.detail = false;
  return predict_memory(k).peak_reserved;
}

int choose_recompute(const MemConfig& c, int64_t budget, std::vector<std::pair<int, int64_t>>* tried,
                     const PeakOf& peak_of) {
  const int stages = model_num_stages(c);
  std::vector<int> candidates = {0};
  // A UNet's N counts resolution levels (models/unet.h): candidates 1 .. depth + 1, cost N.
  const int unet_levels = unet_recompute_levels(c.train.model, num_classes_of(c), c.in_channels, c.image_size);
  for (int s = unet_levels > 0 ? 1 : 2; s <= (unet_levels > 0 ? unet_levels : stages); ++s) candidates.push_back(s);
  int best = -1, best_cost = 1 << 30;
  int64_t best_peak = 0, smallest = INT64_MAX;
  for (int s : candidates) {
    MemConfig k = c;
    k.recompute = s;
    k.detail = false;
    const int64_t peak = peak_of(k);
    if (tried) tried->emplace_back(s, peak);
    smallest = std::min(smallest, peak);
    const int cost = unet_levels > 0 ? s : recomputed_stages(stages, s);
    if (peak <= budget && (best < 0 || cost < best_cost || (cost == best_cost && peak < best_peak))) {
      best = s, best_cost = cost, best_peak = peak;
    }
  }
  char need[32], have[32];
  KILN_CHECK(best >= 0, "--checkpoint auto: no segment count fits the budget of ",
             format_bytes(budget, have, sizeof have), "; the smallest predicted peak is ",
             format_bytes(smallest, need, sizeof need), " (try a smaller --batch, --accum or --image-size)");
  return best;
}

MaxBatchResult find_max_batch(const MemConfig& c, int64_t budget, double margin, const PeakOf& peak_of, int64_t cap) {
  KILN_CHECK(margin >= 0 && margin < 1, "--margin must be in [0, 1), got ", margin);
  const double limit = (double)budget * (1.0 - margin);
  MaxBatchResult r;
  auto peak_at = [&](int64_t b) {
    for (const auto& [pb, peak] : r.probes)
      if (pb == b) return peak;
    MemConfig k = c;
    k.train.batch = b;
    k.train.accum = std::min<int64_t>(c.train.accum, b);
    k.detail = false;
    const int64_t peak = peak_of(k);
    r.probes.emplace_back(b, peak);
    return peak;
  };
  r.batch = train::largest_fitting_batch(cap, [&](int64_t b) { return (double)peak_at(b) <= limit; });
  // The search assumes the peak grows with the batch, which reserved bytes need not: the answer is checked
  // on its own (it fits: the search only returns batches it saw fit).
  if (r.batch >= 1) r.peak_reserved = peak_at(r.batch);
  return r;
}

nlohmann::json MemPrediction::to_json() const {
  auto tags = [](const TagBytes& b) {
    nlohmann::json j;
    for (int t = 0; t < kNumMemoryTags; ++t) j[tag_name((MemoryTag)t)] = b[t];
    return j;
  };
  auto step = [&](const StepPeak& p) {
    return nlohmann::json{{"peak_allocated", p.allocated}, {"peak_reserved", p.reserved},
                          {"tag_peak", tags(p.tag_peak)}, {"tags_at_peak", tags(p.at_peak)}};
  };
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& [m, b] : layer_activations) layers.push_back({{"module", m}, {"bytes", b}});
  const RunConfig& t = config.train;
  return {{"model", t.model},
          {"task", t.task},
          {"batch", t.batch},
          {"accum", t.accum},
          {"image_size", config.image_size},
          {"in_channels", config.in_channels},
          {"num_classes", t.num_classes > 0 ? t.num_classes : config.num_classes},
          {"optimizer", t.optimizer},
          {"momentum", t.momentum},
          {"checkpoint", config.recompute},
          {"amp", t.amp},
          {"amp_dtype", t.amp ? nlohmann::json(dtype_name(t.amp_dtype)) : nlohmann::json()},
          {"num_stages", num_stages},
          {"device", target},
          {"cpu_threads", cpu_threads},
          {"parameters", params},
          {"gradients", grads},
          {"optimizer_state", optimizer},
          {"activations", activations},
          {"temporaries_at_peak", temporaries_at_peak},
          {"input_data", data},
          {"allocator_slack", slack},
          {"peak_allocated", peak_allocated},
          {"peak_reserved", peak_reserved},
          {"first_step", step(first)},
          {"steady_step", step(steady)},
          {"layer_activations", layers},
          {"ranks", ranks},
          {"bucket_bytes", buckets}};
}

bool is_batch_too_small_for_batch_norm(const Error& e) {
  // engine/ops/nn_norm.cpp's and nn_norm_sync.cpp's check, the one error a batch can give by its size alone.
  return std::string(e.what()).find("expected more than 1 value per channel") != std::string::npos;
}

}  // namespace kiln
