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
#include "test_data_support.h"

using namespace kiln;
using namespace kiln_test;

// fuzz_csv, timeout: an integer label of 19999999990 made csv_dataset build that many class names
// (minutes of work and ~600 GiB). Labels are class indices; at most 1000000 classes.
TEST_CASE("fuzz regression: a huge integer CSV label is one error, not billions of classes") {
  TempDir d;
  const std::string found(".p\0.,1999999999o\n\xff.,19999999990,1j", 34);  // the fuzzer's input
  write_bytes(d / "found.csv", found);
  CHECK_THROWS_WITH_AS(csv_dataset(d / "found.csv"), doctest::Contains("label 19999999990 is too large"), Error);
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
