// decode_image entry points: file reading with the size guard, format dispatch by magic bytes,
// and the shared RGB -> L conversion. Must not contain format-specific decoding.
#include "data/decode.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace kiln {

std::string read_file_bytes(const std::string& path, uint64_t max_bytes) {
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw DecodeError(path, str_cat("cannot open (", std::strerror(errno), ")"));
  // fopen succeeds on a directory (and a file may be replaced by one while a loader runs): ask
  // what it is before trusting a size from fseek/ftell.
  struct stat st;
  if (::fstat(::fileno(f), &st) == 0 && !S_ISREG(st.st_mode)) {
    std::fclose(f);
    throw DecodeError(path, S_ISDIR(st.st_mode) ? "is a directory, not an image file" : "not a regular file");
  }
  std::string buf;
  if (std::fseek(f, 0, SEEK_END) == 0) {
    long sz = std::ftell(f);
    if (sz < 0) {
      std::fclose(f);
      throw DecodeError(path, "cannot read (not a regular file?)");
    }
    if ((uint64_t)sz > max_bytes) {
      std::fclose(f);
      throw DecodeError(path, str_cat("file is ", sz, " bytes, over the limit of ", max_bytes));
    }
    std::fseek(f, 0, SEEK_SET);
    buf.resize((size_t)sz);
    size_t got = sz ? std::fread(&buf[0], 1, (size_t)sz, f) : 0;
    bool err = std::ferror(f) != 0;
    std::fclose(f);
    if (err || got != (size_t)sz) throw DecodeError(path, "read error");
    return buf;
  }
  std::fclose(f);
  throw DecodeError(path, "cannot seek (not a regular file?)");
}

void rgb_to_gray_inplace(Image& im) {
  if (im.c != 3) return;
  const size_t np = (size_t)im.w * im.h;
  uint8_t* p = im.px.data();
  for (size_t i = 0; i < np; ++i) {
    const uint8_t* s = p + 3 * i;
    p[i] = (uint8_t)((19595u * s[0] + 38470u * s[1] + 7471u * s[2] + 0x8000u) >> 16);
  }
  im.px.resize(np);
  im.c = 1;
}

Image decode_image_bytes(const uint8_t* data, size_t n, const std::string& name, const DecodeOptions& opt) {
  if (n == 0 || data == nullptr) throw DecodeError(name, "empty file");
  if (n > opt.max_file_bytes)
    throw DecodeError(name, str_cat("file is ", n, " bytes, over the limit of ", opt.max_file_bytes));
  if (n >= 3 && data[0] == 0xFF && data[1] == 0xD8 && data[2] == 0xFF) return decode_jpeg(data, n, name, opt);
  return decode_stb(data, n, name, opt);
}

Image decode_image(const std::string& path, const DecodeOptions& opt) {
  std::string bytes = read_file_bytes(path, opt.max_file_bytes);
  return decode_image_bytes(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), path, opt);
}

}  // namespace kiln
