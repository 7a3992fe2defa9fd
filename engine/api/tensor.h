// <kiln/tensor.h>: tensors and the differentiable ops, dtypes and devices, errors, the random generator,
// autograd's grad mode and autocast.
// Intended usage:
//   kiln::manual_seed(0);
//   kiln::Tensor x = kiln::randn({8, 3, 32, 32}, kiln::DType::f32, kiln::Device::cpu());
//   x.set_requires_grad(true);
//   kiln::Tensor y = kiln::sum(kiln::relu(x));
//   y.backward();                                   // x.grad(): (8, 3, 32, 32)
//   { kiln::NoGradGuard no_grad; ... }              // inference
//   { kiln::AutocastGuard amp(true); ... }          // f16 for conv / linear / matmul, as PyTorch's lists
//   { kiln::AutocastGuard amp(true, kiln::DType::bf16); ... }  // the same in bf16 (no loss scaler needed)
// Declares nothing itself.
#pragma once

#include "engine/autograd/grad_mode.h"
#include "engine/core/device.h"
#include "engine/core/devices.h"
#include "engine/core/dtype.h"
#include "engine/core/error.h"
#include "engine/core/generator.h"
#include "engine/ops/autocast.h"
#include "engine/ops/confusion.h"
#include "engine/ops/ops.h"
#include "engine/ops/segmentation.h"
#include "engine/ops/upsampling.h"
#include "engine/tensor/named_tensors.h"
#include "engine/tensor/tensor.h"
