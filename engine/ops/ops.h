// Every differentiable op of kiln, device-generic. Each op: checks its inputs (errors name the op
// and the shapes), infers the output shape and dtype, allocates the output on the input's device,
// runs the backend kernel (nothing on meta), and records its backward formula when needed.
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "engine/core/generator.h"
#include "engine/tensor/memory_format.h"
#include "engine/tensor/tensor.h"
#include "engine/core/op_modes.h"

namespace kiln {

// ---- factories ----
Tensor zeros(const Shape& s, DType dt = DType::f32, Device d = Device::cpu());
Tensor ones(const Shape& s, DType dt = DType::f32, Device d = Device::cpu());
Tensor full(const Shape& s, double value, DType dt = DType::f32, Device d = Device::cpu());
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor arange(int64_t n, DType dt = DType::i64, Device d = Device::cpu());
// Philox-driven (same numbers on every device for the same generator state).
Tensor rand(const Shape& s, DType dt = DType::f32, Device d = Device::cpu());   // U[0,1)
Tensor randn(const Shape& s, DType dt = DType::f32, Device d = Device::cpu());  // N(0,1)
Tensor uniform(const Shape& s, double lo, double hi, DType dt = DType::f32, Device d = Device::cpu());
Tensor normal(const Shape& s, double mean, double std, DType dt = DType::f32, Device d = Device::cpu());
Tensor scalar_tensor(double v, DType dt = DType::f32, Device d = Device::cpu());

// An uninitialized dense tensor in memory format fmt (channels_last needs 4 dims).
Tensor empty(const Shape& s, DType dt, Device d, MemoryFormat fmt);

// ---- copies, casts, devices ----
// contiguous(x) is row-major (NCHW); contiguous(x, channels_last) is NHWC in memory. Both return x
// itself when it already is in that format, else a differentiable copy.
Tensor contiguous(const Tensor& x);
Tensor contiguous(const Tensor& x, MemoryFormat fmt);
// clone and to_dtype keep a channels-last input channels-last (suggest_memory_format); any other
// input gives a contiguous result. Ops that support channels-last (conv2d on cuda, batch_norm,
// elementwise ops, and pools through a copy) give channels-last outputs for channels-last inputs.
Tensor clone(const Tensor& x);
Tensor to_dtype(const Tensor& x, DType dt);
Tensor to_device(const Tensor& x, Device d);
// In place: dst <- src (broadcast, cast). Bumps dst's version.
Tensor& copy_(Tensor& dst, const Tensor& src);
Tensor& fill_(Tensor& t, double v);
Tensor& zero_(Tensor& t);

// ---- views (differentiable, share storage) ----
Tensor view(const Tensor& x, const Shape& s);     // -1 allowed once; needs compatible strides
Tensor reshape(const Tensor& x, const Shape& s);  // view if possible, else copy
Tensor permute(const Tensor& x, const std::vector<int64_t>& dims);
Tensor transpose(const Tensor& x, int64_t d0, int64_t d1);
Tensor narrow(const Tensor& x, int64_t dim, int64_t start, int64_t length);
Tensor slice(const Tensor& x, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Tensor select(const Tensor& x, int64_t dim, int64_t index);
Tensor expand(const Tensor& x, const Shape& s);  // -1 keeps a dim
Tensor squeeze(const Tensor& x, int64_t dim);
Tensor squeeze(const Tensor& x);
Tensor unsqueeze(const Tensor& x, int64_t dim);
Tensor flatten(const Tensor& x, int64_t start_dim = 0, int64_t end_dim = -1);

// ---- elementwise (broadcasting; floating dtypes; both operands must share dtype and device) ----
Tensor add(const Tensor& a, const Tensor& b, double alpha = 1.0);
Tensor sub(const Tensor& a, const Tensor& b, double alpha = 1.0);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double s);
Tensor mul(const Tensor& a, double s);
Tensor pow(const Tensor& a, double p);
Tensor rsub(const Tensor& a, double s);  // s - a
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor leaky_relu(const Tensor& x, double negative_slope = 0.01);
Tensor gelu(const Tensor& x);  // exact (erf) form, like torch's default
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor clamp(const Tensor& x, std::optional<double> lo, std::optional<double> hi);
// cond: u8 or bool-like (nonzero = take a). Broadcasts all three.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// Comparisons give u8 (no gradient).
Tensor gt(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, double s);
Tensor isfinite_all(const Tensor& x);  // one-element u8: 1 when every element is finite

// in place (bump the version; autograd-aware for non-leaf tensors)
Tensor& add_(Tensor& a, const Tensor& b, double alpha = 1.0);
Tensor& sub_(Tensor& a, const Tensor& b, double alpha = 1.0);
Tensor& mul_(Tensor& a, const Tensor& b);
Tensor& mul_(Tensor& a, double s);
Tensor& add_(Tensor& a, double s);
Tensor& div_(Tensor& a, const Tensor& b);
Tensor& relu_(Tensor& a);
Tensor& clamp_(Tensor& a, std::optional<double> lo, std::optional<double> hi);

// ---- reductions (dims empty = all) ----
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
// Variance with Bessel's correction when unbiased (torch.var default).
Tensor var(const Tensor& x, const std::vector<int64_t>& dims = {}, bool unbiased = true, bool keepdim = false);
struct ValuesIndices {
  Tensor values, indices;
};
ValuesIndices max(const Tensor& x, int64_t dim, bool keepdim = false);
ValuesIndices min(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor max(const Tensor& x);  // over all elements
Tensor min(const Tensor& x);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
// Reduces a broadcast gradient back to `shape` (sum over broadcast dims).
Tensor sum_to(const Tensor& x, const Shape& shape);

// ---- linear algebra ----
Tensor matmul(const Tensor& a, const Tensor& b);  // 1-D, 2-D and batched with broadcast
Tensor linear(const Tensor& x, const Tensor& w, const Tensor& b = Tensor());  // x (...,in) w (out,in)

// ---- neural network ----
Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b = Tensor(), std::vector<int64_t> stride = {1, 1},
              std::vector<int64_t> padding = {0, 0}, std::vector<int64_t> dilation = {1, 1}, int64_t groups = 1);
Tensor max_pool2d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride = {},
                  std::vector<int64_t> padding = {0, 0}, std::vector<int64_t> dilation = {1, 1}, bool ceil_mode = false);
