// `kiln predict` as a function: rebuilds the model from a weights file (metadata written by
// `kiln train --save`, or --num-classes), runs it over a data folder in eval mode and writes a CSV:
//   index,label,predicted,logit_0,...,logit_{K-1}
// (label is the data's label, -1 when unknown). Prints the accuracy when labels are present.
#pragma once
#include <cstdint>
#include <ostream>
#include <string>

#include "data/image_options.h"

namespace kiln {

struct PredictConfig {
  std::string model, weights, data, out;
  int64_t num_classes = 0;  // 0: from the weights' metadata
  int64_t batch = 256;
  int threads = 0;
  std::string device = "auto";
  ImageOptions image;  // image folders / CSV lists: eval transform and normalization
};

struct PredictResult {
  int64_t n = 0;
  double accuracy = 0;
};

PredictResult run_predict(const PredictConfig& c, std::ostream& log);

}  // namespace kiln
