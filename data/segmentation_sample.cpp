// Joint image + mask transform (see segmentation_sample.h). The mask follows the image's plan:
// output pixel centre (o + 0.5) maps to source coordinate start + (o + 0.5) * scale, the same
// centre mapping the bilinear resample uses, and the mask takes the source pixel it falls in.
#include "data/segmentation_sample.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "data/decode.h"
#include "data/png_io.h"

namespace kiln {
namespace {

// Source index along one axis for each output index, -1 where the output is padding. The output
// [0, n) covers crop [c0, c0 + cn) of an axis resized from `src` to `resized` pixels.
std::vector<int> axis_map(int n, int c0, int cn, int resized, int src) {
  std::vector<int> m((size_t)n, -1);
  const double scale_crop = (double)cn / n;  // crop pixels per output pixel
  const double scale_src = (double)src / resized;
  for (int o = 0; o < n; ++o) {
    const double r = c0 + (o + 0.5) * scale_crop;  // position in the resized axis
    if (r < 0 || r >= resized) continue;
    const int s = (int)std::floor(r * scale_src);
    m[(size_t)o] = std::min(std::max(s, 0), src - 1);
  }
  return m;
}

}  // namespace

void transform_mask(const Image& mask, const std::string& name, const SampleTransform& t, const SampleInfo& info,
                    int64_t num_classes, int64_t* y) {
  using K = SampleTransform::Kind;
  KILN_CHECK(mask.c == 1, "transform_mask ", name, ": a mask has 1 channel, got ", mask.c);
  const int W = mask.w, H = mask.h, OW = t.out_w, OH = t.out_h;
  std::vector<int> xs, ys;
  switch (t.kind) {
    case K::random_resized_crop:  // crop in source pixels, resized to the output
      xs = axis_map(OW, info.crop.x, info.crop.w, W, W);
      ys = axis_map(OH, info.crop.y, info.crop.h, H, H);
      break;
    case K::resize_exact:
      xs = axis_map(OW, 0, OW, OW, W);
      ys = axis_map(OH, 0, OH, OH, H);
      break;
    case K::center_crop:  // crop box in source pixels, no resize
      xs = axis_map(OW, info.crop.x, OW, W, W);
      ys = axis_map(OH, info.crop.y, OH, H, H);
      break;
    case K::resize_center_crop:
    default: {
      int rw, rh;
      shorter_side_size(W, H, t.resize, &rw, &rh);
      xs = axis_map(OW, info.crop.x, OW, rw, W);
      ys = axis_map(OH, info.crop.y, OH, rh, H);
      break;
    }
  }
  for (int oy = 0; oy < OH; ++oy) {
    int64_t* row = y + (size_t)oy * OW;
    const int sy = ys[(size_t)oy];
    for (int ox = 0; ox < OW; ++ox) {
      const int sx = xs[(size_t)ox];
      int64_t v = 255;
      if (sx >= 0 && sy >= 0) {
        v = mask.px[(size_t)sy * W + sx];
        if (num_classes > 0 && v >= num_classes && v != 255)
          throw DecodeError(name, str_cat("mask holds class ", v, " at (x ", sx, ", y ", sy, "), but there are ",
                                          num_classes, " classes (0..", num_classes - 1, "; 255 = ignore)"));
      }
      row[info.flipped ? OW - 1 - ox : ox] = v;
    }
  }
}

SegmentationSampleInfo load_segmentation_sample(const std::string& image_path, const std::string& mask_path,
                                                const SegmentationTransform& t, uint64_t seed, uint64_t stream,
                                                float* x, int64_t* y) {
  KILN_CHECK(t.image.dtype == PixelDType::f32, "load_segmentation_sample: f32 images only");
  if (mask_path.empty()) throw DecodeError(image_path, "no mask (masks/ has no PNG with this image's stem)");
  PngMaskOptions mo;
  mo.max_pixels = t.image.decode.max_pixels;
  mo.max_file_bytes = t.image.decode.max_file_bytes;
  const Image mask = read_png_mask(mask_path, mo);
  // Range check over the whole mask, not only the pixels a crop keeps: a bad mask is bad in every epoch.
  if (t.num_classes > 0)
    for (size_t i = 0; i < mask.px.size(); ++i) {
      const int v = mask.px[i];
      if (v >= t.num_classes && v != 255)
        throw DecodeError(mask_path, str_cat("mask holds class ", v, " at (x ", i % mask.w, ", y ", i / mask.w,
                                             "), but there are ", t.num_classes, " classes (0..", t.num_classes - 1,
                                             "; 255 = ignore)"));
    }
  SampleTransform st = t.image;
  st.decode.apply_exif = false;  // the mask has no EXIF: both stay in stored pixel order
  SegmentationSampleInfo info;
  info.image = load_sample_file(image_path, st, seed, stream, x);
  info.mask_w = mask.w;
  info.mask_h = mask.h;
  if (info.image.file_w != mask.w || info.image.file_h != mask.h)
    throw DecodeError(image_path, str_cat("image is ", info.image.file_w, "x", info.image.file_h, " but its mask ",
                                          mask_path, " is ", mask.w, "x", mask.h));
  transform_mask(mask, mask_path, st, info.image, 0, y);
  return info;
}

}  // namespace kiln
