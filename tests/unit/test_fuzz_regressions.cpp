// Regression tests for what the libFuzzer targets (tests/fuzz/) found: each case holds the
// minimized input (as bytes or as the code that makes it) and checks that kiln now answers with
// one kiln::Error, or decodes cleanly, instead of hanging or hitting undefined behaviour.
// Must stay fast and self-contained (it runs under ASan + UBSan with the unit label).
#include <doctest/doctest.h>

#include <string>

#include "data/dataset.h"
#include "data/decode.h"
#include "data/jpeg_encode.h"
#include "data/jpeg_progressive.h"
#include "data/png_io.h"
#include "engine/core/error.h"
#include "engine/ops/ops.h"
#include "engine/optim/sgd.h"
#include "models/model_file.h"
#include "test_data_support.h"

using namespace kiln;
using namespace kiln_test;

// fuzz_csv, timeout: an integer label of 19999999990 made csv_dataset build that many class names
// (minutes of work and ~600 GiB). Labels are class indices; at most 1000000 classes.
TEST_CASE("fuzz regression: a huge integer CSV label is one error, not billions of classes") {
  TempDir d;
  const std::string found(".p\0.,1999999999o\n\xff.,19999999990,1j", 34);  // the fuzzer's input
  write_bytes(d / "found.csv", found);
  // Its second line has a third column, an error of its own since CSV lists take exactly path,label;
  // the same line with two columns reaches the label check.
  CHECK_THROWS_WITH_AS(csv_dataset(d / "found.csv"), doctest::Contains("found.csv:2: 3 columns"), Error);
  const std::string two(".p\0.,1999999999o\n\xff.,19999999990\n", 32);
  write_bytes(d / "found2.csv", two);
  CHECK_THROWS_WITH_AS(csv_dataset(d / "found2.csv"), doctest::Contains("label 19999999990 is too large"), Error);
  write_bytes(d / "big.csv", "a.jpg,0\nb.jpg,9223372036854775807\n");
  CHECK_THROWS_WITH_AS(csv_dataset(d / "big.csv"), doctest::Contains("big.csv:2: label 9223372036854775807"), Error);
  write_bytes(d / "edge.csv", "a.jpg,999999\n");  // the largest label kept
  ImageDataset ds = csv_dataset(d / "edge.csv");
  CHECK(ds.classes.size() == 1000000);
  CHECK(ds.samples.at(0).label == 999999);
  write_bytes(d / "over.csv", "a.jpg,1000000\n");
  CHECK_THROWS_AS(csv_dataset(d / "over.csv"), Error);
}

// fuzz_jpeg_progressive, on its first seed: at 1/8 scale no component keeps AC coefficients, and the
// decoder cleared its empty coefficient buffers with memset(nullptr, 0, 0), undefined behaviour that
// clang's UBSan reports (gcc's did not). Any progressive file at 1/8 shows it.
TEST_CASE("fuzz regression: the progressive decoder at 1/8 scale with empty AC buffers") {
  for (int channels : {1, 3}) {
    CAPTURE(channels);
    Image im = synth_photo(17, 16, 3);
    if (channels == 1) rgb_to_gray_inplace(im);
    const std::string b = encode_jpeg(im, 90, true);
    Image out;
    REQUIRE(decode_jpeg_progressive_scaled(reinterpret_cast<const uint8_t*>(b.data()), b.size(), 8, channels, &out));
    CHECK(out.w == 3);
    CHECK(out.h == 2);
    CHECK(out.px.size() == (size_t)6 * channels);
  }
}

