// CPU execution mode: host bodies of the inline-PTX instructions kiln's Tensor Core GEMM uses
// (kernels/cuda/hgemm_tile.h), written from the PTX ISA, not from kiln's own fragment maps
// (kernels/common/tile_mma.h), so a wrong map there shows up as a wrong product here:
//  - cp.async.cg.shared.global 16 bytes: recorded per thread and performed only when a
//    cp.async.wait_group retires its group, so a wrong wait count reads stale shared memory (and the
//    late write is a race in the shadow check);
//  - ldmatrix.sync.aligned.m8n8.x4[.trans].shared.b16: lanes 8j..8j+7 give the row addresses of
//    matrix j; lane l receives row l/4, elements 2(l%4), 2(l%4)+1 of each (transposed with .trans);
//  - mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 with the ISA's fragment layout (groupID = l/4,
//    threadID_in_group = l%4).
// Shared addresses are offsets into the running block's dynamic shared memory.
#pragma once
#include <cstddef>
#include <cstdint>

namespace kiln::cuda_on_cpu {

uint32_t ptx_shared_address(const void* p);  // __cvta_generic_to_shared
void ptx_cp_async16(uint32_t dst, const void* src, int src_bytes);
void ptx_cp_async_commit();
void ptx_cp_async_wait(int n);
void ptx_ldmatrix_x4(uint32_t (&r)[4], uint32_t addr, bool trans);
void ptx_mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);

// Called by the grid runner at each block's start (forgets copies still in flight).
void ptx_block_begin(int threads);

}  // namespace kiln::cuda_on_cpu
