// `--amp bf16` (issue 35) below the command line: bf16 autocast's dtypes per op (PyTorch's CPU lists), the
// cached bf16 weight copies, RunConfig's amp dtype and its JSON, the run's AmpTraining without a loss scaler,
// the resume check between f16 and bf16 states, the CUDA path's choice of cuDNN for bf16 convolutions, and one
// training step's gradients under bf16 autocast against the f32 path within a bound derived from bf16's 2^-8.
#include <doctest/doctest.h>

#include <cmath>

#include "engine/memory/tag.h"
#include "engine/ops/autocast.h"
#include "engine/ops/ops.h"
#include "engine/run/amp_training.h"
#include "engine/run/resume_check.h"
#include "engine/run/run_config.h"
#include "support/bf16_tiny_net.h"
#if defined(KILN_WITH_CUDA)
#include "kernels/cuda/conv2d_16.h"
#include "kernels/cuda/kernel_select.h"
#endif

using namespace kiln;

TEST_CASE("amp bf16: autocast dtypes per op follow PyTorch's CPU lists, statistics and losses in f32") {
  manual_seed(5);
  Tensor x = randn({2, 3, 6, 6}), w = randn({4, 3, 3, 3}), b = randn({4});
  w.set_requires_grad(true);
  Tensor a = randn({5, 7}), m = randn({7, 3}), lw = randn({3, 7});
  lw.set_requires_grad(true);
  Tensor y = empty({5}, DType::i64);
  for (int64_t i = 0; i < 5; ++i) static_cast<int64_t*>(y.data_ptr())[i] = i % 3;
  Tensor rm = zeros({4}), rv = ones({4}), bw = ones({4}), bb = zeros({4});
  AutocastGuard on(true, DType::bf16);
  CHECK(autocast_dtype() == DType::bf16);
  const Tensor c = conv2d(x, w, b, {1, 1}, {1, 1});
  CHECK(c.dtype() == DType::bf16);
  CHECK(matmul(a, m).dtype() == DType::bf16);
  const Tensor logits = linear(a, lw);
  CHECK(logits.dtype() == DType::bf16);
  // The weight copies: one per parameter, bf16, tagged param_f16 (the 16-bit copies' tag).
  CHECK(autocast_detail::cache_size() == 2);
  const Tensor wc = autocast_detail::to_lower(w);
  CHECK(wc.dtype() == DType::bf16);
  CHECK(wc.storage()->tag == MemoryTag::param_f16);
  // f32 list: softmax, losses, reductions of bf16 tensors in f32.
  CHECK(softmax(logits, 1).dtype() == DType::f32);
  CHECK(log_softmax(logits, 1).dtype() == DType::f32);
  CHECK(cross_entropy(logits, y).dtype() == DType::f32);
  CHECK(sum(logits).dtype() == DType::f32);
  CHECK(mean(logits, {1}).dtype() == DType::f32);
  // batch norm: statistics and running stats in f32, the output in its input's dtype (PyTorch 1.13 too).
  const Tensor bn = batch_norm(c, bw, bb, rm, rv, true);
  CHECK(bn.dtype() == DType::bf16);
  CHECK(rm.dtype() == DType::f32);
  CHECK(rm.to_vector<float>()[0] != 0.0f);
  CHECK(relu(c).dtype() == DType::bf16);
  CHECK(to_dtype(x, DType::f64).dtype() == DType::f64);
  CHECK(matmul(to_dtype(a, DType::f64), to_dtype(m, DType::f64)).dtype() == DType::f64);  // f64 never cast
}

