// Ordered lists of named Tensors (NamedTensors): the exchange type of state dicts, optimizer state,
// training-state files and weight files. It lives with the tensor because modules and optimizers
// (below engine/io) hand these lists out; it must not know any file format (engine/io does).
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "engine/tensor/tensor.h"

namespace kiln {

// Ordered (name, tensor) pairs: state dicts keep PyTorch's order.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// nullptr when `name` is absent.
inline const Tensor* find_named(const NamedTensors& list, const std::string& name) {
  for (const auto& [n, t] : list)
    if (n == name) return &t;
  return nullptr;
}

}  // namespace kiln
