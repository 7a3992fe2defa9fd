// CPU execution mode (kernels/cuda_cpu): __half as kiln's host half (engine/core/half.h), same bits.
#pragma once
#include "engine/core/half.h"
using __half = ::kiln::half;
inline float __half2float(__half h) { return (float)h; }
inline __half __float2half_rn(float f) { return __half(f); }
