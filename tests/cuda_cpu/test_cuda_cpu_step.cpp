// Issue 33's whole `--amp --kernels kiln` small_cnn training step in the CPU execution mode, against the
// same step on the CPU backend. The CPU mode is installed as the engine's cuda backend
// (kernels/cuda_cpu/install.h): cuda:0 is host memory, every op the step dispatches on cuda:0 runs
// kiln's CUDA kernel sources (kiln::cuda_on_cpu, fibres per thread block), copies are memcpy, events
// always complete, and the deferred-error slots are host memory. The step is the trainer's own
// (train::train_step: f16 autocast, the loss scaler, SGD with momentum or AdamW through the fused
// updates) from the same weights, inputs and dropout seed on both devices. Any cuBLAS or cuDNN call
// throws kiln::Error naming the call (runtime_shim.cpp's handles, vendor_stubs.cpp), which fails the
// test with that name; NCCL is not reachable on one rank (train_step makes no device buckets without a
// DataParallel, and no CPU-mode source names NCCL: such a call would not compile).
//
// Tolerances, from f16 rounding: both backends multiply f16 operands exactly and accumulate in f32, in
// different orders (im2col + OpenBLAS vs the implicit GEMM / hgemm tiles), and round to f16 at the same
// points, so they differ where an f32 sum falls on the other side of an f16 rounding boundary.
// - The forward is continuous in its values: the loss and the activations of bn1, bn2 and fc1 (from the
//   state each step starts from) within 8 u (u = 2^-11, f16's unit roundoff; normwise, max |a - b| over
//   max |a|); measured 0.3 u (loss) and 2.2 u.
// - The gradients are not: max-pool sends a window's gradient to its largest value and ReLU passes or stops
//   it, and about a hundred decisions per step are within 8 times the backends' difference (printed), so a
//   gradient may move by O(1) on either backend, as it does between the CPU's --amp and f32 steps. So every
//   parameter, buffer and gradient is compared against that measured noise of autocast: within 4 n + 4 u
//   of the CPU's --amp step, n = the CPU's --amp step's distance from its f32 step (autocast off, no
//   scaler) for that tensor; measured at most 0.44 of the bound. And both --amp steps' gradients within 0.75
//   of the f32 step's (measured 0.33; not the conv biases', 0 in exact arithmetic under batch norm), so a
//   fault on both devices alike (a gradient left scaled, a sign) cannot hide in the noise scale.
// Step 2 starts every side from the CPU's state after step 1. Exact where the operation is: the found-inf
// decision, the loss scale and its growth tracker, the skipped step (the weights untouched, bit for bit),
// the batch count.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "engine/core/generator.h"
#include "engine/memory/device_present.h"
#include "engine/autograd/grad_mode.h"
#include "engine/ops/autocast.h"
#include "engine/ops/op_trace.h"
#include "engine/ops/ops.h"
#include "engine/optim/adamw.h"
#include "engine/optim/loss_scaler.h"
#include "engine/optim/sgd.h"
#include "engine/train/kernel_option.h"
#include "engine/train/train_step.h"
#include "kernels/cuda_cpu/install.h"
#include "models/small_cnn.h"

using namespace kiln;

namespace {

const Device kDev = Device::cuda(0);
constexpr int64_t kImage = 8;  // 8x8 inputs: conv2 and fc1 see 4x4 and 2x2 maps (the CPU mode emulates every mma: time)

std::vector<double> host_values(const Tensor& t) {
  return to_device(to_dtype(t.detach(), DType::f64), Device::cpu()).to_vector<double>();
}

// max |a - b| / max |a|; infinity when NaN / inf do not sit at the same places.
double normwise_err(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return INFINITY;
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isfinite(a[i]) != std::isfinite(b[i])) return INFINITY;
    if (!std::isfinite(a[i])) {
      if (!(std::isnan(a[i]) && std::isnan(b[i])) && a[i] != b[i]) return INFINITY;
      continue;
    }
    num = std::max(num, std::fabs(a[i] - b[i]));
    den = std::max(den, std::fabs(a[i]));
  }
  return den == 0 ? (num == 0 ? 0 : INFINITY) : num / den;
}

