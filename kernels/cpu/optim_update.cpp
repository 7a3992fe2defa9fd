// Fused optimizer updates on the CPU (see optim_update.h).
// Both loops must vectorize (one pass over p, g and the state, SIMD-wide): the hyper-parameters are
// firstprivate copies in each thread's body (a float store through p could otherwise alias h, so the
// compiler reloaded h every element and gave up on vectors; a local copy shared with the OpenMP
// region is read through a pointer as well: SGD ran scalar, with a branch per element, 6% of a
// ResNet18 step), SGD's "no momentum buffer" case is its own loop (a
// reference to either the buffer or a dummy is not a vector operand), and this file is built with
// -fno-math-errno (CMakeLists.txt: sqrtf may then be a SIMD square root; IEEE sqrt is correctly
// rounded either way, so every element's result is the same bits as the scalar loop's). Measured
// in docs/cpu-profile.md: AdamW over the small CNN's 421k parameters was 9% of a batch-16 step.
#include "kernels/cpu/optim_update.h"

namespace kiln::cpu {

void sgd_fused(float* p, const float* g, float* momentum_buffer, int64_t n, bool first_step,
               const optim::SgdParams& h) {
  const optim::SgdParams hl = h;
  if (momentum_buffer == nullptr) {
#pragma omp parallel for if (n > (1 << 16)) firstprivate(hl)
    for (int64_t i = 0; i < n; ++i) {
      float dummy = 0.f;
      optim::sgd_update(p[i], g[i], dummy, first_step, hl);
    }
    return;
  }
#pragma omp parallel for if (n > (1 << 16)) firstprivate(hl)
  for (int64_t i = 0; i < n; ++i) optim::sgd_update(p[i], g[i], momentum_buffer[i], first_step, hl);
}

void adamw_fused(float* p, const float* g, float* exp_avg, float* exp_avg_sq, int64_t n,
                 const optim::AdamWParams& h) {
  const optim::AdamWParams hl = h;
#pragma omp parallel for if (n > (1 << 16)) firstprivate(hl)
  for (int64_t i = 0; i < n; ++i) optim::adamw_update(p[i], g[i], exp_avg[i], exp_avg_sq[i], hl);
}

}  // namespace kiln::cpu
