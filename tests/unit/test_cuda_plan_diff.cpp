// A plan for a GPU this machine does not have (docs/memory.md, "Plans for a GPU you don't have"): the
// meta replay of a cuda target takes the CUDA path's own allocations where kiln controls them. Checked
// here on the meta device (no GPU): the allocation sequence of one convolution, forward and backward,
// for the cpu and the cuda:0 target, each item's bytes computed from the shapes in this file; a whole
// training step (f32, --amp, --amp with 2 data-parallel ranks' buckets) and a run's whole plan (plan_run:
// small_cnn f32 and --amp, resnet18_small --amp) whose request sequences for the two targets differ by exactly
// the convolutions' items and the 16-bit batch norms' and max pools' f32 staging (cuda only: the CPU's is
// direct); and `kiln train --dry-run --device cuda:0` plans of the same configurations marking
// each figure exact, bound or estimate.
#include <doctest/doctest.h>

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/core/meta_target.h"
#include "engine/memory/device_present.h"
#include "engine/nn/batch_norm2d.h"
#include "engine/nn/conv2d.h"
#include "engine/nn/layers.h"
#include "engine/nn/linear.h"
#include "engine/nn/sequential.h"
#include "engine/optim/sgd.h"
#include "engine/train/memory_predict.h"
#include "engine/train/meta_session.h"
#include "engine/run/plan_run.h"
#include "engine/run/run_data.h"
#include "models/resnet.h"
#include "models/small_cnn.h"
#include "kernels/common/workspace_limit.h"
#include "support/cli/run_kiln.h"
#include "engine/memory/allocator.h"
#include "engine/ops/ops.h"
#include "kernels/common/nn_desc.h"
#include "kernels/cpu/bf16_path.h"
#include "kernels/cpu/conv2d.h"
#if defined(KILN_WITH_CUDA)
#include "kernels/cuda/kernel_select.h"
#endif

namespace {

using namespace kiln;

// Records every allocation (+bytes) and free (-bytes) on the meta device, handing out distinct fake
// addresses (meta tensors are never dereferenced).
class Recorder : public Allocator {
 public:
  Recorder() { set_allocator(Device::meta(), this); }
  ~Recorder() override { set_allocator(Device::meta(), nullptr); }
  Device device() const override { return Device::meta(); }
  void* allocate(size_t nbytes, StreamId) override {
    next_ += 1 << 20;
    void* p = reinterpret_cast<void*>(next_);
    sizes_[p] = (int64_t)nbytes;
    if (on_) log.push_back((int64_t)nbytes);
    return p;
  }
  void deallocate(void* p) override {
    auto it = sizes_.find(p);
    if (on_ && it != sizes_.end()) log.push_back(-it->second);
    sizes_.erase(it);
  }
  void start() { on_ = true, log.clear(); }
  std::vector<int64_t> log;

 private:
  uintptr_t next_ = 1 << 30;
  std::map<void*, int64_t> sizes_;
  bool on_ = false;
};

std::string text(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t b : v) s += (b > 0 ? "+" : "") + std::to_string(b) + " ";
  return s;
}

struct ConvCase {
  int64_t N, C, H, K, R, pad, stride;
  bool bias;
};

// The allocation log of conv2d forward + backward (x, w, b need their gradients) on meta, imitating target.
std::vector<int64_t> conv_log(const ConvCase& k, DType dt, Device target) {
  MetaTargetScope imitate(target);
  Recorder rec;
  Tensor x = empty({k.N, k.C, k.H, k.H}, dt, Device::meta());
  Tensor w = empty({k.K, k.C, k.R, k.R}, dt, Device::meta());
  Tensor b = k.bias ? empty({k.K}, dt, Device::meta()) : Tensor();
  x.set_requires_grad(true), w.set_requires_grad(true);
  if (k.bias) b.set_requires_grad(true);
  const int64_t P = (k.H + 2 * k.pad - k.R) / k.stride + 1;
  Tensor g = empty({k.N, k.K, P, P}, dt, Device::meta());
  rec.start();
  {
    Tensor y = conv2d(x, w, b, {k.stride}, {k.pad}, {1}, 1);
    y.backward(g);
  }
  return rec.log;
}

// The allocation log of a 16-bit max_pool2d forward + backward on meta (x needs its gradient), imitating target.
std::vector<int64_t> pool_log(int64_t N, int64_t C, int64_t H, int64_t k, int64_t s, int64_t p, DType dt,
                              Device target) {
  MetaTargetScope imitate(target);
  Recorder rec;
  Tensor x = empty({N, C, H, H}, dt, Device::meta());
  x.set_requires_grad(true);
  const int64_t P = (H + 2 * p - k) / s + 1;
  Tensor g = empty({N, C, P, P}, dt, Device::meta());
  rec.start();
  {
    Tensor y = max_pool2d(x, {k}, {s}, {p});
    y.backward(g);
  }
  return rec.log;
}

