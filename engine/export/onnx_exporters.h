// The ONNX exporter of each module type, found by Module::type_name(). Adding export for a new module
// type is one function (in onnx_export_nn.cpp for engine/nn layers, onnx_export_models.cpp for models/
// blocks and networks) plus one line in the table of onnx_exporters.cpp. A library user's own module
// types are added at run time with register_onnx_exporter.
//
// An exporter emits the module's inference graph (eval mode): batch norm with its running statistics,
// dropout removed. It must not change the module.
#pragma once
#include <string>
#include <vector>

#include "engine/export/onnx_graph.h"

namespace kiln::onnx_export {

// The exporter for a type name, or nullptr.
const OnnxExporter* find_onnx_exporter(const std::string& type_name);
// Every type name with an exporter (sorted), for error messages.
std::vector<std::string> onnx_exporter_types();
// Adds or replaces the exporter of a module type (thread-unsafe: call before exporting).
void register_onnx_exporter(const std::string& type_name, OnnxExporter fn);

// ---- engine/nn layers (onnx_export_nn.cpp) ----
OnnxValue export_conv2d(OnnxGraph& g, nn::Module& m, const std::string& path, const OnnxValue& x);       // Conv
OnnxValue export_batch_norm2d(OnnxGraph& g, nn::Module& m, const std::string& path, const OnnxValue& x); // BatchNormalization
OnnxValue export_linear(OnnxGraph& g, nn::Module& m, const std::string& path, const OnnxValue& x);       // Gemm
OnnxValue export_relu(OnnxGraph& g, nn::Module& m, const std::string& path, const OnnxValue& x);         // Relu
OnnxValue export_max_pool2d(OnnxGraph& g, nn::Module& m, const std::string& path, const OnnxValue& x);   // MaxPool
OnnxValue export_adaptive_avg_pool2d(OnnxGraph& g, nn::Module& m, const std::string& path,
                                     const OnnxValue& x);  // GlobalAveragePool / AveragePool
OnnxValue export_flatten(OnnxGraph& g, nn::Module& m, const std::string& path, const OnnxValue& x);      // Flatten
OnnxValue export_identity(OnnxGraph& g, nn::Module& m, const std::string& path, const OnnxValue& x);     // no node (Dropout, Identity)
OnnxValue export_conv_transpose2d(OnnxGraph& g, nn::Module& m, const std::string& path,
                                  const OnnxValue& x);  // ConvTranspose
OnnxValue export_upsample(OnnxGraph& g, nn::Module& m, const std::string& path, const OnnxValue& x);     // Resize
OnnxValue export_sequential(OnnxGraph& g, nn::Module& m, const std::string& path, const OnnxValue& x);   // its children in order

// ---- models/ (onnx_export_models.cpp) ----
OnnxValue export_basic_block(OnnxGraph& g, nn::Module& m, const std::string& path, const OnnxValue& x);
OnnxValue export_bottleneck(OnnxGraph& g, nn::Module& m, const std::string& path, const OnnxValue& x);
OnnxValue export_resnet(OnnxGraph& g, nn::Module& m, const std::string& path, const OnnxValue& x);
OnnxValue export_small_cnn(OnnxGraph& g, nn::Module& m, const std::string& path, const OnnxValue& x);
// models/unet.h (onnx_export_unet.cpp): DoubleConv, Down, OutConv, and the UNet (Pad + Concat per Up).
OnnxValue export_unet_double_conv(OnnxGraph& g, nn::Module& m, const std::string& path, const OnnxValue& x);
OnnxValue export_unet_down(OnnxGraph& g, nn::Module& m, const std::string& path, const OnnxValue& x);
OnnxValue export_unet_out_conv(OnnxGraph& g, nn::Module& m, const std::string& path, const OnnxValue& x);
OnnxValue export_unet(OnnxGraph& g, nn::Module& m, const std::string& path, const OnnxValue& x);
// A model file's network (models::GraphModel): its layers in run order, joins as Add / Concat.
OnnxValue export_graph_model(OnnxGraph& g, nn::Module& m, const std::string& path, const OnnxValue& x);
// A model file's op layer (models::OpLayer: GELU, Sigmoid, Tanh, LeakyReLU, AvgPool2d, MaxPool2d) from its
// attrs(); MaxPool2d shares its type name with nn::MaxPool2d and goes to export_max_pool2d otherwise.
OnnxValue export_op_layer(OnnxGraph& g, nn::Module& m, const std::string& path, const OnnxValue& x);

// ---- helpers for exporters: nodes for kiln's functional ops (shapes probed with the same op) ----
OnnxValue relu_node(OnnxGraph& g, const std::string& path, const OnnxValue& x);
OnnxValue max_pool_node(OnnxGraph& g, const std::string& path, const OnnxValue& x, int64_t kernel, int64_t stride,
                        int64_t padding);
OnnxValue flatten_node(OnnxGraph& g, const std::string& path, const OnnxValue& x);  // flatten(x, 1)
OnnxValue add_node(OnnxGraph& g, const std::string& path, const OnnxValue& a, const OnnxValue& b);

// The module m as type T, or one error naming the path (an exporter registered under the wrong type name).
template <typename T>
T& module_as(nn::Module& m, const std::string& path) {
  T* p = dynamic_cast<T*>(&m);
  KILN_CHECK(p != nullptr, "ONNX export: module '", path, "' of type ", m.type_name(),
             " is not the C++ class its exporter expects");
  return *p;
}

}  // namespace kiln::onnx_export
