// Fused optimizer updates on the CPU (see optim_update.h).
#include "kernels/cpu/optim_update.h"

namespace kiln::cpu {

void sgd_fused(float* p, const float* g, float* momentum_buffer, int64_t n, bool first_step,
               const optim::SgdParams& h) {
  float dummy = 0.f;
#pragma omp parallel for if (n > (1 << 16)) firstprivate(dummy)
  for (int64_t i = 0; i < n; ++i)
    optim::sgd_update(p[i], g[i], momentum_buffer ? momentum_buffer[i] : dummy, first_step, h);
}

void adamw_fused(float* p, const float* g, float* exp_avg, float* exp_avg_sq, int64_t n,
                 const optim::AdamWParams& h) {
#pragma omp parallel for if (n > (1 << 16))
  for (int64_t i = 0; i < n; ++i) optim::adamw_update(p[i], g[i], exp_avg[i], exp_avg_sq[i], h);
}

}  // namespace kiln::cpu
