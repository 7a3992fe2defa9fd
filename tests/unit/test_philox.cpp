// Philox4x32-10 against the known-answer vectors published with Random123.
#include <doctest/doctest.h>

#include "engine/core/philox.h"

using namespace kiln;

TEST_CASE("philox4x32-10 known-answer vectors") {
  Philox4 z = {{0, 0, 0, 0}};
  Philox4 r = philox4x32_10(z, 0, 0);
  CHECK(r.v[0] == 0x6627e8d5u);
  CHECK(r.v[1] == 0xe169c58du);
  CHECK(r.v[2] == 0xbc57ac4cu);
  CHECK(r.v[3] == 0x9b00dbd8u);
  Philox4 f = {{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}};
  r = philox4x32_10(f, 0xffffffffu, 0xffffffffu);
  CHECK(r.v[0] == 0x408f276du);
  CHECK(r.v[1] == 0x41c83b0eu);
  CHECK(r.v[2] == 0xa20bc7c6u);
  CHECK(r.v[3] == 0x6d5451fdu);
  Philox4 p = {{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}};
  r = philox4x32_10(p, 0xa4093822u, 0x299f31d0u);
  CHECK(r.v[0] == 0xd16cfe09u);
  CHECK(r.v[1] == 0x94fdccebu);
  CHECK(r.v[2] == 0x5001e420u);
  CHECK(r.v[3] == 0x24126ea1u);
}

TEST_CASE("philox stream: element i depends only on (seed, offset, i)") {
  for (uint64_t i = 0; i < 64; ++i) {
    CHECK(philox_word(7, 10, i + 8) == philox_word(7, 12, i));  // 8 elements = 2 counters
    float u = philox_uniform(7, 10, i);
    CHECK(u >= 0.0f);
    CHECK(u < 1.0f);
  }
  CHECK(philox_word(7, 0, 0) != philox_word(8, 0, 0));
}
