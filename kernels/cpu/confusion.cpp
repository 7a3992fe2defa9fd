// The segmentation confusion matrix on the CPU (see confusion.h).
#include "kernels/cpu/confusion.h"

#include <vector>

#include "engine/core/error.h"
#include "kernels/common/confusion_math.h"

namespace kiln::cpu {

template <typename T>
void confusion_matrix_accumulate(int64_t N, int64_t K, int64_t HW, const T* scores, const int64_t* target,
                                 int64_t ignore_index, int64_t* counts) {
  const char* op = "confusion_matrix";
  KILN_CHECK(N >= 0 && K >= 1 && HW >= 0, op, ": bad sizes (N ", N, ", K ", K, ", HW ", HW, ")");
  for (int64_t i = 0; i < N * HW; ++i)
    KILN_CHECK(confusion_cell(target[i], 0, K, ignore_index) != kConfusionBadTarget, op, ": target ", target[i],
               " at image ", i / HW, ", pixel ", i % HW, " is out of range for K=", K, " classes (ignore_index ",
               ignore_index, ")");
  const int64_t KK = K * K;
#pragma omp parallel
  {
    std::vector<int64_t> local((size_t)KK, 0);
#pragma omp for schedule(static)
    for (int64_t n = 0; n < N; ++n) {
      const T* s = scores + n * K * HW;
      const int64_t* t = target + n * HW;
      for (int64_t p = 0; p < HW; ++p) {
        const int64_t cell = confusion_cell(t[p], pixel_argmax(s + p, K, HW), K, ignore_index);
        if (cell >= 0) ++local[(size_t)cell];
      }
    }
#pragma omp critical
    for (int64_t c = 0; c < KK; ++c) counts[c] += local[(size_t)c];
  }
}

template void confusion_matrix_accumulate<float>(int64_t, int64_t, int64_t, const float*, const int64_t*, int64_t,
                                                 int64_t*);
template void confusion_matrix_accumulate<double>(int64_t, int64_t, int64_t, const double*, const int64_t*, int64_t,
                                                  int64_t*);

}  // namespace kiln::cpu
