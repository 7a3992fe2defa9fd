// Module::reset_parameters / reset_all_parameters: the layer's default init redrawn in place, the
// handles (and so an optimizer's references) kept, BatchNorm's running statistics reset, and the
// tree walk. docs/memory-rules-of-thumb.md shows what a reset does to a training run.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "engine/autograd/grad_mode.h"
#include "engine/core/generator.h"
#include "engine/nn/batch_norm2d.h"
#include "engine/nn/conv2d.h"
#include "engine/nn/layers.h"
#include "engine/nn/linear.h"
#include "engine/nn/sequential.h"
#include "engine/nn/upsampling.h"
#include "engine/ops/ops.h"
#include "engine/optim/sgd.h"

using namespace kiln;

namespace {
// Every parameter and buffer of m set to `v` (as training would move them away from their init).
void overwrite(nn::Module& m, double v) {
  NoGradGuard ng;
  for (Tensor t : m.parameters()) fill_(t, v);
  for (Tensor t : m.buffers()) fill_(t, v);
}
double rms(const std::vector<float>& w) {
  double s = 0;
  for (float v : w) s += (double)v * v;
  return std::sqrt(s / (double)w.size());
}
double max_abs(const std::vector<float>& w) {
  double m = 0;
  for (float v : w) m = std::max(m, (double)std::abs(v));
  return m;
}
}  // namespace

TEST_CASE("reset_parameters: Conv2d and Linear redraw U(+-1/sqrt(fan_in)) in place, BatchNorm2d 1/0 and fresh stats") {
  manual_seed(21);
  auto conv = std::make_shared<nn::Conv2d>(16, 32, 3, 1, 1);  // weight (32, 16, 3, 3): fan_in 144
  auto bn = std::make_shared<nn::BatchNorm2d>(32);
  auto lin = std::make_shared<nn::Linear>(400, 300);
  const std::vector<float> conv_w0 = conv->weight.to_vector<float>();
  const Tensor conv_w = conv->weight, lin_b = lin->bias, bn_rv = bn->running_var;
  const void* conv_ptr = conv->weight.data_ptr();
  for (nn::Module* m : std::vector<nn::Module*>{conv.get(), bn.get(), lin.get()}) {
    overwrite(*m, 5.0);
    m->reset_parameters();
  }
  // The same tensors, the same storage: an optimizer holding them steps the new values.
  CHECK(conv->weight.is_same(conv_w));
  CHECK(conv->weight.data_ptr() == conv_ptr);
  CHECK(lin->bias.is_same(lin_b));
  CHECK(bn->running_var.is_same(bn_rv));
  CHECK(conv->weight.requires_grad());

  const double cb = 1.0 / 12.0;  // 1/sqrt(144)
  const auto cw = conv->weight.to_vector<float>();
  CHECK(max_abs(cw) <= cb);
  CHECK(max_abs(cw) > 0.99 * cb);
  CHECK(rms(cw) == doctest::Approx(cb / std::sqrt(3.0)).epsilon(0.05));  // 4608 draws: ~1% sampling error
  CHECK(max_abs(conv->bias.to_vector<float>()) <= cb);
  int same = 0;  // a new draw, not the constructor's numbers again
  for (size_t i = 0; i < cw.size(); ++i) same += cw[i] == conv_w0[i];
  CHECK(same < 10);

  const double lb = 1.0 / 20.0;  // 1/sqrt(400)
  const auto lw = lin->weight.to_vector<float>();
  CHECK(max_abs(lw) <= lb);
  CHECK(rms(lw) == doctest::Approx(lb / std::sqrt(3.0)).epsilon(0.02));
  CHECK(max_abs(lin->bias.to_vector<float>()) <= lb);
  CHECK(max_abs(lin->bias.to_vector<float>()) > 0.5 * lb);

  // ConvTranspose2d: weight (in, out, k, k), fan_in = out * k * k = 8 * 16 = 128 (torch's convention).
  nn::ConvTranspose2dOptions to;
  to.in_channels = 32;
  to.out_channels = 8;
  to.kernel = 4;
  auto up = std::make_shared<nn::ConvTranspose2d>(to);
  overwrite(*up, 5.0);
  up->reset_parameters();
  const double ub = 1.0 / std::sqrt(128.0);
  CHECK(max_abs(up->weight.to_vector<float>()) <= ub);
  CHECK(rms(up->weight.to_vector<float>()) == doctest::Approx(ub / std::sqrt(3.0)).epsilon(0.05));
  CHECK(max_abs(up->bias.to_vector<float>()) <= ub);

  for (float v : bn->weight.to_vector<float>()) CHECK(v == 1.0f);
  for (float v : bn->bias.to_vector<float>()) CHECK(v == 0.0f);
  for (float v : bn->running_mean.to_vector<float>()) CHECK(v == 0.0f);
  for (float v : bn->running_var.to_vector<float>()) CHECK(v == 1.0f);
  CHECK(bn->num_batches_tracked.dtype() == DType::i64);
  CHECK(bn->num_batches_tracked.to_vector<int64_t>()[0] == 0);
}

TEST_CASE("reset_all_parameters walks the tree, reset_parameters alone does not, and an optimizer steps on") {
  manual_seed(22);
  auto seq = std::make_shared<nn::Sequential>();
  seq->push_back(std::make_shared<nn::Linear>(6, 16));
  seq->push_back(std::make_shared<nn::ReLU>());
  seq->push_back(std::make_shared<nn::Linear>(16, 3));
  overwrite(*seq, 5.0);
  seq->reset_parameters();  // the container's own: none
  for (const Tensor& p : seq->parameters())
    for (float v : p.to_vector<float>()) CHECK(v == 5.0f);
  seq->reset_all_parameters();
  for (const Tensor& p : seq->parameters()) CHECK(max_abs(p.to_vector<float>()) <= 1.0 / std::sqrt(6.0));

  // SGD built before the reset steps the reset values: p = p_reset - lr * g.
  optim::SGDOptions o;
  o.lr = 0.5;
  optim::SGD sgd(seq->named_parameters(), o);
  overwrite(*seq, 5.0);
  seq->reset_all_parameters();
  Tensor w = seq->parameters()[0];
  const std::vector<float> before = w.to_vector<float>();
  Tensor x = randn({4, 6});
  Tensor loss = sum((*seq)(x));
  loss.backward();
  const std::vector<float> g = w.grad().to_vector<float>();
  sgd.step();
  const std::vector<float> after = w.to_vector<float>();
  for (size_t i = 0; i < after.size(); ++i) CHECK(after[i] == doctest::Approx(before[i] - 0.5 * g[i]).epsilon(1e-6));
}