bool bit_equal(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (!(a[i] == b[i] || (std::isnan(a[i]) && std::isnan(b[i])))) return false;
  return true;
}

// Sets --kernels kiln through the CLI's own switch for a scope (the backend in force takes it), vendor after.
struct KilnKernels {
  KilnKernels() {
    std::ostringstream log;
    apply_kernels_option("kiln", log);
  }
  ~KilnKernels() {
    std::ostringstream log;
    apply_kernels_option("vendor", log);
  }
};

enum class Opt { sgd, adamw };

// One side of the comparison: a small_cnn, its optimizer and loss scaler on one device.
struct Side {
  std::shared_ptr<models::SmallCNN> model;
  std::unique_ptr<optim::Optimizer> opt;
  std::unique_ptr<optim::LossScaler> scaler;
  bool amp = true;
  Device dev;

  // amp: f16 autocast and a loss scaler (init 1024), as --amp; else f32 with no scaler (the reference).
  Side(const NamedTensors& init, Device d, Opt which, bool amp_ = true) : amp(amp_), dev(d) {
    model = models::small_cnn(10, 1, kImage);
    model->load_state_dict(init);
    model->to(d);
    model->train();
    if (which == Opt::sgd) {
      optim::SGDOptions o;
      o.lr = 0.1, o.momentum = 0.9, o.weight_decay = 1e-4;
      opt = std::make_unique<optim::SGD>(model->named_parameters(), o);
    } else {
      optim::AdamWOptions o;
      o.lr = 1e-2;
      opt = std::make_unique<optim::AdamW>(model->named_parameters(), o);
    }
    optim::LossScalerOptions so;
    so.init_scale = 1024;
    so.enabled = amp;
    scaler = std::make_unique<optim::LossScaler>(so, d);
  }

  // One --amp training step (the trainer's train_step) on (x, y) copied to this side's device, with the
  // dropout draws of `seed`. inject_inf: one gradient element set to +inf after backward.
  train::StepResult step(const Tensor& x, const Tensor& y, uint64_t seed, bool inject_inf) {
    train::StepOptions so;
    so.autocast = amp;
    so.autocast_dtype = DType::f16;
    if (inject_inf)
      so.hooks.after_backward = [this](const train::MicroBatch&) {
        Tensor g = model->fc2->bias.grad();  // (10)
        Tensor first = narrow(g, 0, 3, 1);
        fill_(first, INFINITY);
      };
    manual_seed(seed);
    return train::train_step(*model, *opt, *scaler, Batch{to_device(x, dev), to_device(y, dev)}, so);
  }

  // This side's parameters, buffers and optimizer state set to `o`'s (copies across devices).
  void load_from(const Side& o) {
    model->load_state_dict(o.model->state_dict());
    opt->load_state_dict(o.opt->state_dict());
  }

  // name -> values (parameters, buffers, gradients as "<name>.grad", optimizer state as "<name>.<key>").
  std::vector<std::pair<std::string, std::vector<double>>> values() const {
    std::vector<std::pair<std::string, std::vector<double>>> r;
    for (const auto& nt : model->state_dict()) r.emplace_back(nt.first, host_values(nt.second));
    for (const auto& nt : model->named_parameters())
      if (nt.second.grad().defined()) r.emplace_back(nt.first + ".grad", host_values(nt.second.grad()));
    return r;
  }
};

