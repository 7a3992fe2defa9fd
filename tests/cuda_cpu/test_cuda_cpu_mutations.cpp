// Mutation tests of the CPU execution mode: each fault the mode must expose is planted in a small
// kernel (the faulty variant of a correct pattern kiln's kernels use), and the harness must reject it
// with an error naming the kernel and the fault, never hang or pass. The correct variant of each
// runs clean, so a test fails if the harness rejects good code too.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "kernels/cuda_cpu/prelude.h"
#include "kernels/cuda/kernel_launch.h"
#include "kernels/cuda_cpu/ptx_host.h"

namespace {

using kiln::cuda_on_cpu::launch_kernel;
using kiln::cuda_on_cpu::register_kernel_bounds;

// A block-wide sum through shared memory, as kernels/cuda/launch.cuh's block_sum: MUTATE picks the
// planted fault.
enum class Fault { none, divergent_barrier, skipped_barrier_exit };

template <Fault F>
__global__ void KILN_KERNEL_BOUNDS(64) barrier_kernel(const float* x, float* out) {
  KILN_SHARED(float, s, 64);
  const int t = threadIdx.x;
  s[t] = x[t];
  if (F == Fault::divergent_barrier) {
    if (t != 5) __syncthreads();  // thread 5 skips the barrier the others wait at
  } else if (F == Fault::skipped_barrier_exit) {
    if (t >= 32) return;  // whole warps exit: counts as arrived (sm_70+), correct here
    __syncthreads();
  } else {
    __syncthreads();
  }
  if (t == 0) {
    float sum = 0.f;
    for (int i = 0; i < (F == Fault::skipped_barrier_exit ? 32 : 64); ++i) sum += s[i];
    out[0] = sum;
  }
  __syncthreads();
}

template <bool MISSING>
__global__ void KILN_KERNEL_BOUNDS(64) warp_sum_kernel(const float* x, float* out) {
  float v = x[threadIdx.x];
  if (MISSING && threadIdx.x == 3) return;  // lane 3 leaves before the full-mask shuffle
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0) out[threadIdx.x >> 5] = v;
}

// Block 1 publishes a flag that block 0 spins on: blocks run one after another (as they may on a GPU
// with one SM free), so this is a deadlock; the last-block pattern or two launches is the fix.
__global__ void KILN_KERNEL_BOUNDS(32) spin_kernel(int* flag) {
  if (blockIdx.x == 0) {
    if (threadIdx.x == 0)
      while (atomicAdd(flag, 0) == 0) {
      }
  } else if (threadIdx.x == 0) {
    atomicExch(flag, 1);
  }
}

__global__ void KILN_KERNEL_BOUNDS(64) plain_kernel(float* out) { out[blockIdx.y * 64 + threadIdx.x] = 1.f; }

__global__ void KILN_KERNEL_BOUNDS(32) dyn_kernel(float* out) {
  KILN_DYNAMIC_SHARED(float, d);
  d[threadIdx.x] = (float)threadIdx.x;
  __syncthreads();
  out[threadIdx.x] = d[31 - threadIdx.x];
}

__global__ void no_bounds_kernel(float* out) { out[0] = 1.f; }

const bool registered = register_kernel_bounds("barrier_kernel", 64) && register_kernel_bounds("warp_sum_kernel", 64) &&
                        register_kernel_bounds("spin_kernel", 32) && register_kernel_bounds("plain_kernel", 64) &&
                        register_kernel_bounds("dyn_kernel", 32);

std::string launch_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const kiln::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("CPU mode mutation: a thread that skips a __syncthreads others reach is barrier divergence") {
  REQUIRE(registered);
  std::vector<float> x(64, 1.f), out(1, 0.f);
  launch_kernel("barrier_kernel", barrier_kernel<Fault::none>, 1, 64, 0, nullptr, x.data(), out.data());
  CHECK(out[0] == 64.f);
  launch_kernel("barrier_kernel", barrier_kernel<Fault::skipped_barrier_exit>, 1, 64, 0, nullptr, x.data(), out.data());
  CHECK(out[0] == 32.f);  // exited threads count as arrived
  const std::string e = launch_error([&] {
    launch_kernel("barrier_kernel", barrier_kernel<Fault::divergent_barrier>, 1, 64, 0, nullptr, x.data(), out.data());
  });
  MESSAGE(e);
  CHECK(e.find("barrier_kernel") != std::string::npos);
  CHECK(e.find("barrier divergence") != std::string::npos);
  CHECK(e.find("thread (5, 0, 0)") != std::string::npos);
}

