// Image transforms with torchvision's geometry: shorter-side resize sizes, CenterCrop rounding,
// RandomResizedCrop box sampling (Philox-driven, so a crop depends only on seed, epoch and sample
// index), horizontal flip, and u8 HWC -> normalized f32/f16 CHW planes. Unfused Image-level
// versions live here; the fused per-sample pipeline is in sample_pipeline.h. Must not decode.
#pragma once
#include <cstdint>

#include "data/image.h"

namespace kiln {

// A rectangle in image pixels; may extend past the image (then the outside reads as 0, the way
// torchvision pads before CenterCrop when the crop is larger than the image).
struct CropBox {
  int x = 0, y = 0, w = 0, h = 0;
};

// torchvision Resize(int): the shorter side becomes `target`, the longer int(target * long / short).
void shorter_side_size(int w, int h, int target, int* out_w, int* out_h);

// torchvision CenterCrop: top = int(round((h - ch) / 2.0)) with Python's round-half-even;
// when the crop is larger, the image is centred with (c - s) // 2 padding before.
CropBox center_crop_box(int w, int h, int cw, int ch);

// torchvision RandomResizedCrop.get_params: up to 10 tries of area fraction ~ U(scale) and
// log aspect ratio ~ U(log ratio), then the ratio-clamped centre fallback. Random words come from
// Philox(seed) at counters [stream, stream + 20): the same (seed, stream) gives the same box.
struct RrcParams {
  float scale_lo = 0.08f, scale_hi = 1.0f;
  float ratio_lo = 3.0f / 4.0f, ratio_hi = 4.0f / 3.0f;
};
CropBox random_resized_crop_box(int w, int h, const RrcParams& p, uint64_t seed, uint64_t stream);

// The Philox counter offset reserved for sample `index` in `epoch` (32 counters = 128 words each).
inline uint64_t sample_stream(uint64_t epoch, uint64_t index) { return (epoch << 40) + index * 32; }

// Image-level operations (unfused; tests and tools use them).
Image crop_image(const Image& im, const CropBox& b);          // zero outside the image
Image resize_image(const Image& im, int w, int h);            // PIL-exact bilinear antialias
Image resize_shorter(const Image& im, int target);
Image hflip_image(const Image& im);

// u8 HWC -> CHW planes: dst[c][y][x] = (px / 255 - mean[c]) / std[c], computed in f32 exactly as
// torchvision's ToTensor + Normalize. mean/std have im.c entries. dst holds c*h*w values.
void normalize_to_chw_f32(const Image& im, const float* mean, const float* std, float* dst);
void normalize_to_chw_f16(const Image& im, const float* mean, const float* std, uint16_t* dst);

}  // namespace kiln
