// The model and optimizer of a `kiln train` / `kiln predict` run by name: the only place the
// command layer names models/'s factory and engine/optim's classes.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engine/io/tensor_io.h"
#include "engine/nn/module.h"
#include "engine/optim/optimizer.h"
#include "tools/train_config.h"

namespace kiln {

// Throws kiln::Error listing the known models when `name` is not one of them.
void check_model_name(const std::string& name);
// make_model(name, num_classes, in_channels, image_size) with the error naming the known models.
nn::ModulePtr build_model(const std::string& name, int64_t num_classes, int64_t in_channels, int64_t image_size);

// SGD (momentum, weight decay) or AdamW over every parameter of `model`, PyTorch semantics.
std::unique_ptr<optim::Optimizer> build_optimizer(const TrainConfig& c, nn::Module& model);

}  // namespace kiln