TEST_CASE("amp bf16: RunConfig's amp dtype, its JSON, the precision text and --amp's values") {
  RunConfig c;
  CHECK(c.precision() == "f32");
  CHECK_FALSE(c.to_json().contains("amp_dtype"));
  c.amp = true;
  CHECK(c.precision() == "amp f16");
  CHECK(c.amp_loss_scaling());
  CHECK(c.to_json()["amp_dtype"] == "f16");
  c.amp_dtype = DType::bf16;
  CHECK(c.precision() == "amp bf16");
  CHECK_FALSE(c.amp_loss_scaling());
  CHECK(c.to_json()["amp_dtype"] == "bf16");
  CHECK(parse_amp_dtype("") == DType::f16);
  CHECK(parse_amp_dtype("f16") == DType::f16);
  CHECK(parse_amp_dtype("bf16") == DType::bf16);
  CHECK_THROWS_WITH_AS(parse_amp_dtype("fp8"), doctest::Contains("--amp 'fp8': expected f16 or bf16"), Error);
}

TEST_CASE("amp bf16: AmpTraining autocasts in bf16 with the loss scaler a pass-through") {
  RunConfig c;
  c.amp = true;
  c.amp_dtype = DType::bf16;
  AmpTraining bf(c, Device::cpu());
  CHECK(bf.enabled());
  CHECK(bf.dtype() == DType::bf16);
  CHECK_FALSE(bf.scaling());
  CHECK_FALSE(bf.scaler().enabled());
  CHECK(bf.progress_text() == "  bf16, no loss scaling");
  CHECK(bf.start_text().find("bf16 autocast, bf16, no loss scaling") != std::string::npos);
  const nlohmann::json j = bf.ledger_json();
  CHECK(j["enabled"] == true);
  CHECK(j["dtype"] == "bf16");
  CHECK(j["loss_scaling"] == false);
  CHECK(j["note"] == "bf16, no loss scaling");
  CHECK_FALSE(j.contains("loss_scale"));
  // The pass-through: scale() returns the loss itself.
  const Tensor loss = full({}, 2.5f);
  CHECK(bf.scaler().scale(loss).item() == 2.5);
  c.amp_dtype = DType::f16;
  AmpTraining f16(c, Device::cpu());
  CHECK(f16.scaling());
  CHECK(f16.progress_text().find("scale 65536") != std::string::npos);
  CHECK(f16.ledger_json()["loss_scale"] == 65536.0);
  CHECK(f16.ledger_json()["dtype"] == "f16");
}

TEST_CASE("amp bf16: resuming an --amp f16 state as bf16, or the reverse, is one difference naming both") {
  RunConfig saved, now;
  saved.amp = now.amp = true;
  saved.amp_dtype = DType::f16;
  now.amp_dtype = DType::bf16;
  std::vector<std::string> d = resume_differences(saved.to_json(), now);
  REQUIRE(d.size() == 1);
  CHECK(d[0] == "amp: saved --amp f16, now --amp bf16");
  d = resume_differences(now.to_json(), saved);
  REQUIRE(d.size() == 1);
  CHECK(d[0] == "amp: saved --amp bf16, now --amp f16");
  // A state written before bf16 existed (no amp_dtype) is an f16 one.
  nlohmann::json old = saved.to_json();
  old.erase("amp_dtype");
  CHECK(resume_differences(old, saved).empty());
  CHECK(resume_differences(old, now).size() == 1);
  CHECK(resume_differences(now.to_json(), now).empty());
  // Switching --amp on or off stays allowed (the header's rule), bf16 included.
  RunConfig f32;
  CHECK(resume_differences(now.to_json(), f32).empty());
  CHECK(resume_differences(f32.to_json(), now).empty());
}

#if defined(KILN_WITH_CUDA)
TEST_CASE("amp bf16: a bf16 convolution on CUDA goes to cuDNN, also under --kernels kiln (f16-only kernels)") {
  Conv2dDesc d;
  d.N = 2, d.C = 16, d.H = 8, d.W = 8, d.K = 16, d.R = 3, d.S = 3;
  d.groups = 1;
  cuda::set_kernel_source(cuda::KernelSource::kiln);
  CHECK(cuda::conv2d_16_uses_kiln(d, DType::f16));
  CHECK_FALSE(cuda::conv2d_16_uses_kiln(d, DType::bf16));
  cuda::set_kernel_source(cuda::KernelSource::vendor);
  CHECK_FALSE(cuda::conv2d_16_uses_kiln(d, DType::f16));
  CHECK_FALSE(cuda::conv2d_16_uses_kiln(d, DType::bf16));
}
#endif