// fuzz_jpeg and fuzz_jpeg_progressive, out-of-bounds write: a DHT segment whose code lengths
// over-fill a length (here five 4-bit AC codes after 0, 10, 110) made build_table write the fast
// lookup table past its 512 entries before it checked the lengths. The fuzzer's input, minimized
// (153 bytes): a progressive gray frame, a valid DC table and the over-full AC table.
TEST_CASE("fuzz regression: an over-full Huffman table is handed back to TurboJPEG, which rejects it") {
  static const char kFound[] =
    "\xff\xd8\xff\xdb\x00\x43\x00\xff\xff\xff\xff\x7e\xff\xff\xff\x07"
    "\x07\x09\x09\x08\x0a\x0c\x14\x0d\x0c\x0b\x0b\x0c\x19\x12\x13\x0f"
    "\x14\x1d\x1a\x1f\x1e\xff\xff\xff\xff\xff\xff\xff\x69\x20\x22\x2c"
    "\x23\x1c\x1c\x28\x37\x29\x2c\x30\x31\x34\x34\x34\x1f\x27\x39\x3d"
    "\x38\x32\x3c\x2e\x33\x34\x32\xff\xc2\x00\x0b\x08\x00\x10\x00\x11"
    "\x01\x01\x11\x00\xff\xc4\x00\x16\x00\x01\x01\x01\x00\x00\x00\x00"
    "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x05\x06\x04\xff\xda\x00\x08"
    "\x01\x01\x00\x00\x00\x01\x00\x00\x00\x10\xcb\xff\xc4\x00\x1c\x10"
    "\x01\x01\x01\x05\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01"
    "\x11\x21\x00\x10\x3c\x9b\x7f\xff\xd9";
  const auto* data = reinterpret_cast<const uint8_t*>(kFound);
  const size_t n = sizeof kFound - 1;
  for (int denom : {4, 8})
    for (int channels : {1, 3}) {
      Image out;
      CHECK_FALSE(decode_jpeg_progressive_scaled(data, n, denom, channels, &out));
    }
  DecodeOptions opt;
  opt.min_w = opt.min_h = 1;  // 1/8 scale: the progressive fast path first
  CHECK_THROWS_AS(decode_image_bytes(data, n, "found.jpg", opt), DecodeError);
}

// fuzz_image, undefined behaviour inside stb_image: a PNG with an empty IDAT chunk made stb_image
// memcpy 0 bytes from a null pointer (UBSan's nonnull-attribute check, now off for decode_stb.cpp
// only; ASan still watches that file). The fuzzer's input (87 bytes).
TEST_CASE("fuzz regression: a PNG with an empty IDAT chunk is one DecodeError, clean under the sanitizers") {
  static const char kFound[] =
    "\x89\x50\x4e\x47\x0d\x0a\x1a\x0a\x00\x00\x00\x0d\x49\x48\x44\x52"
    "\x00\x00\x00\x06\x00\x00\x00\x03\x08\x00\x00\x00\x00\x95\x6a\x21"
    "\x27\x00\x00\x00\x00\x49\x44\x41\x54\x78\x9c\x63\xff\xff\x60\x30"
    "\x00\x00\x4f\x28\x09\xc3\xba\x5f\x73\x0c\x98\xd4\xde\xb0\x58\xfc"
    "\x9f\x0c\xa2\x3c\x41\x46\xbc\x65\x68\x83\xbb\x8b\x99\xb7\x00\x49"
    "\x45\x4e\x44\xae\x42\x60\x82";
  const auto* data = reinterpret_cast<const uint8_t*>(kFound);
  const size_t n = sizeof kFound - 1;
  // stb_image stops at the chunk after the empty IDAT: one DecodeError naming the file.
  CHECK_THROWS_WITH_AS(decode_image_bytes(data, n, "found.png"), doctest::Contains("found.png"), DecodeError);
}

// fuzz_jpeg_progressive, a wrong answer: a progressive file whose chroma quantization table starts
// with 255 (the fuzzer's input: a DC quantizer of 255 times a DC of ~160) gave dequantized values
// beyond int16. libjpeg-turbo's SSE2 reduced IDCT multiplies in 16 bits (it wraps) and saturates
// its results where kiln's decoder used 64-bit arithmetic and libjpeg's wrapping table, so the two
// gave different pixels (248 against 0). The decoder now hands such a block to TurboJPEG. Made here
// the same way: a saturated-colour photo encoded progressive, its chroma DC quantizer patched to 255.
TEST_CASE("fuzz regression: a progressive file with dequantized values beyond int16 decodes as TurboJPEG does") {
  Image im = synth_photo(48, 40, 5);
  for (size_t i = 0; i < im.px.size(); i += 3) im.px[i] = 255, im.px[i + 1] = 0, im.px[i + 2] = 0;  // pure red
  std::string b = encode_jpeg(im, 90, true);
  const auto* data = reinterpret_cast<const uint8_t*>(b.data());
  Image fast;
  REQUIRE(decode_jpeg_progressive_scaled(data, b.size(), 4, 3, &fast));  // in range before the patch
  // Every 8-bit quantization table with id 1 (chroma): its first (DC) entry becomes 255.
  int patched = 0;
  for (size_t p = 2; p + 4 < b.size() && !((uint8_t)b[p] == 0xff && (uint8_t)b[p + 1] == 0xda);) {
    REQUIRE((uint8_t)b[p] == 0xff);
    const size_t len = ((uint8_t)b[p + 2] << 8) | (uint8_t)b[p + 3];
    if ((uint8_t)b[p + 1] == 0xdb)
      for (size_t q = p + 4; q < p + 2 + len; q += 65)
        if (b[q] == 1) b[q + 1] = (char)255, ++patched;
    p += 2 + len;
  }
  REQUIRE(patched == 1);
  for (int denom : {4, 8}) {
    CAPTURE(denom);
    Image out;
    const bool took = decode_jpeg_progressive_scaled(data, b.size(), denom, 3, &out);
    // At 1/4 the 4:2:0 chroma goes through the 4x4 IDCT: handed back. (At 1/8 libjpeg keeps 4:2:0
    // chroma at 2x2, handed back too; a 1x1 block takes TurboJPEG's C arithmetic for any value.)
    if (denom == 4) CHECK_FALSE(took);
    DecodeOptions opt;
    opt.apply_exif = false;
    opt.min_w = (48 + denom - 1) / denom, opt.min_h = (40 + denom - 1) / denom;
    const Image with_fast = decode_image_bytes(data, b.size(), "patched.jpg", opt);
    opt.fast_paths = false;
    const Image turbo = decode_image_bytes(data, b.size(), "patched.jpg", opt);
    REQUIRE(turbo.w == opt.min_w);
    CHECK(with_fast.px == turbo.px);
    if (took) CHECK(out.px == turbo.px);
  }
}

