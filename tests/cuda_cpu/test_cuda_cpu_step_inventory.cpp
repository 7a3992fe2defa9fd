// The inventory of issue 33's whole `--amp --kernels kiln` small_cnn step in the CPU mode (the step itself
// runs in test_cuda_cpu_step.cpp, docs/gpu-status.md "The whole step"). With the CPU mode installed as
// the cuda backend (kernels/cuda_cpu/install.h), the engine's cuda path of that step is replayed on the
// meta device imitating cuda:0 (the memory plan's replay: the same op-layer code, kernels skipped) with the
// op trace on, which names every backend entry point that the step reaches through KILN_DISPATCH, the
// 16-bit convolution calls and the fused optimizer updates, in order. Each must be one the CPU mode runs
// with kiln's kernels: the route table below holds the address of the kiln::cuda_on_cpu function that
// does it under --kernels kiln (so it links only if kiln_cuda_cpu has it), and the installed backend
// table must hold that same address (the engine reaches that function, not another); an entry point that
// only cuBLAS / cuDNN / NCCL serves, or a new one, fails here by name. What it cannot see: the dtype of a
// call (an f32 GEMM would be cuBLAS; under --amp small_cnn's linear layers are f16) and anything below
// the entry point. Runs in every build (the table exists with KILN_CUDA=OFF too).
#include <doctest/doctest.h>

#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "engine/core/device.h"
#include "engine/ops/op_trace.h"
#include "engine/optim/sgd.h"
#include "engine/train/kernel_option.h"
#include "engine/train/memory_predict.h"
#include "kernels/cuda_cpu/install.h"
#include "models/small_cnn.h"
namespace {

// The op trace of small_cnn's --amp step (batch 4 of 1x28x28, SGD with momentum, the optimizer state made
// first, as a run makes it) replayed on meta for cuda:0 with --kernels kiln, the CPU mode installed.
std::vector<kiln::OpSpan> kiln_amp_step_trace() {
  using namespace kiln;
  struct Restore {
    ~Restore() {
      std::ostringstream log;
      apply_kernels_option("vendor", log);
      op_trace_enable(false);
    }
  } restore;
  std::ostringstream log;
  apply_kernels_option("kiln", log);
  train::PredictOptions po;
  po.batch = 4;
  po.input_shape = {1, 28, 28};
  po.amp = true;
  po.create_state = true;
  po.target = Device::cuda(0);
  auto make_model = [] { return nn::ModulePtr(models::small_cnn(10, 1, 28)); };
  auto make_opt = [](nn::Module& m) -> std::unique_ptr<optim::Optimizer> {
    optim::SGDOptions o;
    o.lr = 0.1;
    o.momentum = 0.9;
    return std::make_unique<optim::SGD>(m.named_parameters(), o);
  };
  (void)op_trace_take();
  op_trace_enable(true);
  (void)train::predict_step_memory(make_model, make_opt, po);
  op_trace_enable(false);
  return op_trace_take();
}

}  // namespace

// The CPU mode's declarations (namespace kiln::cuda_on_cpu).
#include "kernels/cuda_cpu/prelude.h"
#include "kernels/cuda/backend.h"
#include "kernels/cuda/conv2d_16.h"
#include "kernels/cuda/nn_backend.h"