// The backend entry points of the CPU mode's first step (op trace): the 16-bit convolutions and kiln's
// bias kernels (--kernels kiln), f16 GEMMs, the NN kernels, one fused update per parameter.
void check_mode_entry_points(const std::vector<OpSpan>& spans, Opt which) {
  std::map<std::string, int> calls;
  for (const OpSpan& s : spans) ++calls[s.name];
  std::string seen;
  for (const auto& c : calls) seen += c.first + " x" + std::to_string(c.second) + "; ";
  INFO("entry points of the CPU mode's step: " << seen);
  CHECK(calls["conv2d_16_forward"] == 2);
  CHECK(calls["conv2d_16_backward_weight"] == 2);
  CHECK(calls["conv2d_16_backward_input"] == 1);  // conv1's input (the image) needs no gradient
  CHECK(calls["bias_add"] == 2);
  CHECK(calls["bias_grad"] == 2);
  CHECK(calls["gemm_strided"] >= 5);  // fc1, fc2 forward; their input and weight gradients
  CHECK(calls["batch_norm_forward_train<T>"] == 2);
  CHECK(calls["batch_norm_backward_train<T>"] == 2);
  CHECK(calls["max_pool2d_forward<T>"] == 2);
  CHECK(calls["dropout_forward<T>"] == 1);
  CHECK(calls["cross_entropy_forward<T>"] == 1);
  CHECK(calls["cross_entropy_backward<T>"] == 1);
  CHECK(calls[which == Opt::sgd ? "sgd_fused" : "adamw_fused"] == 12);  // small_cnn's 12 parameters
}

constexpr double kU = 1.0 / 2048.0;  // f16's unit roundoff, 2^-11
constexpr double kGradVsF32 = 0.75;  // the --amp gradients against the f32 step's (compare_sides)

// The bound of the header comment: within 4 times what autocast itself moves this value on the CPU (the
// CPU's --amp step against its f32 step), plus 4 f16 roundings.
bool within_noise(double err_mode, double err_amp, double* ratio) {
  const double bound = 4 * err_amp + 4 * kU;
  *ratio = std::max(*ratio, err_mode / bound);
  return err_mode <= bound;
}

// Every value (parameters, buffers, gradients) of the CPU mode against the CPU's --amp step, with the
// CPU's f32 step as the noise scale; returns the largest share of the bound used.
double compare_sides(const Side& cpu, const Side& mode, const Side& ref, const std::string& when, double* worst_vs_f32) {
  const auto a = cpu.values(), b = mode.values(), c = ref.values();
  REQUIRE(a.size() == b.size());
  REQUIRE(a.size() == c.size());
  double ratio = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const std::string& name = a[i].first;
    REQUIRE(name == b[i].first);
    const double e = normwise_err(a[i].second, b[i].second), n = normwise_err(c[i].second, a[i].second);
    CHECK_MESSAGE(within_noise(e, n, &ratio), when, ": ", name, " differs by ", e, " (normwise) from the CPU's "
                  "--amp step, whose own distance from its f32 step is ", n);
    if (name.find("num_batches_tracked") != std::string::npos) CHECK(bit_equal(a[i].second, b[i].second));
    // Both --amp steps' gradients near the f32 step's, so that a fault on both devices (a gradient left
    // scaled by 1024, a sign) cannot hide in the noise scale. Autocast moves them by 0.21 at most (conv2's
    // weight gradient: f16 rounding of the batch norm's input and gradient, which cancel); bound 0.5. Not
    // the conv biases' gradients: a bias followed by batch norm has gradient 0, so theirs are pure rounding;
    // not the parameters: AdamW's first update is lr * sign(gradient), which flips with the rounding of a
    // gradient element near 0 (bn1's bias, 0 at the start, moves by 2 lr there).
    const bool is_grad = name.size() > 5 && name.compare(name.size() - 5, 5, ".grad") == 0;
    if (is_grad && name != "conv1.bias.grad" && name != "conv2.bias.grad") {
      CHECK_MESSAGE(n <= kGradVsF32, when, ": ", name, " of the CPU's --amp step is ", n, " from its f32 step");
      const double m = normwise_err(c[i].second, b[i].second);
      CHECK_MESSAGE(m <= kGradVsF32, when, ": ", name, " of the CPU mode's --amp step is ", m, " from the CPU's f32 step");
      *worst_vs_f32 = std::max({*worst_vs_f32, n, m});
    }
  }
  return ratio;
}

NamedTensors snapshot(const nn::Module& m) {
  NamedTensors r;
  for (const auto& nt : m.named_parameters()) r.emplace_back(nt.first, clone(nt.second.detach()));
  return r;
}

