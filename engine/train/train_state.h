// Training-state files ("checkpoints": what --resume reads) and weight files, both safetensors
// written atomically. Library code: `fit`'s callers (kiln train, a user's own trainer) save and load
// them; it must not know the command line (the configuration arrives as JSON).
// A checkpoint holds "model.<state_dict name>" and "optim.<optimizer state name>" tensors; its
// __metadata__ holds format "kiln-checkpoint-1", model, num_classes, epoch (completed), step
// (optimizer steps done), rng_seed / rng_offset (engine/core/generator.h) and the run's
// configuration as JSON (`config`, whatever the caller passes); a file saved mid-epoch also
// step_in_epoch (steps of the next epoch done) and that epoch's sums so far (epoch_loss_sum,
// epoch_correct, epoch_seen, epoch_undefined_batches); under --amp also amp_dtype (f16 or bf16) and, with
// the loss scaler (f16), amp_scale, amp_growth_tracker and amp_skipped_steps (the LossScaler's state,
// restored by --resume). A weights
// file (--save) is the plain state_dict with torchvision names, plus format "kiln-weights-1" and the
// model card (engine/train/model_card.h: model, num_classes, input size, channels, resize/crop,
// normalization, class names) that `kiln predict` rebuilds the model and its inputs from; a
// training-state file saved with a card carries the same keys.
// Reading a file and loading it are two calls, so a caller can compare the saved configuration
// with its own (kiln train: tools/resume_check.h) before anything is loaded.
#pragma once
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/core/generator.h"
#include "engine/io/safetensors.h"
#include "engine/nn/module.h"
#include "engine/optim/optimizer.h"
#include "engine/train/model_card.h"

namespace kiln {

struct CheckpointState {
  int64_t epoch = 0;
  int64_t step = 0;
  RngState rng;
  // Saved mid-epoch: optimizer steps of epoch `epoch` (0-based) already done, and their sums.
  int64_t step_in_epoch = 0;
  double epoch_loss_sum = 0;
  int64_t epoch_correct = 0, epoch_seen = 0;
  int64_t epoch_undefined_batches = 0;  // batches of those steps left out (all samples bad, ...)
  int64_t epoch_metric_total = 0;       // segmentation: pixels counted by those steps (0 otherwise)
  // The autocast dtype of the run that saved it: "f16" or "bf16" under --amp, "" without (files written before
  // bf16 existed hold a loss scaler state and no dtype: read as "f16").
  std::string amp_dtype{};
  // The --amp f16 loss scaler's state (has_amp: the run that saved it scaled its loss; bf16 runs have none).
  bool has_amp = false;
  double amp_scale = 0;
  int64_t amp_growth_tracker = 0, amp_skipped_steps = 0;
};

// card (optional): its metadata keys are stored too; its model and class count must be these.
void save_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer& opt,
                     const CheckpointState& st, const std::string& model_name, int64_t num_classes,
                     const nlohmann::json& config, const ModelCard* card = nullptr);
// A training-state file as read: its tensors, parsed state and saved configuration.
struct CheckpointFile {
  std::string path;
  SafetensorsFile file;
  CheckpointState state;
  nlohmann::json config;  // the configuration the saving run passed (null if unreadable)
  ModelCard card;         // model, classes, preprocessing (card.missing: what the file lacks)
};

// Reads and checks a training-state file (format, model name, class count, metadata); loads nothing.
CheckpointFile read_checkpoint(const std::string& path, const std::string& model_name, int64_t num_classes);
// Loads the model state, and the optimizer state unless `opt` is null, in place.
void load_checkpoint_tensors(const CheckpointFile& f, nn::Module& model, optim::Optimizer* opt, Device device);
// read_checkpoint + load_checkpoint_tensors with the optimizer; checks model name and class count.
CheckpointState load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer& opt,
                                const std::string& model_name, int64_t num_classes, Device device);

// The state_dict plus the card's metadata. The card must name the model and its class count. A model
// read from a model file (models::GraphModel) also stores the file's text as "model_json", here and in
// save_checkpoint's training-state files.
void save_weights(const std::string& path, const nn::Module& model, const ModelCard& card);
// A card of model, classes, channels and size only (no normalization, crop or class names).
void save_weights(const std::string& path, const nn::Module& model, const std::string& model_name,
                  int64_t num_classes, int64_t in_channels, int64_t image_size);
// The model state of a weights file or of a training-state file ("model." tensors; the optimizer
// state is left out), with the file's card. Loads nothing into a model.
struct WeightsFile {
  std::vector<NamedArray> tensors;
  ModelCard card;
  bool training_state = false;  // a training-state file
  std::string model_json;       // a model file's text ("model_json"), empty for built-in models
};
WeightsFile read_weights(const std::string& path);

}  // namespace kiln