namespace {

namespace gpu = kiln::cuda_on_cpu;

template <typename F>
std::pair<std::string, const void*> via(const char* what, F* fn) {
  return {what, reinterpret_cast<const void*>(fn)};
}

// Backend entry point (the span's name) -> the CPU-mode function that runs it under --kernels kiln.
const std::map<std::string, std::pair<std::string, const void*>>& cpu_mode_routes() {
  static const std::map<std::string, std::pair<std::string, const void*>> r = {
      {"conv2d_16_forward", via("conv2d_16_forward (conv2d.cpp): igemm_conv_fprop for f16", &gpu::conv2d_16_forward)},
      {"conv2d_16_backward_input", via("conv2d_16_backward_input: igemm_conv_dgrad", &gpu::conv2d_16_backward_input)},
      {"conv2d_16_backward_weight", via("conv2d_16_backward_weight: igemm_conv_wgrad", &gpu::conv2d_16_backward_weight)},
      {"gemm_strided", via("gemm_strided (matmul.cpp): hgemm (hgemm.cu) for f16, else cuBLAS (fails)", &gpu::gemm_strided)},
      {"bias_add", via("bias.cu", &gpu::bias_add)},
      {"bias_grad", via("bias.cu", &gpu::bias_grad)},
      {"unary", via("elementwise.cu", &gpu::unary)},
      {"binary", via("elementwise.cu", &gpu::binary)},
      {"copy", via("elementwise.cu", &gpu::copy)},
      {"fill", via("elementwise.cu", &gpu::fill)},
      {"where", via("elementwise.cu", &gpu::where)},
      {"random_fill", via("elementwise.cu", &gpu::random_fill)},
      {"reduce_rows", via("reduce.cu", &gpu::reduce_rows)},
      {"batch_norm_forward_train<T>", via("batch_norm.cu", &gpu::batch_norm_forward_train<float>)},
      {"batch_norm_backward_train<T>", via("batch_norm.cu", &gpu::batch_norm_backward_train<float>)},
      {"max_pool2d_forward<T>", via("pool.cu", &gpu::max_pool2d_forward<float>)},
      {"max_pool2d_backward<T>", via("pool.cu", &gpu::max_pool2d_backward<float>)},
      {"dropout_forward<T>", via("elementwise.cu", &gpu::dropout_forward<float>)},
      {"dropout_backward<T>", via("elementwise.cu", &gpu::dropout_backward<float>)},
      {"cross_entropy_forward<T>", via("loss.cu", &gpu::cross_entropy_forward<float>)},
      {"cross_entropy_backward<T>", via("loss.cu", &gpu::cross_entropy_backward<float>)},
      {"sgd_fused", via("optim_update.cu", &gpu::sgd_fused)},
      {"adamw_fused", via("optim_update.cu", &gpu::adamw_fused)},
  };
  return r;
}

// The installed table's entry for a span name (the same names as KILN_DISPATCH's); nullptr if none.
const void* table_entry(const kiln::CudaBackend& b, const std::string& name) {
  auto p = [](auto f) { return reinterpret_cast<const void*>(f); };
  if (name == "conv2d_16_forward") return nullptr;  // wrapped (the layout enum): checked by the step test
  if (name == "conv2d_16_backward_input" || name == "conv2d_16_backward_weight") return nullptr;
#define KILN_ENTRY_(fn) \
  if (name == #fn) return p(b.fn);
  KILN_CUDA_BACKEND_ENTRIES(KILN_ENTRY_)
#undef KILN_ENTRY_
#define KILN_TYPED_ENTRY_(fn) \
  if (name == #fn "<T>") return p(b.f32.fn);
  KILN_CUDA_BACKEND_TYPED_ENTRIES(KILN_TYPED_ENTRY_)
#undef KILN_TYPED_ENTRY_
  return nullptr;
}

}  // namespace

TEST_CASE("CPU mode: every backend call of the --amp --kernels kiln small_cnn step has a CPU-mode kernel") {
  using kiln::OpSpan;
  auto installed = gpu::install_as_cuda_backend();
  const kiln::CudaBackend& table = kiln::cuda_backend_or_throw();
  const std::vector<OpSpan> spans = kiln_amp_step_trace();
  std::map<std::string, int> calls;
  for (const OpSpan& s : spans) ++calls[s.name];
  std::string listing;
  for (const auto& c : calls) {
    const auto it = cpu_mode_routes().find(c.first);
    const bool routed = it != cpu_mode_routes().end() && it->second.second != nullptr;
    listing += c.first + " x" + std::to_string(c.second) + (routed ? " -> " + it->second.first : " (NO CPU-MODE ROUTE)") + "; ";
    CHECK_MESSAGE(routed, c.first, ": the step calls it and the CPU mode has no kiln kernel for it");
    // The engine reaches exactly that function through the installed table (the f32 instance for a
    // template; the 16-bit convolutions are wrapped, their layout flag made the enum).
    const void* entry = table_entry(table, c.first);
    if (routed && entry) CHECK_MESSAGE(entry == it->second.second, c.first, ": the installed table holds another function");
  }
  MESSAGE(spans.size(), " backend calls (model set-up and two steps): ", listing);
  // The replay runs two steps (the first, then a steady one): small_cnn's two convolutions each time.
  CHECK(calls["conv2d_16_forward"] == 4);
  CHECK(calls["conv2d_16_backward_weight"] == 4);
  CHECK(calls["bias_add"] == 4);   // conv1 and conv2's biases, on kiln's bias kernels
  CHECK(calls["bias_grad"] == 4);
  CHECK(calls["conv2d_16_backward_input"] == 2);  // conv1's input (the image) needs no gradient
  // small_cnn's 12 f32 parameters (conv1, bn1, conv2, bn2, fc1, fc2: weight and bias each), every one fused
  CHECK(calls["sgd_fused"] == 2 * 12);
}
