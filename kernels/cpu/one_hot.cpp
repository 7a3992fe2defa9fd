// One-hot kernel on the CPU (see one_hot.h). Validates every target first, so a bad target throws
// before anything is written.
#include "kernels/cpu/one_hot.h"

#include "engine/core/error.h"

namespace kiln::cpu {

template <typename T>
void one_hot_forward(int64_t N, int64_t K, int64_t S, const int64_t* target, int64_t ignore_index, T* out,
                     const char* target_desc) {
  KILN_CHECK(N >= 0 && K >= 1 && S >= 0, "one_hot: bad sizes (N ", N, ", K ", K, ", S ", S, ")");
  for (int64_t i = 0; i < N * S; ++i) {
    const int64_t t = target[i];
    KILN_CHECK(t == ignore_index || (t >= 0 && t < K), "one_hot: target value ", t, " at flat position ", i,
               " of target ", target_desc ? target_desc : "", " is out of range for K=", K,
               " classes (valid: 0..", K - 1, ", or ignore_index ", ignore_index, ")");
  }
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < N; ++n) {
    const int64_t* tn = target + n * S;
    T* on = out + n * K * S;
    for (int64_t k = 0; k < K; ++k) {
      T* ok = on + k * S;
      for (int64_t s = 0; s < S; ++s) ok[s] = tn[s] == k ? T(1) : T(0);
    }
  }
}

template void one_hot_forward<float>(int64_t, int64_t, int64_t, const int64_t*, int64_t, float*, const char*);
template void one_hot_forward<double>(int64_t, int64_t, int64_t, const int64_t*, int64_t, double*, const char*);

}  // namespace kiln::cpu
