// The tiled FP16 Tensor Core GEMM kernel shared by kiln's hgemm and implicit-GEMM convolution:
// mma.sync.aligned.m16n8k16 (f16 x f16 -> f32) via inline PTX, ldmatrix.x4 from XOR-swizzled
// shared memory, and a STAGES-deep cp.async global->shared pipeline (sm_80 and later). A problem
// type P (tile::GemmProblem, tile::ConvFprop, ...) says where each operand element lives; all
// index math comes from kernels/common/tile_*.h (tested on the CPU). Device code: include from
// .cu files only.
//
// Block: BM x BN = 128 x 128 of C, 8 warps (2 x 4), each a 64 x 32 warp tile = 4 x 4 mma tiles;
// K steps of BK = 32 (two k16 mma steps per stage). Shared memory per stage: A tile 128 x 32 and
// B tile 32 x 128 halves (16 KiB), 4 stages = 64 KiB (dynamic, opted in above 48 KiB).
#pragma once
#if !defined(__CUDACC__) && !defined(KILN_CUDA_ON_CPU)
#error "hgemm_tile.h holds device code: include it from .cu files only (or the CPU execution mode)"
#endif
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/common/tile_grid.h"
#include "kernels/common/tile_mma.h"
#include "kernels/common/tile_smem.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/kernel_launch.h"
#if defined(KILN_CUDA_ON_CPU)
#include "kernels/cuda_cpu/ptx_host.h"
#endif

namespace kiln::cuda::tc {

using tile::Layout;
using Tile = tile::TileShape;

constexpr bool km_layout(Layout l) { return l == Layout::km || l == Layout::kn; }
// Stored rows x cols (halves) of an operand tile: outer = BM (A) or BN (B) by BK.
template <Layout L, int OUTER> struct OperandTile {
  static constexpr int ROWS = km_layout(L) ? Tile::BK : OUTER;
  static constexpr int COLS = km_layout(L) ? OUTER : Tile::BK;
  static constexpr int ELEMS = ROWS * COLS;
  static constexpr int ROUNDS = ELEMS / tile::kChunkHalves / Tile::THREADS;
  static_assert(ROUNDS * tile::kChunkHalves * Tile::THREADS == ELEMS, "tile must split evenly over threads");
};
constexpr int kSmemBytes = Tile::STAGES * (Tile::BM + Tile::BN) * Tile::BK * 2;

// ---- PTX wrappers -----------------------------------------------------------------------------
#if defined(KILN_CUDA_ON_CPU)
// The CPU execution mode's host bodies (kernels/cuda_cpu/ptx_host.h), same contracts as below.
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return ::kiln::cuda_on_cpu::ptx_shared_address(p); }
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
  ::kiln::cuda_on_cpu::ptx_cp_async16(dst, src, src_bytes);
}
__device__ __forceinline__ void cp_async_commit() { ::kiln::cuda_on_cpu::ptx_cp_async_commit(); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { ::kiln::cuda_on_cpu::ptx_cp_async_wait(N); }
template <bool TRANS>
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) { ::kiln::cuda_on_cpu::ptx_ldmatrix_x4(r, addr, TRANS); }
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  ::kiln::cuda_on_cpu::ptx_mma_m16n8k16(d, a, b0, b1);
}
#else
__device__ __forceinline__ uint32_t smem_u32(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

// 16-byte global->shared copy of src_bytes (16) bytes, the rest zero-filled; .cg: bypass L1.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

template <bool TRANS>
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
  if constexpr (TRANS)
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
  else
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// D = A(16x16) B(16x8) + D, f16 inputs, f32 accumulators (fragments as in tile_mma.h).
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
               "{%0,%1,%2,%3};\n"
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

#endif

template <Layout L>
__device__ __forceinline__ tile::LdsmAddr ldsm_addr(int lane) {
  if constexpr (L == Layout::mk) return tile::ldsm_a_mk(lane);
  else if constexpr (L == Layout::km) return tile::ldsm_a_km(lane);
  else if constexpr (L == Layout::kn) return tile::ldsm_b_kn(lane);
  else return tile::ldsm_b_nk(lane);
}

template <class T> __device__ __forceinline__ T from_f32(float v);
template <> __device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_f32<__half>(float v) { return __float2half_rn(v); }
__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__half v) { return __half2float(v); }

