// softmax and log_softmax over the last dim of a contiguous (rows, cols) buffer, forward and
// backward, on the CPU. The op layer moves the softmax dim last. Rows run in parallel.
#pragma once
#include <cstdint>

namespace kiln::cpu {

// y[r, :] = exp(x[r, :] - max) / sum(exp(x[r, :] - max)).
template <typename T>
void softmax_forward(int64_t rows, int64_t cols, const T* x, T* y);
// y[r, :] = x[r, :] - max - log(sum(exp(x[r, :] - max))).
template <typename T>
void log_softmax_forward(int64_t rows, int64_t cols, const T* x, T* y);

// From the forward output y: dx = y * (dy - sum(dy * y)).
template <typename T>
void softmax_backward(int64_t rows, int64_t cols, const T* y, const T* dy, T* dx);
// From the forward output y (log-probs): dx = dy - exp(y) * sum(dy).
template <typename T>
void log_softmax_backward(int64_t rows, int64_t cols, const T* y, const T* dy, T* dx);

}  // namespace kiln::cpu