// fuzz_jpeg_progressive, a wrong answer: an interleaved DC refinement scan listing the components
// out of frame order (ids 1, 3, 2 of a 4:2:2 file). libjpeg's SOS parser (jdmarker.c get_sos) marks
// the components it has seen by their position in the scan but looks them up by their index in the
// frame, so it calls id 2 a repeat ("Invalid component ID 2 in SOS", a fatal error) and decodes
// nothing, while kiln's decoder took the scan and decoded the whole picture. The decoder now reads
// the scan header by libjpeg's rule and hands such a file back. The fuzzer's input, option byte
// first (0x02: 1/4 scale, luma only), checked as fuzz_jpeg_progressive checks it.
TEST_CASE("fuzz regression: a progressive scan with its components out of frame order is handed back") {
  const std::string input = read_file_bytes(
      std::string(KILN_SOURCE_DIR) + "/tests/fuzz/corpus/jpeg_progressive/regress-sos-components-out-of-frame-order",
      1 << 20);
  REQUIRE(input.size() == 724);
  REQUIRE((uint8_t)input[0] == 0x02);
  const auto* data = reinterpret_cast<const uint8_t*>(input.data()) + 1;
  const size_t n = input.size() - 1;
  int w = 0, h = 0;
  REQUIRE(jpeg_probe_size(data, n, false, &w, &h));
  REQUIRE(w == 19);
  REQUIRE(h == 9);
  for (int denom : {4, 8})
    for (int channels : {1, 3}) {
      CAPTURE(denom);
      CAPTURE(channels);
      const int sw = (w + denom - 1) / denom, sh = (h + denom - 1) / denom;
      Image out;
      const bool took = decode_jpeg_progressive_scaled(data, n, denom, channels, &out);
      CHECK_FALSE(took);
      if (!took) continue;
      // What the fuzz target checks: the same pixels as TurboJPEG's scaled decode.
      DecodeOptions opt;
      opt.fast_paths = false;
      opt.apply_exif = false;
      opt.gray = channels == 1;
      opt.min_w = sw;
      opt.min_h = sh;
      Image ref;
      try {
        ref = decode_image_bytes(data, n, "found.jpg", opt);
      } catch (const Error& e) {
        FAIL_CHECK("the progressive decoder decoded a file TurboJPEG rejects: " << std::string(e.what()));
        continue;
      }
      REQUIRE(out.px.size() == ref.px.size());
      int differ = 0;
      for (size_t i = 0; i < out.px.size(); ++i)
        if (out.px[i] != ref.px[i] && ++differ <= 8) {
          const size_t pix = i / channels;
          MESSAGE("pixel (" << pix % sw << ", " << pix / sw << ") channel " << i % channels << ": kiln "
                            << (int)out.px[i] << ", TurboJPEG " << (int)ref.px[i]);
        }
      CHECK(differ == 0);
    }
  // TurboJPEG stops at that scan with a fatal error, reported as a warning because one came before
  // it (2 extraneous bytes before a marker) and leaving the picture blank: decode_jpeg tells the two
  // apart by the message and answers with one DecodeError, at full size and scaled, fast paths or not.
  for (bool fast : {true, false})
    for (int min_side : {0, 3}) {
      CAPTURE(fast);
      CAPTURE(min_side);
      DecodeOptions opt;
      opt.fast_paths = fast;
      opt.min_w = opt.min_h = min_side;
      CHECK_THROWS_WITH_AS(decode_image_bytes(data, n, "found.jpg", opt),
                           doctest::Contains("Invalid component ID 2 in SOS"), DecodeError);
    }
}

