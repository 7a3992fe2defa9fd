// The small CNN of tests/support/oracle/small_cnn.py (same module names and layout):
//   conv1 (in->32, 3x3, pad 1), bn1, relu, maxpool 2 -> (N, 32, H/2, W/2)
//   conv2 (32->64, 3x3, pad 1), bn2, relu, maxpool 2 -> (N, 64, H/4, W/4)
//   flatten, fc1 (64*(H/4)*(W/4) -> 128), relu, dropout 0.25, fc2 (128 -> K)
// PyTorch's default initialization for every layer. 28x28 grayscale gives fc1 3136 -> 128.
#pragma once
#include <memory>

#include "engine/nn/batch_norm2d.h"
#include "engine/nn/conv2d.h"
#include "engine/nn/layers.h"
#include "engine/nn/linear.h"

namespace kiln::models {

class SmallCNN : public nn::Module {
 public:
  SmallCNN(int64_t num_classes = 10, int64_t in_channels = 1, int64_t image_size = 28, double dropout = 0.25);
  Tensor forward(const Tensor& x) override;  // (N, in, S, S) -> (N, K)
  // block1 (conv1, bn1, relu, pool), block2, fc1 (flatten, fc1, relu, dropout), fc2.
  std::vector<nn::Stage> stages() override;

  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2;
  std::shared_ptr<nn::Linear> fc1, fc2;
  std::shared_ptr<nn::Dropout> dropout;

 private:
  int64_t in_channels_, image_size_;
};

std::shared_ptr<SmallCNN> small_cnn(int64_t num_classes = 10, int64_t in_channels = 1, int64_t image_size = 28);

}  // namespace kiln::models
