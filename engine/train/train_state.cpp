// Training-state and weight files (see train_state.h).
#include "engine/train/train_state.h"

#include <cstdio>

#include "engine/autograd/anomaly_mode.h"
#include "engine/io/safetensors.h"
#include "engine/io/tensor_io.h"
#include "models/model_file.h"

namespace kiln {

namespace {
const char* kModelPrefix = "model.";
const char* kOptimPrefix = "optim.";

const std::string& meta_at(const SafetensorsFile& f, const std::string& key, const std::string& path) {
  auto it = f.metadata.find(key);
  KILN_CHECK(it != f.metadata.end(), "--resume: ", path, " is not a kiln checkpoint (metadata '", key,
             "' missing)");
  return it->second;
}
// A network read from a model file travels with its weights: the file's text under "model_json".
void add_model_json(const nn::Module& model, std::map<std::string, std::string>& meta) {
  if (const auto* g = dynamic_cast<const models::GraphModel*>(&model)) meta["model_json"] = g->json_text();
}
// A model or optimizer state holding inf/NaN is never written: the file at `path` (the last good
// one) stays as it was.
void check_finite_state(const NamedTensors& state, const std::string& path, const char* what) {
  for (const auto& [name, t] : state)
    KILN_CHECK(all_finite(t), "train: not writing ", what, " ", path, ": ", name, " ", shape_str(t.sizes()),
               " holds ", non_finite_kind(t), " (the file there, if any, is kept as it was)");
}
}  // namespace

void save_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer& opt,
                     const CheckpointState& st, const std::string& model_name, int64_t num_classes,
                     const nlohmann::json& config, const ModelCard* card) {
  NamedTensors all;
  for (const auto& [name, t] : model.state_dict()) all.emplace_back(kModelPrefix + name, t);
  for (const auto& [name, t] : opt.state_dict()) all.emplace_back(kOptimPrefix + name, t);
  std::map<std::string, std::string> meta = {
      {"format", "kiln-checkpoint-1"},
      {"model", model_name},
      {"num_classes", std::to_string(num_classes)},
      {"epoch", std::to_string(st.epoch)},
      {"step", std::to_string(st.step)},
      {"rng_seed", std::to_string(st.rng.seed)},
      {"rng_offset", std::to_string(st.rng.offset)},
      {"config", config.dump()},
  };
  if (card) {
    KILN_CHECK(card->model == model_name && card->num_classes == num_classes, "save_checkpoint: the card is of a ",
               card->model, " with ", card->num_classes, " classes, the model a ", model_name, " with ", num_classes);
    for (const auto& [key, value] : card->to_metadata()) meta.emplace(key, value);
  }
  if (st.step_in_epoch > 0) {
    char sum[64];
    std::snprintf(sum, sizeof sum, "%.17g", st.epoch_loss_sum);  // exact for a double
    meta["step_in_epoch"] = std::to_string(st.step_in_epoch);
    meta["epoch_loss_sum"] = sum;
    meta["epoch_correct"] = std::to_string(st.epoch_correct);
    meta["epoch_seen"] = std::to_string(st.epoch_seen);
    meta["epoch_undefined_batches"] = std::to_string(st.epoch_undefined_batches);
    if (st.epoch_metric_total > 0) meta["epoch_metric_total"] = std::to_string(st.epoch_metric_total);
  }
  if (!st.amp_dtype.empty()) meta["amp_dtype"] = st.amp_dtype;
  if (st.has_amp) {
    char scale[64];
    std::snprintf(scale, sizeof scale, "%.17g", st.amp_scale);  // exact for an f32 scale
    meta["amp_scale"] = scale;
    meta["amp_growth_tracker"] = std::to_string(st.amp_growth_tracker);
    meta["amp_skipped_steps"] = std::to_string(st.amp_skipped_steps);
  }
  add_model_json(model, meta);
  check_finite_state(all, path, "the training state");
  save_safetensors(path, all, meta);
}

