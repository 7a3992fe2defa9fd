// Thread count of the CPU backend: one knob for OpenMP loops and OpenBLAS's GEMM threads.
// Must not be called from inside a parallel region.
#pragma once

namespace kiln::cpu {

// Sets both OpenMP's and OpenBLAS's thread counts (n >= 1; throws kiln::Error otherwise).
void set_num_threads(int n);
// The thread count kernels will use (OpenMP's max threads).
int num_threads();

}  // namespace kiln::cpu
