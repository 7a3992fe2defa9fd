// Counts kiln's host synchronization points (engine/core/host_sync.h) in one training step of
// small_cnn and resnet18_small at tiny sizes, on the CPU and on meta: forward under autocast (with
// --amp), cross-entropy, scaled backward, loss-scaler step and update, SGD with momentum. On a GPU
// each item()/to_vector() of the step would wait for the device; the step may read back at most
// once (the loss scaler's found_inf, with --amp) and not at all without it. A whole train::fit
// step (what `kiln train` runs: micro-batches, the progress line's loss and correct count, the
// scaler) reads back exactly once, with and without --amp, whatever --accum: loss, correct count
// and found_inf stay on the device and come back in one read; its loss and accuracy equal the
// per-micro-batch host reads they replace. Also checks that BatchNorm2d's num_batches_tracked
// advances with its device-side increment. Tiny images, a few steps each, no GPU (~4 s CPU).
#include <doctest/doctest.h>

#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "data/array_source.h"
#include "engine/autograd/grad_mode.h"
#include "engine/core/host_sync.h"
#include "engine/ops/autocast.h"
#include "engine/ops/ops.h"
#include "engine/optim/loss_scaler.h"
#include "engine/optim/sgd.h"
#include "engine/train/evaluate.h"
#include "engine/train/fit.h"
#include "models/registry.h"

using namespace kiln;

