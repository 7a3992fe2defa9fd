// ResNet18 training-step benchmark, kiln against PyTorch in the same run: one step = zero grads,
// forward, cross-entropy, backward, SGD momentum step, at batch 8 x 224 and batch 32 x 64 (3
// channels, 1000 classes), or one shape given by --batch and --image-size. Prints the median step
// time of each and the ratio kiln / torch, then one line "kiln <shape>: <images/s> images/s, peak
// <bytes>; step spread kiln <min>-<max> ms, torch <min>-<max> ms" per shape (tools/gpu-check reads the
// last one).
//   bench_train_step [--threads T] [--device cpu|cuda:N] [--steps N] [--warmup N] [--no-peer]
//                    [--batch B --image-size S] [--amp [f16|bf16]] [--kernels vendor|kiln] [--channels-last]
//                    [--cudnn-benchmark] [--recompute N] [--conv-algos]
//                    [--peer-python PATH] [--peer-mode auto|f32|channels_last|bf16]
// --recompute N times the plain step against the same step with the model split into N
// recompute-on-backward segments (kiln train's --recompute N), step by step in alternating order
// (plain, recompute, recompute, plain, ...) so both see the same machine load; it prints both
// medians, their ratio and the median of the per-pair ratios. No peer then.
// --cudnn-benchmark times cuDNN's algorithms per convolution shape on first use (kiln's
// cuda::set_cudnn_benchmark, PyTorch's torch.backends.cudnn.benchmark = True; a PyTorch GPU row
// compared with it must set that too).
// --conv-algos times the CPU step with conv2d's three passes on im2col against the
// automatic choice (Winograd F(2x2,3x3) on the 3x3 stride-1 layers, kernels/cpu/conv2d.h), one model,
// steps alternating (im2col, auto, auto, im2col, ...); prints both medians and their ratio. No peer
// then. Without it, the environment variable KILN_CPU_CONV=auto|im2col|winograd|taps picks the algorithm.
// --amp (or --amp f16) is kiln train's: f16 autocast around forward + loss, LossScaler around backward
// and step. --amp bf16: AutocastGuard(true, DType::bf16) around forward + loss, no loss scaler (bf16 has
// f32's range), f32 master weights (issue 35).
// --kernels picks cuBLAS/cuDNN or kiln's Tensor Core kernels on CUDA; --channels-last feeds the
// model an NHWC input. Each step is train::train_step (the trainer's) and ends with a read of the
// last parameter, so GPU steps are timed to completion.
// The peer is bench/peers/train_step_torch.py, same threads and shapes, on the CPU only (tools/gpu-check
// runs PyTorch's GPU rows itself), run by --peer-python (default Debian's /usr/bin/python3, torch 1.13;
// the pinned torch 2.x is bench/torch_venv.sh's venv) in --peer-mode: f32 (NCHW), channels_last (f32) or
// bf16 (torch.autocast("cpu", bfloat16), channels_last). auto (the default) follows kiln's mode: f32 ->
// f32, --channels-last -> channels_last, --amp bf16 -> bf16; --amp f16 has no CPU peer. The peer's
// torch version, mode and layout are printed after the table.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sys/wait.h>
#include <string>
#include <vector>
#include <algorithm>
#include <chrono>
#include <iostream>
#include <memory>

#include <nlohmann/json.hpp>

#include "engine/ops/ops.h"
#include "engine/optim/sgd.h"
#include "kernels/cpu/conv2d.h"
#include "kernels/cpu/threads.h"
#include "models/registry.h"
#if defined(KILN_WITH_CUDA)
#include "kernels/cuda/handles.h"
#endif
#include "engine/train/train_step.h"
#include "engine/train/kernel_option.h"
#include "engine/train/memory_peak.h"

#include "bench/bench_cli.h"
#include "bench/peer_path.h"

using namespace kiln;

