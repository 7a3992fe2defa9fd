// KILN_HOST_DEVICE: marks inline functions shared by the CPU and CUDA backends.
#pragma once
#if defined(__CUDACC__)
#define KILN_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define KILN_HOST_DEVICE inline
#endif
