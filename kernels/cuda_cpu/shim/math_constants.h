// CPU execution mode (kernels/cuda_cpu): the CUDART_* constants of CUDA's math_constants.h.
#pragma once
#include <limits>
#define CUDART_NAN (std::numeric_limits<double>::quiet_NaN())
#define CUDART_NAN_F (std::numeric_limits<float>::quiet_NaN())
#define CUDART_INF (std::numeric_limits<double>::infinity())
#define CUDART_INF_F (std::numeric_limits<float>::infinity())