// The expected logs, from the shapes alone. Sizes: x (N, C, H, H), w (K, C, R, R), b (K), y and dy (N, K, P, P);
// "4" an f32 copy, "2" a 16-bit one. ws: the CPU kernels' im2col / Winograd workspace for this convolution
// (kernels/cpu/conv2d.h sizes it; its f32 compute type on both dtypes). The documented items:
//   cpu only:  ws, forward and backward; with a 16-bit dtype the f32 staging of x, w, b and y (forward) and
//              of x, w, dy, dx, dw, db (backward), the results rounded back to 16 bits;
//   cuda only: with a 16-bit dtype and a bias, the bias gradient reduced in f32 by the op layer (an f32 copy
//              of dy, sum's own (N, P, Q, K) copy of it, the f32 result) - cuDNN's 16-bit path has no bias.
struct ConvSizes {
  int64_t x, w, b, y, ws;  // elements (ws: bytes)
};

ConvSizes sizes_of(const ConvCase& k) {
  const int64_t P = (k.H + 2 * k.pad - k.R) / k.stride + 1;
  Conv2dDesc d;
  d.N = k.N, d.C = k.C, d.H = d.W = k.H, d.K = k.K, d.R = d.S = k.R;
  d.stride_h = d.stride_w = k.stride, d.pad_h = d.pad_w = k.pad;
  return {k.N * k.C * k.H * k.H, k.K * k.C * k.R * k.R, k.K, k.N * k.K * P * P,
          (int64_t)cpu::conv2d_workspace_bytes(d, 4)};
}

using Log = std::vector<int64_t>;

void add(Log& l, std::initializer_list<int64_t> v) {
  for (int64_t b : v)
    if (b != 0) l.push_back(b);
}

// What both targets allocate: y, then dx, dw (and db) in the dtype, y freed at the end.
Log common_items(const ConvCase& k, int64_t e) {
  const ConvSizes s = sizes_of(k);
  Log l;
  add(l, {s.y * e, s.x * e, s.w * e, k.bias ? s.b * e : 0, -s.y * e});
  return l;
}

Log expected_cpu(const ConvCase& k, bool half) {
  const ConvSizes s = sizes_of(k);
  const int64_t b4 = k.bias ? s.b * 4 : 0, b2 = k.bias ? s.b * 2 : 0;
  Log l;
  if (!half) {
    add(l, {s.y * 4, s.ws, -s.ws});                          // forward: y, the workspace
    add(l, {s.ws, s.x * 4, s.w * 4, b4, -s.ws, -s.y * 4});  // backward: dx, dw, db
    return l;
  }
  add(l, {s.x * 4, s.w * 4, b4, s.y * 4, s.ws, s.y * 2, -s.ws, -s.y * 4, -b4, -s.w * 4, -s.x * 4});
  add(l, {s.x * 4, s.w * 4, s.y * 4, s.ws, s.x * 4, s.x * 2, -s.x * 4, s.w * 4, b4, s.w * 2, b2, -b4, -s.w * 4,
          -s.ws, -s.y * 4, -s.w * 4, -s.x * 4, -s.y * 2});
  return l;
}

Log expected_cuda(const ConvCase& k, bool half) {
  const ConvSizes s = sizes_of(k);
  if (!half) return common_items(k, 4);
  Log l;
  add(l, {s.y * 2, s.x * 2, s.w * 2});
  if (k.bias) add(l, {s.y * 4, s.b * 4, s.y * 4, -s.y * 4, s.b * 2, -s.b * 4, -s.y * 4});
  add(l, {-s.y * 2});
  return l;
}

// The documented items of each target, in the order they come.
Log cpu_only(const ConvCase& k, bool half) {
  const ConvSizes s = sizes_of(k);
  const int64_t b4 = k.bias ? s.b * 4 : 0;
  Log l;
  if (!half) {
    add(l, {s.ws, -s.ws, s.ws, -s.ws});
    return l;
  }
  add(l, {s.x * 4, s.w * 4, b4, s.y * 4, s.ws, -s.ws, -s.y * 4, -b4, -s.w * 4, -s.x * 4});
  add(l, {s.x * 4, s.w * 4, s.y * 4, s.ws, s.x * 4, -s.x * 4, s.w * 4, b4, -b4, -s.w * 4, -s.ws, -s.y * 4,
          -s.w * 4, -s.x * 4});
  return l;
}

Log cuda_only(const ConvCase& k, bool half) {
  const ConvSizes s = sizes_of(k);
  Log l;
  if (half && k.bias) add(l, {s.y * 4, s.b * 4, s.y * 4, -s.y * 4, -s.b * 4, -s.y * 4});
  return l;
}

// True when `log` is `items` and `rest` interleaved, each in its own order: the log is the common allocations
// with the documented items added (dynamic programming over the two prefixes: sizes may coincide).
bool interleaves(const Log& log, const Log& items, const Log& rest) {
  if (log.size() != items.size() + rest.size()) return false;
  std::vector<std::vector<char>> ok(items.size() + 1, std::vector<char>(rest.size() + 1, 0));
  ok[0][0] = 1;
  for (size_t i = 0; i <= items.size(); ++i)
    for (size_t j = 0; j <= rest.size(); ++j) {
      if (i + j == 0) continue;
      const int64_t b = log[i + j - 1];
      ok[i][j] = (i > 0 && ok[i - 1][j] && items[i - 1] == b) || (j > 0 && ok[i][j - 1] && rest[j - 1] == b);
    }
  return ok[items.size()][rest.size()];
}

}  // namespace

