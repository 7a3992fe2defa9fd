// `kiln model show` (see cmd_model.h).
#include "tools/cmd_model.h"

#include "models/registry.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "engine/memory/alloc_config.h"
#include "engine/train/memory_predict.h"
#include "models/model_file.h"
#include "models/model_file_builtin.h"
#include "tools/cli_checks.h"
#include "engine/run/run_model.h"
#include "engine/train/train_state.h"

namespace kiln {

CLI::App* add_model_command(CLI::App& app, ModelShowOptions& o) {
  CLI::App* m = app.add_subcommand("model", "inspect models: kiln model show NAME|FILE");
  m->require_subcommand(1);
  CLI::App* s = m->add_subcommand(
      "show", "list a model's layers, output shapes, parameters and (--batch) activation bytes kept for backward");
  s->add_option("model", o.model,
                "built-in model name (small_cnn, resnet18, ...), a model file NAME.json, or a weights file "
                "W.safetensors from kiln train --save (its model at its trained input size, channels and classes)")
      ->required();
  s->add_option("--image-size", o.image_size, "input height = width (default: the file's input.size, or the model's usual size)")
      ->check(kiln_cli::positive);
  s->add_option("--channels", o.channels, "input channels (default: the file's input.channels; 1 for small_cnn; else 3)")
      ->check(kiln_cli::positive);
  s->add_option("--num-classes", o.num_classes, "classes (linear layers with out_features \"num_classes\")")
      ->check(kiln_cli::positive)
      ->capture_default_str()
      ->each([&o](const std::string&) { o.num_classes_given = true; });
  s->add_option("--batch", o.batch, "also the activation bytes each layer keeps for backward at this batch (meta run)")
      ->check(kiln_cli::positive);
  s->add_flag("--json", o.json, "print the model file (a built-in model's model-file form)");
  return m;
}

namespace {

std::string with_commas(int64_t v) {
  std::string s = std::to_string(v), r;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i && (s.size() - i) % 3 == 0) r += ',';
    r += s[i];
  }
  return r;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  KILN_CHECK(f.good(), "model file ", path, ": cannot open it");
  std::ostringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// file_text: a model file's text that is not on disk (one carried by a weights file; o.model names it).
void run_model_show_impl(const ModelShowOptions& o, const std::string* file_text, std::ostream& out);

// A weights or training-state file (W.safetensors): the model it carries, at its trained input, classes and
// channels (flags still win); a model file's text travels in it.
void show_weights(const ModelShowOptions& o, std::ostream& out) {
  const WeightsFile wf = read_weights(o.model);
  const ModelCard& card = wf.card;
  KILN_CHECK(!card.model.empty(), "model show: ", o.model,
             " names no model (not written by kiln train --save); give the model: kiln model show NAME --num-classes K");
  ModelShowOptions m = o;
  m.model = card.model;
  const bool carried = models::is_model_file_name(card.model) && !wf.model_json.empty();  // the text as trained
  if (o.num_classes_given == false && card.num_classes > 0) m.num_classes = card.num_classes;
  if (o.channels <= 0 && card.preprocessing.channels > 0) m.channels = card.preprocessing.channels;
  if (o.image_size <= 0 && card.preprocessing.image_size > 0) m.image_size = card.preprocessing.image_size;
  out << o.model << ": " << (wf.training_state ? "a training-state file" : "weights") << " of " << card.model
      << " (task " << card.task << ")\n";
  run_model_show_impl(m, carried ? &wf.model_json : nullptr, out);
}

}  // namespace

void run_model_show(const ModelShowOptions& o, std::ostream& out) {
  if (!models::is_model_file_name(o.model) && std::filesystem::path(o.model).extension() == ".safetensors")
    show_weights(o, out);
  else
    run_model_show_impl(o, nullptr, out);
}

