// Test helpers for segmentation runs of the `kiln` command: a small synthetic segmentation set as an
// npy folder (x.npy (N, 1, S, S) f32, y.npy (N, S, S) u8 masks: background 0, a bright square of
// class 1, a mid-gray square of class 2, the top row 255 = ignore), a fully convolutional model file
// (3 classes) built from existing layers, and the all-background baseline's mIoU of a mask set.
// Deterministic (an LCG), so every run sees the same bytes.
#pragma once
#include <algorithm>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "engine/io/npy.h"

namespace kiln_test {

struct SegmentSet {
  std::vector<float> x;     // n * s * s
  std::vector<uint8_t> y;   // n * s * s
};

inline SegmentSet make_segment_npy_folder(const std::string& dir, int64_t n, int64_t s, uint32_t seed) {
  SegmentSet d;
  d.x.assign((size_t)(n * s * s), 0.0f);
  d.y.assign((size_t)(n * s * s), 0);
  uint32_t state = seed;
  auto next = [&]() {
    state = state * 1664525u + 1013904223u;
    return (float)(state >> 8) / 16777216.0f;
  };
  auto pick = [&](int64_t lo, int64_t hi) { return lo + (int64_t)(next() * (float)(hi - lo + 1)) % (hi - lo + 1); };
  for (int64_t i = 0; i < n; ++i) {
    float* x = d.x.data() + i * s * s;
    uint8_t* y = d.y.data() + i * s * s;
    for (int64_t p = 0; p < s * s; ++p) x[p] = 0.1f * next();  // background: dark noise
    for (int cls = 1; cls <= 2; ++cls) {  // class 1 bright (0.8-0.9), class 2 mid-gray (0.4-0.5); 2 drawn over 1
      const int64_t side = pick(s / 4, s / 3 + 1), r0 = pick(1, s - side), c0 = pick(0, s - side);
      for (int64_t r = r0; r < r0 + side; ++r)
        for (int64_t c = c0; c < c0 + side; ++c) {
          x[r * s + c] = (cls == 1 ? 0.8f : 0.4f) + 0.1f * next();
          y[r * s + c] = (uint8_t)cls;
        }
    }
    for (int64_t c = 0; c < s; ++c) y[c] = 255;  // the top row is ignored
  }
  kiln::write_npy(dir + "/x.npy", kiln::host_array_from(kiln::DType::f32, {n, 1, s, s}, d.x));
  kiln::write_npy(dir + "/y.npy", kiln::host_array_from(kiln::DType::u8, {n, s, s}, d.y));
  return d;
}

// mIoU (background included) of predicting background everywhere: IoU_0 = background pixels /
// counted pixels, the other classes present in the target with IoU 0.
inline double all_background_miou(const SegmentSet& d, int64_t k) {
  std::vector<int64_t> count((size_t)k, 0);
  int64_t counted = 0;
  for (uint8_t v : d.y)
    if (v != 255) {
      ++count[v];
      ++counted;
    }
  int64_t present = 0;
  for (int64_t c = 0; c < k; ++c) present += count[(size_t)c] > 0;
  return (double)count[0] / (double)counted / (double)present;
}

// An encoder-decoder of existing layers (conv, stride-2 conv, upsample, concat skip, 1x1 head) whose
// output is (N, 3, S, S): per-pixel scores of 3 classes.
inline std::string write_segment_model_file(const std::string& dir, int64_t size) {
  const std::string path = dir + "/tiny_fcn.json";
  std::ofstream(path) << R"({"format": "kiln-model-1", "input": {"channels": 1, "size": )" << size << R"(},
  "layers": [
    {"name": "enc1", "type": "block", "layers": [
      {"type": "conv2d", "out_channels": 8, "kernel": 3, "padding": 1}, {"type": "relu"}]},
    {"name": "down", "type": "block", "layers": [
      {"type": "conv2d", "out_channels": 16, "kernel": 3, "stride": 2, "padding": 1}, {"type": "relu"}]},
    {"name": "up", "type": "upsample", "scale_factor": 2, "mode": "nearest"},
    {"name": "cat", "type": "concat", "inputs": ["up", "enc1"]},
    {"name": "dec", "type": "block", "layers": [
      {"type": "conv2d", "out_channels": 8, "kernel": 3, "padding": 1}, {"type": "relu"}]},
    {"name": "head", "type": "conv2d", "out_channels": 3, "kernel": 1}]})";
  return path;
}

}  // namespace kiln_test
