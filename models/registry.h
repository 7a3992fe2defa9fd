// make_model: builds a model by name for the command line and tests. Known names:
// resnet18, resnet34, resnet50, resnet101 (torchvision), resnet18_small, resnet34_small,
// resnet50_small, resnet101_small (3x3 stride-1 stem, no max-pool), small_cnn, unet (depth 4, base
// width 64, transposed-conv upsampling) and unet_small (base width 8); a name ending in .json is a
// model file (models/model_file.h). image_size is used by models whose layers depend on it
// (small_cnn, model files) and checked by unet (>= 2^depth).
// UNet options follow a colon, comma-separated: base=N, depth=N, bilinear (bilinear x2 upsampling
// instead of transposed convs), stride2 (stride-2 first conv, logits resized back to the input):
// e.g. "unet:base=32,depth=3,bilinear" or "unet_small:stride2" (models/unet.h).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "engine/nn/module.h"

namespace kiln::models {

std::vector<std::string> model_names();
// True for the models whose output is per-pixel logits (N, K, H, W) with targets (N, H, W): unet*.
bool is_segmentation_model(const std::string& name);
// Throws kiln::Error listing the known names for an unknown one.
std::shared_ptr<nn::Module> make_model(const std::string& name, int64_t num_classes, int64_t in_channels,
                                       int64_t image_size);

}  // namespace kiln::models
