// PNG mask reading and PNG writing (data/png_io.h) through libpng: gray and palette masks read as
// indices (palette colours ignored), low bit depths unscaled, 16-bit gray accepted below 256,
// colour PNGs refused naming the file, malformed and truncated files as DecodeError, writers round
// trip. Files made by kiln's own encoder and by PIL-independent byte edits.
#include <doctest/doctest.h>

#include <zlib.h>

#include "data/decode.h"
#include "data/png_io.h"
#include "test_data_support.h"

using namespace kiln;
using namespace kiln_test;

namespace {

Image gray(int w, int h, int mod) {
  Image im;
  im.w = w;
  im.h = h;
  im.c = 1;
  im.px.resize((size_t)w * h);
  for (size_t i = 0; i < im.px.size(); ++i) im.px[i] = (uint8_t)((i * 7 + i / w) % mod);
  return im;
}

Image read_str(const std::string& b, const std::string& name = "mem.png") {
  return read_png_mask_bytes(reinterpret_cast<const uint8_t*>(b.data()), b.size(), name);
}

std::string expect_decode_error(const std::string& bytes) {
  try {
    read_str(bytes);
  } catch (const DecodeError& e) {
    CHECK(e.file() == "mem.png");
    CHECK(std::string(e.what()).find("mem.png") != std::string::npos);
    return e.reason();
  }
  FAIL("no DecodeError");
  return "";
}

// A PNG chunk: length, type, data, CRC (for hand-made files).
std::string chunk(const char* type, const std::string& data) {
  std::string c;
  auto be32 = [&](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) c.push_back((char)(v >> s));
  };
  be32((uint32_t)data.size());
  std::string td = std::string(type, 4) + data;
  c += td;
  be32((uint32_t)crc32(0, reinterpret_cast<const Bytef*>(td.data()), (uInt)td.size()));
  return c;
}

// A w x h PNG of the given depth and colour type from raw scanlines (filter byte 0 added per row).
std::string hand_png(int w, int h, int depth, int color, const std::vector<std::string>& rows,
                     const std::string& plte = "") {
  std::string ihdr;
  for (uint32_t v : {(uint32_t)w, (uint32_t)h})
    for (int s = 24; s >= 0; s -= 8) ihdr.push_back((char)(v >> s));
  ihdr += (char)depth;
  ihdr += (char)color;
  ihdr += std::string(3, '\0');
  std::string raw;
  for (const std::string& r : rows) raw += '\0' + r;
  uLongf n = compressBound((uLong)raw.size());
  std::string z(n, '\0');
  compress(reinterpret_cast<Bytef*>(&z[0]), &n, reinterpret_cast<const Bytef*>(raw.data()), (uLong)raw.size());
  z.resize(n);
  std::string png = "\x89PNG\r\n\x1a\n";
  png += chunk("IHDR", ihdr);
  if (!plte.empty()) png += chunk("PLTE", plte);
  png += chunk("IDAT", z);
  png += chunk("IEND", "");
  return png;
}

}  // namespace

TEST_CASE("png mask: 8-bit gray round trip keeps every index, mode L") {
  Image src = gray(13, 7, 256);
  src.px[5] = 255;
  Image m = read_str(encode_png(src));
  REQUIRE(m.w == 13);
  REQUIRE(m.h == 7);
  CHECK(m.c == 1);
  CHECK(m.mode == "L");
  CHECK(m.format == "PNG");
  CHECK(m.px == src.px);
}

TEST_CASE("png mask: a palette PNG reads as palette indices, not colours") {
  Image src = gray(9, 5, 4);
  // Colours chosen so that no colour channel or gray conversion equals its index.
  std::vector<PngColor> pal = {{200, 10, 10}, {10, 200, 10}, {10, 10, 200}, {77, 77, 77}};
  std::string b = encode_png_palette(src, pal);
  Image m = read_str(b);
  CHECK(m.mode == "P");
  CHECK(m.px == src.px);
  // stb_image (decode_image) gives the colours: the reason masks go through libpng.
  Image rgb = decode_image_bytes(reinterpret_cast<const uint8_t*>(b.data()), b.size(), "mem.png");
  REQUIRE(rgb.c == 3);
  CHECK(rgb.px[0] == pal[src.px[0]][0]);
}

TEST_CASE("png mask: 1, 2 and 4-bit palette and gray keep raw values (no scaling)") {
  // 8 pixels per row: 1-bit row 0b10110001 -> 1 0 1 1 0 0 0 1
  std::string p1 = hand_png(8, 1, 1, 3, {std::string(1, (char)0xB1)}, std::string(6, 'x'));
  CHECK(read_str(p1).px == std::vector<uint8_t>{1, 0, 1, 1, 0, 0, 0, 1});
  // 2-bit gray: 0b00011011 -> 0 1 2 3
  std::string g2 = hand_png(4, 1, 2, 0, {std::string(1, (char)0x1B)});
  Image m = read_str(g2);
  CHECK(m.mode == "L");
  CHECK(m.px == std::vector<uint8_t>{0, 1, 2, 3});
  // 4-bit palette with 16 entries: 0xF3 0x9A -> 15 3 9 10
  std::string p4 = hand_png(4, 1, 4, 3, {std::string("\xF3\x9A", 2)}, std::string(48, 'c'));
  CHECK(read_str(p4).px == std::vector<uint8_t>{15, 3, 9, 10});
}