// fuzz:jpeg, third campaign: a baseline file whose scan uses Huffman table 1 without defining it.
// libjpeg keeps the tables of earlier files in a decompressor, and decode_jpeg reused one per
// thread, so after a file that defines table 1 (seed-b420) it decoded this one with that table and
// returned a picture with a warning, while on a fresh thread it failed: the answer depended on what
// the thread had decoded before. decode_jpeg now takes a fresh decompressor per file.
TEST_CASE("fuzz regression: a JPEG is decoded the same whatever the thread decoded before it") {
  const std::string dir = std::string(KILN_SOURCE_DIR) + "/tests/fuzz/corpus/jpeg/";
  const std::string bad = read_file_bytes(dir + "regress-huffman-table-of-the-previous-file", 1 << 20);
  const std::string good = read_file_bytes(dir + "seed-b420", 1 << 20);
  REQUIRE(bad.size() == 754);
  auto decode = [](const std::string& file, bool fast) {  // option byte first, as in fuzz_jpeg
    DecodeOptions opt;
    opt.fast_paths = fast;
    opt.apply_exif = false;
    return decode_image_bytes(reinterpret_cast<const uint8_t*>(file.data()) + 1, file.size() - 1, "found.jpg", opt);
  };
  for (bool fast : {true, false})
    for (bool after_good : {false, true}) {
      CAPTURE(fast);
      CAPTURE(after_good);
      if (after_good) REQUIRE(decode(good, fast).w > 0);
      CHECK_THROWS_WITH_AS(decode(bad, fast), doctest::Contains("Huffman table 0x01 was not defined"), DecodeError);
    }
}

// fuzz_checkpoint, crash (std::terminate): a training-state file whose optimizer key reads
// "group.*0.lr" reached std::stoul with "*0", which throws std::invalid_argument, not a kiln::Error.
// The input is tests/fuzz/corpus/checkpoint/regress-group-index-not-a-number.
TEST_CASE("fuzz regression: an optimizer group index that is not a number is one kiln::Error") {
  Tensor w = zeros({2});
  w.set_requires_grad(true);
  optim::SGD sgd(NamedTensors{{"w", w}}, optim::SGDOptions{});
  for (const char* key : {"group.*0.lr", "group.-1.lr", "group..lr", "group.99999999999999999999.lr", "group.0x1.lr"}) {
    CAPTURE(key);
    CHECK_THROWS_AS(sgd.load_state_dict(NamedTensors{{key, scalar_tensor(0.1, DType::f64)}}), Error);
  }
  sgd.load_state_dict(NamedTensors{{"group.0.lr", scalar_tensor(0.25, DType::f64)}});
  CHECK(sgd.lr() == 0.25);  // a good key still loads
}

