// 2-D convolution on the CPU (NCHW, contiguous): forward, input gradient, weight/bias gradient.
// im2col + OpenBLAS GEMM, with several images per GEMM when the output plane is small and no
// im2col at all for 1x1 / stride 1 / pad 0. Kernels never allocate: the caller passes a scratch
// buffer of conv2d_workspace_bytes() bytes (kiln allocates it tagged `temporary`).
#pragma once
#include <cstddef>
#include <cstdint>

#include "kernels/common/nn_desc.h"

namespace kiln::cpu {

// Scratch bytes needed by each of the three functions below for this desc (the same for all three;
// may be 0, in which case workspace may be null). elem_size = sizeof(T).
size_t conv2d_workspace_bytes(const Conv2dDesc& d, size_t elem_size);

// Images whose columns share one GEMM (1 when the output plane alone is wide enough).
int64_t conv2d_images_per_block(const Conv2dDesc& d);

// Throws kiln::Error (naming `op` and the desc) unless the desc is a valid convolution.
void conv2d_check(const Conv2dDesc& d, const char* op);

// x: (N, C, H, W), w: (K, C/groups, R, S), bias: (K) or null -> y: (N, K, OH, OW) (overwritten).
template <typename T>
void conv2d_forward(const Conv2dDesc& d, const T* x, const T* w, const T* bias, T* y, void* workspace);

// dy: (N, K, OH, OW), w: (K, C/groups, R, S) -> dx: (N, C, H, W) (overwritten).
template <typename T>
void conv2d_backward_input(const Conv2dDesc& d, const T* dy, const T* w, T* dx, void* workspace);

// x: (N, C, H, W), dy: (N, K, OH, OW) -> dw: (K, C/groups, R, S) and, if non-null, dbias: (K)
// (both overwritten, not accumulated).
template <typename T>
void conv2d_backward_weight(const Conv2dDesc& d, const T* x, const T* dy, T* dw, T* dbias,
                            void* workspace);

}  // namespace kiln::cpu
