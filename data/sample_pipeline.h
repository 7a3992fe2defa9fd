// The fused per-sample path of the loader: bytes -> (DCT-scaled) decode -> crop + resize in one
// resampling pass -> optional flip -> normalize, written straight into a caller's batch slot
// (C x H x W planes, f32 or f16). Geometry follows torchvision (transforms.h); without DCT
// scaling the result is bit-identical to the unfused Image-level chain. Must not allocate the
// batch or know about data sets.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "data/decode.h"
#include "data/transforms.h"

namespace kiln {

enum class PixelDType { f32, f16 };

struct SampleTransform {
  enum class Kind {
    resize_center_crop,   // Resize(resize) (shorter side) + CenterCrop(out): the eval transform
    resize_exact,         // Resize((out_h, out_w))
    random_resized_crop,  // RandomResizedCrop(out, rrc): the train transform
    center_crop,          // CenterCrop(out) only (zero padding when the image is smaller)
  };
  Kind kind = Kind::resize_center_crop;
  int resize = 256;
  int out_w = 224, out_h = 224;
  RrcParams rrc;
  bool random_hflip = false;  // p = 0.5, from the sample's Philox stream
  int channels = 3;           // 3 = RGB, 1 = L (grayscale)
  float mean[3] = {0.f, 0.f, 0.f};
  float std[3] = {1.f, 1.f, 1.f};
  PixelDType dtype = PixelDType::f32;
  // JPEG DCT-domain reduction when it still leaves >= 1 decoded pixel per output pixel over the
  // crop. Faster, not bit-identical to a full-scale decode (differences of a few levels).
  bool dct_scaling = true;
  DecodeOptions decode;  // limits; min_w/min_h/gray are set per sample from the fields above

  size_t sample_elems() const { return (size_t)channels * out_h * out_w; }
  size_t sample_bytes() const { return sample_elems() * (dtype == PixelDType::f32 ? 4 : 2); }
};

// What happened to one sample (for tests and reports).
struct SampleInfo {
  int file_w = 0, file_h = 0;      // oriented, full scale
  int decoded_w = 0, decoded_h = 0;
  CropBox crop;                    // in full-scale image pixels (resize_center_crop: in resized pixels)
  bool flipped = false;
};

// dst: sample_elems() values of t.dtype (float* or uint16_t* half bits). Random choices use
// Philox(seed) at counter offset `stream` (see sample_stream()). Throws DecodeError on bad input;
// dst is then unspecified.
SampleInfo load_sample(const uint8_t* bytes, size_t n, const std::string& name, const SampleTransform& t,
                       uint64_t seed, uint64_t stream, void* dst);
SampleInfo load_sample_file(const std::string& path, const SampleTransform& t, uint64_t seed, uint64_t stream,
                            void* dst);

}  // namespace kiln