// The forward of a step is continuous in every value (max-pool and ReLU are continuous; dropout's mask is
// the same draw on both), so its activations are compared with a bound from f16 rounding alone: the conv
// and linear outputs differ by at most one f16 rounding where the two f32 sums straddle a boundary, and
// batch norm carries that difference (relative to the layer's largest value) into its output: bn1, bn2 and
// fc1's outputs (before fc1's ReLU) within 8 u normwise (measured about 1.3 u: one f16 ulp of the largest
// value). The gradients are not continuous: max-pool sends a window's gradient to its largest value alone
// and ReLU passes or stops it, and on this network about a hundred windows per step have their top two
// (or their largest and 0) within 8 times the backends' difference, so either backend may pick the other
// element and move a gradient by O(1). That is inherent to any two f16 implementations, not a fault; it
// is why the gradients and updates are compared against the measured noise scale of autocast (above)
// rather than against f16 rounding alone. The number of such close decisions is printed.
struct Activations {
  std::vector<double> z1, z2, f1;  // bn1, bn2 outputs (N, C, H, W); fc1's output before its ReLU (N, 128)
  Shape s1, s2;
};

Activations forward_activations(const nn::Module& from, Device dev, Opt which, const Tensor& x) {
  auto m = models::small_cnn(10, 1, kImage);  // a copy: this forward updates batch-norm running statistics
  m->load_state_dict(from.state_dict());
  m->to(dev);
  m->train();
  (void)which;
  NoGradGuard ng;
  AutocastGuard ac(true, DType::f16);
  const Tensor xd = to_device(x, dev);
  const Tensor z1 = (*m->bn1)((*m->conv1)(xd));
  const Tensor z2 = (*m->bn2)((*m->conv2)(relu(max_pool2d(z1, {2, 2}))));
  const Tensor f1 = (*m->fc1)(flatten(relu(max_pool2d(z2, {2, 2})), 1));
  return {host_values(z1), host_values(z2), host_values(f1), z1.sizes(), z2.sizes()};
}

double max_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

int64_t close_pool_decisions(const std::vector<double>& z, const Shape& s, double margin) {
  const int64_t H = s[2], W = s[3];
  int64_t bad = 0;
  for (int64_t nc = 0; nc < s[0] * s[1]; ++nc)
    for (int64_t oh = 0; oh < H / 2; ++oh)
      for (int64_t ow = 0; ow < W / 2; ++ow) {
        double v[4];
        for (int k = 0; k < 4; ++k) v[k] = z[(size_t)((nc * H + 2 * oh + k / 2) * W + 2 * ow + k % 2)];
        std::sort(v, v + 4);
        if (v[3] < -margin) continue;  // all clearly negative: ReLU stops the gradient, wherever it goes
        if (v[3] - v[2] < margin || std::fabs(v[3]) < margin) ++bad;
      }
  return bad;
}

void compare_forward(const nn::Module& cpu, const nn::Module& mode, Opt which, const Tensor& x, const std::string& when) {
  const Activations a = forward_activations(cpu, Device::cpu(), which, x);
  const Activations b = forward_activations(mode, kDev, which, x);
  const double e1 = normwise_err(a.z1, b.z1), e2 = normwise_err(a.z2, b.z2), ef = normwise_err(a.f1, b.f1);
  CHECK_MESSAGE(e1 <= 8 * kU, when, ": bn1's output differs by ", e1, " (normwise; bound 8 u = ", 8 * kU, ")");
  CHECK_MESSAGE(e2 <= 8 * kU, when, ": bn2's output differs by ", e2, " (normwise; bound 8 u)");
  CHECK_MESSAGE(ef <= 8 * kU, when, ": fc1's output differs by ", ef, " (normwise; bound 8 u)");
  const double d1 = max_diff(a.z1, b.z1), d2 = max_diff(a.z2, b.z2), df = max_diff(a.f1, b.f1);
  int64_t badf = 0;
  for (double v : a.f1) badf += std::fabs(v) < 8 * df;
  MESSAGE(when, ": forward within ", std::max({e1, e2, ef}) / kU, " u of each other (bound 8 u); max-pool / ReLU "
          "decisions closer than 8 times the backends' difference: ", close_pool_decisions(a.z1, a.s1, 8 * d1), " (pool1), ",
          close_pool_decisions(a.z2, a.s2, 8 * d2), " (pool2), ", badf, " (fc1's ReLU)");
}

