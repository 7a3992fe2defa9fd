// Image folders and CSV lists as DataSources (training, evaluation, `kiln predict`): the ImageLoader
// (worker threads, deterministic augmentation) with the transforms the options name —
//   training: RandomResizedCrop(S) + flip with --augment rrc, flip only with --augment flip;
//   eval (and training without augmentation): Resize(shorter side R) + CenterCrop(S), or an exact
//   Resize(S, S) with --crop none; S follows the --image-size schedule (progressive resizing).
// A folder with train/ and val/ (or test/) is split that way; --normalize auto measures the
// per-channel mean/std of the training split first (data/channel_stats.h, the numbers `kiln data`
// prints). Bad samples
// are skipped, counted and reported once with path and reason. Must not know about models.
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/data_source.h"
#include "data/image_options.h"

namespace kiln {

// Where the images are and how they are read: --data, --val, the image options, --seed, --limit.
struct ImageDataOptions {
  std::string data;        // class-folder tree (optionally with train/ + val/ or test/), or a CSV list
  std::string val;         // optional separate validation folder or CSV
  ImageOptions image;
  uint64_t seed = 0;       // shuffling and augmentation
  int64_t limit = -1;      // >= 0: keep this many training samples, spread over the data set
};

TrainData open_image_train_data(const ImageDataOptions& c, Device device);
// Evaluation data for inference: the val/ (or test/) split of a folder with splits, else the whole
// folder or CSV, with the eval transform. Images without labels (data/dataset.h's
// unlabelled_images): several inputs, an image file, a glob, a flat folder, a CSV of paths only. --normalize auto is refused: inference uses the training
// set's statistics (stored with the weights), never statistics of the data it predicts.
std::unique_ptr<DataSource> open_image_predict_data(const std::vector<std::string>& inputs, const ImageOptions& opt,
                                                    Device device);
// Whether `inputs` name images without labels that no other opener takes (a list of several, an
// image file, a glob, a flat folder).
bool is_unlabelled_image_input(const std::vector<std::string>& inputs);

// Shorter side of the first readable image of ds (0 when none can be read).
int probe_image_size(const ImageDataset& ds);

}  // namespace kiln
