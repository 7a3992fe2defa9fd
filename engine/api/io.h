// <kiln/io.h>: tensor files: safetensors (torchvision's parameter names load as they are) and .npy.
// Intended usage:
//   kiln::save_safetensors("w.safetensors", model.state_dict());
//   model.load_state_dict(kiln::load_safetensors("w.safetensors", kiln::Device::cpu()));
// Declares nothing itself.
#pragma once

#include "tensor.h"
#include "engine/io/safetensors.h"
#include "engine/io/tensor_io.h"