CheckpointFile read_checkpoint(const std::string& path, const std::string& model_name, int64_t num_classes) {
  CheckpointFile r;
  r.path = path;
  r.file = read_safetensors(path);
  const SafetensorsFile& f = r.file;
  KILN_CHECK(meta_at(f, "format", path) == "kiln-checkpoint-1", "--resume: ", path, ": unknown checkpoint format '",
             meta_at(f, "format", path), "'");
  KILN_CHECK(meta_at(f, "model", path) == model_name, "--resume: ", path, " was trained with --model ",
             meta_at(f, "model", path), ", not ", model_name);
  KILN_CHECK(meta_at(f, "num_classes", path) == std::to_string(num_classes), "--resume: ", path, " has ",
             meta_at(f, "num_classes", path), " classes, this run has ", num_classes);
  CheckpointState& st = r.state;
  auto optional_meta = [&](const char* key) -> std::string {
    auto it = f.metadata.find(key);
    return it == f.metadata.end() ? std::string("0") : it->second;
  };
  try {
    st.epoch = std::stoll(meta_at(f, "epoch", path));
    st.step = std::stoll(meta_at(f, "step", path));
    st.rng.seed = std::stoull(meta_at(f, "rng_seed", path));
    st.rng.offset = std::stoull(meta_at(f, "rng_offset", path));
    st.step_in_epoch = std::stoll(optional_meta("step_in_epoch"));  // files of epoch ends may lack these
    st.epoch_loss_sum = std::stod(optional_meta("epoch_loss_sum"));
    st.epoch_correct = std::stoll(optional_meta("epoch_correct"));
    st.epoch_seen = std::stoll(optional_meta("epoch_seen"));
    st.epoch_undefined_batches = std::stoll(optional_meta("epoch_undefined_batches"));
    st.epoch_metric_total = std::stoll(optional_meta("epoch_metric_total"));
    if (f.metadata.count("amp_scale")) {
      st.has_amp = true;
      st.amp_scale = std::stod(meta_at(f, "amp_scale", path));
      st.amp_growth_tracker = std::stoll(meta_at(f, "amp_growth_tracker", path));
      st.amp_skipped_steps = std::stoll(meta_at(f, "amp_skipped_steps", path));
    }
    if (f.metadata.count("amp_dtype")) st.amp_dtype = f.metadata.at("amp_dtype");
    else if (st.has_amp) st.amp_dtype = "f16";  // written before bf16: --amp was f16
  } catch (const std::logic_error&) {
    throw Error(str_cat("--resume: ", path, ": malformed epoch/step/rng/amp metadata"));
  }
  KILN_CHECK(st.epoch >= 0 && st.step >= 0 && st.step_in_epoch >= 0 && st.epoch_seen >= 0 && st.epoch_correct >= 0 &&
                 st.epoch_undefined_batches >= 0,
             "--resume: ", path, ": negative epoch/step metadata");
  auto cfg = f.metadata.find("config");
  if (cfg != f.metadata.end()) {
    r.config = nlohmann::json::parse(cfg->second, nullptr, false);
    if (r.config.is_discarded() || !r.config.is_object()) r.config = nlohmann::json();
  }
  r.card = ModelCard::from_metadata(f.metadata, path);
  return r;
}

void load_checkpoint_tensors(const CheckpointFile& f, nn::Module& model, optim::Optimizer* opt, Device device) {
  NamedTensors mstate, ostate;
  const std::string mp = kModelPrefix, op = kOptimPrefix;
  for (const NamedArray& a : f.file.tensors) {
    if (a.name.rfind(mp, 0) == 0) mstate.emplace_back(a.name.substr(mp.size()), from_host_array(a.array, device));
    else if (a.name.rfind(op, 0) == 0) {
      if (opt) ostate.emplace_back(a.name.substr(op.size()), from_host_array(a.array, device));
    } else {
      throw Error(str_cat("--resume: ", f.path, ": unexpected tensor '", a.name, "'"));
    }
  }
  model.load_state_dict(mstate, true);
  if (opt) opt->load_state_dict(ostate);
}

CheckpointState load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer& opt,
                                const std::string& model_name, int64_t num_classes, Device device) {
  CheckpointFile f = read_checkpoint(path, model_name, num_classes);
  load_checkpoint_tensors(f, model, &opt, device);
  return f.state;
}

void save_weights(const std::string& path, const nn::Module& model, const ModelCard& card) {
  KILN_CHECK(!card.model.empty() && card.num_classes > 0, "save_weights: ", path,
             ": the model card must name the model and its class count");
  check_finite_state(model.state_dict(), path, "the weights");
  std::map<std::string, std::string> meta = card.to_metadata();
  meta["format"] = "kiln-weights-1";
  add_model_json(model, meta);
  save_safetensors(path, model.state_dict(), meta);
}

void save_weights(const std::string& path, const nn::Module& model, const std::string& model_name,
                  int64_t num_classes, int64_t in_channels, int64_t image_size) {
  ModelCard card;
  card.model = model_name;
  card.num_classes = num_classes;
  card.preprocessing.channels = in_channels;
  card.preprocessing.image_size = image_size;
  save_weights(path, model, card);
}

WeightsFile read_weights(const std::string& path) {
  SafetensorsFile f = read_safetensors(path);
  WeightsFile w;
  w.card = ModelCard::from_metadata(f.metadata, path);
  auto json = f.metadata.find("model_json");
  if (json != f.metadata.end()) w.model_json = json->second;
  auto format = f.metadata.find("format");
  w.training_state = format != f.metadata.end() && format->second == "kiln-checkpoint-1";
  if (!w.training_state) {
    w.tensors = std::move(f.tensors);
    return w;
  }
  const std::string mp = kModelPrefix;
  for (NamedArray& a : f.tensors)
    if (a.name.rfind(mp, 0) == 0) w.tensors.push_back({a.name.substr(mp.size()), std::move(a.array)});
  return w;
}

}  // namespace kiln
