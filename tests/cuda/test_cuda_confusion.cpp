// The CUDA confusion matrix (kernels/cuda/confusion.cu) against the CPU backend through the op:
// random scores with many exact ties (small integers), ignore pixels, f32 and f64, a 3-class case
// (shared-memory counters) and a 70-class one (K * K > 4096: global counters), accumulation over
// two calls; a bad target is reported at the next synchronization naming the op.
// Without a GPU each test prints one line "cuda tests skipped: <reason>" and passes.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "engine/ops/confusion.h"
#include "engine/ops/ops.h"

#if defined(KILN_WITH_CUDA)
#include "kernels/cuda/runtime.h"
#include "support/cuda_test.h"

using namespace kiln;
using kiln_test::back;
using kiln_test::kGpu;
using kiln_test::skip_without_gpu;

namespace {

// Scores of small integers (ties everywhere: the first-maximum rule decides) and targets with
// about 1 in 8 ignored.
void check_case(int64_t n, int64_t k, int64_t h, int64_t w, DType dt) {
  CAPTURE(k);
  Tensor scores = to_dtype(mul(rand({n, k, h, w}, DType::f64), 4.0), dt);
  std::vector<double> s = scores.to_vector<double>();
  for (double& v : s) v = (double)(int64_t)v;  // 0..3
  scores = to_dtype(tensor_from(s, {n, k, h, w}), dt);
  std::vector<double> r = rand({n, h, w}, DType::f64).to_vector<double>();
  std::vector<int64_t> t(r.size());
  for (size_t i = 0; i < r.size(); ++i) t[i] = r[i] < 0.125 ? 255 : (int64_t)(r[i] * (double)k) % k;
  Tensor target = tensor_from(t, {n, h, w});
  Tensor cpu = confusion_matrix(scores, target);
  Tensor gpu = zeros({k, k}, DType::i64, kGpu);
  confusion_matrix_add_(gpu, to_device(scores, kGpu), to_device(target, kGpu));
  confusion_matrix_add_(gpu, to_device(scores, kGpu), to_device(target, kGpu));
  std::vector<int64_t> want = cpu.to_vector<int64_t>();
  for (int64_t& v : want) v *= 2;
  CHECK(back(gpu).to_vector<int64_t>() == want);
}

}  // namespace

TEST_CASE("cuda confusion_matrix: the CPU's counts, ties and ignore pixels included") {
  if (skip_without_gpu()) return;
  manual_seed(11);
  check_case(3, 3, 17, 23, DType::f32);
  check_case(2, 5, 9, 8, DType::f64);
  check_case(2, 70, 12, 12, DType::f32);  // 4900 cells: global counters
}

TEST_CASE("cuda confusion_matrix: a target out of range is reported at the next synchronization") {
  if (skip_without_gpu()) return;
  Tensor scores = to_device(zeros({1, 3, 2, 2}), kGpu);
  Tensor target = to_device(tensor_from(std::vector<int64_t>{0, 1, 7, 255}, {1, 2, 2}), kGpu);
  Tensor counts = zeros({3, 3}, DType::i64, kGpu);
  confusion_matrix_add_(counts, scores, target);
  CHECK_THROWS_WITH_AS(back(counts), doctest::Contains("confusion_matrix (cuda:0): target 7 at position 2"), Error);
}

#else  // !KILN_WITH_CUDA

TEST_CASE("cuda: confusion_matrix not built") {
  MESSAGE("cuda tests skipped: kiln was built without CUDA (KILN_CUDA=OFF)");
}

#endif