namespace {

struct Shape2 {
  int64_t batch, size;
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct Mode {
  bool amp = false, channels_last = false;
  DType amp_dtype = DType::f16;  // with amp: f16 (+ LossScaler) or bf16 (no scaler)
  int recompute = 0;  // > 0: also time the step with this many recompute segments
  bool conv_algos = false;  // im2col against auto conv2d, alternating steps
};

// One model + optimizer + scaler + batch, ready to step (the same setup as time_kiln's).
struct StepRig {
  nn::ModulePtr model;
  std::unique_ptr<optim::SGD> opt;
  std::unique_ptr<optim::LossScaler> scaler;
  train::StepOptions step;
  Tensor x, y;
};

StepRig make_rig(Shape2 s, Device d, Mode mode, int recompute) {
  manual_seed(0);
  StepRig r;
  r.model = models::make_model("resnet18", 1000, 3, s.size);
  r.model->to(d);
  r.model->train();
  if (recompute > 0) r.model->set_recompute_segments(recompute);
  optim::SGDOptions o;
  o.lr = 0.01;
  o.momentum = 0.9;
  r.opt = std::make_unique<optim::SGD>(r.model->named_parameters(), o);
  optim::LossScalerOptions so;
  so.enabled = mode.amp && mode.amp_dtype == DType::f16;
  r.scaler = std::make_unique<optim::LossScaler>(so, d);
  r.step.autocast = mode.amp;
  r.step.autocast_dtype = mode.amp_dtype;
  r.x = to_device(randn({s.batch, 3, s.size, s.size}), d);
  if (mode.channels_last) r.x = contiguous(r.x, MemoryFormat::channels_last);
  std::vector<int64_t> yv((size_t)s.batch);
  for (int64_t i = 0; i < s.batch; ++i) yv[(size_t)i] = (i * 37) % 1000;
  r.y = to_device(tensor_from(yv, {s.batch}), d);
  return r;
}

double time_one_step(StepRig& r) {
  auto t = std::chrono::steady_clock::now();
  train::train_step(*r.model, *r.opt, *r.scaler, Batch{r.x, r.y}, r.step);
  (void)sum(r.model->parameters().back()).item();  // waits for the step's kernels
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}

// Plain and recompute steps in alternating order (ABBA): per-step times of each.
void time_recompute_pair(Shape2 s, Device d, Mode mode, int steps, int warmup, std::vector<double>* plain,
                         std::vector<double>* rec) {
  StepRig a = make_rig(s, d, mode, 0), b = make_rig(s, d, mode, mode.recompute);
  for (int i = 0; i < warmup + steps; ++i) {
    const bool a_first = i % 2 == 0;
    const double t1 = time_one_step(a_first ? a : b);
    const double t2 = time_one_step(a_first ? b : a);
    if (i < warmup) continue;
    plain->push_back(a_first ? t1 : t2);
    rec->push_back(a_first ? t2 : t1);
  }
}

// --conv-algos: one rig, steps alternating im2col / automatic conv2d (ABBA): per-step times of each.
void time_conv_algos(Shape2 s, Device d, Mode mode, int steps, int warmup, std::vector<double>* im2col,
                     std::vector<double>* autom) {
  StepRig r = make_rig(s, d, mode, 0);
  auto step = [&](bool use_auto) {
    cpu::conv2d_set_algo(use_auto ? cpu::Conv2dAlgo::automatic : cpu::Conv2dAlgo::im2col);
    return time_one_step(r);
  };
  for (int i = 0; i < warmup + steps; ++i) {
    const bool auto_first = i % 2 == 1;
    const double t1 = step(auto_first), t2 = step(!auto_first);
    if (i < warmup) continue;
    im2col->push_back(auto_first ? t2 : t1);
    autom->push_back(auto_first ? t1 : t2);
  }
  cpu::conv2d_set_algo(cpu::Conv2dAlgo::automatic);
}

std::vector<double> time_kiln(Shape2 s, Device d, Mode mode, int steps, int warmup, int64_t* peak) {
  manual_seed(0);
  auto model = models::make_model("resnet18", 1000, 3, s.size);
  model->to(d);
  model->train();
  optim::SGDOptions o;
  o.lr = 0.01;
  o.momentum = 0.9;
  optim::SGD opt(model->named_parameters(), o);
  optim::LossScalerOptions so;
  so.enabled = mode.amp && mode.amp_dtype == DType::f16;  // bf16: no loss scaler
  optim::LossScaler scaler(so, d);
  train::StepOptions step;
  step.autocast = mode.amp;
  step.autocast_dtype = mode.amp_dtype;
  Tensor x = to_device(randn({s.batch, 3, s.size, s.size}), d);
  if (mode.channels_last) x = contiguous(x, MemoryFormat::channels_last);
  std::vector<int64_t> yv((size_t)s.batch);
  for (int64_t i = 0; i < s.batch; ++i) yv[(size_t)i] = (i * 37) % 1000;
  Tensor y = to_device(tensor_from(yv, {s.batch}), d);
  std::vector<double> ms;
  reset_peak_memory(d);
  for (int i = 0; i < warmup + steps; ++i) {
    auto t = std::chrono::steady_clock::now();
    train::train_step(*model, opt, scaler, Batch{x, y}, step);
    (void)sum(model->parameters().back()).item();  // waits for the step's kernels
    const double e = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
    if (i >= warmup) ms.push_back(e);
  }
  *peak = peak_memory_bytes(d);
  return ms;
}

// One argument for /bin/sh: single-quoted, its own single quotes escaped.
std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// What the torch peer reported: step times (ms, warm-up excluded; empty when it could not run) and
// which torch, mode and layout ran them.
struct PeerRun {
  std::vector<double> ms;
  std::string torch, mode, layout, cpu_capability, error;
};

PeerRun time_torch(const std::string& python, const std::string& script, const std::string& peer_mode, Shape2 s,
                   int threads, int steps, int warmup) {
  PeerRun r;
  const std::string cmd = shell_quote(python) + " " + shell_quote(script) + " --batch " + std::to_string(s.batch) +
                          " --size " + std::to_string(s.size) + " --threads " + std::to_string(threads) +
                          " --steps " + std::to_string(steps) + " --warmup " + std::to_string(warmup) +
                          " --mode " + peer_mode + " 2>/dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) {
    r.error = "could not start " + python;
    return r;
  }
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  if (status != 0) {
    r.error = python + " " + script + " exited with status " + std::to_string(WEXITSTATUS(status));
    return r;
  }
  try {
    const auto j = nlohmann::json::parse(out.substr(out.rfind('{')));
    r.ms = j["step_ms"].get<std::vector<double>>();
    r.torch = j.value("torch", "?");
    r.mode = j.value("mode", "f32");
    r.layout = j.value("layout", "nchw");
    r.cpu_capability = j.value("cpu_capability", "n/a");
  } catch (...) {
    r.ms.clear();
    r.error = python + " " + script + " printed no JSON line with step_ms";
  }
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  cpu::ensure_omp_wait_policy(argv);
  CLI::App app{"bench_train_step: one ResNet18 / small CNN training step of kiln against PyTorch's, same shapes, "
               "same run"};
  app.name("bench_train_step");
  int threads = 1, steps = 3, warmup = 1;
  bool no_peer = false, cudnn_bench = false;
  std::string device = "cpu", kernels = "vendor";
  int64_t batch = 0, size = 0;
  Mode mode;
  app.add_option("--threads", threads, "CPU threads")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--device", device, "cpu or cuda:N")->capture_default_str();
  app.add_option("--steps", steps, "timed steps")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--warmup", warmup, "untimed steps first")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_flag("--no-peer", no_peer, "kiln only (no PyTorch)");
  app.add_option("--batch", batch, "one shape: batch (with --image-size; default: the built-in table)")
      ->check(CLI::PositiveNumber);
  app.add_option("--image-size", size, "one shape: image size (with --batch)")->check(CLI::PositiveNumber);
  std::string amp, peer_python = "/usr/bin/python3", peer_mode = "auto";
  CLI::Option* amp_opt = app.add_option("--amp", amp, "mixed precision: --amp or --amp f16 (f16 autocast + loss "
                                                      "scaling), --amp bf16 (bf16 autocast, no loss scaler)")
                             ->expected(0, 1);
  app.add_option("--peer-python", peer_python, "python that runs the torch peer (bench/torch_venv.sh: torch 2.x)")
      ->capture_default_str();
  app.add_option("--peer-mode", peer_mode, "torch peer: f32, channels_last, bf16 (autocast, channels_last), or auto "
                                           "(kiln's mode)")
      ->check(CLI::IsMember({"auto", "f32", "channels_last", "bf16"}))
      ->capture_default_str();
  app.add_option("--kernels", kernels, "vendor or kiln")->check(CLI::IsMember({"vendor", "kiln"}))->capture_default_str();
  app.add_flag("--channels-last", mode.channels_last, "channels-last batches");
  app.add_flag("--cudnn-benchmark", cudnn_bench, "cuDNN's algorithm search (CUDA)");
  app.add_option("--recompute", mode.recompute, "recompute-on-backward segments")->check(CLI::NonNegativeNumber);
  app.add_flag("--conv-algos", mode.conv_algos, "print the convolution algorithms chosen");
  return kiln_bench::run(app, argc, argv, [&]() -> int {
  bool peer = !no_peer;
  if (amp_opt->count() > 0) {
    if (amp.empty() || amp == "f16") {
      mode.amp = true;
    } else if (amp == "bf16") {
      mode.amp = true;
      mode.amp_dtype = DType::bf16;
    } else {
      std::fprintf(stderr, "bench_train_step: error: --amp takes f16 or bf16 (or nothing: f16), got '%s'\n", amp.c_str());
      return 2;
    }
  }
  if ((batch > 0) != (size > 0) || batch < 0 || size < 0 || steps < 1 || warmup < 0 || mode.recompute < 0) {
    std::fprintf(stderr, "bench_train_step: give --batch and --image-size together (positive), --steps >= 1, "
                 "--recompute >= 0\n");
    return 2;
  }
  try {
    cpu::set_num_threads(threads);
    const Device d = Device::parse(device);
    apply_kernels_option(kernels, std::cout);
#if defined(KILN_WITH_CUDA)
    kiln::cuda::set_cudnn_benchmark(cudnn_bench);
#else
    if (cudnn_bench) std::printf("--cudnn-benchmark: no effect, kiln was built without CUDA\n");
#endif
    const std::string script = kiln_bench::peers_dir(__FILE__) + "/train_step_torch.py";
    const bool bf16 = mode.amp && mode.amp_dtype == DType::bf16;
    std::printf("ResNet18 training step (SGD momentum%s%s, kernels %s), %d thread(s), kiln on %s, median of %d steps "
                "after %d warm-up\n",
                !mode.amp ? "" : bf16 ? ", --amp bf16 (bf16 autocast, no loss scaler)" : ", --amp (f16 + loss scaling)",
                mode.channels_last ? ", channels-last" : "", kernels.c_str(), threads, d.str().c_str(), steps, warmup);
    // auto: the peer in kiln's mode; kiln's f16 --amp has no CPU peer (PyTorch's CPU autocast is bf16).
    if (peer_mode == "auto") {
      if (mode.amp && !bf16) peer = false;
      peer_mode = bf16 ? "bf16" : mode.channels_last ? "channels_last" : "f32";
    }
    std::vector<Shape2> shapes = {Shape2{8, 224}, Shape2{32, 64}};
    if (batch > 0) shapes = {Shape2{batch, size}};
    if (mode.recompute > 0) {
      std::printf("recompute %d segments against plain, alternating steps\n", mode.recompute);
      std::printf("%-12s %12s %14s %8s %14s\n", "shape", "plain ms", "recompute ms", "ratio", "pair median");
      for (Shape2 s : shapes) {
        std::vector<double> plain, rec, pair;
        time_recompute_pair(s, d, mode, steps, warmup, &plain, &rec);
        for (size_t i = 0; i < plain.size(); ++i) pair.push_back(rec[i] / plain[i]);
        char shape[32];
        std::snprintf(shape, sizeof shape, "%lldx%lld", (long long)s.batch, (long long)s.size);
        const double p = median(plain), r = median(rec);
        std::printf("%-12s %12.1f %14.1f %7.2fx %13.2fx\n", shape, p, r, r / p, median(pair));
        std::fflush(stdout);
      }
      return 0;
    }
    if (mode.conv_algos) {
      std::printf("conv2d im2col against auto (Winograd on 3x3 stride-1 layers), alternating steps\n");
      std::printf("%-12s %12s %12s %8s %14s\n", "shape", "im2col ms", "auto ms", "ratio", "pair median");
      for (Shape2 s : shapes) {
        std::vector<double> a, b, pair;
        time_conv_algos(s, d, mode, steps, warmup, &a, &b);
        for (size_t i = 0; i < a.size(); ++i) pair.push_back(b[i] / a[i]);
        char shape[32];
        std::snprintf(shape, sizeof shape, "%lldx%lld", (long long)s.batch, (long long)s.size);
        const double p = median(a), q = median(b);
        std::printf("%-12s %12.1f %12.1f %7.2fx %13.2fx\n", shape, p, q, q / p, median(pair));
        std::fflush(stdout);
      }
      return 0;
    }
    std::vector<std::string> summary;
    std::string peer_line;
    std::printf("%-12s %12s %12s %8s %12s\n", "shape", "kiln ms", "torch ms", "ratio", "kiln peak");
    for (Shape2 s : shapes) {
      int64_t peak = -1;
      const std::vector<double> ks = time_kiln(s, d, mode, steps, warmup, &peak);
      PeerRun pr;
      if (peer && d.is_cpu()) pr = time_torch(peer_python, script, peer_mode, s, threads, steps, warmup);
      const std::vector<double>& ts = pr.ms;
      if (!pr.error.empty()) peer_line = "peer: torch column n/a: " + pr.error;  // kept: a failure is not overwritten
      else if (!ts.empty() && peer_line.rfind("peer: torch column n/a", 0) != 0)
        peer_line = "peer: torch " + pr.torch + " " + pr.mode + " (" + pr.layout + ", cpu capability " +
                    pr.cpu_capability + "), " + peer_python;
      const double k = median(ks), t = ts.empty() ? -1 : median(ts);
      char mem[32], shape[32], tcol[32], rcol[32];
      std::snprintf(shape, sizeof shape, "%lldx%lld", (long long)s.batch, (long long)s.size);
      std::snprintf(tcol, sizeof tcol, t > 0 ? "%.1f" : "n/a", t);
      std::snprintf(rcol, sizeof rcol, t > 0 ? "%.2fx" : "n/a", k / t);
      std::printf("%-12s %12.1f %12s %8s %12s\n", shape, k, tcol, rcol, format_bytes(peak, mem, sizeof mem));
      std::fflush(stdout);
      char line[256];
      const auto [kmin, kmax] = std::minmax_element(ks.begin(), ks.end());
      int len = std::snprintf(line, sizeof line, "kiln %s: %.0f images/s, peak %s; step spread kiln %.1f-%.1f ms", shape,
                              k > 0 ? 1000.0 * (double)s.batch / k : 0.0, mem, *kmin, *kmax);
      if (!ts.empty()) {
        const auto [tmin, tmax] = std::minmax_element(ts.begin(), ts.end());
        std::snprintf(line + len, sizeof line - (size_t)len, ", torch %.1f-%.1f ms", *tmin, *tmax);
      }
      summary.push_back(line);
    }
    for (const std::string& l : summary) std::printf("%s\n", l.c_str());
    if (!peer_line.empty()) std::printf("%s\n", peer_line.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_train_step: error: %s\n", e.what());
    return 1;
  }
  return 0;
  });
}