TEST_CASE("png mask: 16-bit gray is accepted below 256 and refused at 256 naming the value") {
  std::string ok = hand_png(3, 1, 16, 0, {std::string("\x00\x00\x00\x07\x00\xFF", 6)});
  Image m = read_str(ok);
  CHECK(m.mode == "I;16");
  CHECK(m.px == std::vector<uint8_t>{0, 7, 255});
  std::string bad = hand_png(3, 1, 16, 0, {std::string("\x00\x01\x01\x00\x00\x02", 6)});
  std::string why = expect_decode_error(bad);
  CHECK(why.find("16-bit") != std::string::npos);
  CHECK(why.find("256") != std::string::npos);
}

TEST_CASE("png mask: RGB, RGBA and gray+alpha PNGs are refused saying what they hold") {
  Image rgb = synth_photo(5, 4, 1);
  std::string why = expect_decode_error(encode_png(rgb));
  CHECK(why.find("RGB image") != std::string::npos);
  CHECK(why.find("gray or palette") != std::string::npos);
  std::string rgba = hand_png(1, 1, 8, 6, {std::string("\1\2\3\4", 4)});
  CHECK(expect_decode_error(rgba).find("RGBA") != std::string::npos);
  std::string ga = hand_png(1, 1, 8, 4, {std::string("\1\2", 2)});
  CHECK(expect_decode_error(ga).find("gray+alpha") != std::string::npos);
}

TEST_CASE("png mask: malformed, truncated and non-PNG inputs are DecodeErrors naming the file") {
  std::string good = encode_png(gray(20, 20, 5));
  CHECK(expect_decode_error("").find("empty") != std::string::npos);
  CHECK(expect_decode_error("GIF89a not a png").find("not a PNG") != std::string::npos);
  for (size_t cut : {8, 20, 33, 40, (int)good.size() / 2, (int)good.size() - 13, (int)good.size() - 1}) {
    CAPTURE(cut);
    expect_decode_error(good.substr(0, cut));
  }
  std::string crc = good;
  crc[20] ^= 0x40;  // inside IHDR: CRC mismatch of a critical chunk
  expect_decode_error(crc);
  std::string zbad = good;
  for (size_t i = 45; i < 60 && i < zbad.size(); ++i) zbad[i] ^= 0x5A;  // corrupt IDAT data (CRC too)
  expect_decode_error(zbad);
  // A palette index past the palette is libpng's business only with checks on; a missing PLTE is an error.
  std::string nopal = hand_png(2, 1, 8, 3, {std::string("\0\1", 2)});
  expect_decode_error(nopal);
}

TEST_CASE("png mask: the pixel-count guard refuses a huge declared size before reading pixels") {
  std::string big = hand_png(5000, 5000, 8, 0, {});  // no pixel data at all
  PngMaskOptions o;
  o.max_pixels = 1000000;
  try {
    read_png_mask_bytes(reinterpret_cast<const uint8_t*>(big.data()), big.size(), "big.png", o);
    FAIL("no error");
  } catch (const DecodeError& e) {
    CHECK(std::string(e.what()).find("over the limit") != std::string::npos);
  }
}

TEST_CASE("png write: gray, palette and RGB files round trip through files and stb_image") {
  TempDir t;
  Image g = gray(11, 6, 256);
  write_png(t / "g.png", g);
  CHECK(read_png_mask(t / "g.png").px == g.px);
  Image idx = gray(11, 6, 3);
  std::vector<PngColor> pal = {{0, 0, 0}, {255, 0, 0}, {0, 255, 0}};
  write_png_palette(t / "p.png", idx, pal);
  CHECK(read_png_mask(t / "p.png").px == idx.px);
  Image col = decode_image(t / "p.png");
  for (size_t i = 0; i < idx.px.size(); ++i) {
    CHECK(col.px[3 * i] == pal[idx.px[i]][0]);
    CHECK(col.px[3 * i + 1] == pal[idx.px[i]][1]);
  }
  Image rgb = synth_photo(9, 7, 3);
  write_png(t / "rgb.png", rgb);
  Image back = decode_image(t / "rgb.png");
  CHECK(back.px == rgb.px);
  CHECK_THROWS_WITH_AS(read_png_mask(t / "missing.png"), doctest::Contains("missing.png"), DecodeError);
}

TEST_CASE("png write: bad arguments are errors naming the output, not corrupt files") {
  Image idx = gray(4, 4, 5);
  std::vector<PngColor> pal = {{0, 0, 0}, {1, 1, 1}};
  CHECK_THROWS_WITH_AS(encode_png_palette(idx, pal, "out.png"), doctest::Contains("past the palette"), Error);
  CHECK_THROWS_WITH_AS(encode_png_palette(idx, std::vector<PngColor>(257), "out.png"), doctest::Contains("1..256"),
                       Error);
  Image two = gray(4, 4, 5);
  two.c = 2;
  two.px.resize(32);
  CHECK_THROWS_WITH_AS(encode_png(two, "out.png"), doctest::Contains("out.png"), Error);
  Image empty;
  CHECK_THROWS_AS(encode_png(empty), Error);
}
