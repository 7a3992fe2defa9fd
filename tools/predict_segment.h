// `kiln predict --task segment` (or a weights file whose model card says task segment): the
// model's per-pixel classes for every image of --data, written to the folder --out as
//   <stem>_mask.png     the class of each pixel as a palette PNG (its indices are the classes; the
//                       colours are data/segmentation_overlay.h's class_palette, class 0 black)
//   <stem>_overlay.png  side by side: the input image as the model saw it (its normalization
//                       undone) and the same image with each non-background class's colour blended
//                       over it (alpha 1/2)
//   summary.json        per image its predicted pixels per class; with masks in the data (an npy
//                       mask folder, a segmentation folder's masks/ or an image,mask CSV with every
//                       image's mask), the set's pixel accuracy, IoU and Dice per class and their
//                       means (engine/train/segment_metrics.h), also printed.
// <stem> is the image's path relative to the deepest folder holding every image, without its extension
// (images/a/x.png -> a/x: OUT/a/x_mask.png), so equal file names in different folders get distinct
// outputs; sample_NNNNN (the index) for array data. A file this would write that exists already
// (a mask, an overlay, summary.json) is refused in one error before anything is written, unless
// --force. The masks are at the model's input size (the eval geometry of the card). run_predict
// (tools/predict.h) checks the flags against the card and calls this. Must not train or measure.
#pragma once
#include <cstdint>
#include <ostream>
#include <string>

#include "data/image_options.h"
#include "engine/train/train_state.h"
#include "tools/predict.h"

namespace kiln {

// image: the eval pipeline run_predict built from the card; wf's tensors are consumed.
PredictResult run_segment_predict(const PredictConfig& c, WeightsFile& wf, const ImageOptions& image,
                                  const std::string& model_name, int64_t num_classes, std::ostream& log);

}  // namespace kiln
