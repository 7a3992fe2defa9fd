// Gradient accumulation through the trainer's own step (train::train_step, StepOptions::accum):
// 4 micro-batches of 16 give the gradients of one batch of 64 for a model without BatchNorm (to
// float rounding), and different ones with BatchNorm, which normalizes each micro-batch by its
// own statistics and updates its running statistics once per micro-batch.
// docs/memory-rules-of-thumb.md quotes the differences this prints (run it with -s).
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "engine/core/generator.h"
#include "engine/nn/batch_norm2d.h"
#include "engine/nn/conv2d.h"
#include "engine/nn/layers.h"
#include "engine/nn/linear.h"
#include "engine/nn/sequential.h"
#include "engine/ops/ops.h"
#include "engine/optim/sgd.h"
#include "engine/train/train_step.h"

using namespace kiln;

namespace {

// conv(1->8, 3x3) [-> bn] -> relu -> maxpool 2 -> flatten -> linear(8*4*4 -> 10) on (N, 1, 8, 8).
nn::ModulePtr make_net(bool bn) {
  manual_seed(41);
  auto s = std::make_shared<nn::Sequential>();
  s->push_back(std::make_shared<nn::Conv2d>(1, 8, 3, 1, 1));
  if (bn) s->push_back(std::make_shared<nn::BatchNorm2d>(8));
  s->push_back(std::make_shared<nn::ReLU>());
  s->push_back(std::make_shared<nn::MaxPool2d>(2));
  s->push_back(std::make_shared<nn::Flatten>());
  s->push_back(std::make_shared<nn::Linear>(8 * 4 * 4, 10));
  return s;
}

struct Step {
  std::vector<std::vector<float>> grads;
  std::vector<float> running_mean;
};

// One SGD step of train_step over x (64, 1, 8, 8), y (64) with `accum` micro-batches: every
// parameter's gradient (train_step leaves them in .grad) and the BatchNorm's running mean.
Step one_step(bool bn, int64_t accum, const Tensor& x, const Tensor& y) {
  nn::ModulePtr m = make_net(bn);
  m->train();
  optim::SGDOptions o;
  o.lr = 0.1;
  optim::SGD sgd(m->named_parameters(), o);
  optim::LossScalerOptions so;
  so.enabled = false;
  optim::LossScaler scaler(so);
  train::StepOptions step;
  step.accum = accum;
  train::train_step(*m, sgd, scaler, Batch{x, y}, step);
  Step r;
  for (const Tensor& p : m->parameters()) r.grads.push_back(p.grad().to_vector<float>());
  if (bn) r.running_mean = std::dynamic_pointer_cast<nn::BatchNorm2d>((*std::dynamic_pointer_cast<nn::Sequential>(m))[1])
                               ->running_mean.to_vector<float>();
  return r;
}

// max |a - b| / max |b| over every gradient.
double rel_diff(const Step& a, const Step& b) {
  double d = 0, scale = 0;
  for (size_t i = 0; i < a.grads.size(); ++i)
    for (size_t j = 0; j < a.grads[i].size(); ++j) {
      d = std::max(d, (double)std::abs(a.grads[i][j] - b.grads[i][j]));
      scale = std::max(scale, (double)std::abs(b.grads[i][j]));
    }
  return d / scale;
}

}  // namespace

TEST_CASE("accumulation: train_step accum 4 x 16 equals batch 64 without BatchNorm and differs with it") {
  manual_seed(40);
  Tensor x = randn({64, 1, 8, 8});
  std::vector<int64_t> labels(64);
  for (int i = 0; i < 64; ++i) labels[(size_t)i] = (i * 7) % 10;
  Tensor y = tensor_from(labels, {64});

  const double plain = rel_diff(one_step(false, 4, x, y), one_step(false, 1, x, y));
  const Step bn4 = one_step(true, 4, x, y), bn1 = one_step(true, 1, x, y);
  const double with_bn = rel_diff(bn4, bn1);
  double rm = 0, rm_scale = 0;
  for (size_t c = 0; c < bn1.running_mean.size(); ++c) {
    rm = std::max(rm, (double)std::abs(bn4.running_mean[c] - bn1.running_mean[c]));
    rm_scale = std::max(rm_scale, (double)std::abs(bn1.running_mean[c]));
  }
  MESSAGE("no BatchNorm: max |g(4 x 16) - g(64)| / max |g(64)| = ", plain);
  MESSAGE("BatchNorm:    max |g(4 x 16) - g(64)| / max |g(64)| = ", with_bn);
  MESSAGE("BatchNorm running_mean after the step: max |rm(4 x 16) - rm(64)| / max |rm(64)| = ", rm / rm_scale);
  CHECK(plain < 1e-5);    // float rounding of sums in another order (~1e-7 seen)
  CHECK(with_bn > 1e-2);  // micro-batch statistics: a different function, not rounding
  // Four momentum-0.1 updates from micro-batches against one from the whole batch.
  CHECK(rm / rm_scale > 0.2);
}
