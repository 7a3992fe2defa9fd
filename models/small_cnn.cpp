// Small CNN for quick runs (Fashion-MNIST), matching small_cnn.py.
#include "models/small_cnn.h"

#include "engine/ops/ops.h"

namespace kiln::models {

using namespace kiln::nn;

SmallCNN::SmallCNN(int64_t num_classes, int64_t in_channels, int64_t image_size, double p)
    : Module("SmallCNN"), in_channels_(in_channels), image_size_(image_size) {
  KILN_CHECK(num_classes > 0 && in_channels > 0 && image_size >= 4, "small_cnn: bad num_classes=", num_classes,
             " in_channels=", in_channels, " image_size=", image_size, " (needs >= 4)");
  int64_t s = (image_size / 2) / 2;  // two floor-mode 2x2 pools
  conv1 = register_module("conv1", std::make_shared<Conv2d>(in_channels, 32, 3, 1, 1));
  bn1 = register_module("bn1", std::make_shared<BatchNorm2d>(32));
  conv2 = register_module("conv2", std::make_shared<Conv2d>(32, 64, 3, 1, 1));
  bn2 = register_module("bn2", std::make_shared<BatchNorm2d>(64));
  fc1 = register_module("fc1", std::make_shared<Linear>(64 * s * s, 128));
  dropout = register_module("dropout", std::make_shared<Dropout>(p));
  fc2 = register_module("fc2", std::make_shared<Linear>(128, num_classes));
}

// The forward is its stages run in order (one definition: recompute segments split the same code).
Tensor SmallCNN::forward(const Tensor& x) {
  Tensor y = x;
  for (const Stage& st : stages()) y = st.fn(y);
  return y;
}

std::vector<Stage> SmallCNN::stages() {
  return {
      Stage{"block1", {conv1, bn1}, [this](const Tensor& x) {
              KILN_CHECK(x.dim() == 4 && x.size(1) == in_channels_ && x.size(2) == image_size_ &&
                             x.size(3) == image_size_,
                         "small_cnn: expected input (N, ", in_channels_, ", ", image_size_, ", ", image_size_,
                         "), got ", x.str());
              // relu after the pool: relu(max_pool(y)) == max_pool(relu(y)) value for value (relu is
              // monotone and keeps NaN; only a -0 may come out where +0 did), and the gradient reaches
              // the same input or, where the window's max is <= 0, none in both orders. The relu and
              // its gradient then run on a 4x smaller tensor (they were ~6% of a batch-64 step).
              return relu(max_pool2d((*bn1)((*conv1)(x)), {2, 2}));  // (N, 32, S/2, S/2)
            }},
      Stage{"block2", {conv2, bn2}, [this](const Tensor& y) {
              return relu(max_pool2d((*bn2)((*conv2)(y)), {2, 2}));  // (N, 64, S/4, S/4)
            }},
      Stage{"fc1", {fc1, dropout}, [this](const Tensor& y) {
              return (*dropout)(relu((*fc1)(flatten(y, 1))));  // (N, 64*(S/4)^2) -> (N, 128)
            }},
      Stage{"fc2", {fc2}, [this](const Tensor& y) { return (*fc2)(y); }},  // (N, K)
  };
}

std::shared_ptr<SmallCNN> small_cnn(int64_t num_classes, int64_t in_channels, int64_t image_size) {
  return std::make_shared<SmallCNN>(num_classes, in_channels, image_size);
}

}  // namespace kiln::models
