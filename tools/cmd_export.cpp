// `kiln export` (see cmd_export.h).
#include "tools/cmd_export.h"

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "engine/core/error.h"
#include "engine/io/safetensors.h"
#include "engine/io/tensor_io.h"
#include "models/model_file.h"
#include "models/registry.h"
#include "tools/shape_facts.h"
#include "tools/trained_size.h"
#ifdef KILN_WITH_ONNX
#include "engine/export/onnx_export.h"
#endif

namespace kiln_cli {

CLI::App* add_export_command(CLI::App& app, ExportOnnxOptions& o) {
  CLI::App* e = app.add_subcommand(
      "export", "write a trained model as an ONNX file (input 'input' f32 (N,C,H,W), output 'logits' f32 (N,K), or (N,K,H,W) for unet)");
  e->add_option("--model", o.model,
                 "model name or model file (NAME.json) as trained (default: the weights file's model; a model "
                 "file's text stored in the weights is used when the file is gone)");
  e->add_option("--weights", o.weights, "weights (safetensors from kiln train --save)")
      ->required()
      ->check(CLI::ExistingFile);
  e->add_option("--onnx", o.onnx, "ONNX file to write")->required();
  e->add_option("--image-size", o.image_size,
                 "input height = width (default: from the weights file; another size than the trained one is refused, "
                 "as kiln predict refuses it, unless --force)")
      ->check(CLI::PositiveNumber);
  e->add_option("--channels", o.channels, "input channels (default: from the weights file)")
      ->check(CLI::PositiveNumber);
  e->add_option("--num-classes", o.num_classes, "number of classes (default: from the weights file)")
      ->check(CLI::PositiveNumber);
  e->add_option("--opset", o.opset, "ONNX opset, 13 to 17")->capture_default_str();
  e->add_flag("--force", o.force,
              "export at an --image-size other than the trained one: the eval resize scales with it and the "
              "metadata says image_size, resize and trained_image_size");
  return e;
}

#ifdef KILN_WITH_ONNX
void run_export_command(const ExportOnnxOptions& o, std::ostream& out) {
  using namespace kiln;
  const auto t0 = std::chrono::steady_clock::now();
  // Check the opset before reading anything large.
  KILN_CHECK(o.opset >= onnx_export::kMinOpset && o.opset <= onnx_export::kMaxOpset, "export: --opset ", o.opset,
             " is not supported (kiln writes opsets ", onnx_export::kMinOpset, " to ", onnx_export::kMaxOpset, ")");
  SafetensorsFile wf = read_safetensors(o.weights);
  auto meta_int = [&](const char* key, int64_t flag, const char* option) -> int64_t {
    if (flag > 0) return flag;
    auto it = wf.metadata.find(key);
    KILN_CHECK(it != wf.metadata.end(), "export: ", o.weights, " has no ", key, " metadata; pass ", option);
    int64_t v = 0;
    try {
      v = std::stoll(it->second);
    } catch (const std::exception&) {
      v = 0;
    }
    KILN_CHECK(v > 0, "export: ", o.weights, " has a bad ", key, " '", it->second, "'; pass ", option);
    return v;
  };
  auto mit = wf.metadata.find("model");
  KILN_CHECK(!o.model.empty() || mit != wf.metadata.end(), "export: ", o.weights,
             " does not say which model it holds (no model metadata); pass --model");
  const std::string model_name = o.model.empty() ? mit->second : o.model;
  KILN_CHECK(mit == wf.metadata.end() || mit->second == model_name, "export: ", o.weights, " holds a ", mit->second,
             ", not a ", model_name);
  // Weights saved by PyTorch carry no metadata: what the tensors' shapes give is taken from them (said in
  // one line), and only what they do not give is asked for.
  const ShapeFacts facts = shape_facts(wf.tensors);
  std::string inferred;
  auto from_shape = [&](const char* key, int64_t flag, int64_t fact, const std::string& from) {
    if (flag > 0 || wf.metadata.count(key) || fact <= 0) return flag;
    inferred += str_cat(inferred.empty() ? "" : ", ", key, " ", fact, " from ", from);
    return fact;
  };
  const int64_t num_classes =
      meta_int("num_classes", from_shape("num_classes", o.num_classes, facts.num_classes, facts.num_classes_from),
               "--num-classes");
  const int64_t channels =
      meta_int("in_channels", from_shape("in_channels", o.channels, facts.in_channels, facts.in_channels_from),
               "--channels");
  KILN_CHECK(o.image_size > 0 || wf.metadata.count("image_size"), "export: ", o.weights,
             " has no image_size metadata and no tensor's shape gives the input size",
             inferred.empty() ? "" : str_cat(" (", inferred, ")"),
             "; pass --image-size (torchvision's ImageNet weights: 224)");
  const int64_t size = meta_int("image_size", o.image_size, "--image-size");
  if (!inferred.empty()) out << "export: " << o.weights << " has no kiln metadata: " << inferred << "\n";
  // Another size than the trained one: refused as kiln predict refuses it, unless --force (the resize scales).
  int64_t trained_size = 0, resize = 0;
  if (auto it = wf.metadata.find("image_size"); it != wf.metadata.end()) trained_size = std::atoll(it->second.c_str());
  if (auto it = wf.metadata.find("resize"); it != wf.metadata.end()) resize = std::atoll(it->second.c_str());
  const bool other_size = o.image_size > 0 && trained_size > 0 && o.image_size != trained_size;
  if (other_size) {
    const std::string d = image_size_difference(std::to_string(o.image_size), trained_size);
    KILN_CHECK(o.force, "export: ", trained_otherwise(o.weights, {d}));
    out << "export: --force: " << d;
    if (resize > 0) out << "; " << scaled_resize_note(resize, trained_size, o.image_size);
    out << "\n";
  }

  // A model file's text travels in the weights ("model_json"): used when --model is not given or the
  // file is gone, so the exported network is the trained one.
  auto jit = wf.metadata.find("model_json");
  nn::ModulePtr model;
  if (models::is_model_file_name(model_name) && jit != wf.metadata.end() && !jit->second.empty() &&
      (o.model.empty() || !std::filesystem::exists(model_name)))
    model = models::build_graph_model(jit->second, o.weights + " (model_json)", {num_classes, channels, size});
  else
    model = models::make_model(model_name, num_classes, channels, size);
  NamedTensors state;
  for (const NamedArray& a : wf.tensors) state.emplace_back(a.name, from_host_array(a.array, Device::cpu()));
  model->load_state_dict(state, true);

  onnx_export::OnnxExportOptions eo;
  eo.opset = o.opset;
  eo.channels = channels;
  eo.height = eo.width = size;
  // Every string the weights file records (model, classes, preprocessing, ...), and the exported input size.
  eo.metadata = wf.metadata;
  eo.metadata["model"] = model_name;
  eo.metadata["num_classes"] = std::to_string(num_classes);
  eo.metadata["in_channels"] = std::to_string(channels);
  eo.metadata["image_size"] = std::to_string(size);
  if (other_size) {
    eo.metadata["trained_image_size"] = std::to_string(trained_size);
    if (resize > 0) eo.metadata["resize"] = std::to_string(scaled_resize(resize, trained_size, size));
  }
  eo.doc = str_cat("kiln ", model_name, ": input '", eo.input_name, "' f32 (N, ", channels, ", ", size, ", ", size,
                   "), output '", eo.output_name, "' f32 (N, ", num_classes,
                   ") logits (no softmax); preprocessing in metadata_props");
  const auto t1 = std::chrono::steady_clock::now();
  const onnx_export::OnnxExportResult r = onnx_export::export_onnx(*model, eo, o.onnx);
  const auto t2 = std::chrono::steady_clock::now();
  const double s = std::chrono::duration<double>(t2 - t0).count();
  const double s_export = std::chrono::duration<double>(t2 - t1).count();
  std::string ops;
  for (const auto& [op, n] : r.op_counts) ops += (ops.empty() ? "" : ", ") + op + " " + std::to_string(n);
  // The total includes building the model (its random initialization) and reading the weights.
  char buf[128];
  std::snprintf(buf, sizeof buf, "%.1f MB in %.2f s (graph, check and write %.2f s)", (double)r.file_bytes / 1e6, s,
                s_export);
  out << "export: " << model_name << " -> " << o.onnx << ": opset " << o.opset << ", " << r.nodes << " nodes (" << ops
      << "), input '" << eo.input_name << "' f32 (N, " << channels << ", " << size << ", " << size << "), output '"
      << eo.output_name << "' f32 (N, " << r.output_shape[1];
  for (size_t d = 2; d < r.output_shape.size(); ++d) out << ", " << r.output_shape[d];
  out << "), " << buf << "\n";
}
#else
void run_export_command(const ExportOnnxOptions&, std::ostream&) {
  throw kiln::Error(
      "export: this kiln was built without ONNX export (KILN_ONNX=OFF, or libonnx-dev / libprotobuf-dev were "
      "missing at configure time): install them (scripts/setup.sh does) and reconfigure");
}
#endif

}  // namespace kiln_cli
