// Segmentation data as DataSources (training, validation, `kiln predict --task segment`): pairs of
// images and masks (data/segmentation_dataset.h) as batches
//   x: (B, C, S, S) f32, normalized like image folders ((x/255 - mean[c]) / std[c])
//   y: (B, S, S) i64 class indices; 255 is kept (ignore: the loss takes ignore_index 255)
// through one geometry for both (data/segmentation_sample.h): training with --augment rrc:
// RandomResizedCrop(S) + flip, --augment flip: flip only over the eval geometry; validation and
// training without augmentation: Resize(shorter side R) + CenterCrop(S), or Resize(S, S) with
// --crop none; masks always by nearest neighbour. The k-th sample of an epoch draws its crop and
// flip from Philox(seed) at sample_stream(epoch, k) (as image folders do), so batches do not
// depend on the worker count and skip_batches gives the batches an uninterrupted epoch gives.
// Bad samples (missing mask, undecodable image or mask, image/mask size mismatch, a class >=
// num_classes other than 255) are left out of their batch and reported once per path.
// The class count: SegmentationDataOptions::num_classes when > 0, else classes.txt's line count,
// else the largest mask value (255 aside) + 1 over the training and validation masks, read at
// open (a note says which). A batch is decoded by --workers threads; while the caller trains on
// one batch, the next decodes on a background thread (one batch ahead; a skip or a new epoch
// drops it). Must not know about models or losses.
#pragma once
#include <memory>
#include <string>

#include "data/data_source.h"
#include "data/image_options.h"
#include "data/segmentation_dataset.h"

namespace kiln {

struct SegmentationDataOptions {
  std::string data;     // segmentation folder (images/ + masks/, or train/ + val|test/ of such), or image,mask CSV
  std::string val;      // optional separate validation folder or CSV
  ImageOptions image;   // --image-size, --resize, --crop, --augment, --normalize, --workers, --channels, --pin-memory
  uint64_t seed = 0;    // shuffling and augmentation
  int64_t limit = -1;   // >= 0: keep this many training samples, spread over the data set
  int64_t num_classes = 0;  // > 0: the class count (masks are not scanned for it)
};

// A folder with images/ and masks/, a folder whose train/ is one, or a CSV whose header is image,mask.
bool is_segmentation_data(const std::string& path);

// TrainData with format "segment", num_classes, classes (classes.txt, else "0".."K-1"), mean/std,
// notes and the ledger's "data" object. --balance is refused (no per-image label).
TrainData open_segmentation_train_data(const SegmentationDataOptions& o, Device device);

// Images to predict, no masks needed: a folder of images (any depth), the images/ of a
// segmentation folder, or the val/ (else test/, else train/) split of a split folder. Batches:
// x as above with the eval geometry, y (B) i64 zeros; SourceBatch::indices + DataSource::path
// give the file names. --normalize auto is refused (the training set's statistics are used).
// num_classes > 0 and a segmentation folder (or image,mask CSV) whose every image has its mask: y is
// the (B, S, S) masks through the same eval geometry (a mask value >= num_classes other than 255 is a
// bad sample), so the prediction is scored as the training run's validation is.
std::unique_ptr<DataSource> open_segmentation_predict_data(const std::string& path, const ImageOptions& opt,
                                                           Device device, int64_t num_classes = 0);

// The DataSource over a listed data set (tests and the openers above). has_masks = false: images
// only (predict). num_classes > 0 checks mask values.
std::unique_ptr<DataSource> make_segmentation_source(SegmentationDataset ds, const ImageOptions& o,
                                                     const ImageSizeSchedule& sizes, const float* mean,
                                                     const float* std, int64_t num_classes, uint64_t seed,
                                                     Device device, bool has_masks = true);

}  // namespace kiln
