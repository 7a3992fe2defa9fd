// Loss kernels on the CPU with PyTorch 1.13 semantics: cross_entropy over class-index targets
// (class weights, label smoothing, ignore_index), nll_loss on log-probs, mse_loss. Inputs are
// contiguous (N, K) logits / log-probs; the op layer moves the class dim of (N, K, d...) inputs
// last and flattens. Never allocates.
#pragma once
#include <cstdint>

#include "kernels/common/nn_desc.h"

namespace kiln::cpu {

// out: one value for mean/sum, (N) for none. logp: (N, K) output, log_softmax(logits), saved for
// backward. weight: (K) or null. Per sample i with target t (skipped when t == ignore_index):
//   q_c = (1 - ls) * w_t * [c == t] + (ls / K) * w_c,   loss_i = -sum_c q_c * logp[i, c]
// (w = 1 without weights). mean divides the sum by D = sum of w_t over non-ignored samples
// (NaN when every target is ignored, like PyTorch). Throws kiln::Error naming the position, the
// target and K when a target is outside [0, K) and not ignore_index.
template <typename T>
void cross_entropy_forward(int64_t N, int64_t K, const T* logits, const int64_t* targets, const T* weight,
                           double label_smoothing, int64_t ignore_index, Reduction reduction, T* out, T* logp);
// grad_out: one value for mean/sum, (N) for none. dlogits[i, c] = g_i * (p_c * sum(q) - q_c) / D
// (0 for ignored samples).
template <typename T>
void cross_entropy_backward(int64_t N, int64_t K, const T* grad_out, const T* logp, const int64_t* targets,
                            const T* weight, double label_smoothing, int64_t ignore_index, Reduction reduction,
                            T* dlogits);

// nll_loss on log-probs logp (N, K): loss_i = -w_t * logp[i, t]; mean divides by sum of w_t.
template <typename T>
void nll_loss_forward(int64_t N, int64_t K, const T* logp, const int64_t* targets, const T* weight,
                      int64_t ignore_index, Reduction reduction, T* out);
// dlogp (N, K) overwritten: -g_i * w_t / D at [i, t], 0 elsewhere.
template <typename T>
void nll_loss_backward(int64_t N, int64_t K, const T* grad_out, const int64_t* targets, const T* weight,
                       int64_t ignore_index, Reduction reduction, T* dlogp);

// (x - target)^2 over n elements, reduced. dx = 2 * (x - target) * g (/ n for mean); the target's
// gradient is -dx (the op layer negates).
template <typename T>
void mse_loss_forward(int64_t n, const T* x, const T* target, Reduction reduction, T* out);
template <typename T>
void mse_loss_backward(int64_t n, const T* grad_out, const T* x, const T* target, Reduction reduction, T* dx);

}  // namespace kiln::cpu
