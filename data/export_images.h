// `kiln export-images`: writes an array data set (IDX folder or x.npy + y.npy) as a JPEG image
// folder, OUT/train/<class>/<index>.jpg and OUT/test/<class>/<index>.jpg (the IDX t10k split or
// --val), so the image pipeline (decode, transforms, loader) trains on the same data the array
// path does. Class folders are the zero-padded label ("0".."9", "00".."99"), so their sorted order
// is the label order. Grayscale data gives grayscale JPEGs. A marker file OUT/.kiln_export
// (written last) tells later runs the export is complete. Must not train.
#pragma once
#include <cstdint>
#include <string>

namespace kiln {

struct ExportImagesOptions {
  std::string data, val, out;
  int quality = 95;
  bool force = false;  // export again even when OUT/.kiln_export exists
};

struct ExportImagesResult {
  bool skipped = false;  // the marker was there
  int64_t train = 0, test = 0, classes = 0;
  double seconds = 0;
};

ExportImagesResult export_images(const ExportImagesOptions& o);

}  // namespace kiln
