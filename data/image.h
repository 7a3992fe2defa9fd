// Image: a decoded picture as 8-bit interleaved pixels (HWC), and DecodeError, the one exception
// every decoder throws. Plain data only: no decoding, no resizing here.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "engine/core/error.h"

namespace kiln {

// px holds h rows of w pixels, c bytes each (c = 3 for RGB, 1 for L); row stride = w * c.
struct Image {
  int w = 0, h = 0, c = 3;
  std::vector<uint8_t> px;
  // What the file held before conversion (for `kiln data`): size at full scale and PIL-style mode
  // ("RGB", "L", "LA", "RGBA", "P", "CMYK", "I;16"...), and the format ("JPEG", "PNG", ...).
  int file_w = 0, file_h = 0;
  std::string mode, format;
  const uint8_t* row(int y) const { return px.data() + (size_t)y * w * c; }
  uint8_t* row(int y) { return px.data() + (size_t)y * w * c; }
};

// A file that is not a readable image: the message names the file and the reason.
class DecodeError : public Error {
 public:
  DecodeError(const std::string& file, const std::string& reason)
      : Error(str_cat("decode ", file, ": ", reason)), file_(file), reason_(reason) {}
  const std::string& file() const { return file_; }
  const std::string& reason() const { return reason_; }

 private:
  std::string file_, reason_;
};

}  // namespace kiln
