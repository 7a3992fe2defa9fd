// kiln::float_to_int (kernels/common/float_to_int.h), the one float -> integer rule of the CPU backend
// and the CUDA kernels: truncate toward zero, saturate to the type's range, NaN -> 0. Through the
// CPU backend's ops (to_dtype, full) as a user reaches it. The CUDA kernels' side runs in
// tests/cuda_cpu/test_cuda_cpu_elementwise.cpp.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "engine/ops/ops.h"
#include "kernels/common/float_to_int.h"

using kiln::DType;
using kiln::float_to_int;

TEST_CASE("float_to_int: truncates, saturates at each integer type's range, NaN gives 0") {
  const double nan = std::nan(""), inf = INFINITY;
  CHECK(float_to_int<int32_t>(nan) == 0);
  CHECK(float_to_int<int32_t>(-0.0) == 0);
  CHECK(float_to_int<int32_t>(-1.9) == -1);
  CHECK(float_to_int<int32_t>(inf) == INT32_MAX);
  CHECK(float_to_int<int32_t>(-inf) == INT32_MIN);
  CHECK(float_to_int<int32_t>(2147483648.0) == INT32_MAX);
  CHECK(float_to_int<int32_t>(2147483647.9) == INT32_MAX);
  CHECK(float_to_int<int32_t>(-2147483649.0) == INT32_MIN);
  CHECK(float_to_int<int64_t>(9223372036854775808.0) == INT64_MAX);
  CHECK(float_to_int<int64_t>(-9223372036854775808.0) == INT64_MIN);
  CHECK(float_to_int<int64_t>(-1e300) == INT64_MIN);
  CHECK(float_to_int<int64_t>(4503599627370497.0) == 4503599627370497LL);
  CHECK(float_to_int<uint8_t>(-1.0) == 0);
  CHECK(float_to_int<uint8_t>(255.99) == 255);
  CHECK(float_to_int<uint8_t>(256.0) == 255);
  CHECK(float_to_int<uint8_t>(nan) == 0);
  CHECK(float_to_int<uint32_t>(4294967296.0) == UINT32_MAX);
  CHECK(float_to_int<uint64_t>(-inf) == 0);
}

TEST_CASE("float_to_int: the CPU backend's casts and fills to i32, i64 and u8 follow it") {
  const std::vector<double> in = {std::nan(""), INFINITY, -INFINITY, -0.0, -1.5, 300.0, 3e9, -3e9, 1e19};
  const kiln::Tensor x = kiln::tensor_from(in, {(int64_t)in.size()});
  const std::vector<int32_t> i32 = kiln::to_dtype(x, DType::i32).to_vector<int32_t>();
  const std::vector<int64_t> i64 = kiln::to_dtype(x, DType::i64).to_vector<int64_t>();
  const std::vector<uint8_t> u8 = kiln::to_dtype(x, DType::u8).to_vector<uint8_t>();
  CHECK(i32 == std::vector<int32_t>{0, INT32_MAX, INT32_MIN, 0, -1, 300, INT32_MAX, INT32_MIN, INT32_MAX});
  CHECK(i64 == std::vector<int64_t>{0, INT64_MAX, INT64_MIN, 0, -1, 300, 3000000000LL, -3000000000LL, INT64_MAX});
  CHECK(u8 == std::vector<uint8_t>{0, 255, 0, 0, 0, 255, 255, 0, 255});
  CHECK(kiln::full({3}, std::nan(""), DType::i32).to_vector<int32_t>() == std::vector<int32_t>(3, 0));
  CHECK(kiln::full({3}, -INFINITY, DType::i64).to_vector<int64_t>() == std::vector<int64_t>(3, INT64_MIN));
  CHECK(kiln::full({3}, -7.0, DType::u8).to_vector<uint8_t>() == std::vector<uint8_t>(3, 0));
}
