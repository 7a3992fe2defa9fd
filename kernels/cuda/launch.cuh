// Launch geometry and device-side helpers shared by kiln's .cu files: grid sizes for grid-stride
// loops, dtype loads/stores in the compute type, block/warp sums. Device code only.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "engine/core/dtype.h"

#include "engine/core/half.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/handles.h"
#include "kernels/cuda/kernel_launch.h"
#include "kernels/cuda/runtime.h"

namespace kiln::cuda {

constexpr int kThreads = 256;

// Blocks for a grid-stride loop over n items: enough to fill the GPU a few times over, no more.
inline unsigned grid_for(int64_t n, int threads = kThreads) {
  int64_t b = (n + threads - 1) / threads;
  const int64_t cap = 132 * 32;  // ~32 blocks per SM on the largest parts; grid-stride covers the rest
  if (b > cap) b = cap;
  return (unsigned)(b < 1 ? 1 : b);
}

inline cudaStream_t stream() { return compute_stream(current_device()); }

template <typename T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::f32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::f64; };
template <> struct DTypeOf<half> { static constexpr DType value = DType::f16; };
template <> struct DTypeOf<bfloat16> { static constexpr DType value = DType::bf16; };

template <typename T> struct Compute { using type = float; };
template <> struct Compute<double> { using type = double; };

// Loads and stores in the compute type (f32 for 16-bit floats, as the CPU backend).
template <typename T>
__device__ __forceinline__ typename Compute<T>::type ld(const T* p) { return (typename Compute<T>::type)(*p); }
template <typename T>
__device__ __forceinline__ void st(T* p, typename Compute<T>::type v) { *p = T(v); }

// Sum over a warp (all lanes get the result).
template <typename A>
__device__ __forceinline__ A warp_sum(A v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum over a block of blockDim.x threads (multiple of 32, <= 1024); every thread gets the result.
// `scratch` holds 32 values; the call synchronizes, so scratch may be reused right after.
template <typename A>
__device__ __forceinline__ A block_sum(A v, A* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read by a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < nwarps ? scratch[lane] : A(0);
  return warp_sum(v);
}

}  // namespace kiln::cuda