TEST_CASE("CPU mode mutation: a full-mask warp shuffle with a lane that has exited is an error") {
  std::vector<float> x(64), out(2, 0.f);
  for (int i = 0; i < 64; ++i) x[i] = (float)i;
  launch_kernel("warp_sum_kernel", warp_sum_kernel<false>, 1, 64, 0, nullptr, x.data(), out.data());
  CHECK(out[0] == 496.f);
  CHECK(out[1] == 1520.f);
  const std::string e = launch_error(
      [&] { launch_kernel("warp_sum_kernel", warp_sum_kernel<true>, 1, 64, 0, nullptr, x.data(), out.data()); });
  MESSAGE(e);
  CHECK(e.find("warp_sum_kernel") != std::string::npos);
  CHECK(e.find("lane 3, which has exited") != std::string::npos);
}

TEST_CASE("CPU mode mutation: a full-mask shuffle in a partial warp names lanes that do not exist") {
  std::vector<float> x(64, 1.f), out(2, 0.f);
  // 48 threads: warp 1 has lanes 0..15 only, and the full mask names lanes 16..31 too.
  const std::string e = launch_error(
      [&] { launch_kernel("warp_sum_kernel", warp_sum_kernel<false>, 1, 48, 0, nullptr, x.data(), out.data()); });
  MESSAGE(e);
  CHECK(e.find("names lane 16, which does not exist (the block has 48 threads)") != std::string::npos);
}

TEST_CASE("CPU mode mutation: a spin-wait on another block is reported, not a hang") {
  int flag = 0;
  const std::string e = launch_error([&] { launch_kernel("spin_kernel", spin_kernel, 2, 32, 0, nullptr, &flag); });
  MESSAGE(e);
  CHECK(e.find("spin_kernel") != std::string::npos);
  CHECK(e.find("spin-wait on another block") != std::string::npos);
}

TEST_CASE("CPU mode mutation: launch limits (launch bounds, grid.y, dynamic shared memory, no bounds stated)") {
  std::vector<float> out(2 * 64, 0.f);
  launch_kernel("plain_kernel", plain_kernel, dim3(1, 2), 64, 0, nullptr, out.data());
  CHECK(out[127] == 1.f);
  std::string e = launch_error([&] { launch_kernel("plain_kernel", plain_kernel, 1, 128, 0, nullptr, out.data()); });
  CHECK(e.find("plain_kernel: 128 threads per block, its __launch_bounds__ allows 64") != std::string::npos);
  e = launch_error([&] { launch_kernel("plain_kernel", plain_kernel, dim3(1, 70000), 64, 0, nullptr, out.data()); });
  CHECK(e.find("plain_kernel: grid (1, 70000, 1)") != std::string::npos);
  e = launch_error([&] { launch_kernel("plain_kernel", plain_kernel, 1, 2048, 0, nullptr, out.data()); });
  CHECK(e.find("is not 1..1024 threads") != std::string::npos);
  e = launch_error([&] { launch_kernel("no_bounds_kernel", no_bounds_kernel, 1, 1, 0, nullptr, out.data()); });
  CHECK(e.find("no_bounds_kernel: the kernel states no KILN_KERNEL_BOUNDS") != std::string::npos);
  // Dynamic shared memory: within 48 KiB needs no opt-in; above needs cudaFuncSetAttribute.
  launch_kernel("dyn_kernel", dyn_kernel, 1, 32, 32 * sizeof(float), nullptr, out.data());
  CHECK(out[0] == 31.f);
  e = launch_error([&] { launch_kernel("dyn_kernel", dyn_kernel, 1, 32, 64 * 1024, nullptr, out.data()); });
  CHECK(e.find("dyn_kernel: 65536 bytes of dynamic shared memory, the kernel opted in to 49152") != std::string::npos);
  REQUIRE(cudaFuncSetAttribute(dyn_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, 64 * 1024) == cudaSuccess);
  launch_kernel("dyn_kernel", dyn_kernel, 1, 32, 64 * 1024, nullptr, out.data());
  CHECK(out[1] == 30.f);
}