// fuzz_jpeg, differential (the fast-path decode and the whole decode of the same bytes differed): the input is
// no JPEG but a TGA (no magic number: stb_image's fallback) whose 255-byte ID field runs past the end of the
// file, so none of its pixel bytes exist. stb's TGA reader ignores the short read, and the image was whatever
// the allocator handed out (ASan fills new blocks with 0xbe). A TGA whose header promises more pixel bytes than
// the file holds is now refused before stb allocates anything (and stb's allocations are zeroed, for what the
// bound cannot see inside run-length packets). Input: tests/fuzz/corpus/jpeg/regress-tga-pixels-past-the-end
// (its first byte is the fuzz target's option byte).
TEST_CASE("fuzz regression: a TGA whose pixels lie past the end of the file is one DecodeError") {
  const std::string bytes = read_file_bytes(
      std::string(KILN_SOURCE_DIR) + "/tests/fuzz/corpus/jpeg/regress-tga-pixels-past-the-end", 1 << 20);
  REQUIRE(bytes.size() > 1);
  DecodeOptions opt;
  opt.max_pixels = 1 << 22;
  opt.gray = true;
  try {
    (void)decode_image_bytes(reinterpret_cast<const uint8_t*>(bytes.data()) + 1, bytes.size() - 1, "regress.tga", opt);
    FAIL("decoded");
  } catch (const DecodeError& e) {
    const std::string what = e.what();
    CHECK_MESSAGE(what.find("regress.tga") != std::string::npos, what);
    CHECK_MESSAGE(what.find("as TGA") != std::string::npos, what);
  }
  // A whole 3x2 gray TGA decodes to its bytes; cut by one byte it is refused.
  std::string tga(18, '\0');
  tga[2] = 3;                      // uncompressed gray
  tga[12] = 3, tga[14] = 2;        // 3 x 2
  tga[16] = 8, tga[17] = 0x20;     // 8 bits, top-left origin
  tga += std::string("\x10\x20\x30\x40\x50\x60", 6);
  Image im = decode_image_bytes(reinterpret_cast<const uint8_t*>(tga.data()), tga.size(), "ok.tga", opt);
  REQUIRE(im.w == 3);
  REQUIRE(im.h == 2);
  CHECK(im.px == std::vector<uint8_t>{0x10, 0x20, 0x30, 0x40, 0x50, 0x60});
  CHECK_THROWS_AS(decode_image_bytes(reinterpret_cast<const uint8_t*>(tga.data()), tga.size() - 1, "cut.tga", opt),
                  DecodeError);
}

// fuzz_model_file, crash (std::terminate): a number beyond double's range ("1e5455555888...") makes
// nlohmann::json throw out_of_range (406), which the model-file reader did not catch (it caught parse_error only).
// Input: tests/fuzz/corpus/model_file/regress-number-beyond-double.
TEST_CASE("fuzz regression: a model file with a number beyond double's range is one kiln::Error") {
  for (const char* text : {"{\n  \"fjype\": 1e5455555888888888888888888888o", "{\"layers\": [1e400]}", "[-1e999]"}) {
    CAPTURE(text);
    try {
      (void)models::build_graph_model(text, "net.json", models::ModelInput{});
      FAIL("no error");
    } catch (const Error& e) {
      CHECK(std::string(e.what()).find("net.json") != std::string::npos);
    }
  }
}

// fuzz_image, out-of-memory: a 170-byte PNG whose second IDAT chunk claims 0xff603000 bytes made stb_image grow
// its IDAT buffer to 2 GiB before reading. A chunk longer than what is left of the file is now one DecodeError,
// before stb sees the file. Input: tests/fuzz/corpus/image/regress-png-chunk-longer-than-the-file (first byte:
// the fuzz target's option byte).
TEST_CASE("fuzz regression: a PNG chunk longer than the rest of the file is one DecodeError, no 2 GiB buffer") {
  const std::string bytes = read_file_bytes(
      std::string(KILN_SOURCE_DIR) + "/tests/fuzz/corpus/image/regress-png-chunk-longer-than-the-file", 1 << 20);
  REQUIRE(bytes.size() > 9);
  const auto* data = reinterpret_cast<const uint8_t*>(bytes.data()) + 1;
  try {
    (void)decode_image_bytes(data, bytes.size() - 1, "bomb.png", DecodeOptions{});
    FAIL("decoded");
  } catch (const DecodeError& e) {
    const std::string what = e.what();
    CHECK_MESSAGE(what.find("bomb.png") != std::string::npos, what);
    CHECK_MESSAGE(what.find("chunk 'IDAT'") != std::string::npos, what);
    CHECK_MESSAGE(what.find("claims") != std::string::npos, what);
  }
  // A valid PNG still decodes, and the same file cut inside its IDAT data is refused the same way.
  Image gray;
  gray.w = 6;
  gray.h = 3;
  gray.c = 1;
  gray.px.assign(18, 0);
  for (size_t i = 0; i < gray.px.size(); ++i) gray.px[i] = (uint8_t)(i * 13);
  const std::string png = encode_png(gray);
  Image ok = decode_image_bytes(reinterpret_cast<const uint8_t*>(png.data()), png.size(), "ok.png", DecodeOptions{});
  CHECK(ok.w == 6);
  const size_t idat = png.find("IDAT");
  REQUIRE(idat != std::string::npos);
  CHECK_THROWS_AS(decode_image_bytes(reinterpret_cast<const uint8_t*>(png.data()), idat + 6, "cut.png", DecodeOptions{}),
                  DecodeError);
}