TEST_CASE("cuda plan: a convolution's allocations for cpu and for cuda:0 differ by exactly the documented items") {
  // small_cnn's and resnet18_small's kinds: 3x3 with and without bias, a strided 3x3, a 1x1 downsample.
  const ConvCase cases[] = {{2, 3, 8, 4, 3, 1, 1, true},
                            {2, 8, 8, 16, 3, 1, 1, false},
                            {3, 8, 9, 16, 3, 1, 2, false},
                            {2, 16, 8, 32, 1, 0, 2, false},
                            {4, 16, 4, 8, 3, 1, 1, true}};
  for (const ConvCase& k : cases)
    for (bool half : {false, true}) {
      const DType dt = half ? DType::f16 : DType::f32;
      const Log cpu_log = conv_log(k, dt, Device::cpu()), cuda_log = conv_log(k, dt, Device::cuda(0));
      INFO("N ", k.N, " C ", k.C, " H ", k.H, " K ", k.K, " R ", k.R, " stride ", k.stride, " bias ", k.bias,
           half ? " f16" : " f32", "\ncpu:  ", text(cpu_log), "\ncuda: ", text(cuda_log));
      CHECK(cpu_log == expected_cpu(k, half));
      CHECK(cuda_log == expected_cuda(k, half));
      // The difference: each target's documented items taken out leave the same allocations.
      const Log common = common_items(k, half ? 2 : 4);
      CHECK(interleaves(cpu_log, cpu_only(k, half), common));
      CHECK(interleaves(cuda_log, cuda_only(k, half), common));
    }
}

namespace {

const std::string& plan_arrays() {  // npy: 22 samples of 3x16x16, 4 classes (a short last batch at batch 8)
  static const std::string d = [] {
    const std::string root = kiln_test::cli_temp_dir("cuda_plan_npy");
    kiln_test::make_npy_folder(root, 22, 3, 16, 4);
    return root;
  }();
  return d;
}

nlohmann::json dry_run(const std::string& flags, const std::string& device, std::string* text = nullptr) {
  const std::string args = "train " + flags + " --data " + plan_arrays() + " --epochs 2 --batch 8 --threads 1 "
                           "--device-memory 8G --dry-run --device " + device;
  const kiln_test::CliRun j = kiln_test::run_kiln(args + " --json");
  REQUIRE_MESSAGE(j.status == 0, j.output);
  if (text) {
    const kiln_test::CliRun t = kiln_test::run_kiln(args);
    REQUIRE_MESSAGE(t.status == 0, t.output);
    *text = t.output;
  }
  return nlohmann::json::parse(j.output.substr(j.output.find('{')));
}

int64_t fig(const nlohmann::json& plan, const char* name) { return plan["figures"][name]["bytes"].get<int64_t>(); }

int64_t phase_allocated(const nlohmann::json& plan, const std::string& name) {
  for (const nlohmann::json& p : plan["phases"])
    if (p["name"] == name) return p["peak_allocated"].get<int64_t>();
  FAIL("no phase ", name);
  return -1;
}

}  // namespace

