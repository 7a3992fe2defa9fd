// The CUDA backend's NN kernel entry points, with exactly the signatures of kernels/cpu/{conv2d,
// pool,batch_norm,softmax,loss,dropout}.h, templated on T = float or double (both instantiated).
// Device pointers on the current device; work queued on its compute stream.
// STATUS: all implemented (conv2d.cpp, pool.cu, batch_norm.cu, softmax.cu, loss.cu, dropout in
// elementwise.cu) and compiled for sm_80/sm_90; none of them has run on a GPU yet.
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/common/nn_desc.h"

namespace kiln::cuda {

// ---- convolution (conv2d.cpp, cuDNN) -- as kernels/cpu/conv2d.h ----
// cuDNN's workspace comes from kiln's allocator (tag temporary) inside each call, so the
// `workspace` argument is ignored and conv2d_workspace_bytes is 0 on this backend.
size_t conv2d_workspace_bytes(const Conv2dDesc& d, size_t elem_size);
template <typename T>
void conv2d_forward(const Conv2dDesc& d, const T* x, const T* w, const T* bias, T* y, void* workspace);
template <typename T>
void conv2d_backward_input(const Conv2dDesc& d, const T* dy, const T* w, T* dx, void* workspace);
template <typename T>
void conv2d_backward_weight(const Conv2dDesc& d, const T* x, const T* dy, T* dw, T* dbias, void* workspace);

// ---- pooling (pool.cu) -- as kernels/cpu/pool.h ----
template <typename T>
void max_pool2d_forward(const Pool2dDesc& d, const T* x, T* y, int64_t* indices);
template <typename T>
void max_pool2d_backward(const Pool2dDesc& d, const T* dy, const int64_t* indices, T* dx);
template <typename T>
void avg_pool2d_forward(const Pool2dDesc& d, bool count_include_pad, const T* x, T* y);
template <typename T>
void avg_pool2d_backward(const Pool2dDesc& d, bool count_include_pad, const T* dy, T* dx);
template <typename T>
void adaptive_avg_pool2d_forward(int64_t N, int64_t C, int64_t H, int64_t W, int64_t OH, int64_t OW, const T* x,
                                 T* y);
template <typename T>
void adaptive_avg_pool2d_backward(int64_t N, int64_t C, int64_t H, int64_t W, int64_t OH, int64_t OW, const T* dy,
                                  T* dx);

// ---- batch norm (batch_norm.cu) -- as kernels/cpu/batch_norm.h ----
template <typename T>
void batch_norm_forward_train(int64_t N, int64_t C, int64_t HW, const T* x, const T* gamma, const T* beta,
                              double eps, T* y, T* save_mean, T* save_invstd, T* running_mean, T* running_var,
                              double momentum);
template <typename T>
void batch_norm_forward_eval(int64_t N, int64_t C, int64_t HW, const T* x, const T* gamma, const T* beta,
                             const T* running_mean, const T* running_var, double eps, T* y);
template <typename T>
void batch_norm_backward_train(int64_t N, int64_t C, int64_t HW, const T* dy, const T* x, const T* gamma,
                               const T* save_mean, const T* save_invstd, T* dx, T* dgamma, T* dbeta);
template <typename T>
void batch_norm_backward_eval(int64_t N, int64_t C, int64_t HW, const T* dy, const T* x, const T* gamma,
                              const T* running_mean, const T* running_var, double eps, T* dx, T* dgamma, T* dbeta);

// ---- softmax (softmax.cu) and losses (loss.cu) -- as kernels/cpu/softmax.h, loss.h ----
template <typename T>
void softmax_forward(int64_t rows, int64_t cols, const T* x, T* y);
template <typename T>
void log_softmax_forward(int64_t rows, int64_t cols, const T* x, T* y);
template <typename T>
void softmax_backward(int64_t rows, int64_t cols, const T* y, const T* dy, T* dx);
template <typename T>
void log_softmax_backward(int64_t rows, int64_t cols, const T* y, const T* dy, T* dx);

// Targets are validated on the device without a host sync: an out-of-range target gives NaN for
// that sample and throws kiln::Error (naming the op, position, target and K) at the next
// synchronizing call (to_device to the host, synchronize): kernels/cuda/deferred_error.h.
template <typename T>
void cross_entropy_forward(int64_t N, int64_t K, const T* logits, const int64_t* targets, const T* weight,
                           double label_smoothing, int64_t ignore_index, Reduction reduction, T* out, T* logp);
template <typename T>
void cross_entropy_backward(int64_t N, int64_t K, const T* grad_out, const T* logp, const int64_t* targets,
                            const T* weight, double label_smoothing, int64_t ignore_index, Reduction reduction,
                            T* dlogits);
template <typename T>
void nll_loss_forward(int64_t N, int64_t K, const T* logp, const int64_t* targets, const T* weight,
                      int64_t ignore_index, Reduction reduction, T* out);
template <typename T>
void nll_loss_backward(int64_t N, int64_t K, const T* grad_out, const int64_t* targets, const T* weight,
                       int64_t ignore_index, Reduction reduction, T* dlogp);
template <typename T>
void mse_loss_forward(int64_t n, const T* x, const T* target, Reduction reduction, T* out);
template <typename T>
void mse_loss_backward(int64_t n, const T* grad_out, const T* x, const T* target, Reduction reduction, T* dx);

// ---- dropout (elementwise.cu) -- as kernels/cpu/dropout.h; the same Philox mask as the CPU ----
template <typename T>
void dropout_forward(int64_t n, const T* x, double p, uint64_t seed, uint64_t offset, T* y, uint8_t* mask);
template <typename T>
void dropout_backward(int64_t n, const T* dy, const uint8_t* mask, double p, T* dx);

}  // namespace kiln::cuda
