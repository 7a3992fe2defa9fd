// Test helper: a small JPEG image folder whose class is visible in the brightness of the top half,
// so a small model learns it: root/train/<class>/*.jpg and root/val/<class>/*.jpg (grayscale or
// RGB), optionally with one truncated "bad" JPEG in train/. Deterministic.
#pragma once
#include <filesystem>
#include <fstream>
#include <string>

#include "data/jpeg_encode.h"

namespace kiln_test {

inline kiln::Image class_image(int label, int classes, int size, int channels, uint32_t* state) {
  kiln::Image im;
  im.w = im.h = size;
  im.c = channels;
  im.px.resize((size_t)size * size * channels);
  for (int y = 0; y < size; ++y)
    for (int x = 0; x < size; ++x)
      for (int c = 0; c < channels; ++c) {
        *state = *state * 1664525u + 1013904223u;
        const int noise = (int)(*state >> 26);  // 0..63
        const int signal = y < size / 2 ? 40 + 160 * label / std::max(1, classes - 1) : 30;
        im.px[((size_t)y * size + x) * channels + c] = (uint8_t)std::min(255, signal + noise);
      }
  return im;
}

// Writes `per_class` train and `per_class / 2` val images per class; returns the bad file's path
// ("" when bad = false).
inline std::string make_image_folder(const std::string& root, int classes, int per_class, int size, int channels,
                                     bool bad) {
  namespace fs = std::filesystem;
  uint32_t state = 777;
  for (const char* split : {"train", "val"}) {
    const int n = std::string(split) == "train" ? per_class : std::max(1, per_class / 2);
    for (int k = 0; k < classes; ++k) {
      const fs::path dir = fs::path(root) / split / ("class" + std::to_string(k));
      fs::create_directories(dir);
      for (int i = 0; i < n; ++i)
        kiln::write_jpeg((dir / (std::to_string(i) + ".jpg")).string(), class_image(k, classes, size, channels, &state),
                         95);
    }
  }
  if (!bad) return "";
  const std::string good = (fs::path(root) / "train" / "class0" / "0.jpg").string();
  const std::string badp = (fs::path(root) / "train" / "class0" / "zz_truncated.jpg").string();
  std::ifstream in(good, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::ofstream(badp, std::ios::binary) << bytes.substr(0, bytes.size() / 3);
  return badp;
}

inline size_t count_of(const std::string& s, const std::string& sub) {
  size_t n = 0;
  for (size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + 1)) ++n;
  return n;
}

}  // namespace kiln_test
