// What a weights file's tensor shapes say about the model it holds, for files without kiln's metadata
// (weights saved by PyTorch: torchvision's resnets, or a kiln model's state_dict saved by hand): the
// number of classes from the classifier's weight (dim 0) and the input channels from the first
// convolution's weight (dim 1). The input size is not in any shape (global pooling takes any size), so
// it is not guessed. Names looked at: fc.weight / conv1.weight (torchvision resnets), fc2.weight /
// conv1.weight (small_cnn), outc.conv.weight / inc.double_conv.0.weight (unet). Reading only.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/io/safetensors.h"

namespace kiln_cli {

struct ShapeFacts {
  int64_t num_classes = 0, in_channels = 0;        // 0: no shape says
  std::string num_classes_from, in_channels_from;  // "fc.weight (1000, 512)"
};

ShapeFacts shape_facts(const std::vector<kiln::NamedArray>& tensors);

}  // namespace kiln_cli
