// <kiln/models.h>: kiln's models by name (resnet18..101 with torchvision's names, their small-image
// forms, small_cnn, unet, networks read from JSON model files).
// Intended usage:
//   kiln::nn::ModulePtr m = kiln::models::make_model("resnet18_small", /*classes*/ 10, /*channels*/ 3, /*size*/ 32);
// Declares nothing itself.
#pragma once

#include "nn.h"
#include "models/registry.h"
