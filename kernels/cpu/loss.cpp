// Loss kernels (see loss.h). Sums in double; cross_entropy reuses log_softmax_forward and keeps
// the log-probs for its backward.
#include "kernels/cpu/loss.h"

#include <cmath>
#include <limits>

#include "engine/core/error.h"
#include "kernels/cpu/softmax.h"

namespace kiln::cpu {

namespace {

// Validates targets; returns D = sum of w_t over non-ignored samples (count without weights).
template <typename T>
double target_weight_sum(int64_t N, int64_t K, const int64_t* targets, const T* weight, int64_t ignore_index,
                         const char* op) {
  double D = 0;
  for (int64_t i = 0; i < N; ++i) {
    const int64_t t = targets[i];
    if (t == ignore_index) continue;
    KILN_CHECK(t >= 0 && t < K, op, ": target ", t, " at position ", i, " is out of range for K=", K,
               " classes (ignore_index ", ignore_index, ")");
    D += weight ? (double)weight[t] : 1.0;
  }
  return D;
}

void check_sizes(int64_t N, int64_t K, const char* op) {
  KILN_CHECK(N >= 0 && K >= 1, op, ": bad sizes (N ", N, ", K ", K, ")");
}

// Writes the reduced (or per-sample) loss. per[i] holds loss_i for reduction none.
template <typename T>
void reduce_out(Reduction r, double sum, double D, T* out) {
  if (r == Reduction::sum) out[0] = (T)sum;
  if (r == Reduction::mean) out[0] = (T)(sum / D);  // D == 0 -> NaN (0/0), as PyTorch
}

// Gradient scale of sample i: upstream gradient, divided by D for mean.
template <typename T>
double grad_scale(Reduction r, const T* grad_out, int64_t i, double D) {
  if (r == Reduction::none) return (double)grad_out[i];
  if (r == Reduction::sum) return (double)grad_out[0];
  return (double)grad_out[0] / D;
}

}  // namespace

template <typename T>
void cross_entropy_forward(int64_t N, int64_t K, const T* logits, const int64_t* targets, const T* weight,
                           double label_smoothing, int64_t ignore_index, Reduction reduction, T* out, T* logp) {
  check_sizes(N, K, "cross_entropy_forward");
  KILN_CHECK(label_smoothing >= 0.0 && label_smoothing <= 1.0,
             "cross_entropy_forward: label_smoothing must be in [0, 1], got ", label_smoothing);
  const double D = target_weight_sum(N, K, targets, weight, ignore_index, "cross_entropy_forward");
  log_softmax_forward(N, K, logits, logp);
  const double ls = label_smoothing;
  double total = 0;
#pragma omp parallel for reduction(+ : total) schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    const int64_t t = targets[i];
    double li = 0;
    if (t != ignore_index) {
      const T* lp = logp + i * K;
      li = -(1.0 - ls) * (weight ? (double)weight[t] : 1.0) * (double)lp[t];
      if (ls > 0) {
        double s = 0;
        for (int64_t c = 0; c < K; ++c) s += (weight ? (double)weight[c] : 1.0) * (double)lp[c];
        li -= ls / (double)K * s;
      }
    }
    if (reduction == Reduction::none) out[i] = (T)li;
    total += li;
  }
  reduce_out(reduction, total, D, out);
}

template <typename T>
void cross_entropy_backward(int64_t N, int64_t K, const T* grad_out, const T* logp, const int64_t* targets,
                            const T* weight, double label_smoothing, int64_t ignore_index, Reduction reduction,
                            T* dlogits) {
  check_sizes(N, K, "cross_entropy_backward");
  const double D = target_weight_sum(N, K, targets, weight, ignore_index, "cross_entropy_backward");
  const double ls = label_smoothing;
  // sum_c (ls / K) * w_c: the smoothing part of sum(q), the same for every sample.
  double smooth_mass = 0;
  if (ls > 0)
    for (int64_t c = 0; c < K; ++c) smooth_mass += ls / (double)K * (weight ? (double)weight[c] : 1.0);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    T* o = dlogits + i * K;
    const int64_t t = targets[i];
    if (t == ignore_index) {
      // PyTorch's composition (nll backward 0, then log_softmax backward 0 - exp(logp) * 0): 0, but
      // NaN where the row's log-prob is NaN (a NaN or +inf logit), so an ignored pixel's bad logits
      // still show up in the gradient.
      const T* lp = logp + i * K;
      for (int64_t c = 0; c < K; ++c) o[c] = (T)(0.0 - std::exp((double)lp[c]) * 0.0);
      continue;
    }
    const double g = grad_scale(reduction, grad_out, i, D);
    const double wt = weight ? (double)weight[t] : 1.0;
    const double qsum = (1.0 - ls) * wt + smooth_mass;
    const T* lp = logp + i * K;
    for (int64_t c = 0; c < K; ++c) {
      const double qc = (ls > 0 ? ls / (double)K * (weight ? (double)weight[c] : 1.0) : 0.0) +
                        (c == t ? (1.0 - ls) * wt : 0.0);
      o[c] = (T)(g * (std::exp((double)lp[c]) * qsum - qc));
    }
  }
}