Tensor avg_pool2d(const Tensor& x, std::vector<int64_t> kernel, std::vector<int64_t> stride = {},
                  std::vector<int64_t> padding = {0, 0}, bool ceil_mode = false, bool count_include_pad = true);
Tensor adaptive_avg_pool2d(const Tensor& x, std::vector<int64_t> output_size);
// x (N, C, ...). In training mode uses batch statistics and updates running stats in place
// (when given); in eval mode uses the running stats.
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, bool training, double momentum = 0.1, double eps = 1e-5);
Tensor dropout(const Tensor& x, double p, bool training);
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);
// logits (N, K) + target (N) i64, or per-pixel (N, K, d...) + (N, d...): engine/ops/segmentation.h.
Tensor cross_entropy(const Tensor& logits, const Tensor& target, const Tensor& weight = Tensor(),
                     Reduction reduction = Reduction::mean, int64_t ignore_index = -100, double label_smoothing = 0.0);
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, const Tensor& weight = Tensor(),
                Reduction reduction = Reduction::mean, int64_t ignore_index = -100);
Tensor mse_loss(const Tensor& a, const Tensor& b, Reduction reduction = Reduction::mean);

// ---- joining and padding ----
Tensor cat(const std::vector<Tensor>& xs, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& xs, int64_t dim = 0);
// pads: (left, right) pairs from the last dim backwards, like torch.nn.functional.pad; constant mode.
Tensor pad(const Tensor& x, const std::vector<int64_t>& pads, double value = 0.0);

// ---- operators ----
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& a) { return neg(a); }
inline Tensor operator*(const Tensor& a, double s) { return mul(a, s); }
inline Tensor operator+(const Tensor& a, double s) { return add(a, s); }

}  // namespace kiln
