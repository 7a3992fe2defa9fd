// Host entry points of kiln's implicit-GEMM convolution: check the descriptor, build the pass's
// GEMM problem (tile::ConvFprop / ConvDgrad / ConvWgrad), choose split-K for the weight gradient
// and launch the tiled Tensor Core kernel of hgemm_tile.h.
#include "kernels/cuda/igemm_conv.h"

#include <cstdint>

#include "engine/core/error.h"
#include "kernels/common/tile_conv.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/hgemm_tile.h"

namespace kiln::cuda {

namespace {

using tile::Layout;

void check_desc(const Conv2dDesc& d, const char* op) {
  KILN_CHECK(d.groups == 1, op, ": kiln's implicit-GEMM convolution supports groups = 1 only (got ", d.groups, ")");
  KILN_CHECK(d.N > 0 && d.C > 0 && d.H > 0 && d.W > 0 && d.K > 0 && d.R > 0 && d.S > 0 && d.out_h() > 0 &&
                 d.out_w() > 0,
             op, ": empty or invalid convolution shape");
  const int64_t lim = INT32_MAX;
  KILN_CHECK(d.N * d.H * d.W * d.C < lim && d.N * d.out_h() * d.out_w() * d.K < lim && d.K * d.R * d.S * d.C < lim,
             op, ": tensors must have < 2^31 elements (32-bit index math)");
  int dev = 0;
  KILN_CUDA_CHECK(cudaGetDevice(&dev), op);
  KILN_CHECK(tc::device_supports_tc(dev), op, ": kiln's Tensor Core convolution needs sm_80 or later");
}

int sm_count() {
  int dev = 0, sms = 0;
  KILN_CUDA_CHECK(cudaGetDevice(&dev), "igemm_conv");
  KILN_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "igemm_conv");
  return sms;
}

int wgrad_splits(const tile::ConvWgrad& p) {
  using T = tile::TileShape;
  const long long tiles = tile::ceil_div(p.M, T::BM) * tile::ceil_div(p.N, T::BN);
  return tile::choose_splits(tiles, tile::ceil_div(p.K, T::BK), sm_count());
}

template <class P, Layout LA, Layout LB>
void run(const P& p, const void* a, const void* b, void* out, DType dt, float alpha, float beta, int splits,
         float* partial, cudaStream_t stream, const char* op) {
  KILN_CHECK(dt == DType::f16 || dt == DType::f32, op, ": output must be f16 or f32");
  const __half* A = static_cast<const __half*>(a);
  const __half* B = static_cast<const __half*>(b);
  if (dt == DType::f16)
    tc::launch_tc_gemm<P, LA, LB, __half>(p, A, B, static_cast<__half*>(out), alpha, beta, splits, partial, stream, op);
  else
    tc::launch_tc_gemm<P, LA, LB, float>(p, A, B, static_cast<float*>(out), alpha, beta, splits, partial, stream, op);
}

// 16-byte copies also need 16-byte aligned base pointers.
bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15) == 0; }

}  // namespace

size_t igemm_conv_workspace_bytes(const Conv2dDesc& d, ConvPass pass) {
  if (pass != ConvPass::wgrad) return 0;
  tile::ConvWgrad p(tile::conv_dims(d));
  const int splits = wgrad_splits(p);
  return splits > 1 ? (size_t)splits * (size_t)p.M * (size_t)p.N * sizeof(float) : 0;
}

void igemm_conv_fprop(const Conv2dDesc& d, const void* x, const void* w, void* y, DType y_dtype, float alpha,
                      float beta, cudaStream_t stream) {
  check_desc(d, "igemm_conv_fprop");
  tile::ConvFprop p(tile::conv_dims(d));
  p.a_vec = p.a_vec && aligned16(x);
  p.b_vec = p.b_vec && aligned16(w);
  // A = im2col(x) stored m-major (8 channels per chunk), B = w stored n-major (KRSC rows).
  run<tile::ConvFprop, Layout::mk, Layout::nk>(p, x, w, y, y_dtype, alpha, beta, 1, nullptr, stream,
                                               "igemm_conv_fprop");
}

void igemm_conv_dgrad(const Conv2dDesc& d, const void* dy, const void* w, void* dx, DType dx_dtype, float alpha,
                      float beta, cudaStream_t stream) {
  check_desc(d, "igemm_conv_dgrad");
  tile::ConvDgrad p(tile::conv_dims(d));
  p.a_vec = p.a_vec && aligned16(dy);
  p.b_vec = p.b_vec && aligned16(w);
  // A = dy gathered per tap stored m-major, B = w as (R*S*K) x C stored k-major.
  run<tile::ConvDgrad, Layout::mk, Layout::kn>(p, dy, w, dx, dx_dtype, alpha, beta, 1, nullptr, stream,
                                               "igemm_conv_dgrad");
}

void igemm_conv_wgrad(const Conv2dDesc& d, const void* dy, const void* x, void* dw, DType dw_dtype, float alpha,
                      float beta, void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  check_desc(d, "igemm_conv_wgrad");
  tile::ConvWgrad p(tile::conv_dims(d));
  p.a_vec = p.a_vec && aligned16(dy);
  p.b_vec = p.b_vec && aligned16(x);
  const int splits = wgrad_splits(p);
  const size_t need = splits > 1 ? (size_t)splits * (size_t)p.M * (size_t)p.N * sizeof(float) : 0;
  KILN_CHECK(workspace_bytes >= need && (need == 0 || workspace != nullptr), "igemm_conv_wgrad: workspace of ",
             workspace_bytes, " bytes, needs ", need);
  // A = dy^T stored k-major (rows n*P*Q, K contiguous), B = im2col(x) stored k-major.
  run<tile::ConvWgrad, Layout::km, Layout::kn>(p, dy, x, dw, dw_dtype, alpha, beta, splits,
                                               static_cast<float*>(workspace), stream, "igemm_conv_wgrad");
}

}  // namespace kiln::cuda
