// The model and optimizer of a run (or of `kiln predict`) by name: the one place a run names models/'s
// factory and engine/optim's classes.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engine/io/tensor_io.h"
#include "engine/nn/module.h"
#include "engine/optim/optimizer.h"
#include "engine/run/run_config.h"

namespace kiln {

// Throws kiln::Error listing the known models when `name` is not one of them (nor an existing model
// file, NAME.json).
void check_model_name(const std::string& name);
// Whether a file's "model" metadata fits --model: the same name, or both model files (their layers
// are then checked by the strict state-dict load, which names every difference).
bool same_model(const std::string& stored, const std::string& wanted);
// make_model(name, num_classes, in_channels, image_size) with the error naming the known models.
nn::ModulePtr build_model(const std::string& name, int64_t num_classes, int64_t in_channels, int64_t image_size);

// --task segment: builds `name` (the global RNG restored after), runs it on a meta input
// (1, in_channels, image_size, image_size) and throws one kiln::Error naming the model and its output
// shape unless that is (1, K, image_size, image_size) with K = num_classes <= 255.
void check_segment_model(const std::string& name, int64_t num_classes, int64_t in_channels, int64_t image_size);

// SGD (momentum, weight decay) or AdamW over every parameter of `model`, PyTorch semantics.
std::unique_ptr<optim::Optimizer> build_optimizer(const RunConfig& c, nn::Module& model);

}  // namespace kiln
