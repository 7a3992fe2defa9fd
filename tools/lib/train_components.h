// The model and optimizer of a `kiln train` / `kiln predict` run, behind a small interface: the only
// place the command layer names engine/nn's model factory and engine/optim's classes, so the
// training loop does not depend on their spelling.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engine/io/tensor_io.h"
#include "engine/nn/module.h"
#include "tools/lib/train_config.h"

namespace kiln {

// Throws kiln::Error listing the known models when `name` is not one of them.
void check_model_name(const std::string& name);
// make_model(name, num_classes, in_channels, image_size) with the error naming the known models.
nn::ModulePtr build_model(const std::string& name, int64_t num_classes, int64_t in_channels, int64_t image_size);

class TrainOptimizer {
 public:
  virtual ~TrainOptimizer() = default;
  virtual void set_lr(double lr) = 0;
  virtual void step() = 0;
  virtual void zero_grad() = 0;
  // Buffers (momentum, Adam moments, step counts) by stable names, for checkpoints.
  virtual NamedTensors state_dict() const = 0;
  virtual void load_state_dict(const NamedTensors& state) = 0;
};

// SGD (momentum, weight decay) or AdamW over every parameter of `model`, PyTorch semantics.
std::unique_ptr<TrainOptimizer> build_optimizer(const TrainConfig& c, nn::Module& model);

// Scales gradients so their global L2 norm is at most max_norm; returns the norm before clipping.
double clip_gradients(const std::vector<Tensor>& params, double max_norm);

}  // namespace kiln