TEST_CASE("cuda plan: kiln train --dry-run --device cuda:0 without the GPU marks each figure exact, bound or estimate") {
  const int64_t MiB = int64_t(1) << 20, granule = 2 * MiB;
  for (const char* flags : {"--model small_cnn", "--model small_cnn --amp", "--model resnet18_small --amp",
                            "--model small_cnn --amp bf16", "--model resnet18_small --amp bf16"}) {
    INFO(flags);
    std::string text;
    const nlohmann::json cpu = dry_run(flags, "cpu"), gpu = dry_run(flags, "cuda:0", &text);
    CHECK(gpu["device"] == "cuda:0");
    CHECK_FALSE(cpu.contains("cuda"));
    // kiln's own allocations: exact on both (the cuda plan's for the assumed policy: whole 2 MiB granules).
    for (const nlohmann::json* p : {&cpu, &gpu}) {
      CHECK((*p)["figures"]["peak_allocated"]["kind"] == "exact");
      CHECK((*p)["figures"]["peak_reserved"]["exact"] == true);
      CHECK(fig(*p, "peak_allocated") == (*p)["peak_allocated"].get<int64_t>());
      CHECK(fig(*p, "peak_reserved") == (*p)["peak_reserved"].get<int64_t>());
    }
    CHECK(gpu["cuda"]["policy_assumed"] == !kiln::device_present(kiln::Device::cuda(0)));
    if (gpu["cuda"]["policy_assumed"].get<bool>()) CHECK(gpu["peak_reserved"].get<int64_t>() % granule == 0);
    // The set-up (parameters, optimizer state, loss scaler) is the same op-level code: the same bytes.
    CHECK(phase_allocated(gpu, "set-up") == phase_allocated(cpu, "set-up"));
    // The items kiln cannot know, each computed here: cuDNN's workspace at most kiln's limit in whole
    // granules, cuBLAS's pool, the context's estimate, and their sums.
    const int64_t limit = (int64_t)kiln::cudnn_workspace_limit();
    CHECK(gpu["cuda"]["cudnn_workspace_limit"].get<int64_t>() == limit);
    CHECK(fig(gpu, "kernel_scratch") == (limit + granule - 1) / granule * granule);
    CHECK(fig(gpu, "allocator_peak_reserved") == fig(gpu, "peak_reserved") + fig(gpu, "kernel_scratch"));
    CHECK(fig(gpu, "cublas_workspace") == (int64_t)kiln::cublas_workspace_bytes(0));
    CHECK(fig(gpu, "cuda_context") == 512 * MiB);
    CHECK(fig(gpu, "card_total") ==
          fig(gpu, "allocator_peak_reserved") + fig(gpu, "cublas_workspace") + fig(gpu, "cuda_context"));
    for (const char* b : {"kernel_scratch", "allocator_peak_reserved", "cublas_workspace", "card_total"}) {
      CHECK_MESSAGE(gpu["figures"][b]["kind"] == "bound", b);
      CHECK_MESSAGE(gpu["figures"][b]["exact"] == false, b);
    }
    CHECK(gpu["figures"]["cuda_context"]["kind"] == "estimate");
    CHECK(gpu["cuda"]["fits_with_bounds"] == true);
    // --amp (f16 or bf16: cuBLAS/cuDNN in bf16, never kiln's f16-only kernels): the CPU's f32 staging of the
    // 16-bit convolutions is not in the cuda plan. bf16 on oneDNN (kernels/cpu/bf16_path.h: what the kiln
    // subprocess takes on this CPU, the same detection) stages nothing on the CPU either: its workspaces and the
    // cuda path's bias-gradient copies decide which peak is higher, so no order is claimed there. The CPU's
    // direct 16-bit batch norm (no f32 copies; the cuda plan keeps x32, y32 and x32, dy32, dx32 per batch norm)
    // leaves the f16 order as it was: both plans' peaks sit in a convolution's backward, where the CPU's f32
    // staging of x, w, dy, dx and its workspace outweigh the cuda plan's batch-norm copies, which are freed
    // before the convolution runs (small_cnn 2913280 vs 2307584 bytes, resnet18_small 105814016 vs 93625344:
    // the CPU figures unchanged by the direct path). With bf16 on oneDNN the order differs by model (small_cnn
    // now 1939456 cpu vs 2305536 cuda, resnet18_small 100393472 vs 93623296).
    const bool amp = std::string(flags).find("--amp") != std::string::npos;
    const bool bf16_onednn = std::string(flags).find("bf16") != std::string::npos &&
                             kiln::cpu::bf16_path_wanted() != kiln::cpu::Bf16Path::portable;
    if (amp && !bf16_onednn) CHECK(gpu["peak_allocated"].get<int64_t>() < cpu["peak_allocated"].get<int64_t>());
    // The text says the same.
    INFO(text);
    CHECK(text.find("planning for cuda:0") != std::string::npos);
    CHECK(text.find("peak reserved (kiln's allocations)") != std::string::npos);
    CHECK(text.find("  exact\n") != std::string::npos);
    CHECK(text.find("  bound\n") != std::string::npos);
    CHECK(text.find("  estimate\n") != std::string::npos);
    CHECK(text.find("card memory needed") != std::string::npos);
  }
}

TEST_CASE("cuda plan: kiln train --dry-run --device cuda:0 without the GPU and without --device-memory names it") {
  if (kiln::device_present(kiln::Device::cuda(0))) return;
  const kiln_test::CliRun r = kiln_test::run_kiln("train --model small_cnn --data " + plan_arrays() +
                                                  " --epochs 1 --batch 8 --device cuda:0 --dry-run");
  CHECK(r.status != 0);
  CHECK_MESSAGE(r.output.find("--device-memory") != std::string::npos, r.output);
}

