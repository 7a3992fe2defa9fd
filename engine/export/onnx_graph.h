// OnnxGraph: the inference graph that ONNX export builds, one module at a time. Each module type has an
// exporter (engine/export/onnx_exporters.h) that turns the module into ONNX nodes through this class:
//   OnnxValue y = g.node(path, "Conv", {x.name, w, b}, {OnnxAttr::ints("strides", {s, s})}, out_shape);
// Composite modules call g.module(child, path, x) on their children, which finds the child's exporter by
// type name (Module::type_name) and fails with one error naming the module path and type when none exists.
//
// Layer: engine/export sits above models/ and engine/train (it exports their modules) and below tools/.
// This header is protobuf-free on purpose: libonnx / libprotobuf are linked only into the kiln_onnx
// library (CMake option KILN_ONNX), and nothing of kiln's core may depend on them.
//
// Shapes: every value carries its shape at batch 1 (the batch dimension is dynamic, "N", in the file).
// They come from kiln itself: a node's output shape is the shape of the matching kiln op run on a batch-1
// zero tensor (OnnxGraph::probe), so export never re-implements shape inference.
#pragma once
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/nn/module.h"

namespace kiln::onnx_export {

// A named value of the graph (a node output or the graph input) and its shape at batch 1.
struct OnnxValue {
  std::string name;
  Shape shape;
};

// One node attribute (the few kinds kiln's nodes use).
struct OnnxAttr {
  enum class Kind { i, f, ints, s };
  std::string name;
  Kind kind = Kind::i;
  int64_t i = 0;
  float f = 0;
  std::vector<int64_t> list;
  std::string text;
  static OnnxAttr integer(const std::string& n, int64_t v);
  static OnnxAttr real(const std::string& n, float v);
  static OnnxAttr ints(const std::string& n, std::vector<int64_t> v);
  static OnnxAttr str(const std::string& n, std::string v);
};

class OnnxGraph;
// Emits the nodes of module m (found at dotted `path`, "" for the root) applied to x; returns its output.
using OnnxExporter = std::function<OnnxValue(OnnxGraph& g, nn::Module& m, const std::string& path, const OnnxValue& x)>;

class OnnxGraph {
 public:
  // opset: 13..17 (checked by export_onnx). device: where probes run (the model's device).
  OnnxGraph(int64_t opset, Device device);
  ~OnnxGraph();
  OnnxGraph(const OnnxGraph&) = delete;
  OnnxGraph& operator=(const OnnxGraph&) = delete;

  int64_t opset() const { return opset_; }

  // The graph input (f32, dims (N, shape[1:]...)).
  OnnxValue input(const std::string& name, const Shape& shape_batch1);
  // Marks v as the graph output under `name` (renames v's producing node output; an Identity node when v
  // is the graph input itself).
  void output(const OnnxValue& v, const std::string& name);

  // Exports module m through the exporter registered for m.type_name(). Throws kiln::Error naming `path`
  // and the type when there is none.
  OnnxValue module(nn::Module& m, const std::string& path, const OnnxValue& x);

  // A parameter or buffer as an f32 initializer named `name` (its state_dict name); returns the name.
  std::string initializer(const std::string& name, const Tensor& t);
  // A constant input of a node (Resize's scales, Slice's starts): a 1-D initializer named after `name`
  // (made unique); returns its name.
  std::string constant_f32(const std::string& name, const std::vector<float>& v);
  std::string constant_i64(const std::string& name, const std::vector<int64_t>& v);

  // Adds node `op` named `path` (made unique) with the given inputs; its one output value is named after
  // the node and has out_shape (from probe, or an input's shape for shape-preserving ops).
  OnnxValue node(const std::string& path, const std::string& op, const std::vector<std::string>& inputs,
                 const std::vector<OnnxAttr>& attrs, const Shape& out_shape);
  // The output shape of fn on a batch-1 zero tensor shaped like x (no autograd, eval mode of the caller).
  Shape probe(const OnnxValue& x, const std::function<Tensor(const Tensor&)>& fn) const;

  // Counts for the caller's report.
  int64_t num_nodes() const;
  std::map<std::string, int64_t> op_counts() const;
  int64_t initializer_bytes() const { return initializer_bytes_; }

  // The protobuf GraphProto behind this builder (onnx::GraphProto*, used by onnx_export.cpp only).
  void* proto();

 private:
  std::string unique_value_name(const std::string& want);

  int64_t opset_;
  Device device_;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int64_t initializer_bytes_ = 0;
};

// Joins a dotted module path and a child name: ("layer1.0", "conv1") -> "layer1.0.conv1", ("", "fc") -> "fc".
std::string join_path(const std::string& path, const std::string& name);

}  // namespace kiln::onnx_export
