// CPU execution mode: per-byte shadow state of the running block's shared memory (shadow.cpp), fed by
// GCC's -fsanitize=thread instrumentation of the kernel sources (the __tsan_* hooks are answered
// here, with no TSan runtime linked): within one barrier interval (per warp for __syncwarp), a
// cross-thread read-after-write, write-after-read or write-after-write is a race, and a read of a byte
// nobody wrote is an uninitialised read; each is a fault naming the threads, the buffer and the offset.
// Deterministic: it does not depend on the order the fibres ran in. Internal to kernels/cuda_cpu.
#pragma once
#include <cstddef>

namespace kiln::cuda_on_cpu::shadow {

void block_begin(int warps);  // a block starts: no buffers, epochs reset
void add_buffer(void* p, size_t n, const char* name);
void block_end();
void barrier();           // __syncthreads released: the block's interval ends
void warp_barrier(int w); // __syncwarp released in warp w
// An access made by the runtime on the running thread's behalf (cp.async landing, ldmatrix rows).
void note(const void* p, size_t n, bool write);
// Whether any translation unit of this binary was built with the hooks (GCC, not under ASan).
bool instrumented();

}  // namespace kiln::cuda_on_cpu::shadow
