// One segmentation sample, image and mask through the same geometry: the image goes through the
// fused sample pipeline (sample_pipeline.h: decode, crop + bilinear resize, flip, normalize), and
// the mask through the crop box and flip that pipeline chose (same Philox stream), resized by
// nearest neighbour so it holds only classes of the source mask. Output pixels outside the image
// (a centre crop larger than the resized image) are 0 in x, as image folders pad, and 255 (ignore)
// in y. EXIF orientation is not applied (masks are stored in the file's pixel order, and PIL does
// not rotate either). Must not allocate batches or know about data sets.
#pragma once
#include <cstdint>
#include <string>

#include "data/image.h"
#include "data/sample_pipeline.h"

namespace kiln {

struct SegmentationTransform {
  SampleTransform image;    // kind, sizes, crop/flip, channels, mean/std; dtype must be f32
  int64_t num_classes = 0;  // mask values must be < num_classes, or 255 (ignore); 0 = no check
};

struct SegmentationSampleInfo {
  SampleInfo image;
  int mask_w = 0, mask_h = 0;
};

// The nearest-neighbour mask of a sample: y[out_h * out_w] (int64 class indices, row-major) from
// mask (w x h, c = 1) for the geometry `info` describes (what load_sample returned for the image).
// Throws DecodeError naming `name` when a value is >= num_classes and not 255.
void transform_mask(const Image& mask, const std::string& name, const SampleTransform& t, const SampleInfo& info,
                    int64_t num_classes, int64_t* y);

// x: channels * out_h * out_w f32; y: out_h * out_w i64. Throws DecodeError naming the file on an
// undecodable image or mask, an image/mask size mismatch, or an out-of-range class.
SegmentationSampleInfo load_segmentation_sample(const std::string& image_path, const std::string& mask_path,
                                                const SegmentationTransform& t, uint64_t seed, uint64_t stream,
                                                float* x, int64_t* y);

}  // namespace kiln
