// Gradients of conv_transpose2d and interpolate by f64 central differences, on random inputs that
// are non-contiguous views (and contiguous ones): every stride/padding/output_padding/dilation/groups
// combination the parity suite uses, and every interpolate mode (nearest by size and by scale,
// including torch's 2x and 1x shortcuts; bilinear with align_corners false and true, up and down).
#include "engine/ops/upsampling.h"
#include "support/gradcheck.h"

using namespace kiln;
using kiln::test::gradcheck;
using kiln::test::random_input;

TEST_CASE("gradcheck: conv_transpose2d with stride, padding, output_padding, dilation, groups, bias") {
  manual_seed(41);
  struct Case { Shape x, w; std::vector<int64_t> s, p, op, d; int64_t g; bool bias; };
  std::vector<Case> cases = {
      {{2, 3, 4, 5}, {3, 2, 3, 3}, {1, 1}, {1, 1}, {0, 0}, {1, 1}, 1, true},
      {{1, 4, 3, 4}, {4, 3, 3, 2}, {2, 2}, {1, 0}, {1, 1}, {1, 1}, 2, true},   // stride 2, output_padding 1, groups 2
      {{2, 2, 3, 3}, {2, 3, 2, 3}, {1, 2}, {0, 1}, {1, 0}, {2, 1}, 1, false},  // dilation 2 with output_padding 1 < dilation
      {{1, 4, 5, 3}, {4, 1, 3, 3}, {3, 2}, {2, 1}, {2, 1}, {2, 2}, 4, true},   // depthwise, stride 3
      {{2, 3, 3, 3}, {3, 4, 1, 1}, {2, 2}, {0, 0}, {1, 0}, {1, 1}, 1, true},   // 1x1 stride 2
  };
  for (auto& c : cases) {
    for (bool nc : {false, true}) {
      Tensor x = random_input(c.x, nc), w = random_input(c.w, nc);
      Tensor b = c.bias ? random_input({c.w[1] * c.g}) : Tensor();
      std::vector<Tensor> in = {x, w};
      if (c.bias) in.push_back(b);
      CHECK(gradcheck("conv_transpose2d", [&](auto& v) {
        return conv_transpose2d(v[0], v[1], c.bias ? v[2] : Tensor(), c.s, c.p, c.op, c.g, c.d);
      }, in) <= 1e-6);
    }
  }
}

TEST_CASE("gradcheck: interpolate nearest and bilinear, by size and by scale, align_corners both ways") {
  manual_seed(42);
  struct Case { const char* name; Shape x; std::vector<int64_t> size; std::vector<double> scale; InterpMode mode; bool ac; };
  const InterpMode nearest = InterpMode::nearest, bilinear = InterpMode::bilinear;
  std::vector<Case> cases = {
      {"nearest size up", {2, 3, 4, 5}, {7, 8}, {}, nearest, false},
      {"nearest scale 1.5", {1, 2, 5, 3}, {}, {1.5}, nearest, false},
      {"nearest scale 2 (shortcut)", {1, 2, 3, 4}, {}, {2.0}, nearest, false},
      {"nearest size down", {1, 2, 7, 6}, {3, 4}, {}, nearest, false},
      {"nearest scale 1 (copy)", {1, 2, 3, 3}, {}, {1.0}, nearest, false},
      {"bilinear size up", {2, 2, 4, 3}, {7, 6}, {}, bilinear, false},
      {"bilinear scale 1.5", {1, 3, 5, 4}, {}, {1.5}, bilinear, false},
      {"bilinear scale 2, 1.5 align_corners", {1, 2, 3, 5}, {}, {2.0, 1.5}, bilinear, true},
      {"bilinear size up align_corners", {1, 2, 4, 3}, {9, 5}, {}, bilinear, true},
      {"bilinear down", {1, 2, 7, 8}, {3, 5}, {}, bilinear, false},
      {"bilinear down align_corners to 1", {1, 2, 5, 4}, {1, 3}, {}, bilinear, true},
      {"bilinear same size", {1, 2, 3, 4}, {3, 4}, {}, bilinear, false},
  };
  for (auto& c : cases) {
    for (bool nc : {false, true}) {
      std::string name = c.name;
      CAPTURE(name);
      CAPTURE(nc);
      Tensor x = random_input(c.x, nc);
      CHECK(gradcheck(c.name, [&](auto& v) { return interpolate(v[0], c.size, c.scale, c.mode, c.ac); }, {x}) <= 1e-6);
    }
  }
}