// ---- global -> shared: one operand tile of one stage ------------------------------------------
// Thread tid copies its ROUNDS chunks (tile::copy_chunk) into swizzled positions: a 16-byte
// cp.async for whole in-range chunks, a 16-byte zero store outside the problem or in padding,
// and 8 guarded element loads + one 16-byte shared store at ragged or unaligned edges. The plain
// stores are ordered by the __syncthreads that precedes every read of the stage.
template <class P, Layout L, bool IS_A>
__device__ __forceinline__ void load_tile(const P& p, const __half* g, __half* s, long long outer0, long long k0,
                                          int tid) {
  using OT = OperandTile<L, IS_A ? Tile::BM : Tile::BN>;
#pragma unroll
  for (int round = 0; round < OT::ROUNDS; ++round) {
    const tile::ChunkPos c = tile::copy_chunk(tid, round, OT::COLS, Tile::THREADS);
    __half* dst = s + tile::swizzled_offset(c.row, c.chunk * tile::kChunkHalves, OT::COLS);
    const tile::ChunkLoad ld = tile::chunk_load(p, IS_A, L, outer0, k0, c.row, c.chunk * tile::kChunkHalves);
    if (ld.kind == tile::ChunkKind::vector) {
      cp_async16(smem_u32(dst), g + ld.offset, 16);
    } else if (ld.kind == tile::ChunkKind::zero) {
      // A plain store, not a zero-filling cp.async: g itself need not be 16-byte aligned.
      *reinterpret_cast<uint4*>(dst) = make_uint4(0u, 0u, 0u, 0u);
    } else {
      const unsigned short* gs = reinterpret_cast<const unsigned short*>(g);
      union { unsigned short h[8]; uint4 v; } u;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const long long off = tile::chunk_element_offset(p, IS_A, L, outer0, k0, c.row, c.chunk * 8, e);
        u.h[e] = off >= 0 ? gs[off] : (unsigned short)0;
      }
      *reinterpret_cast<uint4*>(dst) = u.v;
    }
  }
}

// ---- the kernel --------------------------------------------------------------------------------
// grid: (tiles_m * tiles_n, splits). C = alpha * A B + beta * C through p.c_offset; with split-K
// (partial != nullptr) split z writes its raw f32 sums to partial[z][m][n] instead (M x N dense)
// and splitk_reduce finishes.
template <class P, Layout LA, Layout LB, class OutT>
__global__ void KILN_KERNEL_BOUNDS(Tile::THREADS)
    tc_gemm_kernel(P p, const __half* __restrict__ A, const __half* __restrict__ B, OutT* C, float alpha, float beta,
                   float* partial, int splits) {
#if (defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800) || defined(KILN_CUDA_ON_CPU)
  using TA = OperandTile<LA, Tile::BM>;
  using TB = OperandTile<LB, Tile::BN>;
  KILN_DYNAMIC_SHARED(unsigned char, smem_raw);
  __half* sA = reinterpret_cast<__half*>(smem_raw);  // [STAGES][TA::ELEMS]
  __half* sB = sA + Tile::STAGES * TA::ELEMS;         // [STAGES][TB::ELEMS]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;

  const long long tiles_m = tile::ceil_div(p.M, Tile::BM), tiles_n = tile::ceil_div(p.N, Tile::BN);
  const tile::TileIdx bt = tile::block_tile(blockIdx.x, tiles_m, tiles_n, Tile::GROUP_M);
  const long long m0 = bt.tm * Tile::BM, n0 = bt.tn * Tile::BN;
  const tile::Range kr = tile::split_k_range(tile::ceil_div(p.K, Tile::BK), splits, blockIdx.y);
  const long long nk = kr.end - kr.begin;
  const tile::RowCol wo = tile::warp_origin(warp, Tile::WARPS_N, Tile::WM, Tile::WN);

  float acc[Tile::MI][Tile::NI][4];
#pragma unroll
  for (int i = 0; i < Tile::MI; ++i)
#pragma unroll
    for (int j = 0; j < Tile::NI; ++j)
#pragma unroll
      for (int r = 0; r < 4; ++r) acc[i][j][r] = 0.f;

  auto load_stage = [&](int stage, long long kt) {
    load_tile<P, LA, true>(p, A, sA + stage * TA::ELEMS, m0, kt * Tile::BK, tid);
    load_tile<P, LB, false>(p, B, sB + stage * TB::ELEMS, n0, kt * Tile::BK, tid);
  };
  // Prologue: STAGES-1 tiles in flight (one commit group each, empty groups past the end).
#pragma unroll
  for (int s = 0; s < Tile::STAGES - 1; ++s) {
    if (s < nk) load_stage(s, kr.begin + s);
    cp_async_commit();
  }

  const tile::LdsmAddr la = ldsm_addr<LA>(lane), lb = ldsm_addr<LB>(lane);
  for (long long i = 0; i < nk; ++i) {
    cp_async_wait<Tile::STAGES - 2>();  // groups 0..i landed (this thread's)
    __syncthreads();                    // ... and every thread's; stage (i-1)%STAGES is free again
    const long long next = i + Tile::STAGES - 1;
    if (next < nk) load_stage((int)(next % Tile::STAGES), kr.begin + next);
    cp_async_commit();

    const __half* a = sA + (int)(i % Tile::STAGES) * TA::ELEMS;
    const __half* b = sB + (int)(i % Tile::STAGES) * TB::ELEMS;
#pragma unroll
    for (int ks = 0; ks < Tile::BK / 16; ++ks) {
      uint32_t af[Tile::MI][4], bf[Tile::NI / 2][4];
#pragma unroll
      for (int mi = 0; mi < Tile::MI; ++mi) {
        const int mo = wo.row + mi * 16;  // 16x16 block at (m = mo, k = 16 ks)
        const int row = (km_layout(LA) ? ks * 16 : mo) + la.row;
        const int chunk = (km_layout(LA) ? mo / 8 : ks * 2) + la.chunk;
        ldsm_x4<km_layout(LA)>(af[mi], smem_u32(a + tile::swizzled_offset(row, chunk * 8, TA::COLS)));
      }
#pragma unroll
      for (int np = 0; np < Tile::NI / 2; ++np) {
        const int no = wo.col + np * 16;  // two n8 blocks at n = no, no + 8
        const int row = (km_layout(LB) ? ks * 16 : no) + lb.row;
        const int chunk = (km_layout(LB) ? no / 8 : ks * 2) + lb.chunk;
        ldsm_x4<km_layout(LB)>(bf[np], smem_u32(b + tile::swizzled_offset(row, chunk * 8, TB::COLS)));
      }
#pragma unroll
      for (int mi = 0; mi < Tile::MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < Tile::NI; ++ni)
          mma_16816(acc[mi][ni], af[mi], bf[ni / 2][2 * (ni & 1)], bf[ni / 2][2 * (ni & 1) + 1]);
    }
  }
  cp_async_wait<0>();

  // Epilogue: each accumulator register to its C element, ragged edges predicated.
#pragma unroll
  for (int mi = 0; mi < Tile::MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < Tile::NI; ++ni)
#pragma unroll
      for (int r = 0; r < 4; ++r) {
        const tile::RowCol c = tile::mma_c_coord(lane, r);
        const long long m = m0 + wo.row + mi * 16 + c.row, n = n0 + wo.col + ni * 8 + c.col;
        if (!tile::in_bounds(m, n, p.M, p.N)) continue;
        if (partial) {
          partial[((long long)blockIdx.y * p.M + m) * p.N + n] = acc[mi][ni][r];
        } else {
          const long long off = p.c_offset(m, n);
          float v = alpha * acc[mi][ni][r];
          if (beta != 0.f) v += beta * to_f32(C[off]);
          C[off] = from_f32<OutT>(v);
        }
      }
#else
  __trap();  // Tensor Core path needs sm_80+; the host never launches it below that
#endif
}