void run_steps(Opt which) {
  manual_seed(33);
  auto init_model = models::small_cnn(10, 1, kImage);
  const NamedTensors init = init_model->state_dict();
  // Batch 4 of 1 x kImage x kImage (8), well-scaled (N(0, 1)), classes spread over 10.
  const Tensor x = normal({4, 1, kImage, kImage}, 0.0, 1.0);
  const Tensor y = tensor_from<int64_t>({3, 7, 0, 9}, {4});

  auto installed = cuda_on_cpu::install_as_cuda_backend();
  KilnKernels kiln_kernels;
  {
    // The CPU's --amp step, the CPU mode's on cuda:0, and the CPU's f32 step (the noise scale).
    Side cpu(init, Device::cpu(), which), mode(init, kDev, which), ref(init, Device::cpu(), which, false);
    REQUIRE(mode.model->conv1->weight.device() == kDev);
    double worst = 0, worst_vs_f32 = 0, worst_loss = 0;
    for (int s = 0; s < 2; ++s) {
      CAPTURE(s);
      if (s == 1) {  // step 2 starts every side from the CPU's state after step 1 (momentum / moments set)
        mode.load_from(cpu);
        ref.load_from(cpu);
      }
      compare_forward(*cpu.model, *mode.model, which, x, s == 0 ? "step 1" : "step 2");
      const train::StepResult rc = cpu.step(x, y, 100 + s, false);
      if (s == 0) (void)op_trace_take(), op_trace_enable(true);
      const train::StepResult rm = mode.step(x, y, 100 + s, false);
      if (s == 0) {
        op_trace_enable(false);
        check_mode_entry_points(op_trace_take(), which);
      }
      const train::StepResult rr = ref.step(x, y, 100 + s, false);
      CHECK(rc.stepped);
      CHECK(rm.stepped);
      const double le = std::fabs(rc.loss - rm.loss) / std::fabs(rc.loss);
      // The loss is continuous in the forward's values: the f16 bound of compare_forward.
      CHECK_MESSAGE(le <= 8 * kU, "step ", s + 1, ": loss ", rc.loss, " (cpu) vs ", rm.loss, " (CPU mode), ", le / kU,
                    " u apart (bound 8 u); f32: ", rr.loss);
      worst_loss = std::max(worst_loss, le / kU);
      CHECK(rc.loss_scale == 1024.0);  // clean steps: the scale stays, exactly, on both
      CHECK(rm.loss_scale == 1024.0);
      CHECK(cpu.scaler->growth_tracker() == s + 1);
      CHECK(mode.scaler->growth_tracker() == s + 1);
      worst = std::max(worst, compare_sides(cpu, mode, ref, s == 0 ? "step 1" : "step 2", &worst_vs_f32));
    }
    MESSAGE("loss: at most ", worst_loss, " u apart (bound 8 u); largest share of the noise bound used over two "
            "steps (weights, buffers, gradients): ", worst, "; largest distance of an --amp gradient from the f32 "
            "step's: ", worst_vs_f32, " (bound ", kGradVsF32, ")");

    // A step whose gradient holds an inf: the found-inf path skips it on both devices and halves the scale;
    // the parameters stay exactly as they were.
    const NamedTensors cb = snapshot(*cpu.model), mb = snapshot(*mode.model);
    const train::StepResult rc = cpu.step(x, y, 200, true);
    const train::StepResult rm = mode.step(x, y, 200, true);
    CHECK(!rc.stepped);
    CHECK(!rm.stepped);
    CHECK(cpu.scaler->last_step_skipped());
    CHECK(mode.scaler->last_step_skipped());
    CHECK(rc.loss_scale == 512.0);
    CHECK(rm.loss_scale == 512.0);
    CHECK(host_values(mode.scaler->scale_tensor())[0] == 512.0);  // the device copy of the scale
    CHECK(mode.scaler->growth_tracker() == 0);
    const NamedTensors ma = mode.model->named_parameters(), ca = cpu.model->named_parameters();
    for (size_t i = 0; i < ma.size(); ++i) {
      CAPTURE(ma[i].first);
      CHECK(bit_equal(host_values(mb[i].second), host_values(ma[i].second)));
      CHECK(bit_equal(host_values(cb[i].second), host_values(ca[i].second)));
    }
  }
}

}  // namespace

