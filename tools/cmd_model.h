// `kiln model show NAME|FILE|W.safetensors`: a torchinfo-style table of a built-in model or a model file (layers,
// output shapes, parameter counts and bytes) with, given --batch, the activation bytes each layer keeps
// for backward at that batch (a meta-device training step, engine/train's memory predictor); --json
// prints the model file of a built-in model. Built-in models are shown through their model-file form
// (models/model_file_builtin.h), so the rows are the file's layers; the activation column of a built-in
// model comes from the built-in model's own meta run (the numbers `kiln mem` gives). A weights file
// (kiln train --save, or a training-state file) shows the model it carries at its trained input size,
// channels and classes (a model file's text travels in it).
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <ostream>
#include <string>

namespace kiln {

struct ModelShowOptions {
  std::string model;         // built-in name or NAME.json
  int64_t image_size = 0;    // 0: the file's "input.size", else the model's usual size
  int64_t channels = 0;      // 0: the file's "input.channels", else 1 for small_cnn, 3 otherwise
  int64_t num_classes = 10;
  bool num_classes_given = false;  // --num-classes on the command line (a weights file's own count otherwise)
  int64_t batch = 0;         // > 0: the activation column at this batch
  bool json = false;
};

CLI::App* add_model_command(CLI::App& app, ModelShowOptions& o);
// Prints the table (or the JSON) to `out`; throws kiln::Error for a bad model or file.
void run_model_show(const ModelShowOptions& o, std::ostream& out);

}  // namespace kiln
