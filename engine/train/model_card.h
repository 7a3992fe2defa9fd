// What a trained model needs to be used again, stored with its weights: the model, its classes in
// index order and the preprocessing its inputs went through (input size, channels, resize/crop,
// the normalization mean/std actually applied — for --normalize auto the training split's
// measured values). A weights file (save_weights) and a training-state file (save_checkpoint)
// carry it as safetensors __metadata__ strings; `kiln predict` rebuilds the eval transform from
// it, and an exporter reads the same struct. Reading tolerates files written before these keys
// existed: what is absent is listed in ModelCard::missing, and the caller decides what to assume.
// Pure values and their text form: no files are opened here except by read_model_card, nothing
// is decoded, no statistics are measured.
// Metadata keys: model, task (classify|segment; absent in older files: classify), num_classes,
// in_channels, image_size, data_format (images|idx|npy|segment),
// resize, crop (center|none), normalize (the requested kind: none|imagenet|auto|custom text),
// mean and std (JSON arrays, one value per channel, or one for all), class_names (JSON array), precision (how
// the weights were trained: f32, amp f16 or amp bf16; the weights themselves are f32 master weights either way).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "data/data_source.h"
#include "data/image_options.h"
#include "engine/io/safetensors.h"

namespace kiln {

struct Preprocessing {
  std::string data_format;    // images | idx | npy ("" unknown)
  int64_t image_size = 0;     // S: the model sees S x S (a progressive schedule's final size); 0 unknown
  int64_t channels = 0;       // 1 or 3; 0 unknown
  int64_t resize = 0;         // shorter side before the centre crop (eval); 0 unknown
  std::string crop;           // center | none ("" unknown)
  std::string normalize;      // what was asked: none | imagenet | auto | m,..:s,.. ("" unknown)
  // Applied as (x/255 - mean[c]) / std[c]; empty: unknown. One value applies to every channel.
  std::vector<double> mean, std;

  bool has_normalization() const { return !mean.empty() && mean.size() == std.size(); }
  // The normalization as --normalize text that reproduces the stored values exactly
  // ("m1,m2,m3:s1,s2,s3", 17 significant digits; "none" for mean 0 / std 1).
  std::string normalize_text() const;
};

struct ModelCard {
  std::string model;                     // a built-in model name ("" unknown)
  // What the model's output means: "classify" (N, K) logits, "segment" (N, K, H, W) per-pixel
  // scores (engine/train/segment_task.h). Files written before tasks existed read as "classify".
  std::string task = "classify";
  int64_t num_classes = 0;               // 0 unknown
  std::vector<std::string> class_names;  // index = class; empty: unknown
  Preprocessing preprocessing;
  // How the model was trained: "f32", "amp f16" or "amp bf16" (RunConfig::precision()); "" unknown (files
  // written before it was recorded: not listed in `missing`, nothing depends on it). Informational: the stored
  // weights are the f32 master weights in every case.
  std::string precision;
  // Filled by from_metadata: what the file did not hold, in words ("normalization mean/std",
  // "resize/crop", "class names", ...). Empty for files written by this version.
  std::vector<std::string> missing;

  std::map<std::string, std::string> to_metadata() const;
  // `source` names the file in errors (a malformed value is an error, an absent one is `missing`).
  static ModelCard from_metadata(const std::map<std::string, std::string>& metadata, const std::string& source);
};

// The card of a weights or training-state file (reads the whole file; see from_metadata).
ModelCard read_model_card(const std::string& path);

// The card of a run over `data` (as open_image_train_data / a caller's array source left it):
// format, classes (padded with their indices up to num_classes; array data: the indices), the
// normalization applied, and the eval transform of `image` at `image_size` (the final size).
ModelCard make_model_card(const std::string& model, int64_t num_classes, const TrainData& data,
                          const ImageOptions& image, int64_t channels, int64_t image_size);

}  // namespace kiln
