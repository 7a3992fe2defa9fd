// bf16 weight gradient as im2col + one oneDNN matmul (see conv2d_bf16_im2col.h).
// dw (K, C*R*S) = dy^T (K, N*OH*OW) x col^T: col (C*R*S, N*OH*OW) is kiln's im2col of x (image n's columns at
// n*OH*OW; bf16 moved as its bit patterns), dy^T dy's (K, OH*OW) planes side by side. The workspace, 64-byte
// aligned pieces: [col][dy^T][the matmul's workspace] + kAlign.
#include "kernels/cpu/conv2d_bf16_im2col.h"

#include <cstdint>
#include <cstring>

#include "engine/core/error.h"
#include "kernels/cpu/im2col.h"
#include "kernels/cpu/matmul_bf16.h"

namespace kiln::cpu {

namespace {

constexpr size_t kAlign = 64;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

struct Im2colPlan {
  MatmulBf16Desc mm;
  size_t dyt_offset = 0, mm_offset = 0, total = 0;
};

Im2colPlan im2col_plan_of(const Conv2dDesc& d) {
  Im2colPlan p;
  const int64_t npq = d.N * d.out_h() * d.out_w(), crs = d.C * d.R * d.S;
  p.mm.M = d.K, p.mm.N = crs, p.mm.K = npq;
  p.mm.lda = npq;  // A = dy^T (K, npq), row-major
  p.mm.trans_b = true, p.mm.ldb = npq;  // B = col^T: col stored (crs, npq)
  p.dyt_offset = align_up((size_t)(crs * npq) * sizeof(bfloat16));
  p.mm_offset = p.dyt_offset + align_up((size_t)(d.K * npq) * sizeof(bfloat16));
  p.total = p.mm_offset + matmul_bf16_workspace_bytes(p.mm) + kAlign;
  return p;
}

}  // namespace

size_t conv2d_bf16_wgrad_im2col_bytes(const Conv2dDesc& d) { return im2col_plan_of(d).total; }

std::string conv2d_bf16_wgrad_im2col_impl(const Conv2dDesc& d) { return matmul_bf16_impl_name(im2col_plan_of(d).mm); }

void conv2d_bf16_wgrad_im2col(const Conv2dDesc& d, const bfloat16* x, const bfloat16* dy, bfloat16* dw, void* dbias,
                              Bf16Bias bt, void* workspace) {
  KILN_CHECK(workspace != nullptr, "conv2d bf16 backward_weight (im2col): workspace is null");
  const Im2colPlan p = im2col_plan_of(d);
  char* base = (char*)(((uintptr_t)workspace + kAlign - 1) / kAlign * kAlign);
  const int64_t pq = d.out_h() * d.out_w(), npq = d.N * pq, rs = d.R * d.S;
  uint16_t* col = (uint16_t*)base;
  bfloat16* dyt = (bfloat16*)(base + p.dyt_offset);
  const Im2colGeom g{d.H, d.W, d.R, d.S, d.stride_h, d.stride_w, d.pad_h, d.pad_w, d.dil_h, d.dil_w, d.out_h(), d.out_w()};
  const int64_t planes = d.N * d.C;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < planes; ++i) {  // plane (n, c): rows c*R*S.., columns n*pq..
    const int64_t n = i / d.C, c = i % d.C;
    im2col_plane<uint16_t>(g, (const uint16_t*)(x + i * d.H * d.W), col + c * rs * npq + n * pq, npq);
  }
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < d.N * d.K; ++i) {  // dy plane (n, k) -> dy^T row k, columns n*pq..
    const int64_t n = i / d.K, k = i % d.K;
    std::memcpy(static_cast<void*>(dyt + k * npq + n * pq), dy + i * pq, (size_t)pq * sizeof(bfloat16));
  }
  matmul_bf16(p.mm, dyt, (const bfloat16*)col, dw, base + p.mm_offset);
  if (bt == Bf16Bias::none) return;
#pragma omp parallel for schedule(static)
  for (int64_t k = 0; k < d.K; ++k) {
    float acc = 0.f;
    for (int64_t j = 0; j < npq; ++j) acc += (float)dyt[k * npq + j];
    if (bt == Bf16Bias::f32) ((float*)dbias)[k] = acc;
    else ((bfloat16*)dbias)[k] = bfloat16(acc);
  }
}

}  // namespace kiln::cpu