namespace {

// One convolution's documented items split into its forward and backward parts (see cpu_only / cuda_only):
// needs_dx false for a network's first convolution (its input needs no gradient).
Log cpu_forward_items(const ConvCase& k, bool half) {
  const ConvSizes s = sizes_of(k);
  const int64_t b4 = k.bias ? s.b * 4 : 0;
  Log l;
  if (!half) add(l, {s.ws, -s.ws});
  else add(l, {s.x * 4, s.w * 4, b4, s.y * 4, s.ws, -s.ws, -s.y * 4, -b4, -s.w * 4, -s.x * 4});
  return l;
}

Log cpu_backward_items(const ConvCase& k, bool half, bool needs_dx) {
  const ConvSizes s = sizes_of(k);
  const int64_t b4 = k.bias ? s.b * 4 : 0;
  Log l;
  if (!half) {
    add(l, {s.ws, -s.ws});
    return l;
  }
  add(l, {s.x * 4, s.w * 4, s.y * 4, s.ws});
  if (needs_dx) add(l, {s.x * 4, -s.x * 4});
  add(l, {s.w * 4, b4, -b4, -s.w * 4, -s.ws, -s.y * 4, -s.w * 4, -s.x * 4});
  return l;
}

Log cuda_backward_items(const ConvCase& k, bool half) {
  const ConvSizes s = sizes_of(k);
  Log l;
  if (half && k.bias) add(l, {s.y * 4, s.b * 4, s.y * 4, -s.y * 4, -s.b * 4, -s.y * 4});
  return l;
}

// A 16-bit training batch norm over X values (engine/ops/nn_norm.cpp). The CPU (and meta imitating it) reads
// and writes the 16-bit x, y, dy, dx directly; the cuda target stages through f32 (the host side of
// kernels/cuda/batch_norm.cu allocates nothing). Both make, in the same order, the f32 statistics (C*4 each),
// the 16-bit y, and in backward dw, db (C*4 each) and the 16-bit dx. The documented items:
//   cuda only, forward:  x32 and y32 (X*4 each) before the statistics, freed when the op returns;
//   cuda only, backward: x32 (X*4), and at once the saved 16-bit x freed (X*2: backward released its saved
//             tensors, and the f32 copy replaced the only reference), dy32 and dx32 (X*4 each; dy arrives
//             16-bit from relu / max pool / add) before dw, db; dx32 and dy32 freed when the gradients are
//             returned, x32 last (the lambda's first local);
//   cpu only, backward:  the saved 16-bit x freed last (X*2), after the 16-bit dx is made: the kernels read it.
Log cuda_bn_forward_items(int64_t X, bool half) {
  Log l;
  if (half) add(l, {X * 4, X * 4, -X * 4, -X * 4});
  return l;
}

Log cuda_bn_backward_items(int64_t X, bool half) {
  Log l;
  if (half) add(l, {X * 4, -X * 2, X * 4, X * 4, -X * 4, -X * 4, -X * 4});
  return l;
}

Log cpu_bn_backward_items(int64_t X, bool half) {
  Log l;
  if (half) add(l, {-X * 2});
  return l;
}

// A 16-bit max pool from X to Y values (engine/ops/nn_pool.cpp). The CPU (and meta imitating it) pools the
// 16-bit x directly; the cuda target stages through f32. Both make, in the same order, the indices (Y*8) and
// the 16-bit y (Y*2), in backward the 16-bit dx (X*2). The documented items:
//   cuda only, forward:  x32 (X*4) and y32 (Y*4) before the indices, freed when the op returns (y32 first);
//   cuda only, backward: dy32 (Y*4), then, inside a step, the 16-bit dy freed (Y*2: the cast's backward was
//             its last reader), dx32 (X*4), the indices freed (Y*8: the f32 pool's node released its saved
//             tensor before the cast back to 16 bits ran), dy32 freed, and after the 16-bit dx, dx32 freed;
//   cpu only, backward:  the indices freed (Y*8) after the 16-bit dx is made (the kernel reads them), then,
//             inside a step, the 16-bit dy (Y*2).
// dy_freed: the step's dy is freed by the engine (a lone op's test holds it: false).
Log cuda_pool_forward_items(int64_t X, int64_t Y, bool half) {
  Log l;
  if (half) add(l, {X * 4, Y * 4, -Y * 4, -X * 4});
  return l;
}

Log cuda_pool_backward_items(int64_t X, int64_t Y, bool half, bool dy_freed = true) {
  Log l;
  if (half) add(l, {Y * 4, dy_freed ? -Y * 2 : 0, X * 4, -Y * 8, -Y * 4, -X * 4});
  return l;
}

Log cpu_pool_backward_items(int64_t Y, bool half, bool dy_freed = true) {
  Log l;
  if (half) add(l, {-Y * 8, dy_freed ? -Y * 2 : 0});
  return l;
}

// Each side's documented items of a whole step, forward then backward: the convolutions in forward order,
// bn[i] true when a batch norm follows convolution i (over its output), pool_y[i] > 0 the output size of a
// max pool after that batch norm (0: none), backward in the reverse order (a pool's backward before its
// batch norm's, a batch norm's before its convolution's).
void step_items(const std::vector<ConvCase>& convs, const std::vector<bool>& bn, const std::vector<int64_t>& pool_y,
                bool half, Log& cpu_items, Log& gpu_items) {
  for (size_t i = 0; i < convs.size(); ++i) {
    for (int64_t b : cpu_forward_items(convs[i], half)) cpu_items.push_back(b);
    if (bn[i])
      for (int64_t b : cuda_bn_forward_items(sizes_of(convs[i]).y, half)) gpu_items.push_back(b);
    if (pool_y[i] > 0)
      for (int64_t b : cuda_pool_forward_items(sizes_of(convs[i]).y, pool_y[i], half)) gpu_items.push_back(b);
  }
  for (size_t i = convs.size(); i-- > 0;) {
    if (pool_y[i] > 0) {
      for (int64_t b : cpu_pool_backward_items(pool_y[i], half)) cpu_items.push_back(b);
      for (int64_t b : cuda_pool_backward_items(sizes_of(convs[i]).y, pool_y[i], half)) gpu_items.push_back(b);
    }
    if (bn[i]) {
      for (int64_t b : cpu_bn_backward_items(sizes_of(convs[i]).y, half)) cpu_items.push_back(b);
      for (int64_t b : cuda_bn_backward_items(sizes_of(convs[i]).y, half)) gpu_items.push_back(b);
    }
    for (int64_t b : cpu_backward_items(convs[i], half, i > 0)) cpu_items.push_back(b);
    for (int64_t b : cuda_backward_items(convs[i], half)) gpu_items.push_back(b);
  }
}

// resnet18_small's convolutions at batch n of 3x16x16 in forward order (models/resnet.h, the 3x3 stride-1
// stem, no bias): in each block conv1, conv2, then the downsample's 1x1 of the block's input.
std::vector<ConvCase> resnet18_small_convs(int64_t n) {
  std::vector<ConvCase> v = {{n, 3, 16, 64, 3, 1, 1, false}};
  for (int b = 0; b < 4; ++b) v.push_back({n, 64, 16, 64, 3, 1, 1, false});
  for (int64_t c = 64, h = 16; c < 512; c *= 2, h /= 2) {
    v.push_back({n, c, h, 2 * c, 3, 1, 2, false});
    v.push_back({n, 2 * c, h / 2, 2 * c, 3, 1, 1, false});
    v.push_back({n, c, h, 2 * c, 1, 0, 2, false});
    for (int b = 0; b < 2; ++b) v.push_back({n, 2 * c, h / 2, 2 * c, 3, 1, 1, false});
  }
  return v;
}

// True when the two logs are one common sequence with each side's items interleaved, each in its own order:
// an alignment of a and b whose unmatched entries are exactly a_items in a and b_items in b (dynamic
// programming over (position in a, items of a taken, items of b taken); the position in b follows).
bool differ_by(const Log& a, const Log& a_items, const Log& b, const Log& b_items) {
  if (a.size() - a_items.size() != b.size() - b_items.size()) return false;
  const size_t P = a.size(), I = a_items.size(), J = b_items.size();
  std::vector<char> ok((P + 1) * (I + 1) * (J + 1), 0);
  auto at = [&](size_t p, size_t i, size_t j) -> char& { return ok[(p * (I + 1) + i) * (J + 1) + j]; };
  at(0, 0, 0) = 1;
  for (size_t p = 0; p <= P; ++p)
    for (size_t i = 0; i <= I && i <= p; ++i)
      for (size_t j = 0; j <= J; ++j) {
        if (!at(p, i, j)) continue;
        const size_t q = p - i + j;  // entries of b consumed: the matched ones and b's items
        if (q > b.size()) continue;
        if (p < P && i < I && a[p] == a_items[i]) at(p + 1, i + 1, j) = 1;
        if (j < J && q < b.size() && b[q] == b_items[j]) at(p, i, j + 1) = 1;
        if (p < P && q < b.size() && a[p] == b[q]) at(p + 1, i, j) = 1;
      }
  return at(P, I, J) != 0;
}

}  // namespace

