// CPU execution mode: included first by every translation unit of kiln_cuda_cpu (the generated
// wrappers around kernels/cuda/*.cu, and runtime_shim.cpp). It includes the shim's CUDA headers and
// every engine/ header the CUDA sources reach, then renames the namespace kiln::cuda to
// kiln::cuda_on_cpu (a macro), so the same sources compile a second, host-only copy of the CUDA
// backend whose symbols never collide with the real one in a CUDA build.
#pragma once
#if !defined(KILN_CUDA_ON_CPU)
#error "kernels/cuda_cpu/prelude.h: only the CPU-mode build (KILN_CUDA_ON_CPU) includes this"
#endif
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <math_constants.h>

#include "engine/core/device.h"
#include "engine/core/dtype.h"
#include "engine/core/error.h"
#include "engine/core/half.h"
#include "engine/core/philox.h"

// From here on `cuda` (the token, not a part of a longer name) is `cuda_on_cpu`.
#define cuda cuda_on_cpu
