// models/unet: milesial's module names and parameter count, (N, K, H, W) output for even and odd
// sizes and every option (bilinear, stride-2 first conv, depth, width), the registry's names and
// options, clear errors for small inputs and bad options, and recompute by resolution level: the
// same loss and gradients as the plain run, fewer activation bytes.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>

#include "engine/autograd/grad_mode.h"
#include "engine/memory/caching_allocator.h"
#include "engine/ops/ops.h"
#include "engine/ops/segmentation.h"
#include "models/registry.h"
#include "models/unet.h"

using namespace kiln;

namespace {

bool has_name(const NamedTensors& v, const std::string& n) {
  return std::any_of(v.begin(), v.end(), [&](const auto& e) { return e.first == n; });
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const kiln::Error& e) {
    return e.what();
  }
  return "";
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  auto x = to_dtype(a, DType::f64).to_vector<double>(), y = to_dtype(b, DType::f64).to_vector<double>();
  REQUIRE(x.size() == y.size());
  double d = 0;
  for (size_t i = 0; i < x.size(); ++i) d = std::max(d, std::abs(x[i] - y[i]));
  return d;
}

}  // namespace

TEST_CASE("unet: milesial's names and parameter count (depth 4, base 64)") {
  // milesial/Pytorch-UNet UNet(n_channels=3, n_classes=2, bilinear=False): 31,037,698 parameters;
  // bilinear=True: 17,263,042 (the count of tests/support/oracle/unet.py's torch class, which the
  // parity tests load kiln's weights into name by name).
  auto m = models::make_model("unet", 2, 3, 0);
  CHECK(m->num_parameters() == 31037698);
  CHECK(models::make_model("unet:bilinear", 2, 3, 0)->num_parameters() == 17263042);
  auto sd = m->state_dict();
  for (const char* n : {"inc.double_conv.0.weight", "inc.double_conv.1.running_var", "inc.double_conv.4.bias",
                        "down1.maxpool_conv.1.double_conv.0.weight", "down4.maxpool_conv.1.double_conv.3.weight",
                        "up1.up.weight", "up1.up.bias", "up4.conv.double_conv.4.num_batches_tracked", "outc.conv.weight",
                        "outc.conv.bias"})
    CHECK_MESSAGE(has_name(sd, n), n);
  CHECK_FALSE(has_name(sd, "inc.double_conv.0.bias"));  // convs before BN have no bias
  CHECK_FALSE(has_name(sd, "down5.maxpool_conv.1.double_conv.0.weight"));
}

TEST_CASE("unet: (N, K, H, W) out for every option, even and odd sizes") {
  manual_seed(5);
  NoGradGuard ng;
  struct Case { const char* name; int64_t h, w; };
  for (const Case& c : {Case{"unet_small:depth=2,base=4", 16, 16}, Case{"unet_small:depth=2,base=4", 13, 19},
                        Case{"unet_small:depth=3,base=4,bilinear", 24, 17}, Case{"unet_small:depth=2,base=4,stride2", 16, 16},
                        Case{"unet_small:depth=2,base=4,stride2,bilinear", 17, 23}, Case{"unet_small:depth=1,base=2", 2, 3}}) {
    CAPTURE(c.name);
    CAPTURE(c.h);
    auto m = models::make_model(c.name, 5, 2, 0);
    m->eval();
    Tensor y = (*m)(uniform({2, 2, c.h, c.w}, -1, 1));
    CHECK(y.sizes() == Shape{2, 5, c.h, c.w});
  }
  // The meta device: a full-size UNet at 2048 px is shapes only.
  auto big = models::make_model("unet", 3, 3, 2048);
  big->to(Device::meta());
  Tensor yb = (*big)(empty({2, 3, 2048, 2048}, DType::f32, Device::meta()));
  CHECK(yb.sizes() == Shape{2, 3, 2048, 2048});
}