TEST_CASE("cuda plan: a 16-bit max pool's allocations for cpu and for cuda:0 differ by exactly the documented items") {
  // x (2, 3, 8, 8) f16 / bf16, 2x2 stride 2 and 3x3 stride 2 pad 1 (both to 4x4): X = 384 values, Y = 96
  // (X * 2 == Y * 8: the 16-bit dx and the indices have the same size, which the items must not confuse)
  for (DType dt : {DType::f16, DType::bf16})
    for (int64_t k : {2, 3}) {
      const int64_t X = 2 * 3 * 8 * 8, Y = 2 * 3 * 4 * 4;
      INFO(dtype_name(dt), " kernel ", k);
      const Log cpu_log = pool_log(2, 3, 8, k, 2, k == 2 ? 0 : 1, dt, Device::cpu());
      const Log cuda_log = pool_log(2, 3, 8, k, 2, k == 2 ? 0 : 1, dt, Device::cuda(0));
      // common: indices (Y*8) before y (Y*2), dx (X*2); the indices freed, y freed last (x keeps its grad)
      Log cpu_expected, cuda_expected;
      add(cpu_expected, {Y * 8, Y * 2, X * 2, -Y * 8, -Y * 2});
      add(cuda_expected, {X * 4, Y * 4, Y * 8, Y * 2, -Y * 4, -X * 4, Y * 4, X * 4, -Y * 8, -Y * 4, X * 2, -X * 4, -Y * 2});
      CHECK_MESSAGE(cpu_log == cpu_expected, "cpu: ", text(cpu_log));
      CHECK_MESSAGE(cuda_log == cuda_expected, "cuda: ", text(cuda_log));
      Log cpu_items, cuda_items;
      for (int64_t b : cpu_pool_backward_items(Y, true, false)) cpu_items.push_back(b);
      for (int64_t b : cuda_pool_forward_items(X, Y, true)) cuda_items.push_back(b);
      for (int64_t b : cuda_pool_backward_items(X, Y, true, false)) cuda_items.push_back(b);
      CHECK(differ_by(cpu_log, cpu_items, cuda_log, cuda_items));
    }
}

