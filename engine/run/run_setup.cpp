// The pieces a run trains with (see run_setup.h).
#include "engine/run/run_setup.h"

#include <cmath>

#include "engine/core/generator.h"
#include "engine/memory/host_scratch.h"
#include "engine/nn/init.h"
#include "engine/ops/ops.h"
#include "engine/run/run_model.h"
#include "engine/train/segment_task.h"

namespace kiln {

void build_model_and_optimizer(RunSetup& s, const RunConfig& c, const ModelShape& shape, Device device,
                               const std::function<void(nn::Module&, optim::Optimizer&)>& load) {
  {
    HostScratchScope scratch;  // the build, its random draws and the loaded files stay out of the device
    std::optional<nn::init::SkipRandomInitGuard> shapes_only;
    if (!load) shapes_only.emplace();
    s.model = build_model(c.model, shape.num_classes, shape.channels, shape.image_size);
    if (shape.recompute_segments > 0) s.model->set_recompute_segments(shape.recompute_segments);
    s.opt = build_optimizer(c, *s.model);
    s.opt->create_state();
    if (load) load(*s.model, *s.opt);
  }
  s.model->rehome(device);
  s.opt->rehome(device);
}

void make_class_weights(RunSetup& s, const RunConfig& c, int64_t num_classes, Device device) {
  if (c.class_weights.empty()) return;
  if (device.is_meta()) {
    s.class_weights = empty({num_classes}, DType::f32, device);  // allocated untagged, as the run's
    return;
  }
  std::vector<float> w(c.class_weights.begin(), c.class_weights.end());
  s.class_weights = to_device(tensor_from(w, {num_classes}), device);
}

void make_data_parallel(RunSetup& s, const RunConfig& c, dist::ProcessGroup* group) {
  if (c.ranks <= 1) return;
  if (!group) {
    s.imitated = dist::make_imitated_process_group(0, (int)c.ranks);
    group = s.imitated.get();
  }
  train::DataParallelOptions dpo;
  dpo.bucket_bytes = std::max<int64_t>(1, std::llround(c.bucket_mb * (1 << 20)));
  dpo.first_bucket_bytes = std::min<int64_t>(dpo.bucket_bytes, 1 << 20);
  s.data_parallel = std::make_unique<train::DataParallel>(*group, *s.model, dpo);
}

void make_loss_scaler(RunSetup& s, const RunConfig& c, Device device) {
  s.amp = std::make_unique<AmpTraining>(c, device);
}

train::FitOptions run_fit_options(const RunConfig& c, const RunSetup& s) {
  train::FitOptions fo;
  fo.epochs = c.epochs;
  fo.batch = c.batch;
  fo.drop_last = c.drop_last;
  const LrSchedule schedule = LrSchedule::parse(c.schedule, c.warmup);
  auto factor = std::make_shared<optim::LRSchedulePtr>();  // built on fit's first step, when it knows the run's steps
  const double lr = c.lr;
  fo.lr_at = [lr, schedule, factor](int64_t at, int64_t per_epoch, int64_t total) {
    if (!*factor) *factor = schedule.build(per_epoch, total);
    return lr * (*factor)->factor(at);
  };
  fo.class_weights = s.class_weights;
  if (c.task == "segment") {  // per-pixel loss and pixel counts; validation = the whole set's confusion matrix
    fo.classification = false;
    train::use_segmentation_step(&fo.step, s.class_weights, c.loss);
    const Tensor weights = s.class_weights;
    const int64_t batch = c.batch;
    const bool ignore_background = c.ignore_background;
    fo.evaluate = [weights, batch, ignore_background](nn::Module& m, DataSource& val, int64_t epoch) {
      return train::evaluate_segmentation(m, val, batch, epoch, weights, ignore_background);
    };
  }
  fo.step.accum = c.accum;
  fo.step.clip = c.clip;
  fo.step.autocast = s.amp && s.amp->enabled();
  fo.step.autocast_dtype = c.amp_dtype;
  fo.step.channels_last = c.channels_last;
  fo.step.data_parallel = s.data_parallel.get();
  fo.detect_anomaly = c.detect_anomaly;
  fo.max_skipped_steps = c.max_skipped_steps;
  return fo;
}

}  // namespace kiln