namespace {

void run_model_show_impl(const ModelShowOptions& o, const std::string* file_text, std::ostream& out) {
  const bool file = file_text || models::is_model_file_name(o.model);
  const std::string text = file_text ? *file_text
                           : file    ? read_text(o.model)
                                     : models::format_model_json(models::builtin_model_json(o.model));
  if (o.json) {
    out << text;
    return;
  }
  models::ModelInput in;
  in.num_classes = o.num_classes;
  in.in_channels = o.model == "small_cnn" ? 1 : 3;
  in.image_size = o.model == "small_cnn" ? 28 : (o.model == "resnet18" || o.model == "resnet34") ? 224 : 32;
  if (file) {  // the file's own input, when it says
    const nlohmann::json doc = nlohmann::json::parse(text, nullptr, false);
    if (doc.is_object() && doc.contains("input") && doc["input"].is_object()) {
      const nlohmann::json& i = doc["input"];
      if (i.contains("channels") && i["channels"].is_number_integer()) in.in_channels = i["channels"].get<int64_t>();
      if (i.contains("size") && i["size"].is_number_integer()) in.image_size = i["size"].get<int64_t>();
    }
  }
  if (o.channels > 0) in.in_channels = o.channels;
  if (o.image_size > 0) in.image_size = o.image_size;
  const std::string source = file ? o.model : o.model + " (built in)";
  std::shared_ptr<models::GraphModel> g = models::build_graph_model(text, source, in);

  std::map<std::string, int64_t> act;  // layer -> bytes saved for backward
  int64_t act_total = 0, act_other = 0;
  StepMemory mem;
  if (o.batch > 0) {
    train::PredictOptions po;
    po.batch = o.batch;
    po.input_shape = {in.in_channels, in.image_size, in.image_size};
    // A segmenter (unet*): per-pixel logits, one class-index mask per sample.
    if (!file && models::is_segmentation_model(o.model)) po.target_shape = {in.image_size, in.image_size};
    RunConfig tc;  // kiln train's defaults: plain SGD
    // A built-in model's own modules (in-place adds and ReLUs): the numbers of `kiln mem --model NAME`.
    mem = train::predict_step_memory(
        [&] {
          return file ? nn::ModulePtr(models::build_graph_model(text, source, in))
                      : build_model(o.model, in.num_classes, in.in_channels, in.image_size);
        },
        [&](nn::Module& m) { return build_optimizer(tc, m); }, po);
    for (const auto& [path, bytes] : mem.layer_activations) {
      act_total += bytes;
      bool placed = false;
      for (const models::GraphLayer& l : g->layers())
        if (path == l.name || path.rfind(l.name + ".", 0) == 0) {
          act[l.name] += bytes;
          placed = true;
          break;
        }
      if (!placed) act_other += bytes;
    }
  }

  out << "model " << source << ": input (" << in.in_channels << ", " << in.image_size << ", " << in.image_size
      << "), " << in.num_classes << " classes\n";
  size_t wn = 5, wt = 4, ws = 12;
  for (const models::GraphLayer& l : g->layers()) {
    wn = std::max(wn, l.name.size());
    wt = std::max(wt, l.type.size());
    std::string sh = "(";
    for (size_t i = 0; i < l.out_shape.size(); ++i) sh += (i ? ", " : "") + std::to_string(l.out_shape[i]);
    ws = std::max(ws, sh.size() + 1);
  }
  char buf[512];
  const std::string act_head = o.batch > 0 ? "activations @" + std::to_string(o.batch) : "";
  // One row: the activation column only with --batch (no trailing blanks without it).
  auto row = [&](const std::string& n, const std::string& t, const std::string& sh, const std::string& p,
                 const std::string& pb, const std::string& a) {
    std::snprintf(buf, sizeof buf, "%-*s  %-*s  %-*s  %12s  %11s", (int)wn, n.c_str(), (int)wt, t.c_str(), (int)ws,
                  sh.c_str(), p.c_str(), pb.c_str());
    out << buf << (o.batch > 0 ? "  " + a : std::string()) << "\n";
  };
  row("layer", "type", "output shape", "params", "param bytes", act_head);
  int64_t params = 0, pbytes = 0;
  for (const models::GraphLayer& l : g->layers()) {
    std::string sh = "(";
    for (size_t i = 0; i < l.out_shape.size(); ++i) sh += (i ? ", " : "") + std::to_string(l.out_shape[i]);
    sh += ")";
    const std::string a = o.batch > 0 ? format_bytes((double)act[l.name]) : "";
    row(l.name, l.type, sh, l.params ? with_commas(l.params) : "-",
        l.param_bytes ? format_bytes((double)l.param_bytes) : "-", a);
    params += l.params;
    pbytes += l.param_bytes;
  }
  out << "total: " << with_commas(params) << " parameters, " << format_bytes((double)pbytes)
      << " of parameters and buffers (f32)\n";
  if (o.batch > 0) {
    out << "activations kept for backward at batch " << o.batch << ": " << format_bytes((double)act_total);
    if (act_other > 0)
      out << " (" << format_bytes((double)act_other) << " outside the listed layers: loss"
          << (file ? "" : ", the built-in blocks' in-place adds") << ")";
    out << "; predicted peak of a training step (kiln train's defaults: SGD, cpu policy): " << format_bytes((double)mem.peak_allocated)
        << " allocated, " << format_bytes((double)mem.peak_reserved) << " reserved\n";
  }
}

}  // namespace

}  // namespace kiln
