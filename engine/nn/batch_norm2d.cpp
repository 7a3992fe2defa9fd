// BatchNorm2d module over ops::batch_norm, plus the num_batches_tracked counter. With a statistics
// reducer set (engine/ops/batch_norm_sync.h, data-parallel --sync-bn) training uses batch_norm_sync.
#include "engine/nn/batch_norm2d.h"

#include "engine/autograd/grad_mode.h"
#include "engine/memory/tag.h"
#include "engine/nn/init.h"
#include "engine/nn/recompute.h"
#include "engine/ops/batch_norm_sync.h"
#include "engine/ops/ops.h"

namespace kiln::nn {

BatchNorm2d::BatchNorm2d(int64_t c, double eps, double momentum)
    : Module("BatchNorm2d"), c_(c), eps_(eps), momentum_(momentum) {
  KILN_CHECK(c > 0 && eps > 0 && momentum >= 0 && momentum <= 1, "BatchNorm2d: bad options num_features=", c,
             " eps=", eps, " momentum=", momentum);
  MemoryScope ms(MemoryTag::param);
  weight = register_parameter("weight", ones({c}));
  bias = register_parameter("bias", zeros({c}));
  running_mean = register_buffer("running_mean", zeros({c}));
  running_var = register_buffer("running_var", ones({c}));
  num_batches_tracked = register_buffer("num_batches_tracked", zeros({}, DType::i64));
}

void BatchNorm2d::reset_parameters() {
  init::constant_(weight, 1.0);
  init::constant_(bias, 0.0);
  init::constant_(running_mean, 0.0);
  init::constant_(running_var, 1.0);
  init::constant_(num_batches_tracked, 0.0);
}

// num_batches_tracked += 1 on the counter's own device, with no host round trip (which would be
// two blocking copies per layer per step on a GPU): elementwise math is floating-only, so the i64
// scalar goes through f64 on the device (exact below 2^53 batches) and is cast back in place.
// Same code on every device, so the CPU tests run the GPU's path.
static void increment_counter(Tensor& t) {
  if (t.device().is_meta()) return;
  NoGradGuard ng;
  MemoryScope ms(MemoryTag::temporary);
  Tensor next = add(to_dtype(t, DType::f64), 1.0);
  copy_(t, next);
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  KILN_CHECK(x.dim() == 4 && x.size(1) == c_, "BatchNorm2d(", c_, "): expected input (N, ", c_, ", H, W), got ",
             x.str());
  // Re-running a recompute segment for backward: batch statistics, but the running buffers and
  // the counter were already updated by the first forward.
  // --sync-bn: the global batch's statistics (every rank runs the same layers in the same order, a
  // recompute too); never on the meta device (the memory predictor sees plain batch norm's shapes).
  const ChannelSumReducer& reduce = batch_norm_reducer();
  const bool sync = reduce && is_training() && !x.device().is_meta();
  if (is_training() && recomputing())
    return sync ? batch_norm_sync(x, weight, bias, Tensor(), Tensor(), momentum_, eps_, reduce,
                                  batch_norm_reducer_param_grads())
                : batch_norm(x, weight, bias, Tensor(), Tensor(), true, momentum_, eps_);
  if (is_training()) increment_counter(num_batches_tracked);
  if (sync)
    return batch_norm_sync(x, weight, bias, running_mean, running_var, momentum_, eps_, reduce,
                           batch_norm_reducer_param_grads());
  return batch_norm(x, weight, bias, running_mean, running_var, is_training(), momentum_, eps_);
}

}  // namespace kiln::nn
