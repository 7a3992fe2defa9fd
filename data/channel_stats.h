// Per-channel mean and std of decoded images: the one definition behind `kiln data` and
// `kiln train --normalize auto`. The statistic is numpy's x.mean() and x.std() (population) over
// every decoded pixel of every readable image stacked together, on [0, 1]: each pixel weighs the
// same, so a large image counts more than a small one. Must not choose which images are measured
// or print anything: the callers do.
#pragma once
#include <cstddef>
#include <string>

#include "data/dataset.h"
#include "data/image.h"

namespace kiln {

// Exact integer sums of an image set's pixels, merged across worker threads.
struct ChannelSums {
  double s1[3] = {0, 0, 0}, s2[3] = {0, 0, 0};  // sum of x and x^2 per channel, x on [0, 1]
  double pixels = 0;
  size_t images = 0;

  // Adds every pixel of `im` for `channels` (1 or 3) channels; a gray image counts for each.
  void add(const Image& im, int channels);
  void merge(const ChannelSums& o);
  // Mean and std per channel (std >= 1e-6, so a constant channel still divides); 0 and 1 when empty.
  void result(int channels, double* mean, double* std) const;
};

// Decodes `path` for the statistics, as `channels` (1: gray) channels, JPEGs at a reduced DCT scale
// that keeps the shorter side >= min_side (0: full size). Throws DecodeError for a bad file.
Image decode_for_stats(const std::string& path, int channels, int min_side);

// The statistics of up to `max_images` images of ds spread evenly over it (all when 0) on
// `workers` threads (<= 0: half the cores). Unreadable images are left out. Returns the number of
// images used.
size_t image_channel_stats(const ImageDataset& ds, int channels, int min_side, int workers, size_t max_images,
                           float* mean, float* std);

// --normalize auto and `kiln data`: the one computation of the statistics a run normalizes with.
// Every pixel of every readable image of `ds` (the training split, after --limit), decoded at full size
// (no reduced-scale JPEG decode, no resize or crop), as `channels` channels; returns the images used.
size_t normalize_statistics(const ImageDataset& ds, int channels, int workers, float* mean, float* std);
// "m1,m2,m3:s1,s2,s3" with 4 decimals: how kiln train and kiln data print the --normalize values.
std::string normalize_flag_values(int channels, const double* mean, const double* std);
// What the numbers describe, for both commands' output.
constexpr const char* kNormalizeStatisticsScope =
    "every pixel of every readable training image, decoded at full size, before any resize or crop";

}  // namespace kiln
