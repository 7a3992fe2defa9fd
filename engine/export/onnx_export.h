// export_onnx: writes a module's inference graph as an ONNX model file (the library side of `kiln export`).
//   input  `input`  f32 (N, C, H, W), N dynamic
//   output `logits` f32 (N, K), or (N, K, H, W) for a segmenter (unet)
// Inference graph: the module is exported in eval mode (batch norm with its running statistics, dropout
// removed) and its training flag is restored afterwards. Weights are f32 initializers named as in the
// state_dict ("layer1.0.conv1.weight"). `metadata` goes into the model's metadata_props (kiln export
// copies the weights file's string metadata there: model, image size, channels, classes, normalization).
// The model is checked with ONNX's own checker (libonnx) before it is written.
//
// Built only with KILN_ONNX (libonnx-dev, libprotobuf-dev); this header does not include them.
#pragma once
#include <map>
#include <string>

#include "engine/nn/module.h"

namespace kiln::onnx_export {

constexpr int64_t kMinOpset = 13;
constexpr int64_t kMaxOpset = 17;  // Debian's libonnx 1.12 knows opsets up to 17

struct OnnxExportOptions {
  int64_t opset = 17;            // 13..17
  int64_t channels = 3;          // C of the input
  int64_t height = 224, width = 224;
  std::string input_name = "input", output_name = "logits";
  std::map<std::string, std::string> metadata;  // -> metadata_props
  std::string doc;                              // the model's doc_string (what the input expects)
};

struct OnnxExportResult {
  int64_t nodes = 0;
  std::map<std::string, int64_t> op_counts;  // "Conv" -> 20, ...
  int64_t initializer_bytes = 0;
  int64_t file_bytes = 0;
  Shape output_shape;  // at batch 1, e.g. (1, 1000)
};

// Throws kiln::Error for an opset outside 13..17, a module with no exporter (naming its path and type), a
// model over protobuf's 2 GiB limit, a checker failure, or an unwritable path.
OnnxExportResult export_onnx(nn::Module& model, const OnnxExportOptions& o, const std::string& path);

}  // namespace kiln::onnx_export
