// kiln_deps_probe: one call into each Debian dependency kiln builds against (TurboJPEG, libjpeg, OpenBLAS,
// zlib, libpng, nlohmann-json, CLI11, stb_image; doctest's header), so that a build against a tools/gpu-check
// bundle can be proven to compile, link and run from the bundle alone (tests/slow/test_gpu_bundle.cpp).
// Not part of kiln; it must not include kiln's headers. Prints one line and exits 0 when every call works.
#define DOCTEST_CONFIG_DISABLE
#include <doctest/doctest.h>

#include <cblas.h>
#include <jpeglib.h>
#include <png.h>
#include <turbojpeg.h>
#include <zlib.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>

#define STB_IMAGE_IMPLEMENTATION
#define STBI_ONLY_PNG
#include <stb_image.h>

int main(int argc, char** argv) {
  CLI::App app{"kiln_deps_probe"};
  int n = 2;
  app.add_option("--n", n, "matrix size");
  CLI11_PARSE(app, argc, argv);
  // 2x2 GEMM: [[1,2],[3,4]] * identity.
  const float a[4] = {1, 2, 3, 4}, b[4] = {1, 0, 0, 1};
  float c[4] = {0, 0, 0, 0};
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 2, 2, 2, 1.0f, a, 2, b, 2, 0.0f, c, 2);
  tjhandle tj = tjInitDecompress();
  jpeg_error_mgr jerr;
  jpeg_std_error(&jerr);
  const nlohmann::json j = nlohmann::json::parse("{\"sum\": 10}");
  int w = 0, h = 0, ch = 0;
  const unsigned char not_png[4] = {0, 1, 2, 3};
  const bool stb_rejects = stbi_info_from_memory(not_png, 4, &w, &h, &ch) == 0;
  const bool ok = tj != nullptr && c[0] + c[1] + c[2] + c[3] == j["sum"].get<float>() && stb_rejects &&
                  zlibVersion()[0] != '\0' && png_access_version_number() > 0 && jerr.error_exit != nullptr && n == 2;
  if (tj) tjDestroy(tj);
  std::printf("kiln_deps_probe: %s (zlib %s, sgemm sum %g)\n", ok ? "all dependencies answered" : "FAILED",
              zlibVersion(), c[0] + c[1] + c[2] + c[3]);
  return ok ? 0 : 1;
}
