// torchvision-compatible transform geometry and the unfused Image-level transforms.
#include "data/transforms.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "data/resize.h"
#include "engine/core/half.h"
#include "engine/core/philox.h"

namespace kiln {

void shorter_side_size(int w, int h, int target, int* out_w, int* out_h) {
  KILN_CHECK(w > 0 && h > 0 && target > 0, "resize: bad sizes ", w, "x", h, " -> ", target);
  // Python: int(target * long / short) with true (double) division.
  if (w <= h) {
    *out_w = target;
    *out_h = (int)((double)((int64_t)target * h) / (double)w);
  } else {
    *out_h = target;
    *out_w = (int)((double)((int64_t)target * w) / (double)h);
  }
}

static int python_round_half(int diff) {
  // round(diff / 2.0): diff / 2 is an integer or ends in .5, and Python rounds .5 to even.
  return (int)std::nearbyint(diff / 2.0);
}

CropBox center_crop_box(int w, int h, int cw, int ch) {
  CropBox b;
  b.w = cw;
  b.h = ch;
  // Larger crop: torchvision pads (c - s) // 2 before, then crops at 0.
  b.x = cw > w ? -((cw - w) / 2) : python_round_half(w - cw);
  b.y = ch > h ? -((ch - h) / 2) : python_round_half(h - ch);
  return b;
}

CropBox random_resized_crop_box(int w, int h, const RrcParams& p, uint64_t seed, uint64_t stream) {
  const double area = (double)w * h;
  const double lr0 = std::log((double)p.ratio_lo), lr1 = std::log((double)p.ratio_hi);
  // 53-bit uniform from two 32-bit Philox words; word index k of this sample's stream.
  auto uniform = [&](int k) {
    uint64_t a = philox_word(seed, stream, (uint64_t)(2 * k)), b = philox_word(seed, stream, (uint64_t)(2 * k + 1));
    return (double)(((a << 21) ^ b) & ((1ull << 53) - 1)) * (1.0 / 9007199254740992.0);
  };
  for (int attempt = 0; attempt < 10; ++attempt) {
    double target_area = area * (p.scale_lo + (p.scale_hi - p.scale_lo) * uniform(4 * attempt));
    double aspect = std::exp(lr0 + (lr1 - lr0) * uniform(4 * attempt + 1));
    int cw = (int)std::nearbyint(std::sqrt(target_area * aspect));
    int ch = (int)std::nearbyint(std::sqrt(target_area / aspect));
    if (cw > 0 && cw <= w && ch > 0 && ch <= h) {
      CropBox b;
      b.w = cw;
      b.h = ch;
      // torch.randint(0, h - ch + 1): uniform integer in [0, h - ch].
      b.y = std::min((int)(uniform(4 * attempt + 2) * (h - ch + 1)), h - ch);
      b.x = std::min((int)(uniform(4 * attempt + 3) * (w - cw + 1)), w - cw);
      return b;
    }
  }
  // Fallback: whole image clamped to the ratio range, centred.
  CropBox b;
  double in_ratio = (double)w / h;
  if (in_ratio < p.ratio_lo) {
    b.w = w;
    b.h = (int)std::nearbyint(w / (double)p.ratio_lo);
  } else if (in_ratio > p.ratio_hi) {
    b.h = h;
    b.w = (int)std::nearbyint(h * (double)p.ratio_hi);
  } else {
    b.w = w;
    b.h = h;
  }
  b.y = (h - b.h) / 2;
  b.x = (w - b.w) / 2;
  return b;
}

Image crop_image(const Image& im, const CropBox& b) {
  KILN_CHECK(b.w > 0 && b.h > 0, "crop: empty box ", b.w, "x", b.h);
  Image out = im;
  out.w = b.w;
  out.h = b.h;
  out.px.assign((size_t)b.w * b.h * im.c, 0);
  const int x0 = std::max(b.x, 0), x1 = std::min(b.x + b.w, im.w);
  if (x1 <= x0) return out;
  for (int y = 0; y < b.h; ++y) {
    int sy = b.y + y;
    if (sy < 0 || sy >= im.h) continue;
    std::memcpy(out.row(y) + (size_t)(x0 - b.x) * im.c, im.row(sy) + (size_t)x0 * im.c, (size_t)(x1 - x0) * im.c);
  }
  return out;
}

Image resize_image(const Image& im, int w, int h) {
  Image out = im;
  out.w = w;
  out.h = h;
  out.px.assign((size_t)w * h * im.c, 0);
  resize_bilinear_u8(im.px.data(), im.w, im.h, im.c, out.px.data(), w, h);
  return out;
}

Image resize_shorter(const Image& im, int target) {
  int w, h;
  shorter_side_size(im.w, im.h, target, &w, &h);
  return resize_image(im, w, h);
}

Image hflip_image(const Image& im) {
  Image out = im;
  for (int y = 0; y < im.h; ++y) {
    const uint8_t* s = im.row(y);
    uint8_t* d = out.row(y);
    for (int x = 0; x < im.w; ++x) std::memcpy(d + (size_t)(im.w - 1 - x) * im.c, s + (size_t)x * im.c, im.c);
  }
  return out;
}

template <typename Store>
static void normalize_impl(const Image& im, const float* mean, const float* std, Store store) {
  const size_t plane = (size_t)im.w * im.h;
  for (int c = 0; c < im.c; ++c) {
    float lut[256];
    for (int v = 0; v < 256; ++v) lut[v] = ((float)v / 255.0f - mean[c]) / std[c];
    const uint8_t* s = im.px.data() + c;
    for (size_t i = 0; i < plane; ++i) store((size_t)c * plane + i, lut[s[i * im.c]]);
  }
}

void normalize_to_chw_f32(const Image& im, const float* mean, const float* std, float* dst) {
  normalize_impl(im, mean, std, [dst](size_t i, float v) { dst[i] = v; });
}

void normalize_to_chw_f16(const Image& im, const float* mean, const float* std, uint16_t* dst) {
  normalize_impl(im, mean, std, [dst](size_t i, float v) { dst[i] = float_to_half_bits(v); });
}

}  // namespace kiln
