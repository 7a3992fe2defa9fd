// Linear module over ops::linear.
#include "engine/nn/linear.h"

#include <cmath>

#include "engine/memory/tag.h"
#include "engine/nn/init.h"
#include "engine/ops/ops.h"

namespace kiln::nn {

Linear::Linear(int64_t in, int64_t out, bool has_bias) : Module("Linear"), in_(in), out_(out) {
  KILN_CHECK(in > 0 && out > 0, "Linear: bad sizes in=", in, " out=", out);
  MemoryScope ms(MemoryTag::param);
  // Registered and drawn one after the other (the allocation order kiln mem's figures rest on);
  // the draws are reset_parameters()'s.
  weight = register_parameter("weight", empty({out, in}));
  init_weight();
  if (has_bias) {
    bias = register_parameter("bias", empty({out}));
    init_bias();
  }
}

void Linear::init_weight() { init::kaiming_uniform_(weight, std::sqrt(5.0)); }

void Linear::init_bias() {
  double bound = 1.0 / std::sqrt((double)in_);
  init::uniform_(bias, -bound, bound);
}

void Linear::reset_parameters() {
  init_weight();
  if (bias.defined()) init_bias();
}

Tensor Linear::forward(const Tensor& x) {
  KILN_CHECK(x.dim() >= 1 && x.size(-1) == in_, "Linear(", in_, "->", out_, "): expected input (..., ", in_,
             "), got ", x.str());
  return linear(x, weight, bias);
}

}  // namespace kiln::nn
