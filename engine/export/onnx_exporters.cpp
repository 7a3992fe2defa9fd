// The table of exporters by module type name (see onnx_exporters.h): the one place that lists which
// module types ONNX export supports.
#include "engine/export/onnx_exporters.h"

#include <map>

namespace kiln::onnx_export {

namespace {
std::map<std::string, OnnxExporter>& table() {
  static std::map<std::string, OnnxExporter> t = {
      // engine/nn
      {"Conv2d", export_conv2d},
      {"BatchNorm2d", export_batch_norm2d},
      {"Linear", export_linear},
      {"ReLU", export_relu},
      {"MaxPool2d", export_op_layer},  // nn::MaxPool2d or a model file's max_pool (models::OpLayer)
      {"AdaptiveAvgPool2d", export_adaptive_avg_pool2d},
      {"Flatten", export_flatten},
      {"Dropout", export_identity},  // inference graph: dropout is the identity
      {"Identity", export_identity},
      {"Sequential", export_sequential},
      {"ConvTranspose2d", export_conv_transpose2d},
      {"Upsample", export_upsample},
      // models/
      {"BasicBlock", export_basic_block},
      {"Bottleneck", export_bottleneck},
      {"ResNet", export_resnet},
      {"SmallCNN", export_small_cnn},
      {"GraphModel", export_graph_model},
      {"DoubleConv", export_unet_double_conv},
      {"Down", export_unet_down},
      {"OutConv", export_unet_out_conv},
      {"UNet", export_unet},
      // model files' op layers (models::OpLayer)
      {"GELU", export_op_layer},
      {"Sigmoid", export_op_layer},
      {"Tanh", export_op_layer},
      {"LeakyReLU", export_op_layer},
      {"AvgPool2d", export_op_layer},
  };
  return t;
}
}  // namespace

const OnnxExporter* find_onnx_exporter(const std::string& type_name) {
  auto it = table().find(type_name);
  return it == table().end() ? nullptr : &it->second;
}

std::vector<std::string> onnx_exporter_types() {
  std::vector<std::string> v;
  for (const auto& kv : table()) v.push_back(kv.first);
  return v;
}

void register_onnx_exporter(const std::string& type_name, OnnxExporter fn) {
  KILN_CHECK(!type_name.empty() && fn, "register_onnx_exporter: empty type name or exporter");
  table()[type_name] = std::move(fn);
}

}  // namespace kiln::onnx_export
