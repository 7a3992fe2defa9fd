// The data of a run (or of `kiln predict`) behind one interface, whatever RunConfig::data names:
// an IDX or .npy folder (in memory, data/array_dataset.h) or an image folder / CSV list (decoded
// per epoch by the threaded ImageLoader, data/image_source.h). The training loop asks a
// DataSource for an epoch's batches on the training device and never learns which it is.
// Must not know about models or optimizers.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/data_source.h"
#include "engine/nn/module.h"
#include "engine/tensor/tensor.h"
#include "engine/train/evaluate.h"
#include "data/image_options.h"
#include "engine/run/run_config.h"

namespace kiln {

// "idx", "npy" or "images" (an image folder or a .csv file) for --data; throws naming the path.
std::string data_kind(const std::string& path);

// The training (and validation) data of run `c` on `device`. --task segment: a folder of x.npy +
// y.npy (N, H, W) masks (data/mask_array_source.h); format "segment".
TrainData open_train_data(const RunConfig& c, Device device);
// The data `kiln predict --task segment` runs on: an npy mask folder (images and masks, so the
// masks score the prediction), or image files (data/segmentation_source.h: a folder of images, a
// segmentation folder's images/, a split folder's val/; no masks).
// num_classes > 0: a segmentation folder whose every image has a mask is scored by its masks too.
std::unique_ptr<DataSource> open_segment_predict_data(const std::string& path, const ImageOptions& opt, Device device,
                                                      int64_t num_classes = 0);
// The data `kiln predict` runs on: an IDX folder's t10k split, x.npy + y.npy, or for image data
// the val/ or test/ split of a folder with splits (else the whole folder, or the CSV), with the
// eval transform (opt.normalize must not be auto: predict never measures its data).
// idx_mean_std (optional): an IDX folder's normalization (mean, std), the weights' training values.
// Several inputs, an image file, a glob or a flat folder: images without labels (data/image_source.h).
std::unique_ptr<DataSource> open_predict_data(const std::vector<std::string>& inputs, const ImageOptions& opt,
                                              Device device, const double* idx_mean_std = nullptr);

// Prints bad-sample reports not yet printed ("data: skipped bad sample PATH: REASON").
// "data: skipped bad sample PATH: REASON" for the bad samples met since the last call, each after `prefix`
// (a data-parallel rank other than 0 writes "rank R: " to stderr: it decodes its own shard).
void report_bad_samples(DataSource& d, std::ostream& log, const std::string& prefix = "");

}  // namespace kiln
