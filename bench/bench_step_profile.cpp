// bench_step_profile: where one ResNet18 (or small CNN) CPU training step spends its time, by kernel and pass, f32
// beside bf16 autocast (issue 35). The step is bench_train_step's: SGD momentum 0.9, cross entropy,
// for --amp bf16 AutocastGuard(true, bf16) around forward + loss and no loss scaler. The op spans
// (engine/ops/op_trace.h: every KILN_DISPATCH kernel and the bf16 conv passes) are summed per
// (pass, kernel name); a pass's time not inside any span (autograd bookkeeping, allocation, the
// oneDNN path's reorders outside a span) is the row "(outside spans)". f32 and bf16 steps alternate
// (ABAB...) so the machine's load hits both alike; the table is the sum over the timed steps / steps.
// --pair bf16,bf16-cl compares bf16 on NCHW batches with bf16 on channels-last batches (any two of f32, f32-cl,
// bf16, bf16-cl; the left one is the table's first column).
// Measurement only: no kiln behaviour lives here.
//
//   bench_step_profile [--model resnet18|small_cnn] [--threads T] [--batch B] [--image-size S] [--steps N]
//                      [--warmup N] [--detail KERNEL] [--pair A,B]
// small_cnn: 10 classes, 1 input channel (Fashion-MNIST's shape; --image-size 28).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/ops/autocast.h"
#include "engine/ops/op_trace.h"
#include "engine/ops/ops.h"
#include "engine/optim/sgd.h"
#include "kernels/cpu/threads.h"
#include "models/registry.h"

#include "bench/bench_cli.h"

using namespace kiln;

