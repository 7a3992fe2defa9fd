// The CPU copy kernel's contiguous f32 <-> bf16 runs (kernels/cpu/elementwise.cpp, vectorized over bit
// patterns) against engine/core/half.h's scalar conversions: every bf16 pattern to f32, and f32 patterns
// on, beside and between bf16 values (ties to even, NaN quieted, infinities, the overflow to inf), bit
// for bit; a strided (non-contiguous) source takes the scalar loop and gives the same bits.
#include <doctest/doctest.h>

#include <cstring>
#include <vector>

#include "engine/core/half.h"
#include "engine/ops/ops.h"

using namespace kiln;

namespace {

std::vector<uint32_t> f32_patterns() {
  std::vector<uint32_t> v;
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint32_t hi = b << 16;
    for (uint32_t lo : {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu}) v.push_back(hi | lo);
  }
  return v;  // 393216 values: a run long enough for every vector width and a remainder (393216 % 64 = 0: +3 below)
}

}  // namespace

TEST_CASE("bf16 copy: contiguous f32 <-> bf16 runs give the scalar conversions' bits on every pattern") {
  std::vector<uint32_t> pat = f32_patterns();
  pat.push_back(0x7f800000u), pat.push_back(0xff800001u), pat.push_back(0x3f808000u);  // inf, NaN, a tie
  std::vector<float> f(pat.size());
  std::memcpy(f.data(), pat.data(), pat.size() * sizeof(float));
  Tensor t = tensor_from(f, {(int64_t)f.size()});
  Tensor b = to_dtype(t, DType::bf16);
  const uint16_t* bp = static_cast<const uint16_t*>(b.data_ptr());
  int bad = 0;
  for (size_t i = 0; i < pat.size(); ++i) bad += bp[i] != float_to_bf16_bits(f[i]);
  CHECK(bad == 0);
  // strided source: the scalar loop, same bits
  Tensor ts = transpose(tensor_from(f, {(int64_t)f.size() / 3, 3}), 0, 1);
  Tensor bs = contiguous(to_dtype(ts, DType::bf16));
  Tensor bc = contiguous(to_dtype(contiguous(ts), DType::bf16));
  CHECK(std::memcmp(bs.data_ptr(), bc.data_ptr(), (size_t)bs.numel() * 2) == 0);
  // every bf16 pattern to f32 (exact: the bits shifted up), + 5 for a remainder
  std::vector<uint16_t> all(65536 + 5);
  for (size_t i = 0; i < all.size(); ++i) all[i] = (uint16_t)(i * 40503u);  // odd multiplier: a permutation mod 2^16
  Tensor h = empty({(int64_t)all.size()}, DType::bf16);
  std::memcpy(h.data_ptr(), all.data(), all.size() * 2);
  Tensor back = to_dtype(h, DType::f32);
  const uint32_t* fp = static_cast<const uint32_t*>(back.data_ptr());
  bad = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    const float ref = bf16_bits_to_float(all[i]);
    uint32_t r;
    std::memcpy(&r, &ref, 4);
    bad += fp[i] != r;
  }
  CHECK(bad == 0);
}
