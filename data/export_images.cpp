// Array data set -> JPEG image folder (see export_images.h).
#include "data/export_images.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "data/array_dataset.h"
#include "data/jpeg_encode.h"
#include "engine/io/atomic_file.h"

namespace kiln {
namespace fs = std::filesystem;

namespace {

const char* kMarker = ".kiln_export";

std::string class_name(int64_t label, int64_t num_classes) {
  int width = 1;
  for (int64_t k = num_classes - 1; k >= 10; k /= 10) ++width;
  std::string s = std::to_string(label);
  return std::string(s.size() < (size_t)width ? (size_t)width - s.size() : 0, '0') + s;
}

// Undoes the loader's normalization: pixel = round((v * std + mean) * 255), clamped to 0..255.
int64_t write_split(const ArrayDataset& d, double mean, double std, const fs::path& dir, int64_t num_classes,
                    int quality) {
  KILN_CHECK(d.channels == 1 || d.channels == 3, "export-images: ", d.source, " has ", d.channels,
             " channels (1 or 3 can be written as JPEG)");
  for (int64_t k = 0; k < num_classes; ++k) fs::create_directories(dir / class_name(k, num_classes));
  const int64_t plane = d.height * d.width;
  char name[32];
  for (int64_t i = 0; i < d.n; ++i) {
    Image im;
    im.w = (int)d.width;
    im.h = (int)d.height;
    im.c = (int)d.channels;
    im.px.resize((size_t)(plane * d.channels));
    const float* src = d.images.data() + i * d.sample_numel();
    for (int64_t c = 0; c < d.channels; ++c)
      for (int64_t p = 0; p < plane; ++p) {
        const double v = std::round(((double)src[c * plane + p] * std + mean) * 255.0);
        im.px[(size_t)(p * d.channels + c)] = (uint8_t)std::min(255.0, std::max(0.0, v));
      }
    std::snprintf(name, sizeof name, "%06lld.jpg", (long long)i);
    const std::string bytes = encode_jpeg(im, quality);
    // Plain writes (not atomic_write_file's fsync per file: 70k images); the marker written last
    // is what says the folder is complete.
    const std::string path = (dir / class_name(d.labels[(size_t)i], num_classes) / name).string();
    std::ofstream f(path, std::ios::binary | std::ios::trunc);
    f.write(bytes.data(), (std::streamsize)bytes.size());
    KILN_CHECK(f.good(), "export-images: cannot write ", path);
  }
  return d.n;
}

}  // namespace

ExportImagesResult export_images(const ExportImagesOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  KILN_CHECK(!o.out.empty(), "export-images: --out is required");
  KILN_CHECK(o.quality >= 1 && o.quality <= 100, "export-images: --quality must be 1..100, got ", o.quality);
  ExportImagesResult r;
  const fs::path out(o.out);
  if (!o.force && fs::exists(out / kMarker)) {
    r.skipped = true;
    return r;
  }
  DataSplits s = load_training_data(o.data, o.val);
  int64_t max_label = s.train.max_label();
  if (s.val) max_label = std::max(max_label, s.val->max_label());
  r.classes = max_label + 1;
  fs::remove(out / kMarker);
  r.train = write_split(s.train, s.mean, s.std, out / "train", r.classes, o.quality);
  if (s.val) r.test = write_split(*s.val, s.mean, s.std, out / "test", r.classes, o.quality);
  const std::string marker = str_cat("kiln export-images of ", o.data, ": ", r.train, " train, ", r.test,
                                     " test images, ", r.classes, " classes, JPEG quality ", o.quality, "\n");
  atomic_write_file((out / kMarker).string(), marker.data(), marker.size());
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

}  // namespace kiln