// ---- shared-memory races and uninitialised reads (kernels/cuda_cpu/shadow.h) ----
namespace {

enum class Smem { none, removed_barrier_raw, removed_barrier_war, waw, uninit };

template <Smem F>
__global__ void KILN_KERNEL_BOUNDS(64) smem_kernel(const float* x, float* out) {
  KILN_SHARED(float, s, 64);
  const int t = threadIdx.x;
  if (F == Smem::waw) {
    s[0] = (float)t;  // every thread writes the same word in one interval
    __syncthreads();
    out[t] = s[0];
    return;
  }
  if (F != Smem::uninit || t != 7) s[t] = x[t];  // uninit: nobody writes s[7]
  if (F != Smem::removed_barrier_raw) __syncthreads();
  // raw: thread t reads what thread t-1 just wrote; war: thread t reads s[t + 1] before thread t + 1 writes it
  const float v = F == Smem::removed_barrier_war ? s[(t + 1) % 64] : t > 0 ? s[t - 1] : 0.f;
  if (F != Smem::removed_barrier_war) __syncthreads();
  s[t] = 2.f * v;  // war: thread t overwrites s[t] that thread t+1 read in this interval
  __syncthreads();
  out[t] = s[t];
}

const bool registered_smem = register_kernel_bounds("smem_kernel", 64);

template <Smem F>
std::string run_smem() {
  std::vector<float> x(64, 1.f), out(64, 0.f);
  return launch_error([&] { launch_kernel("smem_kernel", smem_kernel<F>, 1, 64, 0, nullptr, x.data(), out.data()); });
}

}  // namespace

TEST_CASE("CPU mode mutation: shared-memory races (removed barrier RAW, WAR, WAW) and uninitialised reads") {
  REQUIRE(registered_smem);
#if defined(KILN_CUDA_CPU_SHADOW)
  REQUIRE(kiln::cuda_on_cpu::shadow_checks_on());
  CHECK(run_smem<Smem::none>().empty());
  const std::string raw = run_smem<Smem::removed_barrier_raw>(), war = run_smem<Smem::removed_barrier_war>(),
                    waw = run_smem<Smem::waw>(), uninit = run_smem<Smem::uninit>();
  MESSAGE(raw);
  MESSAGE(war);
  MESSAGE(waw);
  MESSAGE(uninit);
  CHECK(raw.find("shared-memory race (read after write): thread (1, 0, 0) reads s byte 0 that thread (0, 0, 0) wrote") !=
        std::string::npos);
  CHECK(war.find("shared-memory race (write after read)") != std::string::npos);
  CHECK(war.find("thread (1, 0, 0) writes s byte 4 that thread (0, 0, 0) read") != std::string::npos);
  CHECK(waw.find("shared-memory race (write after write)") != std::string::npos);
  CHECK(uninit.find("uninitialised shared-memory read: thread (8, 0, 0) reads s byte 28") != std::string::npos);
#else
  MESSAGE("shared-memory race checks skipped: this build has no -fsanitize=thread hooks (the sanitizer build; "
          "it checks out-of-bounds shared accesses with ASan instead)");
  CHECK(run_smem<Smem::none>().empty());
#endif
}