// One step's gradients under bf16 autocast against the f32 path, the same weights and batch
// (tests/support/bf16_tiny_net.h: conv 3->8 3x3, batch norm, relu, linear 288->5, cross-entropy, 4 images of 6x6).
// The bound: every gradient entry is a sum of terms (reduction lengths 4 to 144; the header lists them); under
// bf16 each term's factors went through bf16 roundings, each of relative error <= u = 2^-8 (8 significant bits).
// On the longest path (the conv weight's) there are R = 10: the casts of x and of both weights, the conv, batch
// norm and linear outputs, the logits' gradient cast to bf16, the linear and batch norm backward outputs and the
// weight gradient's own rounding. To first order a term is then off by <= R u |term|, so the sum, in any order,
// by <= R u A with A = sum |term|, and the tensor in the 2-norm by <= R u ||A|| (f32 accumulation adds <= 144 x
// 2^-24 relative: nothing next to it). Taken normwise because batch norm's centring makes an element's error
// relative to the uncentred values, which only the norm absorbs. Bound: ||g_bf16 - g_f32|| <= R u ||A||, whatever
// the summation order, so on any x86 CPU and any of kiln's bf16 paths (OpenBLAS staging, oneDNN's AMX or
// AVX512-BF16 kernels; rounding is the same everywhere, and errors add as a random walk well below it). Not
// vacuous: R u ||A|| < ||g|| / 2 (a gradient off by half of itself fails), except the conv bias's, whose exact
// gradient is 0 (batch norm follows it).
TEST_CASE("amp bf16: one step's gradients against the f32 path within R 2^-8 of the norm of the sums of |terms|") {
  const test::TinyNet net = test::make_tiny_net(11);
  const test::TinyRun f32 = test::run_tiny(net, false);
  const test::TinyRun bf = test::run_tiny(net, true);
  const test::TinyScales a = test::tiny_scales(net, f32);
  const double u = std::ldexp(1.0, -8), R = 10;
  for (size_t i = 0; i < net.params.size(); ++i) {
    const std::string& name = net.params[i].first;
    CAPTURE(name);
    REQUIRE(bf.grads[i].dtype() == DType::f32);  // the master weights' gradients
    const double d = test::l2_diff(bf.grads[i], f32.grads[i]), bound = R * u * test::l2(a.grads[i]),
                 g = test::l2(f32.grads[i]);
    MESSAGE(name, ": ||g_bf16 - g_f32|| = ", d, ", bound R u ||A|| = ", bound, ", ||g|| = ", g, " (relative error ",
            d / g, ")");
    CHECK(d <= bound);
    CHECK(d > 0);  // bf16 did round: the two paths differ
    if (name != "conv_b") CHECK(bound < 0.5 * g);
  }
  // The logits: 6 roundings (x, both weights, conv, batch norm and linear outputs); the loss (f32 cross-entropy,
  // 2-Lipschitz in each row's max norm of the logits) within 2 x that.
  const double dz = test::l2_diff(bf.logits, f32.logits), zb = 6 * u * test::l2(a.logits);
  MESSAGE("logits: ||z_bf16 - z_f32|| = ", dz, " (bound ", zb, ")");
  CHECK(dz <= zb);
  const double dl = std::fabs(bf.loss.item() - f32.loss.item());
  MESSAGE("loss: |bf16 - f32| = ", dl, " (bound ", 2 * zb, ")");
  CHECK(dl <= 2 * zb);
}