namespace {

struct StepResult {
  HostSyncCounts syncs;
  int64_t bn_count = -1;  // num_batches_tracked of the first BatchNorm2d after the steps (-1: none / meta)
};

// One step (the first: lazily created state such as momentum buffers included), counted.
StepResult one_step(const std::string& model_name, Device dev, bool amp, int64_t image) {
  auto model = models::make_model(model_name, 10, 3, image);
  model->to(dev);
  model->train();
  optim::SGDOptions so;
  so.lr = 0.01;
  so.momentum = 0.9;
  optim::SGD opt(model->named_parameters(), so);
  optim::LossScalerOptions lo;
  lo.enabled = amp;
  optim::LossScaler scaler(lo, dev);
  const int64_t n = 4;
  Tensor x = dev.is_meta() ? empty({n, 3, image, image}, DType::f32, dev) : randn({n, 3, image, image});
  Tensor y = dev.is_meta() ? empty({n}, DType::i64, dev) : tensor_from(std::vector<int64_t>{1, 3, 0, 9}, {n});
  StepResult r;
  auto step = [&] {
    model->zero_grad();
    Tensor loss;
    {
      AutocastGuard ac(amp, DType::f16);
      Tensor logits = (*model)(x);
      loss = cross_entropy(logits, y);
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
  };
  HostSyncScope scope;
  step();
  r.syncs = scope.counts();
  if (!dev.is_meta())
    for (const auto& [name, t] : model->named_buffers())
      if (name.find("num_batches_tracked") != std::string::npos) {
        r.bn_count = (int64_t)t.item();
        break;
      }
  return r;
}

}  // namespace

TEST_CASE("host syncs: the counter sees item() and to_vector()") {
  Tensor t = full({}, 2.0);
  HostSyncScope s;
  (void)t.item();
  (void)t.to_vector<float>();
  CHECK(s.counts().host_reads == 2);
  CHECK(s.counts().device_syncs == 0);
}

TEST_CASE("host syncs: one training step reads back at most once (small_cnn, resnet18_small, on cpu and meta)") {
  for (const char* name : {"small_cnn", "resnet18_small"}) {
    for (Device dev : {Device::cpu(), Device::meta()}) {
      for (bool amp : {false, true}) {
        CAPTURE(name);
        CAPTURE(dev.str());
        CAPTURE(amp);
        const int64_t image = std::string(name) == "small_cnn" ? 28 : 8;
        // resnet18_small's CPU step costs seconds (11M parameters): only with --amp, the case with a read
        if (std::string(name) == "resnet18_small" && dev.is_cpu() && !amp) continue;
        const StepResult r = one_step(name, dev, amp, image);
        CHECK(r.syncs.device_syncs == 0);  // no GPU here: nothing may block on one
        CHECK(r.syncs.total() <= 1);
        // exactly the loss scaler's found_inf read with --amp on a device with data; none otherwise
        CHECK(r.syncs.host_reads == (amp && !dev.is_meta() ? 1 : 0));
        if (std::string(name) == "resnet18_small" && !dev.is_meta()) CHECK(r.bn_count == 1);
      }
    }
  }
}

namespace {

std::unique_ptr<DataSource> sixteen_samples() {
  ArrayDataset d;
  d.n = 16;
  d.channels = 1;
  d.height = d.width = 8;
  for (int64_t i = 0; i < 16 * 64; ++i) d.images.push_back((float)((i * 13) % 7) / 3.0f - 1.0f);
  for (int64_t i = 0; i < 16; ++i) d.labels.push_back((i * 5) % 3);
  d.source = "sixteen";
  return make_array_source(std::move(d), 0, Device::cpu());
}

struct FitRun {
  std::vector<HostSyncCounts> per_step;  // from before_step to on_step_end
  std::vector<double> grad_norms;        // StepResult::grad_norm of each step (with clip)
  std::vector<float> weights;            // every parameter after the run
  double train_loss = 0, train_acc = 0;
  double ref_loss = 0, ref_acc = 0;      // from per-micro-batch host reads (reference only)
};

// Two steps of 8 samples in `accum` micro-batches; `reference` adds a hook that reads each
// micro-batch's loss and correct count on the host (so its run's counts are not meaningful).
FitRun fit_run(bool amp, int64_t accum, bool reference, double clip = 0) {
  manual_seed(5);
  auto src = sixteen_samples();
  nn::ModulePtr model = models::make_model("small_cnn", 3, 1, 8);
  optim::SGD opt(model->named_parameters(), optim::SGDOptions{0.01, 0.9});
  optim::LossScalerOptions lo;
  lo.enabled = amp;
  optim::LossScaler scaler(lo);
  FitRun r;
  double ref_loss = 0;
  int64_t ref_correct = 0, ref_seen = 0;
  train::FitOptions fo;
  fo.epochs = 1;
  fo.batch = 8;
  fo.step.accum = accum;
  fo.step.autocast = amp;
  fo.step.clip = clip;
  std::optional<HostSyncScope> scope;
  fo.callbacks.before_step = [&](const train::FitStep&) { scope.emplace(); };
  fo.callbacks.on_step_end = [&](const train::FitStep& s) {
    r.per_step.push_back(scope->counts());
    r.grad_norms.push_back(s.result->grad_norm);
  };
  fo.callbacks.on_epoch_end = [&](train::EpochStats& es) {
    r.train_loss = es.train_loss;
    r.train_acc = es.train_acc;
  };
  if (reference)
    fo.step.hooks.after_backward = [&](const train::MicroBatch& b) {
      ref_loss += to_device(b.loss, Device::cpu()).item() * (double)b.size;
      ref_correct += count_correct(b.output, b.y);
      ref_seen += b.size;
    };
  train::fit(*model, opt, scaler, *src, nullptr, fo);
  for (const Tensor& p : model->parameters())
    for (float v : p.to_vector<float>()) r.weights.push_back(v);
  if (reference) {
    r.ref_loss = ref_loss / (double)ref_seen;
    r.ref_acc = (double)ref_correct / (double)ref_seen;
  }
  return r;
}

}  // namespace

TEST_CASE("host syncs: a whole fit step reads back once (loss, correct count and found_inf together)") {
  for (bool amp : {false, true}) {
    for (int64_t accum : {1, 4}) {
      CAPTURE(amp);
      CAPTURE(accum);
      const FitRun run = fit_run(amp, accum, false);
      REQUIRE(run.per_step.size() == 2);
      for (const HostSyncCounts& c : run.per_step) {
        CHECK(c.device_syncs == 0);
        CHECK(c.host_reads == 1);  // per micro-batch reads gave 3 * accum (+1 with amp)
      }
      // The device-side sums give what the per-micro-batch host reads gave (with micro-batches).
      if (accum == 1) continue;
      const FitRun ref = fit_run(amp, accum, true);
      CHECK(ref.train_acc == ref.ref_acc);
      CHECK(std::fabs(ref.train_loss - ref.ref_loss) <= 1e-12 * std::max(1.0, std::fabs(ref.ref_loss)));
      CHECK(std::isfinite(ref.train_loss));
      // The counted run trained the same way (the reference hook only reads).
      CHECK(run.train_acc == ref.train_acc);
      CHECK(run.train_loss == ref.train_loss);
    }
  }
}

TEST_CASE("host syncs: gradient clipping adds no read, the norm comes back in the step's one read") {
  // clip 0.05 clips these steps' gradients (their norms are larger); clip 1e9 leaves them as they are.
  for (bool amp : {false, true}) {
    CAPTURE(amp);
    const FitRun plain = fit_run(amp, 1, false);
    const FitRun loose = fit_run(amp, 1, false, 1e9);
    const FitRun tight = fit_run(amp, 1, false, 0.05);
    REQUIRE(tight.per_step.size() == 2);
    for (const FitRun* run : {&loose, &tight})
      for (const HostSyncCounts& c : run->per_step) {
        CHECK(c.device_syncs == 0);
        CHECK(c.host_reads == 1);  // the norm's own read made it 2
      }
    for (double n : tight.grad_norms) CHECK(n > 0.05);  // the case clips
    CHECK(std::isfinite(loose.grad_norms[0]));
    CHECK(loose.grad_norms[0] == tight.grad_norms[0]);  // the first step's norm: before clipping, same weights
    CHECK(loose.weights == plain.weights);              // under the limit: gradients multiplied by exactly 1
    CHECK(tight.weights != plain.weights);
  }
}
