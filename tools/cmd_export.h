// `kiln export [--model NAME] --weights W --onnx out.onnx [--image-size S] [--channels C] [--num-classes K]
// [--opset 17]`: the command-line side of ONNX export (engine/export/onnx_export.h). Reads the weights
// file, builds the model (NAME defaults to the weights' model; a model file's text stored in the weights,
// "model_json", rebuilds it when --model is absent or the file is gone), and hands both to export_onnx with the weights file's string metadata.
// Without KILN_ONNX the command exists and fails with one line saying how to get it.
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <ostream>
#include <string>

namespace kiln_cli {

struct ExportOnnxOptions {
  std::string model, weights, onnx;
  int64_t image_size = 0;   // 0: the weights file's image_size
  int64_t channels = 0;     // 0: the weights file's in_channels
  int64_t num_classes = 0;  // 0: the weights file's num_classes
  int64_t opset = 17;
  // An --image-size other than the trained one is refused (the message kiln predict gives) unless force:
  // then the eval resize scales with it (tools/trained_size.h) and the metadata says image_size, resize
  // and trained_image_size.
  bool force = false;
};

CLI::App* add_export_command(CLI::App& app, ExportOnnxOptions& o);
// Prints one summary line to `out`; throws kiln::Error on any problem.
void run_export_command(const ExportOnnxOptions& o, std::ostream& out);

}  // namespace kiln_cli
