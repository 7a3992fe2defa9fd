// The meta device: every op runs shape inference and allocation through the meta allocator
// (addresses only) and computes nothing; no host memory is used, and shapes match the CPU.
#include <doctest/doctest.h>

#include <functional>

#include "engine/autograd/grad_mode.h"
#include "engine/memory/caching_allocator.h"
#include "engine/ops/ops.h"

using namespace kiln;

TEST_CASE("every op runs on meta without host memory, forward and backward, with CPU shapes") {
  using V = std::vector<Tensor>;
  struct Case {
    const char* name;
    std::vector<Shape> shapes;
    std::function<Tensor(const V&)> f;
  };
  Tensor tgt_cpu = zeros({6}, DType::i64);
  Tensor tgt_meta = empty({6}, DType::i64, Device::meta());
  std::vector<Case> cases = {
      {"add", {{3, 4}, {4}}, [](const V& x) { return add(x[0], x[1]); }},
      {"mul", {{3, 4}, {3, 1}}, [](const V& x) { return mul(x[0], x[1]); }},
      {"div", {{3, 4}, {3, 4}}, [](const V& x) { return div(x[0], x[1]); }},
      {"pow", {{3, 4}, {3, 4}}, [](const V& x) { return pow(x[0], x[1]); }},
      {"unary chain", {{3, 4}}, [](const V& x) { return tanh(sigmoid(gelu(relu(exp(x[0]))))); }},
      {"clamp", {{3, 4}}, [](const V& x) { return clamp(x[0], -1.0, 1.0); }},
      {"reductions", {{3, 4, 5}}, [](const V& x) { return add(sum(x[0], {1}), mul(var(x[0], {1}), mean(x[0], {1}))); }},
      {"max", {{3, 4}}, [](const V& x) { return max(x[0], 1).values; }},
      {"matmul", {{2, 3, 4}, {4, 5}}, [](const V& x) { return matmul(x[0], x[1]); }},
      {"linear", {{6, 4}, {3, 4}, {3}}, [](const V& x) { return linear(x[0], x[1], x[2]); }},
      {"conv2d", {{2, 3, 9, 9}, {4, 3, 3, 3}, {4}}, [](const V& x) { return conv2d(x[0], x[1], x[2], {2, 2}, {1, 1}); }},
      {"pools", {{2, 3, 9, 9}}, [](const V& x) {
         return adaptive_avg_pool2d(avg_pool2d(max_pool2d(x[0], {3, 3}, {2, 2}, {1, 1}), {2, 2}), {1, 1});
       }},
      {"batch_norm", {{4, 3, 5, 5}, {3}, {3}}, [](const V& x) { return batch_norm(x[0], x[1], x[2], Tensor(), Tensor(), true); }},
      {"softmax", {{3, 5}}, [](const V& x) { return add(softmax(x[0], 1), log_softmax(x[0], 0)); }},
      {"dropout", {{3, 5}}, [](const V& x) { return dropout(x[0], 0.5, true); }},
      {"cat/stack/pad", {{2, 3}, {2, 3}}, [](const V& x) { return pad(cat({x[0], select(stack({x[0], x[1]}, 0), 0, 1)}, 0), {1, 1}); }},
      {"views", {{2, 3, 4}}, [](const V& x) { return flatten(permute(unsqueeze(x[0], 0), {0, 3, 2, 1}), 1); }},
  };
  CachingAllocator* host = caching_allocator_for(Device::cpu());
  for (auto& c : cases) {
    std::string case_name = c.name;
    CAPTURE(case_name);
    V cpu_in, meta_in;
    for (auto& s : c.shapes) {
      cpu_in.push_back(uniform(s, 0.5, 1.5).set_requires_grad(true));
      meta_in.push_back(empty(s, DType::f32, Device::meta()).set_requires_grad(true));
    }
    Tensor cpu_out = c.f(cpu_in);
    int64_t host_before = host ? host->stats().total.allocated.current : 0;
    Tensor meta_out = c.f(meta_in);
    CHECK(meta_out.device().is_meta());
    CHECK(meta_out.sizes() == cpu_out.sizes());
    CHECK(meta_out.dtype() == cpu_out.dtype());
    Tensor g = empty(meta_out.sizes(), DType::f32, Device::meta());
    meta_out.backward(g);
    for (size_t i = 0; i < meta_in.size(); ++i) {
      REQUIRE(meta_in[i].grad().defined());
      CHECK(meta_in[i].grad().sizes() == meta_in[i].sizes());
      CHECK(meta_in[i].grad().device().is_meta());
    }
    if (host) CHECK(host->stats().total.allocated.current == host_before);
  }
  CachingAllocator* meta = caching_allocator_for(Device::meta());
  REQUIRE(meta != nullptr);
  CHECK(meta->stats().total.allocated.peak > 0);  // the meta allocator saw the requests
}

TEST_CASE("cross_entropy on meta") {
  Tensor logits = empty({6, 5}, DType::f32, Device::meta()).set_requires_grad(true);
  Tensor t = empty({6}, DType::i64, Device::meta());
  Tensor l = cross_entropy(logits, t);
  CHECK(l.sizes() == Shape{});
  l.backward(empty({}, DType::f32, Device::meta()));
  CHECK(logits.grad().sizes() == Shape{6, 5});
}
