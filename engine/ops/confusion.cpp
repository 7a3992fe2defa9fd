// The confusion-matrix op (see confusion.h): shape checks naming the op and the shapes, dtype
// dispatch, no autograd. Meta tensors run the checks and allocate like real ones.
#include "engine/ops/confusion.h"

#include "engine/autograd/grad_mode.h"
#include "engine/ops/nn_common.h"
#include "kernels/cpu/confusion.h"

namespace kiln {

void confusion_matrix_add_(Tensor& counts, const Tensor& scores, const Tensor& target, int64_t ignore_index) {
  const char* op = "confusion_matrix";
  check_defined(scores, op, "scores");
  check_defined(target, op, "target");
  check_defined(counts, op, "counts");
  KILN_CHECK(scores.dim() >= 2, op, ": scores must be (N, K, H, W) or (N, K), got ", scores.str());
  const int64_t N = scores.size(0), K = scores.size(1);
  Shape want = {N};
  for (int64_t d = 2; d < scores.dim(); ++d) want.push_back(scores.size(d));
  KILN_CHECK(target.dtype() == DType::i64 && target.sizes() == want, op, ": target must be i64 ", shape_str(want),
             " for scores ", scores.str(), ", got ", target.str());
  KILN_CHECK(counts.dtype() == DType::i64 && counts.sizes() == Shape({K, K}), op, ": counts must be i64 (", K,
             ", ", K, ") for scores ", scores.str(), ", got ", counts.str());
  check_same_device(scores, target, op);
  check_same_device(scores, counts, op);
  KILN_CHECK(counts.is_contiguous(), op, ": counts must be contiguous, got ", counts.str());
  NoGradGuard no_grad;
  Tensor s = scores.detach();
  if (is_16bit(s.dtype())) s = to_dtype(s, DType::f32);
  check_floating(s, op);
  s = contiguous(s);
  Tensor t = contiguous(target);
  const int64_t HW = N > 0 && K > 0 ? s.numel() / (N * K) : 0;
  KILN_NN_TYPED(s.dtype(), op,
                KILN_DISPATCH(s.device(), confusion_matrix_accumulate<T>, N, K, HW, ptr<T>(s), ptr<int64_t>(t),
                              ignore_index, ptr<int64_t>(counts)));
  counts.bump_version();
}

Tensor confusion_matrix(const Tensor& scores, const Tensor& target, int64_t ignore_index) {
  check_defined(scores, "confusion_matrix", "scores");
  KILN_CHECK(scores.dim() >= 2, "confusion_matrix: scores must be (N, K, H, W) or (N, K), got ", scores.str());
  Tensor counts = zeros({scores.size(1), scores.size(1)}, DType::i64, scores.device());
  confusion_matrix_add_(counts, scores, target, ignore_index);
  return counts;
}

}  // namespace kiln
