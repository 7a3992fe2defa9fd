// Mask pictures (see segmentation_overlay.h).
#include "data/segmentation_overlay.h"

#include <algorithm>
#include <cmath>

namespace kiln {

std::vector<PngColor> class_palette(int k) {
  KILN_CHECK(k >= 1 && k <= 256, "class_palette: 1..256 classes, got ", k);
  std::vector<PngColor> p((size_t)k);
  p[0] = {0, 0, 0};
  for (int i = 1; i < k; ++i) {
    // Hue steps by the golden angle; lightness alternates between three levels.
    const double h = std::fmod((i - 1) * 137.50776405, 360.0) / 60.0;
    const double v = (i % 3 == 0) ? 0.65 : (i % 3 == 1) ? 1.0 : 0.82, s = 0.85;
    const double c = v * s, x = c * (1 - std::fabs(std::fmod(h, 2.0) - 1)), m = v - c;
    double r = 0, g = 0, b = 0;
    switch ((int)h) {
      case 0: r = c, g = x; break;
      case 1: r = x, g = c; break;
      case 2: g = c, b = x; break;
      case 3: g = x, b = c; break;
      case 4: r = x, b = c; break;
      default: r = c, b = x; break;
    }
    p[(size_t)i] = {(uint8_t)std::lround((r + m) * 255), (uint8_t)std::lround((g + m) * 255),
                    (uint8_t)std::lround((b + m) * 255)};
  }
  return p;
}

Image resize_mask_nearest(const Image& mask, int w, int h) {
  KILN_CHECK(mask.c == 1 && mask.w > 0 && mask.h > 0, "resize_mask_nearest: a mask of 1 channel, got ", mask.w, "x",
             mask.h, "x", mask.c);
  KILN_CHECK(w > 0 && h > 0, "resize_mask_nearest: bad size ", w, "x", h);
  Image out;
  out.w = w;
  out.h = h;
  out.c = 1;
  out.px.resize((size_t)w * h);
  std::vector<int> xs((size_t)w);
  for (int x = 0; x < w; ++x)
    xs[(size_t)x] = std::min(mask.w - 1, (int)std::floor((x + 0.5) * mask.w / w));
  for (int y = 0; y < h; ++y) {
    const int sy = std::min(mask.h - 1, (int)std::floor((y + 0.5) * mask.h / h));
    for (int x = 0; x < w; ++x) out.px[(size_t)y * w + x] = mask.px[(size_t)sy * mask.w + xs[(size_t)x]];
  }
  return out;
}

Image colorize_mask(const Image& mask, const std::vector<PngColor>& palette) {
  KILN_CHECK(mask.c == 1, "colorize_mask: a mask of 1 channel, got ", mask.c);
  Image out;
  out.w = mask.w;
  out.h = mask.h;
  out.c = 3;
  out.px.resize(mask.px.size() * 3);
  for (size_t i = 0; i < mask.px.size(); ++i) {
    const uint8_t v = mask.px[i];
    const PngColor c = v < palette.size() ? palette[v] : PngColor{255, 255, 255};
    for (int ch = 0; ch < 3; ++ch) out.px[3 * i + (size_t)ch] = c[(size_t)ch];
  }
  return out;
}

Image side_by_side_overlay(const Image& image, const Image& mask, const std::vector<PngColor>& palette, float alpha) {
  KILN_CHECK(image.c == 1 || image.c == 3, "side_by_side_overlay: image of 1 or 3 channels, got ", image.c);
  KILN_CHECK(mask.c == 1 && mask.w == image.w && mask.h == image.h, "side_by_side_overlay: the mask is ", mask.w, "x",
             mask.h, "x", mask.c, ", the image ", image.w, "x", image.h, " (resize_mask_nearest first)");
  KILN_CHECK(alpha >= 0.f && alpha <= 1.f, "side_by_side_overlay: alpha must be in [0, 1], got ", alpha);
  Image out;
  out.w = 2 * image.w;
  out.h = image.h;
  out.c = 3;
  out.px.resize((size_t)out.w * out.h * 3);
  for (int y = 0; y < image.h; ++y)
    for (int x = 0; x < image.w; ++x) {
      const uint8_t* s = image.row(y) + (size_t)x * image.c;
      uint8_t* left = out.row(y) + (size_t)x * 3;
      uint8_t* right = out.row(y) + (size_t)(x + image.w) * 3;
      const uint8_t v = mask.px[(size_t)y * mask.w + x];
      for (int ch = 0; ch < 3; ++ch) {
        const uint8_t p = s[image.c == 3 ? ch : 0];
        left[ch] = p;
        right[ch] = (v == 0 || v >= palette.size())
                        ? p
                        : (uint8_t)std::lround((1.f - alpha) * p + alpha * palette[v][(size_t)ch]);
      }
    }
  return out;
}

}  // namespace kiln