TEST_CASE("cuda plan: a training step's allocations for cpu and for cuda:0 differ by exactly the convolutions', 16-bit batch norms' and max pools' items") {
  // A model of this file's own (four convolutions, with and without bias), small_cnn and resnet18_small, batch 4
  // of 3x16x16, SGD with momentum, the optimizer state made at construction (as a run makes it).
  using namespace kiln;
  // Batch 4 of 3x16x16: the convolutions' shapes, in forward order (the first one's input needs no gradient).
  const std::vector<ConvCase> own_convs = {{4, 3, 16, 8, 3, 1, 1, true},    // -> (4, 8, 16, 16), pooled to 8x8
                                       {4, 8, 8, 16, 3, 1, 2, false},   // -> (4, 16, 4, 4)
                                       {4, 16, 4, 16, 1, 0, 1, false},  // 1x1
                                       {4, 16, 4, 8, 3, 1, 1, true}};   // -> (4, 8, 4, 4)
  const std::vector<bool> own_bn = {true, true, false, false};        // a batch norm after the first two
  const std::vector<int64_t> own_pool = {4 * 8 * 8 * 8, 0, 0, 0};      // a 2x2 max pool after the first
  auto make_model = [] {
    auto s = std::make_shared<nn::Sequential>();
    s->push_back(std::make_shared<nn::Conv2d>(3, 8, 3, 1, 1, true));
    s->push_back(std::make_shared<nn::BatchNorm2d>(8));
    s->push_back(std::make_shared<nn::ReLU>());
    s->push_back(std::make_shared<nn::MaxPool2d>(2));
    s->push_back(std::make_shared<nn::Conv2d>(8, 16, 3, 2, 1, false));
    s->push_back(std::make_shared<nn::BatchNorm2d>(16));
    s->push_back(std::make_shared<nn::ReLU>());
    s->push_back(std::make_shared<nn::Conv2d>(16, 16, 1, 1, 0, false));
    s->push_back(std::make_shared<nn::Conv2d>(16, 8, 3, 1, 1, true));
    s->push_back(std::make_shared<nn::Flatten>());
    s->push_back(std::make_shared<nn::Linear>(8 * 4 * 4, 4));
    return nn::ModulePtr(s);
  };
  // small_cnn (models/small_cnn.h): conv1 3->32 and conv2 32->64, 3x3 with bias, a 2x2 pool after each.
  const std::vector<ConvCase> small_cnn_convs = {{4, 3, 16, 32, 3, 1, 1, true}, {4, 32, 8, 64, 3, 1, 1, true}};
  auto make_small_cnn = [] { return nn::ModulePtr(models::small_cnn(4, 3, 16)); };
  // resnet18_small (models/resnet.h, the 3x3 stride-1 stem, no bias): in each block conv1, conv2, then the
  // downsample's 1x1 of the block's input; backward takes them in the reverse order.
  const std::vector<ConvCase> resnet_convs = resnet18_small_convs(4);
  auto make_resnet = [] { return nn::ModulePtr(models::resnet18(4, 3, true)); };
  auto make_opt = [](nn::Module& m) -> std::unique_ptr<optim::Optimizer> {
    optim::SGDOptions o;
    o.lr = 0.1;
    o.momentum = 0.9;
    return std::make_unique<optim::SGD>(m.named_parameters(), o);
  };
  struct Config {
    const char* model;
    bool amp;
    int ranks;
  };
  for (const Config cfg : {Config{"own", false, 1}, Config{"own", true, 1}, Config{"own", true, 2},
                           Config{"small_cnn", false, 1}, Config{"small_cnn", true, 1},
                           Config{"resnet18_small", true, 1}}) {
    INFO(std::string(cfg.model), ", amp ", cfg.amp, ", ranks ", cfg.ranks);
    const std::string model = cfg.model;
    const std::vector<ConvCase>& convs = model == "own" ? own_convs : model == "small_cnn" ? small_cnn_convs : resnet_convs;
    // small_cnn and resnet18_small: a batch norm after every convolution (the downsample's too)
    const std::vector<bool> bn = model == "own" ? own_bn : std::vector<bool>(convs.size(), true);
    // max pools: own's after its first block; small_cnn's 2x2 after each batch norm; resnet18_small none
    // (the small stem has no max pool)
    std::vector<int64_t> pool(convs.size(), 0);
    if (model == "own") pool = own_pool;
    if (model == "small_cnn") pool = {sizes_of(convs[0]).y / 4, sizes_of(convs[1]).y / 4};
    const train::ModelFactory factory = model == "own"         ? train::ModelFactory(make_model)
                                        : model == "small_cnn" ? train::ModelFactory(make_small_cnn)
                                                               : train::ModelFactory(make_resnet);
    train::PredictOptions po;
    po.batch = 4;
    po.input_shape = {3, 16, 16};
    po.amp = cfg.amp;
    po.ranks = cfg.ranks;
    po.create_state = true;
    auto replay = [&](Device target, StepMemory* r) {
      po.target = target;
      train::MetaAllocationLog log;
      *r = train::predict_step_memory(factory, make_opt, po);
      return log.events;
    };
    StepMemory cpu_r, gpu_r;
    const Log cpu_log = replay(Device::cpu(), &cpu_r), gpu_log = replay(Device::cuda(0), &gpu_r);
    // The step is replayed twice (the first and a steady one): each step's items, forward then backward.
    Log cpu_items, gpu_items;
    for (int step = 0; step < 2; ++step) step_items(convs, bn, pool, cfg.amp, cpu_items, gpu_items);
    CHECK(!cpu_items.empty());
    CHECK(gpu_items.empty() == !cfg.amp);  // --amp: every model has 16-bit batch norms (and biased convolutions)
    CHECK_MESSAGE(differ_by(cpu_log, cpu_items, gpu_log, gpu_items), "cpu: ", text(cpu_log), "\ncuda: ", text(gpu_log));
    CHECK_FALSE(differ_by(cpu_log, {}, gpu_log, {}));  // the check sees a difference
    // The persistent accounts agree; the buckets (ranks 2) are the same tensors from kiln's allocator.
    CHECK(gpu_r.params == cpu_r.params);
    CHECK(gpu_r.grads == cpu_r.grads);
    CHECK(gpu_r.optimizer == cpu_r.optimizer);
    CHECK(gpu_r.buckets == cpu_r.buckets);
    if (cfg.ranks > 1) CHECK(gpu_r.buckets > 0);
  }
}

