// TurboJPEG compression of an Image (see jpeg_encode.h).
#include "data/jpeg_encode.h"

#include <turbojpeg.h>

#include <cstdio>

namespace kiln {

std::string encode_jpeg(const Image& im, int quality, bool progressive) {
  KILN_CHECK(im.w > 0 && im.h > 0 && (im.c == 1 || im.c == 3), "encode_jpeg: bad image ", im.w, "x", im.h, "x", im.c);
  KILN_CHECK(im.px.size() == (size_t)im.w * im.h * im.c, "encode_jpeg: pixel buffer size mismatch");
  tjhandle tj = tjInitCompress();
  KILN_CHECK(tj != nullptr, "encode_jpeg: cannot create a TurboJPEG compressor");
  unsigned char* out = nullptr;
  unsigned long size = 0;
  const int pf = im.c == 1 ? TJPF_GRAY : TJPF_RGB;
  const int sub = im.c == 1 ? TJSAMP_GRAY : TJSAMP_420;
  int rc = tjCompress2(tj, im.px.data(), im.w, im.w * im.c, im.h, pf, &out, &size, sub, quality,
                       progressive ? TJFLAG_PROGRESSIVE : 0);
  std::string err = rc != 0 ? std::string(tjGetErrorStr2(tj)) : std::string();
  std::string bytes = rc == 0 ? std::string(reinterpret_cast<const char*>(out), size) : std::string();
  if (out) tjFree(out);
  tjDestroy(tj);
  KILN_CHECK(rc == 0, "encode_jpeg: ", err);
  return bytes;
}

void write_jpeg(const std::string& path, const Image& im, int quality) {
  std::string b = encode_jpeg(im, quality);
  FILE* f = std::fopen(path.c_str(), "wb");
  KILN_CHECK(f != nullptr, "write_jpeg: cannot create ", path);
  size_t wrote = std::fwrite(b.data(), 1, b.size(), f);
  int closed = std::fclose(f);
  KILN_CHECK(wrote == b.size() && closed == 0, "write_jpeg: write error on ", path);
}

}  // namespace kiln
