// <kiln/nn.h>: modules (subclass nn::Module; register_module / register_parameter), the layers with
// PyTorch's default initialization and parameter names, recompute-on-backward segments.
// Intended usage:
//   class Net : public kiln::nn::Module {
//    public:
//     Net() : Module("Net") { fc = register_module("fc", std::make_shared<kiln::nn::Linear>(16, 10)); }
//     kiln::Tensor forward(const kiln::Tensor& x) override { return (*fc)(x); }   // x: (N, 16) -> (N, 10)
//     std::shared_ptr<kiln::nn::Linear> fc;
//   };
// Declares nothing itself.
#pragma once

#include "tensor.h"
#include "engine/nn/batch_norm2d.h"
#include "engine/nn/conv2d.h"
#include "engine/nn/layers.h"
#include "engine/nn/linear.h"
#include "engine/nn/module.h"
#include "engine/nn/recompute.h"
#include "engine/nn/sequential.h"
#include "engine/nn/upsampling.h"