namespace {

uint64_t now_ns() {
  return (uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

struct Rig {
  nn::ModulePtr model;
  std::unique_ptr<optim::SGD> opt;
  Tensor x, y;
  bool bf16 = false;
  std::string mode;  // f32, f32-cl, bf16, bf16-cl
  // (pass, kernel) -> summed ms over the timed steps; pass totals; step count
  std::map<std::pair<std::string, std::string>, double> ms;
  std::map<std::string, double> pass_ms;
  std::vector<double> step_ms;
  std::string detail;  // kernel whose spans are also summed per module path
  std::map<std::pair<std::string, std::string>, double> detail_ms;
};

Rig make_rig(const std::string& name, int64_t batch, int64_t size, const std::string& mode) {
  manual_seed(0);
  Rig r;
  r.mode = mode;
  r.bf16 = mode.rfind("bf16", 0) == 0;
  const bool small = name == "small_cnn";
  const int64_t classes = small ? 10 : 1000, channels = small ? 1 : 3;
  r.model = models::make_model(name, classes, channels, size);
  r.model->train();
  optim::SGDOptions o;
  o.lr = 0.01;
  o.momentum = 0.9;
  r.opt = std::make_unique<optim::SGD>(r.model->named_parameters(), o);
  r.x = randn({batch, channels, size, size});
  if (mode.size() > 3 && mode.compare(mode.size() - 3, 3, "-cl") == 0) r.x = contiguous(r.x, MemoryFormat::channels_last);
  std::vector<int64_t> yv((size_t)batch);
  for (int64_t i = 0; i < batch; ++i) yv[(size_t)i] = (i * 37) % classes;
  r.y = tensor_from(yv, {batch});
  return r;
}

// One step; with `record` the spans are attributed to the pass whose window holds their begin.
void step(Rig& r, bool record) {
  op_trace_take();
  const uint64_t t0 = now_ns();
  r.model->zero_grad();
  Tensor loss;
  {
    AutocastGuard ac(r.bf16, DType::bf16);
    Tensor out = (*r.model)(r.x);
    loss = cross_entropy(out, r.y);
  }
  const uint64_t t1 = now_ns();
  loss.backward();
  const uint64_t t2 = now_ns();
  r.opt->step();
  const uint64_t t3 = now_ns();
  std::vector<OpSpan> spans = op_trace_take();
  if (!record) return;
  const uint64_t edges[4] = {t0, t1, t2, t3};
  const char* names[3] = {"forward+loss", "backward", "sgd step"};
  double inside[3] = {0, 0, 0};
  for (const OpSpan& s : spans) {
    int p = s.begin_ns < t1 ? 0 : s.begin_ns < t2 ? 1 : 2;
    const double d = (double)(s.end_ns - s.begin_ns) / 1e6;
    r.ms[{names[p], s.name}] += d;
    if (!r.detail.empty() && r.detail == s.name) r.detail_ms[{names[p], s.module}] += d;
    inside[p] += d;
  }
  for (int p = 0; p < 3; ++p) {
    const double w = (double)(edges[p + 1] - edges[p]) / 1e6;
    r.pass_ms[names[p]] += w;
    r.ms[{names[p], "(outside spans)"}] += w - inside[p];
  }
  r.step_ms.push_back((double)(t3 - t0) / 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  cpu::ensure_omp_wait_policy(argv);
  CLI::App app{"bench_step_profile: ResNet18 / small CNN CPU train step by pass and kernel, f32 beside bf16 autocast",
               "bench_step_profile"};
  int threads = 1, steps = 3, warmup = 1;
  int64_t batch = 8, size = 224;
  std::string detail, model = "resnet18", pair = "f32,bf16";
  app.add_option("--model", model, "resnet18 or small_cnn")
      ->check(CLI::IsMember({"resnet18", "small_cnn"}))
      ->capture_default_str();
  app.add_option("--threads", threads, "CPU threads")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--batch", batch, "batch")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--image-size", size, "image size")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--steps", steps, "timed steps")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--warmup", warmup, "untimed steps first")->check(CLI::NonNegativeNumber)->capture_default_str();
  app.add_option("--detail", detail, "also print this kernel's time per module path (e.g. copy)");
  app.add_option("--pair", pair, "the two steps compared: f32,bf16 or any two of f32, f32-cl, bf16, bf16-cl (-cl: "
                                 "channels-last batches)")
      ->check(CLI::IsMember({"f32,bf16", "bf16,bf16-cl", "f32,bf16-cl", "f32-cl,bf16-cl", "f32,f32-cl"}))
      ->capture_default_str();
  return kiln_bench::run(app, argc, argv, [&]() -> int {
    cpu::set_num_threads(threads);
    const std::string ma = pair.substr(0, pair.find(',')), mb = pair.substr(pair.find(',') + 1);
    Rig f = make_rig(model, batch, size, ma), b = make_rig(model, batch, size, mb);
    const char* na = ma.c_str();
    const char* nb = mb.c_str();
    f.detail = b.detail = detail;
    op_trace_enable(true);
    for (int i = 0; i < warmup + steps; ++i) {
      Rig& first = i % 2 == 0 ? f : b;
      Rig& second = i % 2 == 0 ? b : f;
      step(first, i >= warmup);
      step(second, i >= warmup);
    }
    op_trace_enable(false);
    auto med = [](std::vector<double> v) {
      std::sort(v.begin(), v.end());
      return v[v.size() / 2];
    };
    const double sf = med(f.step_ms), sb = med(b.step_ms);
    double tf = 0, tb = 0;
    for (auto& kv : f.pass_ms) tf += kv.second;
    for (auto& kv : b.pass_ms) tb += kv.second;
    tf /= steps;
    tb /= steps;
    std::printf("%s %lldx%lld, %d thread(s), %d timed steps (+%d warmup), alternating %s/%s\n",
                model.c_str(), (long long)batch, (long long)size, threads, steps, warmup, na, nb);
    std::printf("step median: %s %.1f ms, %s %.1f ms (%s/%s %.2fx); mean %s %.1f, %s %.1f\n", na, sf, nb, sb, nb, na,
                sb / sf, na, tf, nb, tb);
    std::map<std::pair<std::string, std::string>, std::pair<double, double>> rows;
    for (auto& kv : f.ms) rows[kv.first].first = kv.second / steps;
    for (auto& kv : b.ms) rows[kv.first].second = kv.second / steps;
    std::vector<std::pair<std::pair<std::string, std::string>, std::pair<double, double>>> v(rows.begin(), rows.end());
    std::sort(v.begin(), v.end(), [](const auto& a, const auto& c) { return a.second.second > c.second.second; });
    std::printf("| pass | kernel | %s ms | %s %% | %s ms | %s %% |\n| --- | --- | --- | --- | --- | --- |\n", na, na,
                nb, nb);
    for (auto& row : v) {
      if (row.second.first < 0.05 * tf / 100 && row.second.second < 0.05 * tb / 100) continue;  // < 0.05%
      std::printf("| %s | %s | %.1f | %.1f | %.1f | %.1f |\n", row.first.first.c_str(), row.first.second.c_str(),
                  row.second.first, 100 * row.second.first / tf, row.second.second, 100 * row.second.second / tb);
    }
    for (const char* p : {"forward+loss", "backward", "sgd step"})
      std::printf("| %s | (pass total) | %.1f | %.1f | %.1f | %.1f |\n", p, f.pass_ms[p] / steps,
                  100 * f.pass_ms[p] / steps / tf, b.pass_ms[p] / steps, 100 * b.pass_ms[p] / steps / tb);
    if (!detail.empty()) {
      std::printf("\n%s per module (ms per step): pass | module | %s | %s\n", detail.c_str(), na, nb);
      std::map<std::pair<std::string, std::string>, std::pair<double, double>> dm;
      for (auto& kv : f.detail_ms) dm[kv.first].first = kv.second / steps;
      for (auto& kv : b.detail_ms) dm[kv.first].second = kv.second / steps;
      for (auto& kv : dm)
        std::printf("%s | %s | %.2f | %.2f\n", kv.first.first.c_str(), kv.first.second.c_str(), kv.second.first,
                    kv.second.second);
    }
    return 0;
  });
}