TEST_CASE("cuda plan: a run's plan for cpu and for cuda:0 replays request sequences that differ by exactly the convolutions', 16-bit batch norms' and max pools' items") {
  using namespace kiln;
  // small_cnn (f32, --amp) and resnet18_small (--amp), 16 samples of 3x16x16 in batches of 8, SGD with momentum:
  // one epoch of two steps, both replayed on either target (set-up, model, optimizer state, loss scaler alike).
  const std::string root = kiln_test::cli_temp_dir("cuda_plan_run_npy");
  kiln_test::make_npy_folder(root, 16, 3, 16, 4);
  const std::vector<ConvCase> small_cnn_convs = {{8, 3, 16, 32, 3, 1, 1, true}, {8, 32, 8, 64, 3, 1, 1, true}};
  struct Config {
    const char* model;
    bool amp;
  };
  for (const Config cfg : {Config{"small_cnn", false}, Config{"small_cnn", true}, Config{"resnet18_small", true}}) {
    const bool amp = cfg.amp;
    INFO(std::string(cfg.model), ", amp ", amp);
    const std::vector<ConvCase> convs = std::string(cfg.model) == "small_cnn" ? small_cnn_convs : resnet18_small_convs(8);
    const std::vector<bool> bn(convs.size(), true);  // both models: a batch norm after every convolution
    std::vector<int64_t> pool(convs.size(), 0);       // small_cnn: a 2x2 max pool after each batch norm
    if (std::string(cfg.model) == "small_cnn") pool = {sizes_of(convs[0]).y / 4, sizes_of(convs[1]).y / 4};
    RunConfig c;
    c.model = cfg.model;
    c.data = root;
    c.batch = 8;
    c.epochs = 1;
    c.momentum = 0.9;
    c.threads = 1;
    c.amp = amp;
    const TrainData td = open_train_data(c, Device::cpu());
    PlanInputs in;
    in.config = &c;
    in.train = td.train.get();
    in.model = {4, 3, 16, 0};
    auto plan = [&](Device d, RunPlan* p) {
      in.device = d;
      train::MetaAllocationLog log;
      *p = plan_run(in);
      return log.events;
    };
    RunPlan cpu_plan, gpu_plan;
    const Log cpu_log = plan(Device::cpu(), &cpu_plan), gpu_log = plan(Device::cuda(0), &gpu_plan);
    REQUIRE(cpu_plan.steps_replayed == 2);
    REQUIRE(gpu_plan.steps_replayed == 2);
    Log cpu_items, gpu_items;
    for (int step = 0; step < 2; ++step) step_items(convs, bn, pool, amp, cpu_items, gpu_items);
    CHECK_MESSAGE(differ_by(cpu_log, cpu_items, gpu_log, gpu_items), "cpu: ", text(cpu_log), "\ncuda: ", text(gpu_log));
    CHECK_FALSE(differ_by(cpu_log, {}, gpu_log, {}));
    CHECK(gpu_plan.cuda);
    CHECK_FALSE(cpu_plan.cuda);
  }
}

#if defined(KILN_WITH_CUDA)
// --kernels kiln: kiln's bias kernels (kernels/cuda/bias.cu) add the 16-bit conv bias and reduce its
// gradient in f32 inside the kernel, so the cuda replay has no f32 copy of dy (y's size x 4, unique in
// this case: x 768 / 1536, w 270 / 540, y 1280 / 2560 bytes in f16 / f32) and no f32 bias sum, and the
// 16-bit db is allocated once; the vendor choice keeps the op layer's f32 sum (two y x 4 items).
TEST_CASE("cuda plan: under --kernels kiln the 16-bit conv bias gradient takes no f32 copy of dy") {
  struct Restore {
    ~Restore() { cuda::set_kernel_source(cuda::KernelSource::vendor); }
  } restore;
  const ConvCase k{2, 3, 8, 5, 3, 1, 1, true};
  const ConvSizes s = sizes_of(k);
  cuda::set_kernel_source(cuda::KernelSource::kiln);
  const Log kiln_log = conv_log(k, DType::f16, Device::cuda(0));
  cuda::set_kernel_source(cuda::KernelSource::vendor);
  const Log vendor_log = conv_log(k, DType::f16, Device::cuda(0));
  CHECK(std::count(vendor_log.begin(), vendor_log.end(), s.y * 4) == 2);
  CHECK(std::count(vendor_log.begin(), vendor_log.end(), s.b * 4) == 1);
  CHECK(std::count(kiln_log.begin(), kiln_log.end(), s.y * 4) == 0);
  CHECK(std::count(kiln_log.begin(), kiln_log.end(), s.b * 4) == 0);
  CHECK(std::count(kiln_log.begin(), kiln_log.end(), s.b * 2) == 1);
  MESSAGE("kiln: ", text(kiln_log), "| vendor: ", text(vendor_log));
}
#endif