template <typename T>
void nll_loss_forward(int64_t N, int64_t K, const T* logp, const int64_t* targets, const T* weight,
                      int64_t ignore_index, Reduction reduction, T* out) {
  check_sizes(N, K, "nll_loss_forward");
  const double D = target_weight_sum(N, K, targets, weight, ignore_index, "nll_loss_forward");
  double total = 0;
  for (int64_t i = 0; i < N; ++i) {
    const int64_t t = targets[i];
    const double li = t == ignore_index ? 0.0 : -(weight ? (double)weight[t] : 1.0) * (double)logp[i * K + t];
    if (reduction == Reduction::none) out[i] = (T)li;
    total += li;
  }
  reduce_out(reduction, total, D, out);
}

template <typename T>
void nll_loss_backward(int64_t N, int64_t K, const T* grad_out, const int64_t* targets, const T* weight,
                       int64_t ignore_index, Reduction reduction, T* dlogp) {
  check_sizes(N, K, "nll_loss_backward");
  const double D = target_weight_sum(N, K, targets, weight, ignore_index, "nll_loss_backward");
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < N; ++i) {
    T* o = dlogp + i * K;
    for (int64_t c = 0; c < K; ++c) o[c] = T(0);
    const int64_t t = targets[i];
    if (t == ignore_index) continue;
    o[t] = (T)(-grad_scale(reduction, grad_out, i, D) * (weight ? (double)weight[t] : 1.0));
  }
}

template <typename T>
void mse_loss_forward(int64_t n, const T* x, const T* target, Reduction reduction, T* out) {
  KILN_CHECK(n >= 0, "mse_loss_forward: bad size ", n);
  double total = 0;
#pragma omp parallel for reduction(+ : total) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const double d = (double)x[i] - (double)target[i];
    if (reduction == Reduction::none) out[i] = (T)(d * d);
    total += d * d;
  }
  if (reduction == Reduction::sum) out[0] = (T)total;
  if (reduction == Reduction::mean) out[0] = (T)(total / (double)n);  // n == 0 -> NaN, as PyTorch
}

template <typename T>
void mse_loss_backward(int64_t n, const T* grad_out, const T* x, const T* target, Reduction reduction, T* dx) {
  KILN_CHECK(n >= 0, "mse_loss_backward: bad size ", n);
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    const T g = reduction == Reduction::none ? grad_out[i]
                : reduction == Reduction::sum ? grad_out[0]
                                              : (T)((double)grad_out[0] / (double)n);
    dx[i] = T(2) * (x[i] - target[i]) * g;
  }
}

#define KILN_INSTANTIATE_LOSS(T)                                                                           \
  template void cross_entropy_forward<T>(int64_t, int64_t, const T*, const int64_t*, const T*, double,    \
                                         int64_t, Reduction, T*, T*);                                     \
  template void cross_entropy_backward<T>(int64_t, int64_t, const T*, const T*, const int64_t*, const T*, \
                                          double, int64_t, Reduction, T*);                                \
  template void nll_loss_forward<T>(int64_t, int64_t, const T*, const int64_t*, const T*, int64_t,        \
                                    Reduction, T*);                                                       \
  template void nll_loss_backward<T>(int64_t, int64_t, const T*, const int64_t*, const T*, int64_t,       \
                                     Reduction, T*);                                                      \
  template void mse_loss_forward<T>(int64_t, const T*, const T*, Reduction, T*);                          \
  template void mse_loss_backward<T>(int64_t, const T*, const T*, const T*, Reduction, T*);
KILN_INSTANTIATE_LOSS(float)
KILN_INSTANTIATE_LOSS(double)
#undef KILN_INSTANTIATE_LOSS

}  // namespace kiln::cpu
