// encode_jpeg: RGB or L u8 Image -> JPEG bytes through TurboJPEG (contact sheets, test corpora).
// Must not write files itself beyond write_jpeg's single output.
#pragma once
#include <string>

#include "data/image.h"

namespace kiln {

// quality 1..100; chroma 4:2:0 for RGB. Throws kiln::Error on failure.
std::string encode_jpeg(const Image& im, int quality = 90, bool progressive = false);
void write_jpeg(const std::string& path, const Image& im, int quality = 90);

}  // namespace kiln
