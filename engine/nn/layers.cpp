// Parameter-free layers over single ops.
#include "engine/nn/layers.h"

#include "engine/ops/ops.h"

namespace kiln::nn {

Tensor ReLU::forward(const Tensor& x) {
  if (!inplace_) return relu(x);
  Tensor y = x;
  relu_(y);
  return y;
}

MaxPool2d::MaxPool2d(int64_t kernel, int64_t stride, int64_t padding)
    : Module("MaxPool2d"), k_(kernel), s_(stride == 0 ? kernel : stride), p_(padding) {
  KILN_CHECK(k_ > 0 && s_ > 0 && p_ >= 0 && 2 * p_ <= k_, "MaxPool2d: bad options kernel=", kernel,
             " stride=", stride, " padding=", padding);
}

Tensor MaxPool2d::forward(const Tensor& x) { return max_pool2d(x, {k_, k_}, {s_, s_}, {p_, p_}); }

Tensor AdaptiveAvgPool2d::forward(const Tensor& x) { return adaptive_avg_pool2d(x, {oh_, ow_}); }

Dropout::Dropout(double p) : Module("Dropout"), p_(0) { set_p(p); }

void Dropout::set_p(double p) {
  KILN_CHECK(p >= 0 && p < 1, "Dropout: p must be in [0, 1), got ", p);
  p_ = p;
}

Tensor Dropout::forward(const Tensor& x) {
  if (!is_training() || p_ == 0) return x;
  return dropout(x, p_, true);
}

Tensor Flatten::forward(const Tensor& x) { return flatten(x, start_, end_); }

}  // namespace kiln::nn
