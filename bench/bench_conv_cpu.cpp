// Benchmark: kiln's CPU conv2d (forward, input grad, weight grad) on ResNet18's conv shapes at
// batch 8 x 224, against torch.nn.functional.conv2d (bench/peers/conv_torch.py, run through
// /usr/bin/python3 with the same thread count) in the same run. Prints GFLOP/s per shape and the
// time ratio kiln / torch. Timing only: correctness lives in tests/unit/test_kernels_conv.cpp.
//
// usage: bench_conv_cpu [--threads N] [--batch B] [--size S] [--reps R] [--no-peer] [--only NAME] [--algos]
//                       [--pass fwd|bwd_in|bwd_w] [--bf16] [--bf16-wgrad] [--channels-last]
//                       [--model resnet18|small_cnn]
// --pass times only that pass (the others print 0): for instruction counts under callgrind.
//
// The algorithm of the three passes follows KILN_CPU_CONV=auto|im2col|winograd|taps
// (conv2d.h; auto when unset: Winograd F(2x2,3x3) on the 3x3 stride-1 layers where it pays, valid
// taps on small planes where they pay, im2col elsewhere). --algos instead
// times only the shapes Winograd applies to, im2col against Winograd for fwd, bwd_in and bwd_w,
// alternating the two call by call (im2col, winograd, winograd, im2col, ...) so both see the same
// machine load, and prints the medians of --reps calls each and their ratio (no peer).
// --bf16 times the bf16 kernels (kernels/cpu/conv2d_bf16.h: oneDNN on the path KILN_CPU_ISA picks, amx or
// avx512_bf16) against kiln's f32 kernels on the same shape, alternating call by call, medians of --reps,
// and prints the CPU model, ISA and oneDNN implementation per shape (no peer). --model small_cnn takes the
// small CNN's two convolutions (1->32 at --size, 32->64 at --size/2; --size 28 for Fashion-MNIST).
// --bf16-wgrad times the bf16 weight gradient's five ways (cpu::Bf16Wgrad: f32 staging with its
// conversions, oneDNN's one call, the split per kiln thread by images and by output channels, im2col + matmul)
// round-robin, and
// names the one the rule picks. --channels-last makes --bf16 and --bf16-wgrad call the bf16 kernels on NHWC
// activations (cpu::Bf16Layout::nhwc, as the channels-last training step does; the data are random, so only
// the layout the kernels are told changes); kiln's f32 kernels (the f32 column, the f32 staging way) stay NCHW.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/common/nn_desc.h"
#include "engine/core/half.h"
#include "kernels/cpu/bf16_path.h"
#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/conv2d_bf16.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/conv2d_winograd.h"
#include "kernels/cpu/threads.h"

#include "bench/bench_cli.h"
#include "bench/peer_path.h"

using namespace kiln;

