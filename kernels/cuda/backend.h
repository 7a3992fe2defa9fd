// The CUDA backend's kernel entry points, called by the op layer through KILN_DISPATCH with exactly
// the signatures of the CPU backend (kernels/cpu/*.h): pointers are device pointers on the current
// device, work is queued on compute_stream(current device) and is asynchronous unless noted. Same
// math as the CPU (kernels/common/, engine/core/philox.h), so random draws agree bit for bit.
// The NN kernels (conv, pool, batch norm, softmax, losses, dropout) are declared in nn_backend.h,
// included here so the op layer's KILN_DISPATCH finds them. The fused optimizer updates are called
// by engine/optim directly (no CPU twin in kernels/cpu: the CPU loop lives in sgd.cpp / adamw.cpp).
// STATUS: sgd_fused / adamw_fused compiled for sm_80/sm_90, never run on a GPU yet
// (tests/cuda/test_cuda_optim.cpp checks them against the CPU loop when one is present).
#pragma once
#include <cstddef>
#include <cstdint>

#include "engine/core/dtype.h"
#include "kernels/common/elementwise_math.h"
#include "kernels/common/reduce_op.h"
#include "kernels/common/strided.h"
#include "kernels/common/update_rules.h"
#include "kernels/cuda/nn_backend.h"

namespace kiln::cuda {

// ---- elementwise (elementwise.cu) -- as kernels/cpu/elementwise.h ----
void copy(const LoopShape& shape, StridedOperand dst, StridedOperand src);  // any dtype pair
void fill(const LoopShape& shape, StridedOperand dst, double value);
void unary(UnaryOp op, const LoopShape& shape, StridedOperand out, StridedOperand in, double a, double b);
void binary(BinaryOp op, const LoopShape& shape, StridedOperand out, StridedOperand x, StridedOperand y, double a);
void where(const LoopShape& shape, StridedOperand out, StridedOperand cond, StridedOperand x, StridedOperand y);
void random_fill(void* out, DType dt, int64_t n, int kind, double lo, double hi, uint64_t seed, uint64_t offset);

// ---- reductions (reduce.cu) -- as kernels/cpu/reduce.h ----
void reduce_rows(ReduceOp op, DType dt, const void* x, int64_t rows, int64_t cols, void* out, int64_t* indices);

// ---- GEMM (matmul.cpp, cuBLAS) -- as kernels/cpu/matmul.h ----
void gemm_strided(DType dt, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, double alpha, const void* A,
                  int64_t lda, int64_t stride_a, const void* B, int64_t ldb, int64_t stride_b, double beta, void* C,
                  int64_t ldc, int64_t stride_c, int64_t batch);

// ---- fused optimizer updates (optim_update.cu) -- the per-element rules of update_rules.h ----
// In place over n contiguous f32 elements of one parameter tensor, one kernel launch each.
// momentum_buffer may be nullptr when h.momentum == 0 (the rule does not touch it).
void sgd_fused(float* p, const float* g, float* momentum_buffer, int64_t n, bool first_step,
               const optim::SgdParams& h);
void adamw_fused(float* p, const float* g, float* exp_avg, float* exp_avg_sq, int64_t n,
                 const optim::AdamWParams& h);

}  // namespace kiln::cuda
