// Autocast: a thread-local mixed-precision region, PyTorch's torch.autocast rules.
// While enabled (AutocastGuard), the ops themselves pick their compute dtype:
//   - lower-precision list: conv2d, linear, matmul cast their floating f32 (and other 16-bit)
//     operands, weights included, to the autocast dtype (f16 by default) and run there (the CPU
//     and cuBLAS paths accumulate in f32);
//   - f32 list: softmax, log_softmax, cross_entropy, nll_loss, mse_loss, sum, mean upcast 16-bit
//     operands to f32 and return f32;
//   - batch_norm keeps its statistics and running stats in f32 and returns its input's dtype
//     (what PyTorch's cuDNN batch norm does under autocast); every other op follows its inputs.
// f64 operands are never cast. Master weights stay f32: the casts of leaf tensors that require
// grad (parameters) are cached for the lifetime of the outermost enabled region, allocated under
// MemoryTag::param_f16 (so reports show them apart from activations and master weights), kept
// alive by the autograd graph, and freed with it after backward.
// The rules are the same for both dtypes: f16 (`--amp`, with a loss scaler) and bf16 (`--amp bf16`, none), which
// is torch.autocast("cpu", dtype=torch.bfloat16)'s lower-precision list (conv, linear, matmul in bf16 with f32
// accumulation). kiln's f32 list is the stricter one on both: PyTorch 1.13's CPU autocast leaves softmax, sum and
// mean in bf16 and batch_norm's output in its input's dtype (as here), kiln computes softmax, log_softmax, losses
// and reductions of 16-bit tensors in f32 (tests/parity/test_parity_amp_bf16.cpp compares a model without them).
// Run backward outside the region (as PyTorch recommends); backward formulas are not autocast.
#pragma once
#include "engine/tensor/tensor.h"

namespace kiln {

bool autocast_enabled();
DType autocast_dtype();

// Sets the calling thread's autocast state for its lifetime and restores the previous state
// after; leaving the outermost enabled region drops the cached weight casts. dtype must be f16
// or bf16.
class AutocastGuard {
 public:
  explicit AutocastGuard(bool enabled = true, DType dtype = DType::f16);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  bool prev_enabled_;
  DType prev_dtype_;
};

namespace autocast_detail {

// Used by the ops: the operand in the autocast dtype (f32 and the other 16-bit type are cast;
// f64, integers and undefined tensors pass through).
Tensor to_lower(const Tensor& t);
// The operand in f32 when it is 16-bit; anything else passes through.
Tensor to_f32(const Tensor& t);
// Number of cached weight casts (tests).
size_t cache_size();

// Turns autocast off for the op's own (already cast) computation; restores it after. Unlike
// AutocastGuard it never drops the cache.
class Suspend {
 public:
  Suspend();
  ~Suspend();
  Suspend(const Suspend&) = delete;
  Suspend& operator=(const Suspend&) = delete;

 private:
  bool prev_;
};

}  // namespace autocast_detail
}  // namespace kiln
