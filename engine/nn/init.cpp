// torch.nn.init formulas over kiln's random ops.
#include "engine/nn/init.h"

#include <cmath>

#include "engine/autograd/grad_mode.h"
#include "engine/memory/tag.h"
#include "engine/ops/ops.h"

namespace kiln::nn::init {

static int64_t receptive(const Tensor& w) {
  KILN_CHECK(w.dim() >= 2, "init: fan needs a tensor with at least 2 dims, got ", w.str());
  int64_t r = 1;
  for (int64_t d = 2; d < w.dim(); ++d) r *= w.size(d);
  return r;
}
int64_t fan_in(const Tensor& w) { return w.size(1) * receptive(w); }
int64_t fan_out(const Tensor& w) { return w.size(0) * receptive(w); }

double gain(const std::string& nl, double param) {
  if (nl == "linear" || nl == "sigmoid" || nl == "conv2d") return 1.0;
  if (nl == "relu") return std::sqrt(2.0);
  if (nl == "tanh") return 5.0 / 3.0;
  if (nl == "leaky_relu") return std::sqrt(2.0 / (1.0 + param * param));
  throw Error(str_cat("init::gain: unknown nonlinearity '", nl, "' (linear, sigmoid, relu, tanh, leaky_relu)"));
}

namespace {
thread_local bool skip_random_init = false;
}  // namespace

SkipRandomInitGuard::SkipRandomInitGuard() : prev_(skip_random_init) { skip_random_init = true; }
SkipRandomInitGuard::~SkipRandomInitGuard() { skip_random_init = prev_; }

void uniform_(Tensor& t, double lo, double hi) {
  if (skip_random_init) return;
  NoGradGuard ng;
  MemoryScope ms(MemoryTag::temporary);
  copy_(t, uniform(t.sizes(), lo, hi, t.dtype(), t.device()));
}

void normal_(Tensor& t, double mean, double std) {
  if (skip_random_init) return;
  NoGradGuard ng;
  MemoryScope ms(MemoryTag::temporary);
  copy_(t, normal(t.sizes(), mean, std, t.dtype(), t.device()));
}

void constant_(Tensor& t, double v) {
  NoGradGuard ng;
  fill_(t, v);
}

static double kaiming_std(const Tensor& w, double a, FanMode mode, const std::string& nl) {
  int64_t fan = mode == FanMode::fan_in ? fan_in(w) : fan_out(w);
  KILN_CHECK(fan > 0, "kaiming init: zero fan for ", w.str());
  return gain(nl, a) / std::sqrt((double)fan);
}

void kaiming_uniform_(Tensor& w, double a, FanMode mode, const std::string& nl) {
  double bound = std::sqrt(3.0) * kaiming_std(w, a, mode, nl);
  uniform_(w, -bound, bound);
}

void kaiming_normal_(Tensor& w, double a, FanMode mode, const std::string& nl) {
  normal_(w, 0.0, kaiming_std(w, a, mode, nl));
}

}  // namespace kiln::nn::init