// Sums the split-K partials [splits][M][N] into C = alpha * sum + beta * C.
template <class P, class OutT>
__global__ void KILN_KERNEL_BOUNDS(256) splitk_reduce_kernel(P p, const float* __restrict__ partial, int splits, OutT* C, float alpha,
                                     float beta) {
  const long long mn = p.M * p.N;
  for (long long id = blockIdx.x * (long long)blockDim.x + threadIdx.x; id < mn;
       id += (long long)gridDim.x * blockDim.x) {
    float s = 0.f;
    for (int z = 0; z < splits; ++z) s += partial[z * mn + id];
    const long long off = p.c_offset(id / p.N, id % p.N);
    float v = alpha * s;
    if (beta != 0.f) v += beta * to_f32(C[off]);
    C[off] = from_f32<OutT>(v);
  }
}

// Host launch of C = alpha A B + beta C for problem p on `stream`. splits > 1 needs `partial`
// holding splits * M * N floats. `what` names the op in errors.
template <class P, Layout LA, Layout LB, class OutT>
void launch_tc_gemm(const P& p, const __half* A, const __half* B, OutT* C, float alpha, float beta, int splits,
                    float* partial, cudaStream_t stream, const char* what) {
  if (p.M <= 0 || p.N <= 0) return;
  auto kernel = tc_gemm_kernel<P, LA, LB, OutT>;
  KILN_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemBytes), what);
  const long long tiles = tile::ceil_div(p.M, Tile::BM) * tile::ceil_div(p.N, Tile::BN);
  if (splits < 1) splits = 1;
  launch_kernel("tc_gemm_kernel", kernel, dim3((unsigned)tiles, (unsigned)splits), Tile::THREADS, kSmemBytes, stream,
      p, A, B, C, alpha, beta, splits > 1 ? partial : nullptr, splits);
  KILN_CUDA_LAUNCH_CHECK(what);
  if (splits > 1) {
    const long long mn = p.M * p.N;
    long long blocks = (mn + 255) / 256;
    if (blocks > 4096) blocks = 4096;
    launch_kernel("splitk_reduce_kernel", splitk_reduce_kernel<P, OutT>, (unsigned)blocks, 256, 0, stream, p, partial, splits, C, alpha, beta);
    KILN_CUDA_LAUNCH_CHECK(what);
  }
}

// Whether the GPU can run the Tensor Core path (sm_80+); the host entry points check this.
bool device_supports_tc(int dev);

}  // namespace kiln::cuda::tc