TEST_CASE("CPU mode step: two --amp --kernels kiln small_cnn steps with SGD momentum match the CPU backend") {
  run_steps(Opt::sgd);
}

TEST_CASE("CPU mode step: two --amp --kernels kiln small_cnn steps with AdamW match the CPU backend") {
  run_steps(Opt::adamw);
}

TEST_CASE("CPU mode step: under --kernels vendor the step stops at the first cuDNN call, naming it") {
  manual_seed(34);
  auto init_model = models::small_cnn(10, 1, kImage);
  const Tensor x = normal({2, 1, kImage, kImage}, 0.0, 1.0);
  const Tensor y = tensor_from<int64_t>({1, 2}, {2});
  auto installed = cuda_on_cpu::install_as_cuda_backend();
  std::string msg;
  {
    Side mode(init_model->state_dict(), kDev, Opt::sgd);  // --kernels vendor: the default
    try {
      (void)mode.step(x, y, 1, false);
    } catch (const Error& e) {
      msg = e.what();
    }
  }
  INFO("error: " << msg);
  // The f16 convolution goes to cuDNN under vendor: its handle (runtime_shim.cpp: "cudnn_handle: a cuDNN
  // call in the CPU mode") or, in a build without cuDNN (the sanitizer build), the convolution entry point
  // says cuDNN is needed ("kiln was built without cuDNN; use --kernels kiln").
  CHECK((msg.find("cudnn_handle: a cuDNN call in the CPU mode") != std::string::npos ||
         msg.find("conv2d_forward (16-bit) on cuda: kiln was built without cuDNN") != std::string::npos));
}

TEST_CASE("CPU mode as cuda:0: host memory, memcpy copies and deferred errors, for the install's lifetime only") {
  std::string why;
  const bool before = device_present(kDev, &why);
  // before: false here (a build without CUDA, or a CUDA build that finds no device); true on a GPU machine.
  Tensor survivor;  // outlives the install: its allocator must stay alive (retired), not be destroyed under it
  {
    auto installed = cuda_on_cpu::install_as_cuda_backend();
    survivor = to_device(full({1000}, 2.0), kDev);
    REQUIRE(device_present(kDev, &why));
    CHECK(!device_present(Device::cuda(1), &why));  // one device
    CHECK(why.find("1 CUDA devices visible") != std::string::npos);
    const Tensor h = tensor_from(std::vector<float>{1.5f, -0.0f, INFINITY, -3.25f}, {4});
    Tensor d = to_device(h, kDev);
    CHECK(d.device() == kDev);
    const std::vector<float> back = to_device(d, Device::cpu()).to_vector<float>();
    REQUIRE(back.size() == 4);
    CHECK(std::memcmp(back.data(), h.to_vector<float>().data(), 4 * sizeof(float)) == 0);  // bit for bit, -0 too
    // An out-of-range class target: found by loss.cu on the "device", reported at the copy to the host.
    Tensor logits = to_device(uniform({3, 5}, -1, 1), kDev);
    Tensor target = to_device(tensor_from<int64_t>({0, 9, 1}, {3}), kDev);
    Tensor loss = cross_entropy(logits, target);  // no error yet (deferred)
    std::string msg;
    try {
      (void)to_device(loss, Device::cpu());
    } catch (const Error& e) {
      msg = e.what();
    }
    INFO("deferred error: " << msg);
    CHECK(msg.find("cross_entropy") != std::string::npos);
    CHECK(msg.find("9") != std::string::npos);
  }
  CHECK(device_present(kDev, &why) == before);  // the previous backend (and its allocator) is back
  CHECK(survivor.device() == kDev);
  survivor = Tensor();  // freed into the retired CPU-mode allocator (ASan: no use after free)
}
