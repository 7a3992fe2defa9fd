// export_onnx (see onnx_export.h): builds the graph with OnnxGraph, wraps it in a ModelProto (IR version,
// opset, producer, metadata), checks it with onnx::checker and writes it atomically.
#include "engine/export/onnx_export.h"

#include <onnx/checker.h>
#include <onnx/onnx_pb.h>

#include <limits>

#include "engine/export/onnx_graph.h"
#include "engine/io/atomic_file.h"

namespace kiln::onnx_export {

namespace {
// Restores the module's training flag on every exit path.
struct EvalScope {
  nn::Module& m;
  bool was_training;
  explicit EvalScope(nn::Module& mod) : m(mod), was_training(mod.is_training()) { m.eval(); }
  ~EvalScope() {
    if (was_training) m.train(true);
  }
};
}  // namespace

OnnxExportResult export_onnx(nn::Module& model, const OnnxExportOptions& o, const std::string& path) {
  KILN_CHECK(o.opset >= kMinOpset && o.opset <= kMaxOpset, "ONNX export: opset ", o.opset,
             " is not supported (kiln writes opsets ", kMinOpset, " to ", kMaxOpset, ")");
  KILN_CHECK(o.channels > 0 && o.height > 0 && o.width > 0, "ONNX export: bad input size (", o.channels, ", ",
             o.height, ", ", o.width, ")");
  KILN_CHECK(!path.empty(), "ONNX export: no output path");
  EvalScope eval(model);
  Device device = Device::cpu();
  for (const Tensor& p : model.parameters()) {
    device = p.device();
    break;
  }

  OnnxGraph g(o.opset, device);
  const OnnxValue x = g.input(o.input_name, {1, o.channels, o.height, o.width});
  const OnnxValue y = g.module(model, "", x);
  KILN_CHECK(y.shape.size() == 2 || y.shape.size() == 4, "ONNX export: the model's output is ", shape_str(y.shape),
             " at batch 1; kiln exports classifiers with (N, K) logits and segmenters with (N, K, H, W)");
  g.output(y, o.output_name);

  OnnxExportResult r;
  r.nodes = g.num_nodes();
  r.op_counts = g.op_counts();
  r.initializer_bytes = g.initializer_bytes();
  r.output_shape = y.shape;

  onnx::ModelProto mp;
  mp.set_ir_version(onnx::IR_VERSION);
  mp.set_producer_name("kiln");
  mp.set_producer_version("0.1.0");
  mp.set_model_version(1);
  mp.set_doc_string(o.doc);
  onnx::OperatorSetIdProto* op = mp.add_opset_import();
  op->set_domain("");
  op->set_version(o.opset);
  for (const auto& [k, v] : o.metadata) {
    onnx::StringStringEntryProto* e = mp.add_metadata_props();
    e->set_key(k);
    e->set_value(v);
  }
  onnx::GraphProto* graph = mp.mutable_graph();
  graph->Swap(static_cast<onnx::GraphProto*>(g.proto()));
  graph->set_name(model.type_name());

  const size_t bytes = mp.ByteSizeLong();
  KILN_CHECK(bytes < (size_t)std::numeric_limits<int32_t>::max(), "ONNX export: the model needs ", bytes,
             " bytes, over protobuf's 2 GiB limit for one file");
  try {
    onnx::checker::check_model(mp);
  } catch (const std::exception& e) {
    throw Error(str_cat("ONNX export: onnx::checker rejects the model: ", e.what()));
  }
  std::string out;
  KILN_CHECK(mp.SerializeToString(&out), "ONNX export: protobuf could not serialize the model");
  atomic_write_file(path, out.data(), out.size());
  r.file_bytes = (int64_t)out.size();
  return r;
}

}  // namespace kiln::onnx_export
