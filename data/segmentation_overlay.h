// Pictures of segmentation masks for people (`kiln predict --task segment`, reports): a default
// class palette, a mask resized by nearest neighbour (a prediction back to its image's size), a
// mask coloured by the palette, and the side-by-side overlay [image | image blended with the
// coloured mask]. Pure pixel work on Images: no files (data/png_io.h writes them), no models.
#pragma once
#include <cstdint>
#include <vector>

#include "data/image.h"
#include "data/png_io.h"

namespace kiln {

// k colours (1..256): class 0 black (background), the others well apart in hue and lightness, so
// neighbouring classes differ; fixed (the same k gives the same colours in every run). A palette
// PNG written with it (write_png_palette) shows the classes and still reads back as indices.
std::vector<PngColor> class_palette(int k);

// Nearest neighbour, the pixel-centre rule the segmentation loader uses: source x =
// floor((x + 0.5) * src_w / w). mask: c = 1.
Image resize_mask_nearest(const Image& mask, int w, int h);

// RGB picture of a mask (c = 1): each value's palette colour; a value past the palette (255 =
// ignore among them) is drawn white.
Image colorize_mask(const Image& mask, const std::vector<PngColor>& palette);

// [image | overlay]: 2w x h RGB. image: c = 1 or 3; mask: c = 1, same w x h (checked, naming the
// sizes). Overlay = (1 - alpha) * image + alpha * colour where the mask is not 0; 0 (background)
// and values past the palette are left as the image.
Image side_by_side_overlay(const Image& image, const Image& mask, const std::vector<PngColor>& palette,
                           float alpha = 0.5f);

}  // namespace kiln