TEST_CASE("unet: registry names, options and errors") {
  auto names = models::model_names();
  CHECK(std::find(names.begin(), names.end(), "unet") != names.end());
  CHECK(std::find(names.begin(), names.end(), "unet_small") != names.end());
  CHECK(models::is_segmentation_model("unet_small:stride2"));
  CHECK_FALSE(models::is_segmentation_model("resnet18"));
  auto small = std::dynamic_pointer_cast<models::UNet>(models::make_model("unet_small", 2, 3, 0));
  REQUIRE(small);
  CHECK(small->options().base_width == 8);
  CHECK(small->options().depth == 4);
  CHECK_FALSE(small->options().bilinear);
  CHECK(error_of([] { models::make_model("unet:colour=red", 2, 3, 0); }).find("unknown option 'colour=red'") !=
        std::string::npos);
  CHECK(error_of([] { models::make_model("unet:depth=x", 2, 3, 0); }).find("integer") != std::string::npos);
  CHECK(error_of([] { models::make_model("unet:depth=0", 2, 3, 0); }).find("depth") != std::string::npos);
  CHECK(error_of([] { models::make_model("unet", 2, 3, 8); }).find("smaller than 16") != std::string::npos);
  CHECK(error_of([] { models::make_model("unet:stride2", 2, 3, 16); }).find("smaller than 32") != std::string::npos);
  auto m = models::make_model("unet_small:depth=3", 2, 3, 0);
  std::string e = error_of([&] { (*m)(uniform({1, 3, 7, 32}, -1, 1)); });
  CHECK(e.find("smaller than 8 x 8") != std::string::npos);
  CHECK(error_of([&] { (*m)(uniform({1, 4, 32, 32}, -1, 1)); }).find("expected input (N, 3, H, W)") != std::string::npos);
}

TEST_CASE("unet: recompute by resolution level gives the plain gradients with fewer activation bytes") {
  const std::string name = "unet_small:depth=3,base=4";
  manual_seed(9);
  Tensor x = uniform({2, 3, 24, 24}, -1, 1);
  std::vector<int64_t> tv(2 * 24 * 24);
  for (size_t i = 0; i < tv.size(); ++i) tv[i] = (int64_t)((i * 7 + i / 13) % 3);
  Tensor y = tensor_from<int64_t>(tv, {2, 24, 24});
  auto ref = models::make_model(name, 3, 3, 0);
  const NamedTensors init = ref->state_dict();
  CachingAllocator* host = caching_allocator_for(Device::cpu());
  auto run = [&](int levels, int64_t* activation_bytes) {
    auto m = models::make_model(name, 3, 3, 0);
    m->load_state_dict(init);
    if (levels > 0) m->set_recompute_segments(levels);
    int64_t before = host ? host->stats().tag_allocated[(int)MemoryTag::activation].current : 0;
    Tensor logits = (*m)(x);
    Tensor loss = add(cross_entropy(logits, y), dice_loss(logits, y));
    if (host) *activation_bytes = host->stats().tag_allocated[(int)MemoryTag::activation].current - before;
    loss.backward();
    std::vector<Tensor> g;
    for (auto& [n, p] : m->named_parameters()) g.push_back(p.grad());
    return std::make_pair(loss, g);
  };
  int64_t plain_bytes = 0;
  auto [l0, g0] = run(0, &plain_bytes);
  int64_t last = plain_bytes;
  for (int levels : {1, 2, 4}) {  // 4 = depth + 1: every block
    CAPTURE(levels);
    int64_t bytes = 0;
    auto [l, g] = run(levels, &bytes);
    CHECK(max_abs_diff(l, l0) <= 1e-6);
    REQUIRE(g.size() == g0.size());
    for (size_t i = 0; i < g.size(); ++i) {
      REQUIRE(g[i].defined());
      CHECK(max_abs_diff(g[i], g0[i]) <= 1e-5 * std::max(1.0, max_abs_diff(g0[i], zeros_like(g0[i]))));
    }
    if (host) {
      MESSAGE("recompute ", levels, " level(s): activations ", bytes, " bytes (plain ", plain_bytes, ")");
      CHECK(bytes < last);
      last = bytes;
    }
  }
}