namespace {

struct Shape {
  const char* name;
  int count;  // how many convs of this shape ResNet18 has
  int64_t C, H, K, R, stride, pad;
};

// ResNet18 (torchvision) at 224: stem, then per stage the first 3x3 (maybe strided), the other
// 3x3s, and the 1x1 stride-2 downsample. H is the input size at 224 (scaled for other sizes).
const Shape kShapes[] = {
    {"conv1 7x7/2", 1, 3, 224, 64, 7, 2, 3},     {"layer1 3x3", 4, 64, 56, 64, 3, 1, 1},
    {"layer2.0 3x3/2", 1, 64, 56, 128, 3, 2, 1}, {"layer2 3x3", 3, 128, 28, 128, 3, 1, 1},
    {"layer2 ds 1x1/2", 1, 64, 56, 128, 1, 2, 0}, {"layer3.0 3x3/2", 1, 128, 28, 256, 3, 2, 1},
    {"layer3 3x3", 3, 256, 14, 256, 3, 1, 1},    {"layer3 ds 1x1/2", 1, 128, 28, 256, 1, 2, 0},
    {"layer4.0 3x3/2", 1, 256, 14, 512, 3, 2, 1}, {"layer4 3x3", 3, 512, 7, 512, 3, 1, 1},
    {"layer4 ds 1x1/2", 1, 256, 14, 512, 1, 2, 0},
};

// The small CNN (models/small_cnn.cpp) at 28 px: H is the input size at 28 (scaled for other sizes).
const Shape kSmallCnnShapes[] = {
    {"conv1 1->32", 1, 1, 28, 32, 3, 1, 1},
    {"conv2 32->64", 1, 32, 14, 64, 3, 1, 1},
};

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

template <typename F>
double median_ms(int reps, F f) {
  f();  // warm-up
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    double t0 = now_ms();
    f();
    t.push_back(now_ms() - t0);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Times call(pass, variant) for the three passes, the two variants alternating call by call (which goes first
// swaps each repetition), after one warm-up of each; m[pass][variant] is the median of reps calls.
template <class Call>
void alternating_medians(Call&& call, int reps, double m[3][2]) {
  std::vector<double> t[3][2];
  for (int pass = 0; pass < 3; ++pass) {
    call(pass, 0), call(pass, 1);  // warm-up
    for (int r = 0; r < reps; ++r) {
      const int first = r % 2;
      const double a = call(pass, first), b = call(pass, 1 - first);
      t[pass][first].push_back(a);
      t[pass][1 - first].push_back(b);
    }
  }
  for (int pass = 0; pass < 3; ++pass)
    for (int k = 0; k < 2; ++k) {
      std::sort(t[pass][k].begin(), t[pass][k].end());
      m[pass][k] = t[pass][k][t[pass][k].size() / 2];
    }
}

const char* layout_name(cpu::Bf16Layout l) { return l == cpu::Bf16Layout::nhwc ? "NHWC" : "NCHW"; }

std::string peer_path() {
  return kiln_bench::peers_dir(__FILE__) + "/conv_torch.py";
}

// --algos: im2col against Winograd, fwd, bwd_in and bwd_w, alternating call by call (ABBA).
int compare_algos(const std::vector<Conv2dDesc>& descs, const std::vector<const Shape*>& shapes, int threads,
                  int reps) {
  using cpu::Conv2dAlgo;
  std::printf("conv2d CPU im2col vs Winograd F(2x2,3x3), %d threads, alternating calls, median of %d (ms)\n",
              threads, reps);
  std::printf("%-16s %-16s %9s %9s %7s | %9s %9s %7s | %9s %9s %7s\n", "shape", "N,C,H,K", "fwd i2c", "fwd wino",
              "ratio", "bwdi i2c", "bwdi wino", "ratio", "bwdw i2c", "bwdw wino", "ratio");
  std::mt19937 g(0);
  std::uniform_real_distribution<float> u(-1, 1);
  double tot[6] = {0, 0, 0, 0, 0, 0};
  for (size_t si = 0; si < descs.size(); ++si) {
    const Conv2dDesc& d = descs[si];
    if (!cpu::winograd_applies(d)) continue;
    std::vector<float> x(d.N * d.C * d.H * d.W), w(d.K * d.C * d.R * d.S), y(d.N * d.K * d.out_h() * d.out_w());
    std::vector<float> dx(x.size()), dy(y.size()), dw(w.size());
    for (auto& v : x) v = u(g);
    for (auto& v : w) v = u(g);
    for (auto& v : dy) v = u(g);
    cpu::conv2d_set_algo(Conv2dAlgo::winograd);
    size_t bytes = cpu::conv2d_workspace_bytes(d, sizeof(float));
    cpu::conv2d_set_algo(Conv2dAlgo::im2col);
    bytes = std::max(bytes, cpu::conv2d_workspace_bytes(d, sizeof(float)));
    std::vector<unsigned char> ws(bytes + 64);
    // call(pass, algo): pass 0 fwd, 1 bwd_in, 2 bwd_w; algo 0 im2col, 1 winograd.
    auto call = [&](int pass, int algo) {
      cpu::conv2d_set_algo(algo ? Conv2dAlgo::winograd : Conv2dAlgo::im2col);
      const double t0 = now_ms();
      if (pass == 0) cpu::conv2d_forward<float>(d, x.data(), w.data(), nullptr, y.data(), ws.data());
      else if (pass == 1) cpu::conv2d_backward_input<float>(d, dy.data(), w.data(), dx.data(), ws.data());
      else cpu::conv2d_backward_weight<float>(d, x.data(), dy.data(), dw.data(), nullptr, ws.data());
      return now_ms() - t0;
    };
    double m[3][2];
    alternating_medians(call, reps, m);
    for (int pass = 0; pass < 3; ++pass)
      for (int algo = 0; algo < 2; ++algo) tot[pass * 2 + algo] += shapes[si]->count * m[pass][algo];
    char dims[64];
    std::snprintf(dims, sizeof dims, "%lld,%lld,%lld,%lld", (long long)d.N, (long long)d.C, (long long)d.H,
                  (long long)d.K);
    std::printf("%-16s %-16s %9.2f %9.2f %6.2fx | %9.2f %9.2f %6.2fx | %9.2f %9.2f %6.2fx\n", shapes[si]->name,
                dims, m[0][0], m[0][1], m[0][1] / m[0][0], m[1][0], m[1][1], m[1][1] / m[1][0], m[2][0], m[2][1],
                m[2][1] / m[2][0]);
    std::fflush(stdout);
  }
  cpu::conv2d_set_algo(Conv2dAlgo::automatic);
  auto ratio = [&](int pass) { return tot[2 * pass] > 0 ? tot[2 * pass + 1] / tot[2 * pass] : 0.0; };
  std::printf("weighted by ResNet18 count: fwd %.1f -> %.1f ms (%.2fx), bwd_in %.1f -> %.1f ms (%.2fx), "
              "bwd_w %.1f -> %.1f ms (%.2fx)\n",
              tot[0], tot[1], ratio(0), tot[2], tot[3], ratio(1), tot[4], tot[5], ratio(2));
  return 0;
}

// --bf16: kiln f32 against the bf16 kernels, fwd, bwd_in and bwd_w, alternating call by call.
int compare_bf16(const std::vector<Conv2dDesc>& descs, const std::vector<const Shape*>& shapes, int threads,
                 int reps, cpu::Bf16Layout layout) {
  using cpu::Bf16Bias;
  using cpu::Conv2dPass;
  const cpu::Bf16Path path = cpu::bf16_path();
  std::printf("conv2d CPU bf16 (%s, layout %s) vs kiln f32 (NCHW), %s, isa %s, oneDNN %s, %d threads, alternating "
              "calls, median of %d (ms)\n",
              cpu::bf16_path_name(path), layout_name(layout), cpu::cpu_model_name().c_str(),
              cpu::cpu_isa_name(cpu::cpu_isa()), cpu::onednn_version().c_str(), threads, reps);
  if (path == cpu::Bf16Path::portable) {
    std::fprintf(stderr, "bench_conv_cpu --bf16: the bf16 path is portable (f32 staging); set KILN_CPU_ISA=amx or "
                         "avx512_bf16 on a CPU that has it\n");
    return 1;
  }
  std::printf("%-16s %-14s %8s %8s %6s | %8s %8s %6s | %8s %8s %6s | %s\n", "shape", "N,C,H,K", "fwd f32", "fwd bf16",
              "ratio", "bwdi f32", "bwdi bf", "ratio", "bwdw f32", "bwdw bf", "ratio", "oneDNN fwd / bwd_in / bwd_w");
  std::mt19937 g(0);
  std::uniform_real_distribution<float> u(-1, 1);
  double tot[6] = {0, 0, 0, 0, 0, 0};
  for (size_t si = 0; si < descs.size(); ++si) {
    const Conv2dDesc& d = descs[si];
    std::vector<float> x(d.N * d.C * d.H * d.W), w(d.K * d.C * d.R * d.S), y(d.N * d.K * d.out_h() * d.out_w());
    std::vector<float> dx(x.size()), dy(y.size()), dw(w.size());
    for (auto& v : x) v = u(g);
    for (auto& v : w) v = u(g);
    for (auto& v : dy) v = u(g);
    std::vector<bfloat16> xb(x.size()), wb(w.size()), yb(y.size()), dxb(x.size()), dyb(y.size()), dwb(w.size());
    for (size_t i = 0; i < x.size(); ++i) xb[i] = bfloat16(x[i]);
    for (size_t i = 0; i < w.size(); ++i) wb[i] = bfloat16(w[i]);
    for (size_t i = 0; i < dy.size(); ++i) dyb[i] = bfloat16(dy[i]);
    std::vector<unsigned char> ws(cpu::conv2d_workspace_bytes(d, sizeof(float)) + 64);
    const size_t bbytes =
        std::max({cpu::conv2d_bf16_workspace_bytes(d, Conv2dPass::forward, Bf16Bias::none, layout),
                  cpu::conv2d_bf16_workspace_bytes(d, Conv2dPass::backward_input, Bf16Bias::none, layout),
                  cpu::conv2d_bf16_workspace_bytes(d, Conv2dPass::backward_weight, Bf16Bias::none, layout)});
    std::vector<unsigned char> wsb(bbytes);
    auto call = [&](int pass, int bf) {
      const double t0 = now_ms();
      if (!bf) {
        if (pass == 0) cpu::conv2d_forward<float>(d, x.data(), w.data(), nullptr, y.data(), ws.data());
        else if (pass == 1) cpu::conv2d_backward_input<float>(d, dy.data(), w.data(), dx.data(), ws.data());
        else cpu::conv2d_backward_weight<float>(d, x.data(), dy.data(), dw.data(), nullptr, ws.data());
      } else {
        if (pass == 0)
          cpu::conv2d_bf16_forward(d, xb.data(), wb.data(), nullptr, Bf16Bias::none, yb.data(), wsb.data(), layout);
        else if (pass == 1)
          cpu::conv2d_bf16_backward_input(d, dyb.data(), wb.data(), dxb.data(), wsb.data(), layout);
        else
          cpu::conv2d_bf16_backward_weight(d, xb.data(), dyb.data(), dwb.data(), nullptr, Bf16Bias::none, wsb.data(),
                                           layout);
      }
      return now_ms() - t0;
    };
    double m[3][2];
    alternating_medians(call, reps, m);
    for (int pass = 0; pass < 3; ++pass)
      for (int k = 0; k < 2; ++k) tot[pass * 2 + k] += shapes[si]->count * m[pass][k];
    char dims[64];
    std::snprintf(dims, sizeof dims, "%lld,%lld,%lld,%lld", (long long)d.N, (long long)d.C, (long long)d.H,
                  (long long)d.K);
    std::printf("%-16s %-14s %8.2f %8.2f %5.2fx | %8.2f %8.2f %5.2fx | %8.2f %8.2f %5.2fx | %s / %s / %s\n",
                shapes[si]->name, dims, m[0][0], m[0][1], m[0][1] / m[0][0], m[1][0], m[1][1], m[1][1] / m[1][0],
                m[2][0], m[2][1], m[2][1] / m[2][0],
                std::string(cpu::conv2d_bf16_impl_name(d, Conv2dPass::forward, Bf16Bias::none, layout)).c_str(),
                std::string(cpu::conv2d_bf16_impl_name(d, Conv2dPass::backward_input, Bf16Bias::none, layout)).c_str(),
                std::string(cpu::conv2d_bf16_impl_name(d, Conv2dPass::backward_weight, Bf16Bias::none, layout)).c_str());
    std::fflush(stdout);
  }
  std::printf("weighted by count: fwd %.1f -> %.1f ms (%.2fx), bwd_in %.1f -> %.1f ms (%.2fx), bwd_w %.1f -> %.1f "
              "ms (%.2fx)\n",
              tot[0], tot[1], tot[1] / tot[0], tot[2], tot[3], tot[3] / tot[2], tot[4], tot[5], tot[5] / tot[4]);
  return 0;
}

// --bf16-wgrad: the bf16 weight gradient's five ways (cpu::Bf16Wgrad) round-robin call by call, rotating
// which goes first, medians of --reps: f32 staging as the op runs it (x and dy converted to f32, kiln's f32
// kernel, dw rounded to bf16: the conversions timed too), oneDNN's one call over all images (threaded by
// oneDNN), the split (one single-threaded oneDNN call per kiln thread on its images, partials summed) and the
// split by channel (one single-threaded call per kiln thread on its output channels, no sum), and im2col + one
// oneDNN matmul.
int compare_bf16_wgrad(const std::vector<Conv2dDesc>& descs, const std::vector<const Shape*>& shapes, int threads,
                       int reps, cpu::Bf16Layout layout) {
  using cpu::Bf16Bias;
  using cpu::Bf16Wgrad;
  using cpu::Conv2dPass;
  const cpu::Bf16Path path = cpu::bf16_path();
  if (path == cpu::Bf16Path::portable) {
    std::fprintf(stderr, "bench_conv_cpu --bf16-wgrad: the bf16 path is portable (f32 staging); set KILN_CPU_ISA=amx "
                         "or avx512_bf16 on a CPU that has it\n");
    return 1;
  }
  std::printf("conv2d CPU bf16 weight gradient (%s), layout %s (f32 staging: NCHW), %s, oneDNN %s, %d threads, "
              "round-robin calls, median of %d (ms)\n",
              cpu::bf16_path_name(path), layout_name(layout), cpu::cpu_model_name().c_str(),
              cpu::onednn_version().c_str(), threads, reps);
  std::printf("%-16s %-14s %9s %9s %9s %9s %9s | %6s %6s %6s %6s | %s\n", "shape", "N,C,H,K", "f32 stage", "onednn",
              "split", "channels", "im2col", "on/f32", "sp/f32", "ch/f32", "ic/f32", "rule picks");
  std::mt19937 g(0);
  std::uniform_real_distribution<float> u(-1, 1);
  constexpr int kWays = 5;
  double tot[kWays] = {0, 0, 0, 0, 0}, tot_rule = 0;
  const Bf16Wgrad ways[kWays] = {Bf16Wgrad::f32_staging, Bf16Wgrad::onednn, Bf16Wgrad::split,
                                 Bf16Wgrad::split_channels, Bf16Wgrad::im2col};
  for (size_t si = 0; si < descs.size(); ++si) {
    const Conv2dDesc& d = descs[si];
    const Bf16Wgrad rule = cpu::conv2d_bf16_wgrad(d, layout);
    std::vector<bfloat16> xb(d.N * d.C * d.H * d.W), dyb(d.N * d.K * d.out_h() * d.out_w()), dwb(d.K * d.C * d.R * d.S);
    for (auto& v : xb) v = bfloat16(u(g));
    for (auto& v : dyb) v = bfloat16(u(g));
    std::vector<float> xf(xb.size()), dyf(dyb.size()), dwf(dwb.size());
    std::vector<unsigned char> ws(cpu::conv2d_workspace_bytes(d, sizeof(float)) + 64);
    size_t bbytes[kWays] = {0, 0, 0, 0, 0};
    for (int k = 1; k < kWays; ++k) {
      cpu::set_bf16_wgrad_forced(ways[k]);
      bbytes[k] = cpu::conv2d_bf16_workspace_bytes(d, Conv2dPass::backward_weight, Bf16Bias::none, layout);
    }
    std::vector<unsigned char> wsb(*std::max_element(bbytes + 1, bbytes + kWays));
    auto call = [&](int k) {
      const double t0 = now_ms();
      if (k == 0) {
        const int64_t nx = (int64_t)xb.size(), ny = (int64_t)dyb.size(), nw = (int64_t)dwb.size();
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < nx; ++i) xf[i] = (float)xb[i];
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < ny; ++i) dyf[i] = (float)dyb[i];
        cpu::conv2d_backward_weight<float>(d, xf.data(), dyf.data(), dwf.data(), nullptr, ws.data());
#pragma omp parallel for schedule(static)
        for (int64_t i = 0; i < nw; ++i) dwb[i] = bfloat16(dwf[i]);
      } else {
        cpu::set_bf16_wgrad_forced(ways[k]);
        cpu::conv2d_bf16_backward_weight(d, xb.data(), dyb.data(), dwb.data(), nullptr, Bf16Bias::none, wsb.data(),
                                         layout);
      }
      return now_ms() - t0;
    };
    std::vector<double> t[kWays];
    for (int k = 0; k < kWays; ++k) call(k);  // warm-up
    for (int r = 0; r < reps; ++r)
      for (int j = 0; j < kWays; ++j) {
        const int k = (r + j) % kWays;
        t[k].push_back(call(k));
      }
    cpu::set_bf16_wgrad_forced(Bf16Wgrad::by_rule);
    double m[kWays];
    for (int k = 0; k < kWays; ++k) {
      std::sort(t[k].begin(), t[k].end());
      m[k] = t[k][t[k].size() / 2];
      tot[k] += shapes[si]->count * m[k];
    }
    tot_rule += shapes[si]->count * m[rule == Bf16Wgrad::f32_staging ? 0
                                      : rule == Bf16Wgrad::onednn    ? 1
                                      : rule == Bf16Wgrad::split     ? 2
                                      : rule == Bf16Wgrad::im2col    ? 4
                                                                     : 3];
    char dims[64];
    std::snprintf(dims, sizeof dims, "%lld,%lld,%lld,%lld", (long long)d.N, (long long)d.C, (long long)d.H,
                  (long long)d.K);
    std::printf("%-16s %-14s %9.2f %9.2f %9.2f %9.2f %9.2f | %5.2fx %5.2fx %5.2fx %5.2fx | %s\n", shapes[si]->name, dims,
                m[0], m[1], m[2], m[3], m[4], m[1] / m[0], m[2] / m[0], m[3] / m[0], m[4] / m[0],
                cpu::bf16_wgrad_name(rule));
    std::fflush(stdout);
  }
  std::printf("weighted by count: f32 staging %.1f ms, onednn %.1f ms (%.2fx), split %.1f ms (%.2fx), split by "
              "channel %.1f ms (%.2fx), im2col %.1f ms (%.2fx), the rule's picks %.1f ms (%.2fx)\n",
              tot[0], tot[1], tot[1] / tot[0], tot[2], tot[2] / tot[0], tot[3], tot[3] / tot[0], tot[4],
              tot[4] / tot[0], tot_rule, tot_rule / tot[0]);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  cpu::ensure_omp_wait_policy(argv);  // as the kiln command does (see threads.h)
  CLI::App app{"bench_conv_cpu: kiln's CPU convolutions (forward, input and weight gradients) of ResNet shapes "
               "against PyTorch's in the same run"};
  app.name("bench_conv_cpu");
  int threads = 2, reps = 3;
  int64_t batch = 8, size = 224;
  bool no_peer = false, algos = false, bf16 = false, bf16_wgrad = false, channels_last = false;
  std::string model = "resnet18";
  std::string only, pass;  // pass: empty = all three
  app.add_option("--threads", threads, "CPU threads")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--batch", batch, "batch")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--size", size, "input height = width")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--reps", reps, "repetitions (best kept)")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_flag("--no-peer", no_peer, "kiln only (no PyTorch)");
  app.add_option("--only", only, "run only shapes whose name contains this");
  app.add_flag("--algos", algos, "time every convolution algorithm kiln has for each shape");
  app.add_flag("--bf16", bf16, "time the bf16 kernels (oneDNN, KILN_CPU_ISA's path) against kiln's f32 ones");
  app.add_flag("--bf16-wgrad", bf16_wgrad, "time the bf16 weight gradient's five ways: f32 staging, oneDNN, split, split by channel, im2col + matmul");
  app.add_flag("--channels-last", channels_last,
               "--bf16 / --bf16-wgrad: the bf16 kernels on NHWC activations (as the channels-last step)");
  app.add_option("--model", model, "whose conv shapes")->check(CLI::IsMember({"resnet18", "small_cnn"}))
      ->capture_default_str();
  app.add_option("--pass", pass, "one pass only")->check(CLI::IsMember({"fwd", "bwd_in", "bwd_w"}));
  return kiln_bench::run(app, argc, argv, [&]() -> int {
  bool peer = !no_peer;
  cpu::set_num_threads(threads);

  std::vector<Conv2dDesc> descs;
  std::vector<const Shape*> shapes;
  const bool small = model == "small_cnn";
  const Shape* begin = small ? std::begin(kSmallCnnShapes) : std::begin(kShapes);
  const Shape* end = small ? std::end(kSmallCnnShapes) : std::end(kShapes);
  const int64_t base = small ? 28 : 224;
  for (const Shape* sp = begin; sp != end; ++sp) {
    const Shape& s = *sp;
    if (!only.empty() && std::string(s.name).find(only) == std::string::npos) continue;
    shapes.push_back(&s);
    Conv2dDesc d;
    d.N = batch, d.C = s.C, d.H = d.W = s.H * size / base, d.K = s.K, d.R = d.S = s.R;
    d.stride_h = d.stride_w = s.stride, d.pad_h = d.pad_w = s.pad;
    descs.push_back(d);
  }

  if (algos) return compare_algos(descs, shapes, threads, reps);
  const cpu::Bf16Layout layout = channels_last ? cpu::Bf16Layout::nhwc : cpu::Bf16Layout::nchw;
  if (channels_last && !bf16 && !bf16_wgrad) {
    std::fprintf(stderr, "bench_conv_cpu: --channels-last applies to --bf16 and --bf16-wgrad only\n");
    return 2;
  }
  if (bf16) return compare_bf16(descs, shapes, threads, reps, layout);
  if (bf16_wgrad) return compare_bf16_wgrad(descs, shapes, threads, reps, layout);

  // Peer first (its own process, run to completion), so the two never share the cores.
  std::vector<double> pf(descs.size(), -1), pb(descs.size(), -1);
  if (peer) {
    std::string shapes;
    for (const auto& d : descs)
      shapes += std::to_string(d.N) + "," + std::to_string(d.C) + "," + std::to_string(d.H) + "," +
                std::to_string(d.W) + "," + std::to_string(d.K) + "," + std::to_string(d.R) + "," +
                std::to_string(d.S) + "," + std::to_string(d.stride_h) + "," + std::to_string(d.pad_h) + ";";
    std::string cmd = "/usr/bin/python3 " + peer_path() + " --threads " + std::to_string(threads) +
                      " --reps " + std::to_string(reps) + " --shapes '" + shapes + "'";
    FILE* p = popen((cmd + " 2>/dev/null").c_str(), "r");
    size_t i = 0;
    if (p) {
      double f, b;
      while (i < descs.size() && std::fscanf(p, "%lf %lf", &f, &b) == 2) pf[i] = f, pb[i++] = b;
      pclose(p);
    }
    if (i != descs.size()) std::fprintf(stderr, "peer failed (%s); printing kiln only\n", cmd.c_str());
  }

  const char* policy = std::getenv("OMP_WAIT_POLICY");
  std::printf("conv2d CPU, batch %lld x %lld, %d threads, OMP_WAIT_POLICY=%s, median of %d (ms; GFLOP/s = "
              "2*MACs/time)\n",
              (long long)batch, (long long)size, threads, policy ? policy : "(default)", reps);
  std::printf("%-16s %3s %8s %8s %8s %7s %7s %7s | %8s %8s | %6s %6s\n", "shape", "n", "fwd", "bwd_in",
              "bwd_w", "GF/s f", "GF/s bi", "GF/s bw", "torch f", "torch b", "x fwd", "x bwd");
  double tot_k = 0, tot_t = 0;
  std::mt19937 g(0);
  std::uniform_real_distribution<float> u(-1, 1);
  for (size_t si = 0; si < descs.size(); ++si) {
    const Conv2dDesc& d = descs[si];
    std::vector<float> x(d.N * d.C * d.H * d.W), w(d.K * d.C * d.R * d.S), y(d.N * d.K * d.out_h() * d.out_w());
    std::vector<float> dx(x.size()), dw(w.size()), dy(y.size());
    for (auto& v : x) v = u(g);
    for (auto& v : w) v = u(g);
    for (auto& v : dy) v = u(g);
    std::vector<unsigned char> ws(cpu::conv2d_workspace_bytes(d, sizeof(float)) + 64);
    auto runs = [&](const char* name) { return pass.empty() || pass == name; };
    double tf = 0, ti = 0, tw = 0;
    if (runs("fwd"))
      tf = median_ms(reps, [&] { cpu::conv2d_forward<float>(d, x.data(), w.data(), nullptr, y.data(), ws.data()); });
    if (runs("bwd_in"))
      ti = median_ms(reps, [&] { cpu::conv2d_backward_input<float>(d, dy.data(), w.data(), dx.data(), ws.data()); });
    if (runs("bwd_w"))
      tw = median_ms(reps, [&] {
        cpu::conv2d_backward_weight<float>(d, x.data(), dy.data(), dw.data(), nullptr, ws.data());
      });
    double gflop = 2.0 * d.forward_macs() * 1e-9;
    int cnt = shapes[si]->count;
    std::printf("%-16s %3d %8.2f %8.2f %8.2f %7.1f %7.1f %7.1f | %8.2f %8.2f | %6.2f %6.2f\n", shapes[si]->name,
                cnt, tf, ti, tw, gflop / tf * 1e3, gflop / ti * 1e3, gflop / tw * 1e3, pf[si], pb[si],
                pf[si] > 0 ? tf / pf[si] : 0.0, pb[si] > 0 ? (ti + tw) / pb[si] : 0.0);
    tot_k += cnt * (tf + ti + tw);
    tot_t += cnt * (pf[si] + pb[si]);
  }
  std::printf("ResNet18 convs fwd+bwd (weighted by count): kiln %.1f ms", tot_k);
  if (peer && tot_t > 0) std::printf(", torch %.1f ms, ratio kiln/torch %.2f", tot_t, tot_k / tot_t);
  std::printf("\n");
  return 0;
  });
}
