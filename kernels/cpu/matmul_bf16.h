// bf16 batched matmul on the CPU's matrix units through oneDNN's matmul primitive (AMX tiles or
// AVX512-BF16, bf16_path.h): C[b] = op(A[b]) op(B[b]) with bf16 A, B, C, f32 accumulation, the result
// rounded once to bf16. It serves linear and matmul forward, input gradient and weight gradient (the op
// layer, engine/ops/matmul.cpp, expresses each as one product with transpose flags). A and B are given
// in kiln's row-major (optionally transposed) layout with their leading dimensions; oneDNN reads them as
// strided memory, so no reorder exists; oneDNN's own scratchpad (its copies of A / B into its blocked
// panels, scratchpad_mode::user) is carved out of ONE caller-provided workspace of
// matmul_bf16_workspace_bytes(d) bytes, allocated by kiln (tagged `temporary`) and identically on the
// meta device. The size comes from oneDNN's primitive descriptor: it depends on the ISA and the thread
// count, never a constant. Primitives are cached per (desc, threads, path). Kernels never allocate tensors.
// Which products take this path: matmul_bf16_uses_onednn (a measured rule, docs/cpu-bf16.md); the rest
// stays on kernels/cpu/matmul.cpp's f32 staging.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "engine/core/half.h"

namespace kiln::cpu {

// C (batch, M, N), dense row-major (ldc N, batch stride M*N); A is (M, K) or, trans_a, stored (K, M) with
// leading dimension lda; B is (K, N) or, trans_b, stored (N, K) with ldb. stride_a / stride_b: the
// elements between batches, 0 to broadcast one matrix over the batch.
struct MatmulBf16Desc {
  int64_t batch = 1, M = 0, N = 0, K = 0;
  bool trans_a = false, trans_b = false;
  int64_t lda = 0, ldb = 0, stride_a = 0, stride_b = 0;
};

// "(batch 1) A (16, 3136) x B^T (128, 3136) -> C (16, 128)": for errors and test output.
std::string matmul_bf16_desc_str(const MatmulBf16Desc& d);

// The measured rule's smallest product (M*N*K per matrix) that takes oneDNN: 65536 at 1 thread, 2^20 above
// (cpu::num_threads(); matmul_bf16.cpp, docs/cpu-bf16.md).
int64_t matmul_bf16_min_macs();
// True when this product runs on oneDNN: bf16_path() is an onednn one, M*N*K >= matmul_bf16_min_macs() and not
// both operands broadcast over a batch.
bool matmul_bf16_uses_onednn(const MatmulBf16Desc& d);

// Workspace bytes (oneDNN's scratchpad, plus 64 so any base address works). For any product with M, N, K >= 1
// on a oneDNN path (the rule is the op's choice: tests run small products through the kernel directly).
size_t matmul_bf16_workspace_bytes(const MatmulBf16Desc& d);

// A, B as described -> C (batch, M, N), overwritten.
void matmul_bf16(const MatmulBf16Desc& d, const bfloat16* A, const bfloat16* B, bfloat16* C, void* workspace);

// oneDNN's implementation name ("brg:avx512_core_bf16", ...): tests print it.
const char* matmul_bf16_impl_name(const MatmulBf16Desc& d);

}  // namespace kiln::cpu
