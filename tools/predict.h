// `kiln predict` as a function: rebuilds the model and its input pipeline from a weights file's
// model card (engine/train/model_card.h, written by `kiln train --save`; a training-state file
// works too), runs it over a data folder in eval mode and writes a CSV. Labelled data:
//   index,[path,]label,predicted,label_name,predicted_name,logit_0,...,logit_{K-1}
// label and predicted are model class indices (label -1: the sample's class is not one of the
// model's); label_name is the data's class name. The data's classes are matched to the model's by
// name, and the accuracy printed is over the samples whose class the model knows.
// Images without labels (a flat folder, image files, a glob, a CSV of paths only) and no accuracy:
//   path,class,score,class_1,score_1,...,class_T,score_T
// class is the predicted class's name, score its softmax probability, then the top T = min(5, K)
// classes best first (class_1 == class).
// Flags that contradict the card (model, classes, image size, channels, resize/crop,
// normalization) are one error naming each difference unless `force`; a file without a card
// (written before it existed) predicts with one warning naming what was assumed. The
// normalization is always the training set's: predict never measures the data it predicts.
// Memory: the prediction is planned on the meta device first (engine/run/plan_predict.h) and the plan
// printed; after the pass, one line puts the measured peaks beside the plan's.
#pragma once
#include <cstdint>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "data/image_options.h"

namespace kiln {

struct PredictConfig {
  std::string model;        // "": the weights' model
  std::string task;         // "": the weights' (classify, or segment: tools/predict_segment.h, --out a folder)
  bool ignore_background = false;  // segment: class 0 left out of the mean IoU / Dice of the summary
  std::string weights, data, out;  // data: inputs[0] (or the only input), for messages
  std::vector<std::string> inputs;  // --data: one folder / CSV / file / glob, or several image files or globs
  int64_t num_classes = 0;  // 0: from the weights' metadata
  int64_t batch = 256;
  int threads = 0;
  std::string device = "auto";
  ImageOptions image;       // image folders / CSV lists: only the entries named in `given` are used
  // The image options the caller set ("image-size", "resize", "crop", "normalize", "channels");
  // the others come from the weights file.
  std::set<std::string> given;
  bool force = false;       // given options that contradict the weights' preprocessing win; segment: overwrite
  // The memory plan (engine/run/plan_predict.h) is printed before the pass, and the measured peaks against it
  // after; dry_run: the plan only, nothing written. device_memory: the device's budget ("": its capacity).
  bool dry_run = false;
  std::string device_memory;
};

struct PredictResult {
  int64_t n = 0;
  int64_t scored = 0;       // samples whose class is one of the model's (segment: pixels scored by masks)
  double accuracy = 0;      // correct / scored (segment: pixel accuracy)
  bool plan_fits = true;    // the memory plan fits the budget
  int64_t planned_allocated = 0, planned_reserved = 0;    // the plan's peaks (bytes)
  int64_t measured_allocated = -1, measured_reserved = -1;  // the pass's (-1: not run, or no statistics)
};

PredictResult run_predict(const PredictConfig& c, std::ostream& log);

}  // namespace kiln