// ---- cp.async: a wait_group count one too high (the GEMM pipeline's fault) -------------------------
namespace {

// 32 threads, two stages of 128 floats: each thread copies its 16-byte chunk of both stages with
// cp.async (one commit group per stage), waits, and after the barrier reads its neighbour's chunk of
// stage 0. WAIT = 1 retires stage 0 (correct); WAIT = 2 retires nothing, so the read sees the old
// contents and the copy lands later, over a chunk another thread has read (a write after read).
template <int WAIT>
__global__ void KILN_KERNEL_BOUNDS(32) cp_async_kernel(const float* g, float* out) {
  KILN_DYNAMIC_SHARED(float, s);
  const int t = threadIdx.x;
  for (int i = 0; i < 4; ++i) s[4 * t + i] = -1.f;  // the previous contents of stage 0
  __syncthreads();
  for (int stage = 0; stage < 2; ++stage) {
    kiln::cuda_on_cpu::ptx_cp_async16(kiln::cuda_on_cpu::ptx_shared_address(s + stage * 128 + 4 * t),
                                      g + stage * 128 + 4 * t, 16);
    kiln::cuda_on_cpu::ptx_cp_async_commit();
  }
  kiln::cuda_on_cpu::ptx_cp_async_wait(WAIT);
  __syncthreads();
  const float v = s[(4 * t + 4) % 128];
  kiln::cuda_on_cpu::ptx_cp_async_wait(0);
  out[t] = v;
}

const bool registered_cp = register_kernel_bounds("cp_async_kernel", 32);

}  // namespace

TEST_CASE("CPU mode mutation: a cp.async wait_group count one too high reads stale shared memory") {
  REQUIRE(registered_cp);
  alignas(16) float g[256];
  for (int i = 0; i < 256; ++i) g[i] = (float)i;
  std::vector<float> out(32, 0.f);
  launch_kernel("cp_async_kernel", cp_async_kernel<1>, 1, 32, 256 * sizeof(float), nullptr, g, out.data());
  CHECK(out[0] == 4.f);
  CHECK(out[31] == 0.f);
  const std::string e = launch_error(
      [&] { launch_kernel("cp_async_kernel", cp_async_kernel<2>, 1, 32, 256 * sizeof(float), nullptr, g, out.data()); });
#if defined(KILN_CUDA_CPU_SHADOW)
  MESSAGE(e);
  CHECK(e.find("cp_async_kernel") != std::string::npos);
  CHECK(e.find("shared-memory race (write after read)") != std::string::npos);
#else
  CHECK(e.empty());
  CHECK(out[0] == -1.f);  // stale: the copy had not landed when it was read
#endif
}

// ---- __syncwarp orders shared memory within a warp only ---------------------------------------------
namespace {

// Lane l writes s[l], then (SYNC: after __syncwarp) reads s[l ^ 1] of its own warp.
template <bool SYNC>
__global__ void KILN_KERNEL_BOUNDS(32) warp_sync_kernel(float* out) {
  KILN_SHARED(float, s, 32);
  const int l = threadIdx.x;
  s[l] = -1.f;
  __syncthreads();
  s[l] = (float)l;
  if (SYNC) __syncwarp();
  out[l] = s[l ^ 1];
}

const bool registered_ws = register_kernel_bounds("warp_sync_kernel", 32);

}  // namespace

TEST_CASE("CPU mode mutation: a removed __syncwarp between lanes' shared writes and reads is a race") {
  REQUIRE(registered_ws);
  std::vector<float> out(32, 0.f);
#if defined(KILN_CUDA_CPU_SHADOW)
  // Without the __syncwarp lane 0 reads s[1] and lane 1 then overwrites it (lanes run in order here; the
  // other order would be a read after write): a race either way.
  const std::string e = launch_error([&] { launch_kernel("warp_sync_kernel", warp_sync_kernel<false>, 1, 32, 0, nullptr, out.data()); });
  MESSAGE(e);
  CHECK(e.find("shared-memory race (write after read): thread (1, 0, 0) writes s byte 4 that thread (0, 0, 0) read") !=
        std::string::npos);
#endif
  CHECK(launch_error([&] { launch_kernel("warp_sync_kernel", warp_sync_kernel<true>, 1, 32, 0, nullptr, out.data()); }).empty());
  CHECK(out[0] == 1.f);
  CHECK(out[31] == 30.f);
}
