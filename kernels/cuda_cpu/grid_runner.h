// CPU execution mode for kiln's own CUDA kernels (library kiln_cuda_cpu): runs a launch's blocks one
// after another on the calling thread, each block's threads as cooperatively scheduled fibers
// (ucontext), switching only at __syncthreads, warp collectives and exit. What a GPU would do
// nondeterministically, or hang on, is an error here naming the kernel, block and thread: barrier
// divergence, a warp collective with lanes missing, a spin-wait on another block, launch limits.
// Must not include engine/ops; only the CPU-mode build (KILN_CUDA_ON_CPU) includes it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "kernels/cuda_cpu/cuda_types.h"

namespace kiln::cuda_on_cpu {

// Where the running simulated GPU thread is.
struct ThreadPos {
  uint3 tid;
  uint3 bid;
  dim3 block;
  dim3 grid;
  int linear;  // threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z)
};
extern thread_local const ThreadPos* g_pos;  // the running fiber's, nullptr outside a kernel

// Runs `body` once per thread of every block (body calls the kernel). Throws kiln::Error naming the
// kernel on a launch-limit violation or a fault found while it ran.
void run_grid(const char* name, const void* kernel, dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
              const std::function<void()>& body);

// Block-wide barrier; `file:line` identifies the call site (different sites = divergence).
void sync_block(const char* file, int line);
// Warp-wide rendezvous of the lanes in `mask` (all of them must arrive); then `exchange` runs with
// every lane's 16-byte value (lanes outside the mask: undefined, here zero).
void sync_warp(unsigned mask, const char* what);
// Collective gather: publishes `mine` (<= 16 bytes), waits for the lanes in mask, returns the warp's
// 32 slots (16 bytes apart; valid until this lane's next collective).
const unsigned char* warp_gather(unsigned mask, const void* mine, size_t bytes, const char* what);
// Collective exchange: publishes `mine` (<= 16 bytes), waits for the lanes in mask, returns a
// pointer to lane `src`'s published bytes (valid until this lane's next collective).
const void* warp_exchange(unsigned mask, const void* mine, size_t bytes, int src, const char* what);
// Counts a spin-loop step (atomics, fences, sleeps); too many in one thread is a spin on another block.
void count_spin(const char* what);
// Ends the kernel with an error (never returns to the kernel).
[[noreturn]] void fault(std::string&& msg);

// Shared memory of the running block: one buffer per KILN_SHARED declaration (exact size, so
// AddressSanitizer sees an overrun), and the launch's dynamic buffer. Filled with 0xff (NaN for floats)
// at block start.
void* static_shared_bytes(const void* site, size_t bytes, const char* name);
void* dynamic_shared_bytes();
size_t dynamic_shared_size();
template <typename T>
T* static_shared(const void* site, size_t n, const char* name) {
  return static_cast<T*>(static_shared_bytes(site, n * sizeof(T), name));
}
template <typename T>
T* dynamic_shared() {
  return static_cast<T*>(dynamic_shared_bytes());
}

// __launch_bounds__ of each kernel (by name), registered from the table generated from the sources'
// KILN_KERNEL_BOUNDS; a launch of a kernel with no entry is an error.
bool register_kernel_bounds(const char* name, int max_threads);
cudaError_t set_max_dynamic_shared(const void* kernel, int bytes);

// Whether the shared-memory race and uninitialised-read checks run in this binary (shadow.h: GCC
// builds; not the ASan build).
bool shadow_checks_on();

// Launches and fibre switches so far (tests report them).
struct RunStats {
  int64_t launches = 0, blocks = 0, threads = 0, switches = 0;
};
RunStats run_stats();

// Launch geometry as tests see it: the most blocks (grid.x * grid.y * grid.z) of any launch of the
// kernel `name` since the last clear_launch_geometry() (0: not launched). A test that a kernel
// spreads its work over the grid (not one block over everything) reads it.
int64_t most_blocks_launched(const std::string& name);
void clear_launch_geometry();

}  // namespace kiln::cuda_on_cpu
