// Facts from tensor shapes (see shape_facts.h).
#include "tools/shape_facts.h"

namespace kiln_cli {

namespace {

std::string shape_words(const kiln::NamedArray& a) {
  std::string s = a.name + " (";
  for (size_t d = 0; d < a.array.shape.size(); ++d) s += (d ? ", " : "") + std::to_string(a.array.shape[d]);
  return s + ")";
}

const kiln::NamedArray* find(const std::vector<kiln::NamedArray>& tensors, const char* name, size_t dims) {
  for (const kiln::NamedArray& a : tensors)
    if (a.name == name && a.array.shape.size() == dims) return &a;
  return nullptr;
}

}  // namespace

ShapeFacts shape_facts(const std::vector<kiln::NamedArray>& tensors) {
  ShapeFacts f;
  // classifier weight: Linear (K, F) or a 1x1 convolution (K, C, 1, 1)
  const std::pair<const char*, size_t> heads[] = {{"fc.weight", 2}, {"fc2.weight", 2}, {"outc.conv.weight", 4}};
  for (const auto& [name, dims] : heads)
    if (const kiln::NamedArray* a = find(tensors, name, dims)) {
      f.num_classes = a->array.shape[0];
      f.num_classes_from = shape_words(*a);
      break;
    }
  // first convolution's weight (O, C, R, S)
  for (const char* name : {"conv1.weight", "inc.double_conv.0.weight"})
    if (const kiln::NamedArray* a = find(tensors, name, 4)) {
      f.in_channels = a->array.shape[1];
      f.in_channels_from = shape_words(*a);
      break;
    }
  return f;
}

}  // namespace kiln_cli
