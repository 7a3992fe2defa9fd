// isfinite_all, the AMP found-inf check (LossScaler::unscale_): correct with a NaN or inf anywhere,
// the last element included, and without a full-size temporary (it allocated a mask the size of
// the gradient and reduced it in one block on cuda; now a max and a min, grid-wide on cuda: the
// kernels' side runs in tests/cuda_cpu/test_cuda_cpu_reductions.cpp).
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include "engine/ops/ops.h"
#include "engine/train/memory_peak.h"

using namespace kiln;

TEST_CASE("isfinite_all: a NaN or inf at any position, the last included, with no full-size temporary") {
  const int64_t n = 300001;  // not a multiple of any block
  const Device cpu = Device::cpu();
  for (DType dt : {DType::f32, DType::f64, DType::f16}) {
    std::vector<float> v((size_t)n);
    for (int64_t i = 0; i < n; ++i) v[(size_t)i] = (float)((i * 37) % 101) * 0.25f - 12.0f;
    const Tensor finite = to_dtype(tensor_from<float>(v, {n}), dt);
    reset_peak_memory(cpu);
    int64_t live = 0;
    for (int64_t b : live_tag_bytes(cpu)) live += b;
    CHECK(isfinite_all(finite).item() == 1.0);
    const int64_t extra = peak_memory_bytes(cpu) - live;
    MESSAGE(std::string(dtype_name(dt)), ": isfinite_all's peak above the live bytes: ", extra, " for an input of ", finite.nbytes());
    CHECK(extra < (int64_t)finite.nbytes() / 8);
    for (float special : {NAN, INFINITY, -INFINITY})
      for (int64_t at : {n - 1, (int64_t)0, n / 2}) {
        std::vector<float> w = v;
        w[(size_t)at] = special;
        const Tensor x = to_dtype(tensor_from<float>(w, {n}), dt);
        CHECK_MESSAGE(isfinite_all(x).item() == 0.0, std::string(dtype_name(dt)), " ", special, " at ", at);
      }
  }
  // Huge finite values are finite (no overflow in the check itself).
  CHECK(isfinite_all(tensor_from<float>({3e38f, 3e38f, -3e38f}, {3})).item() == 1.0);
  CHECK(isfinite_all(zeros({0})).item() == 1.0);
}
