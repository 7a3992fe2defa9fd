// Fused sample pipeline (see sample_pipeline.h). The plan maps the output (or the part of it that
// lies inside the image) to a source box; the DCT scale is picked from that box; one resampling
// pass then produces exactly the output pixels, which are normalized into the planes.
#include "data/sample_pipeline.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "data/resize.h"
#include "engine/core/half.h"
#include "engine/core/philox.h"

namespace kiln {
namespace {

// Source region (full-scale coordinates) for output pixels [ox, ox+ow) x [oy, oy+oh); the rest of
// the output is padding (value 0 before normalization).
struct Plan {
  double x0, y0, x1, y1;  // source box
  int cx0, cy0, cx1, cy1; // source pixels the filter may read
  int ox, oy, ow, oh;     // filled part of the output
  CropBox crop;
};

// Crop `cb` taken from an image of (rw, rh) that is the whole (W, H) source resized: the
// resampling reads the whole source (PIL resizes first, then crops).
Plan plan_resized_crop(int W, int H, int rw, int rh, const CropBox& cb) {
  Plan p;
  p.crop = cb;
  p.ox = std::max(0, -cb.x);
  p.oy = std::max(0, -cb.y);
  p.ow = std::min(cb.w, rw - cb.x) - p.ox;
  p.oh = std::min(cb.h, rh - cb.y) - p.oy;
  const double sx = (double)W / rw, sy = (double)H / rh;
  p.x0 = (cb.x + p.ox) * sx;
  p.x1 = (cb.x + p.ox + p.ow) * sx;
  p.y0 = (cb.y + p.oy) * sy;
  p.y1 = (cb.y + p.oy + p.oh) * sy;
  p.cx0 = 0; p.cy0 = 0; p.cx1 = W; p.cy1 = H;
  return p;
}

Plan make_plan(int W, int H, const SampleTransform& t, uint64_t seed, uint64_t stream) {
  using K = SampleTransform::Kind;
  switch (t.kind) {
    case K::resize_center_crop: {
      int rw, rh;
      shorter_side_size(W, H, t.resize, &rw, &rh);
      return plan_resized_crop(W, H, rw, rh, center_crop_box(rw, rh, t.out_w, t.out_h));
    }
    case K::resize_exact:
      return plan_resized_crop(W, H, t.out_w, t.out_h, CropBox{0, 0, t.out_w, t.out_h});
    case K::center_crop:
      return plan_resized_crop(W, H, W, H, center_crop_box(W, H, t.out_w, t.out_h));
    case K::random_resized_crop:
    default: {
      // Crop first, then resize the crop: the filter must not read outside it.
      CropBox b = random_resized_crop_box(W, H, t.rrc, seed, stream);
      Plan p;
      p.crop = b;
      p.ox = p.oy = 0;
      p.ow = t.out_w;
      p.oh = t.out_h;
      p.x0 = b.x; p.x1 = b.x + b.w; p.y0 = b.y; p.y1 = b.y + b.h;
      p.cx0 = b.x; p.cx1 = b.x + b.w; p.cy0 = b.y; p.cy1 = b.y + b.h;
      return p;
    }
  }
}

template <typename T, typename Conv>
void write_planes(const uint8_t* px, const Plan& p, const SampleTransform& t, bool flip, T* dst, Conv conv) {
  const int C = t.channels, OW = t.out_w, OH = t.out_h;
  const size_t plane = (size_t)OW * OH;
  for (int c = 0; c < C; ++c) {
    T lut[256];
    for (int v = 0; v < 256; ++v) lut[v] = conv(((float)v / 255.0f - t.mean[c]) / t.std[c]);
    T* d = dst + (size_t)c * plane;
    for (int y = 0; y < OH; ++y) {
      T* drow = d + (size_t)y * OW;
      const bool in_y = y >= p.oy && y < p.oy + p.oh;
      for (int x = 0; x < OW; ++x) {
        const bool inside = in_y && x >= p.ox && x < p.ox + p.ow;
        uint8_t v = inside ? px[((size_t)(y - p.oy) * p.ow + (x - p.ox)) * C + c] : 0;
        drow[flip ? OW - 1 - x : x] = lut[v];
      }
    }
  }
}

// The plan mapped from full-scale (W x H) to decoded (w x h) coordinates (identity without DCT
// scaling).
ResampleBox decoded_box(const Plan& plan, int W, int H, int w, int h) {
  const double fx = (double)w / W, fy = (double)h / H;
  ResampleBox b;
  b.x0 = plan.x0 * fx; b.x1 = plan.x1 * fx; b.y0 = plan.y0 * fy; b.y1 = plan.y1 * fy;
  b.cx0 = std::max(0, (int)std::floor(plan.cx0 * fx));
  b.cy0 = std::max(0, (int)std::floor(plan.cy0 * fy));
  b.cx1 = std::min(w, (int)std::ceil(plan.cx1 * fx));
  b.cy1 = std::min(h, (int)std::ceil(plan.cy1 * fy));
  return b;
}

}  // namespace

SampleInfo load_sample(const uint8_t* bytes, size_t n, const std::string& name, const SampleTransform& t,
                       uint64_t seed, uint64_t stream, void* dst) {
  KILN_CHECK(t.channels == 1 || t.channels == 3, "load_sample: channels must be 1 or 3, got ", t.channels);
  KILN_CHECK(t.out_w > 0 && t.out_h > 0, "load_sample: bad output size ", t.out_w, "x", t.out_h);
  SampleInfo info;
  DecodeOptions dopt = t.decode;
  dopt.gray = t.channels == 1;
  dopt.min_w = dopt.min_h = 0;
  int W = 0, H = 0;
  Plan plan{};
  bool planned = false;
  if (t.dct_scaling && t.kind != SampleTransform::Kind::center_crop &&
      jpeg_probe_size(bytes, n, dopt.apply_exif, &W, &H) && (uint64_t)W * H <= dopt.max_pixels) {
    plan = make_plan(W, H, t, seed, stream);
    planned = true;
    if (plan.ow > 0 && plan.oh > 0) {
      // Keep >= 1 decoded pixel per output pixel across the box.
      dopt.min_w = (int)std::ceil(W * (double)plan.ow / (plan.x1 - plan.x0) - 1e-9);
      dopt.min_h = (int)std::ceil(H * (double)plan.oh / (plan.y1 - plan.y0) - 1e-9);
      // Tell the decoder which pixels the resize will read (it may skip the others).
      const int d = jpeg_scale_denom(W, H, dopt.min_w, dopt.min_h);
      dopt.roi_w = (W + d - 1) / d;
      dopt.roi_h = (H + d - 1) / d;
      resample_source_window(decoded_box(plan, W, H, dopt.roi_w, dopt.roi_h), plan.ow, plan.oh, &dopt.roi_x0,
                             &dopt.roi_y0, &dopt.roi_x1, &dopt.roi_y1);
    }
  }
  Image im = decode_image_bytes(bytes, n, name, dopt);
  if (!planned) {
    W = im.w;
    H = im.h;
    plan = make_plan(W, H, t, seed, stream);
  }
  info.file_w = W;
  info.file_h = H;
  info.decoded_w = im.w;
  info.decoded_h = im.h;
  info.crop = plan.crop;
  info.flipped = t.random_hflip && (philox_word(seed, stream, 100) & 1u);

  std::vector<uint8_t> px;
  if (plan.ow > 0 && plan.oh > 0) {
    const ResampleBox b = decoded_box(plan, W, H, im.w, im.h);
    px.resize((size_t)plan.ow * plan.oh * im.c);
    resample_bilinear_u8(im.px.data(), im.w, im.h, im.c, (size_t)im.w * im.c, b, px.data(), plan.ow, plan.oh);
  }
  if (t.dtype == PixelDType::f32)
    write_planes(px.data(), plan, t, info.flipped, static_cast<float*>(dst), [](float v) { return v; });
  else
    write_planes(px.data(), plan, t, info.flipped, static_cast<uint16_t*>(dst),
                 [](float v) { return float_to_half_bits(v); });
  return info;
}

SampleInfo load_sample_file(const std::string& path, const SampleTransform& t, uint64_t seed, uint64_t stream,
                            void* dst) {
  std::string bytes = read_file_bytes(path, t.decode.max_file_bytes);
  return load_sample(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path, t, seed, stream, dst);
}

}  // namespace kiln
