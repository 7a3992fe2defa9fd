// Implicit-GEMM mapping of a 2-D convolution in NHWC layout onto kiln's tiled GEMM: for each of
// the three passes, which GEMM (M, N, K) it is and which tensor element each GEMM operand element
// reads (or -1 where it reads zero: padding, or a dgrad tap the stride skips). No im2col buffer is
// built; the GEMM kernel's loaders call these functions per 16-byte chunk. groups = 1 only.
//
//   x: (N, H, W, C)   w: (K, R, S, C) ("KRSC")   y: (N, P, Q, K), P = out_h, Q = out_w
//   h = p*stride_h - pad_h + r*dil_h,  w = q*stride_w - pad_w + s*dil_w
//
//   fprop  y  = A B : GEMM m = (n,p,q) [N*P*Q],  n = k [K],          k = (r,s,c) [R*S*C]
//                     A[m][k] = x[n,h,w,c]  (stored mk)   B[k][n] = w[k,r,s,c]  (stored nk)
//   dgrad  dx = A B : GEMM m = (n,h,w) [N*H*W],  n = c [C],          k = (r,s,k) [R*S*K]
//                     A[m][k] = dy[n,p,q,k] where h = p*stride - pad + r*dil has an integer p
//                     in [0, P) (likewise w, q), else 0 (stored mk)   B[k][n] = w[k,r,s,c] (kn)
//   wgrad  dw = A B : GEMM m = k [K],            n = (r,s,c) [R*S*C], k = (n,p,q) [N*P*Q]
//                     A[m][k] = dy[n,p,q,k]  (stored km)   B[k][n] = x[n,h,w,c]  (stored kn)
// The innermost GEMM k (or n) index is c or k, so 8 consecutive indices are 8 contiguous halves
// whenever C (resp. K) is a multiple of 8: that is when a_vec / b_vec allow 16-byte copies.
// Index arithmetic is 32-bit (fast on the GPU); the host checks every tensor has < 2^31 elements.
#pragma once
#include "engine/core/host_device.h"
#include "kernels/common/nn_desc.h"

namespace kiln::tile {

// Convolution sizes in 32-bit ints, taken from a Conv2dDesc.
struct ConvDims {
  int N, C, H, W, K, R, S, P, Q;
  int stride_h, stride_w, pad_h, pad_w, dil_h, dil_w;
};
inline ConvDims conv_dims(const Conv2dDesc& d) {
  return {(int)d.N, (int)d.C, (int)d.H, (int)d.W, (int)d.K, (int)d.R, (int)d.S, (int)d.out_h(), (int)d.out_w(),
          (int)d.stride_h, (int)d.stride_w, (int)d.pad_h, (int)d.pad_w, (int)d.dil_h, (int)d.dil_w};
}

// Offset of x[n, h, w, c], or -1 outside the image (padding).
KILN_HOST_DEVICE long long x_offset(const ConvDims& d, int n, int h, int w, int c) {
  if (h < 0 || h >= d.H || w < 0 || w >= d.W) return -1;
  return (((long long)n * d.H + h) * d.W + w) * d.C + c;
}

// Forward: y (M = N*P*Q rows, N = K cols) = im2col(x) (M x R*S*C) * w^T.
struct ConvFprop {
  ConvDims d;
  long long M, N, K;
  bool a_vec, b_vec;
  explicit ConvFprop(const ConvDims& dd)
      : d(dd), M((long long)dd.N * dd.P * dd.Q), N(dd.K), K((long long)dd.R * dd.S * dd.C),
        a_vec(dd.C % 8 == 0), b_vec(dd.C % 8 == 0) {}
  KILN_HOST_DEVICE long long a_offset(long long m, long long k) const {
    const int q = (int)m % d.Q, pq = (int)m / d.Q, p = pq % d.P, n = pq / d.P;
    const int c = (int)k % d.C, rs = (int)k / d.C, s = rs % d.S, r = rs / d.S;
    return x_offset(d, n, p * d.stride_h - d.pad_h + r * d.dil_h, q * d.stride_w - d.pad_w + s * d.dil_w, c);
  }
  KILN_HOST_DEVICE long long b_offset(long long k, long long n) const { return n * K + k; }
  KILN_HOST_DEVICE long long c_offset(long long m, long long n) const { return m * N + n; }
};

// Input gradient: dx (M = N*H*W rows, N = C cols) = A (dy gathered, M x R*S*K) * B (w as R*S*K x C).
struct ConvDgrad {
  ConvDims d;
  long long M, N, K;
  bool a_vec, b_vec;
  explicit ConvDgrad(const ConvDims& dd)
      : d(dd), M((long long)dd.N * dd.H * dd.W), N(dd.C), K((long long)dd.R * dd.S * dd.K),
        a_vec(dd.K % 8 == 0), b_vec(dd.C % 8 == 0) {}
  // The output position along one axis that tap r reads for input position h, or -1.
  KILN_HOST_DEVICE static int out_pos(int h, int r, int stride, int pad, int dil, int P) {
    const int t = h + pad - r * dil;
    if (t < 0 || t % stride != 0) return -1;
    const int p = t / stride;
    return p < P ? p : -1;
  }
  KILN_HOST_DEVICE long long a_offset(long long m, long long k) const {
    const int w = (int)m % d.W, nh = (int)m / d.W, h = nh % d.H, n = nh / d.H;
    const int kk = (int)k % d.K, rs = (int)k / d.K, s = rs % d.S, r = rs / d.S;
    const int p = out_pos(h, r, d.stride_h, d.pad_h, d.dil_h, d.P);
    const int q = out_pos(w, s, d.stride_w, d.pad_w, d.dil_w, d.Q);
    if (p < 0 || q < 0) return -1;
    return (((long long)n * d.P + p) * d.Q + q) * d.K + kk;
  }
  KILN_HOST_DEVICE long long b_offset(long long k, long long n) const {
    const int kk = (int)k % d.K, rs = (int)k / d.K;  // w[kk, rs, n]
    return ((long long)kk * d.R * d.S + rs) * d.C + n;
  }
  KILN_HOST_DEVICE long long c_offset(long long m, long long n) const { return m * N + n; }
};

// Weight gradient: dw (M = K rows, N = R*S*C cols) = dy^T (K x N*P*Q) * im2col(x) (N*P*Q x R*S*C).
struct ConvWgrad {
  ConvDims d;
  long long M, N, K;
  bool a_vec, b_vec;
  explicit ConvWgrad(const ConvDims& dd)
      : d(dd), M(dd.K), N((long long)dd.R * dd.S * dd.C), K((long long)dd.N * dd.P * dd.Q),
        a_vec(dd.K % 8 == 0), b_vec(dd.C % 8 == 0) {}
  KILN_HOST_DEVICE long long a_offset(long long m, long long k) const { return k * M + m; }
  KILN_HOST_DEVICE long long b_offset(long long k, long long n) const {
    const int q = (int)k % d.Q, pq = (int)k / d.Q, p = pq % d.P, nn = pq / d.P;
    const int c = (int)n % d.C, rs = (int)n / d.C, s = rs % d.S, r = rs / d.S;
    return x_offset(d, nn, p * d.stride_h - d.pad_h + r * d.dil_h, q * d.stride_w - d.pad_w + s * d.dil_w, c);
  }
  KILN_HOST_DEVICE long long c_offset(long long m, long long n) const { return m * N + n; }
};

}  // namespace kiln::tile
