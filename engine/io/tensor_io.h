// Adapters between Tensor and engine/io's HostArray: safetensors and .npy files of Tensors.
// Tensors of any device and layout are copied to a dense host array before writing; loaded
// arrays become contiguous Tensors on the requested device, and NamedTensors lists
// (engine/tensor/named_tensors.h) become safetensors files.
// This file does no format parsing itself (engine/io does) and knows nothing of modules.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/io/host_array.h"
#include "engine/tensor/named_tensors.h"
#include "engine/tensor/tensor.h"

namespace kiln {

// A dense host copy of t (detached; any device except meta).
HostArray to_host_array(const Tensor& t);
// A new contiguous tensor holding a's data, on device d.
Tensor from_host_array(const HostArray& a, Device d = Device::cpu());

// Atomic write (temporary file + rename) in the given order.
void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata = {});
// Tensors in file (data offset) order; errors name the file and the tensor.
NamedTensors load_safetensors(const std::string& path, Device d = Device::cpu());

void save_npy(const std::string& path, const Tensor& t);
Tensor load_npy(const std::string& path, Device d = Device::cpu());

}  // namespace kiln
