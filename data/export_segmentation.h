// `kiln export-images --segmentation OUT`: a small segmentation data set made from Fashion-MNIST
// (Debian's dataset-fashion-mnist), so a new user can train a UNet with nothing downloaded. Each
// sample is a gray canvas (default 64x64) with 2..4 Fashion-MNIST items pasted at random places
// (they may overlap: a later item covers an earlier one where it has ink); the mask is
// item class + 1 where the visible item has ink (pixel value > threshold, default 48 of 255) and 0
// (background) elsewhere; faint item pixels at or under the threshold show in the image but stay
// background in the mask. The background carries a little noise (values 0..15, under the
// threshold). Images and masks are 8-bit gray PNGs (lossless: JPEG would smear the edges the
// masks mark); train/ takes items from the IDX train split, val/ from t10k, so validation items
// are unseen. Layout: OUT/{train,val}/{images,masks}/NNNNNN.png, OUT/classes.txt (background + the
// 10 Fashion-MNIST names), OUT/.kiln_export (JSON, written last: what was asked). With classes = "shapes"
// the ten items are grouped by outline into 4 classes a small UNet can tell apart at 64 px (top: T-shirt,
// pullover, dress, coat, shirt; trouser; footwear: sandal, sneaker, ankle boot; bag), and each pasted
// item's group is drawn uniformly first (then an item of it), so the four are equally common; the mask is
// group + 1. Deterministic for
// a seed. Like export-images: the same request again does nothing; another request replaces an
// export that holds only kiln's own files; a folder with anything else in it is refused (--force
// writes anyway). Must not train.
#pragma once
#include <cstdint>
#include <functional>
#include <string>

namespace kiln {

struct ExportSegmentationOptions {
  std::string data = "/usr/share/datasets/fashion-mnist";  // IDX folder with train and t10k files
  std::string out;
  uint64_t seed = 0;
  int64_t count = 2000;  // training samples; val gets count / 5 (at least 1)
  int canvas = 64;       // side of the square canvas, >= 28
  int min_items = 2, max_items = 4;
  int threshold = 48;    // ink: item pixel > threshold
  std::string classes = "items";  // "items": 10 classes + background; "shapes": 4 outline groups + background
  bool force = false;
  // Called every few hundred samples and at the end of each split: (split, done, total).
  std::function<void(const std::string&, int64_t, int64_t)> progress;
};

struct ExportSegmentationResult {
  bool skipped = false;  // OUT's marker records exactly this request
  std::string replaced;  // exported again over an export of other settings: what differed
  int64_t train = 0, val = 0;
  double seconds = 0;
};

ExportSegmentationResult export_segmentation(const ExportSegmentationOptions& o);

// The class names written to classes.txt for classes "items" (11: "background", then Fashion-MNIST's 10 in
// label order) or "shapes" (5: "background", "top", "trouser", "footwear", "bag"); nullptr-terminated.
const char* const* fashion_mnist_segmentation_classes(const std::string& classes = "items");

}  // namespace kiln
