// Recompute-on-backward (Chen et al. 2016, "Training Deep Nets with Sublinear Memory Cost").
// recompute(fn, x) runs fn under NoGradGuard, so none of its intermediate tensors are kept; it
// saves only x, the Philox generator state, the autocast state (enabled + dtype) and the module
// path. Its backward node restores the generator state, re-enters the autocast state, re-runs
// fn with grad enabled on a detached copy of x that requires grad (BatchNorm uses batch statistics but does not update its running buffers again: see
// recomputing()), back-propagates the incoming gradient through that graph and returns the
// gradient of x; parameter gradients accumulate into the parameters as in a plain backward.
// On the CPU in f32 the gradients are the plain run's bit for bit.
// Must not know models: it works on Stages (engine/nn/module.h) and plain functions.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/nn/module.h"

namespace kiln::nn {

// True on this thread while a recompute segment is being re-run for backward. Modules with
// side effects in forward (BatchNorm2d's running stats and batch counter) skip them then.
bool recomputing();

// y = fn(x) without keeping fn's activations. params: every parameter fn reads (they get their
// gradients during the recompute; listed so a segment whose input needs no gradient is still
// recorded). label names the node in errors and reports.
Tensor recompute(const std::function<Tensor(const Tensor&)>& fn, const Tensor& x, const std::vector<Tensor>& params,
                  const std::string& label = "recompute");
// The same with several inputs (a UNet's Up block: the tensor from below and the skip): saves each
// input and returns a gradient for each one that needs it.
Tensor recompute(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& xs,
                 const std::vector<Tensor>& params, const std::string& label = "recompute");

// Splits `stages` into `segments` contiguous runs of near-equal length (the first ones one stage
// longer when it does not divide) and runs every run but the last under recompute(), the last
// one plainly (its activations are needed at once), like torch.utils.checkpoint.checkpoint_sequential.
// segments is clamped to the number of stages; 1 runs everything plainly.
Tensor recompute_sequential(const std::vector<Stage>& stages, int segments, const Tensor& x);
// The [begin, end) stage ranges recompute_sequential uses.
std::vector<std::pair<size_t, size_t>> segment_bounds(size_t num_stages, int segments);

// A module whose forward is recompute(inner). The wrapped module is its child "module", so its
// parameter names gain the prefix "module.".
class Recompute : public Module {
 public:
  explicit Recompute(ModulePtr inner);
  Tensor forward(const Tensor& x) override;  // same shapes as inner
  const ModulePtr& inner() const { return inner_; }

 private:
  ModulePtr inner_;
};

// The stages of a Sequential: one per child.
std::vector<Stage> sequential_stages(Module& seq);

}  // namespace kiln::nn
