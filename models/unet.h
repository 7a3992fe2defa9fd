// UNet (Ronneberger et al. 2015) in the layout and parameter names of the common PyTorch
// implementation (milesial/Pytorch-UNet): inc, down1..downD, up1..upD, outc, each DoubleConv a
// Sequential `double_conv` (0 conv3x3 no bias, 1 BN, 2 ReLU, 3 conv3x3 no bias, 4 BN, 5 ReLU),
// Down = `maxpool_conv` (0 MaxPool2d(2), 1 DoubleConv), Up = `up` (bilinear x2 Upsample with
// align_corners, or ConvTranspose2d(in, in/2, 2, stride 2)) then `conv` (DoubleConv), OutConv
// `outc.conv` (1x1 with bias). PyTorch's default initialization (no re-initialization, as milesial).
//
// Widths: w_i = base * 2^i. inc: in_channels -> w_0; down_i: w_(i-1) -> w_i (downD: w_D / f);
// up_j: w_(D-j+1) -> w_(D-j) / f (upD: -> w_0); f = 2 with bilinear upsampling, else 1. With
// bilinear, an Up's DoubleConv has mid = in / 2 (milesial's rule).
//
// Sizes: x (N, in_channels, H, W) -> logits (N, num_classes, H, W) for any H, W >= 2^depth (times 2
// with the stride-2 first conv): MaxPool2d(2) floors odd sizes and every Up pads its upsampled
// input (zeros, split left/right as milesial) to the skip's size before cat([skip, up], 1).
//
// first_stride 2 (the "smaller first-layer feature maps" trick): inc's first conv has stride 2, so
// every feature map is at half the resolution (a quarter of the activation memory); the logits come
// out at ceil(H/2) x ceil(W/2) and are brought back to exactly H x W by F.interpolate(size = (H, W),
// bilinear, align_corners = False) after outc (on num_classes channels, the cheapest place).
//
// Recompute (set_recompute_segments(N), `--recompute N`): a UNet is no chain of stages (its skips),
// so it gives one stage (stages()) and N counts resolution levels from the top: N = 1 recomputes
// the blocks that run at full feature resolution (inc and upD), N = 2 adds the half-resolution
// ones (down1, up(D-1)), ..., N >= D + 1 every block (downD, the bottleneck, last). A recomputed
// block keeps only its inputs and re-runs in backward: inc and a Down their one input; an Up
// (upsampling, pad, concat and DoubleConv, all recomputed) the map from below and the skip, which
// the encoder keeps anyway, so neither the concatenation nor the upsampled map is stored. outc is
// never recomputed. `kiln mem` shows the model's 1 stage.
// Must not know the trainer or the CLI.
#pragma once
#include <memory>
#include <vector>

#include "engine/nn/batch_norm2d.h"
#include "engine/nn/conv2d.h"
#include "engine/nn/layers.h"
#include "engine/nn/sequential.h"
#include "engine/nn/upsampling.h"

namespace kiln::models {

// (conv3x3 no bias, BN, ReLU) x 2 as the Sequential `double_conv`: (N, in, H, W) -> (N, out, H', W')
// (H' = H, or ceil(H/2) when first_stride is 2).
class DoubleConv : public nn::Module {
 public:
  DoubleConv(int64_t in, int64_t out, int64_t mid = 0, int64_t first_stride = 1);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<nn::Sequential> double_conv;
};

// MaxPool2d(2) then DoubleConv as the Sequential `maxpool_conv`: (N, in, H, W) -> (N, out, H/2, W/2).
class UNetDown : public nn::Module {
 public:
  UNetDown(int64_t in, int64_t out);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<nn::Sequential> maxpool_conv;
};

// `up` (x2) on x1, zero-pad to x2's size, cat([x2, x1], 1), `conv`. Two inputs: use up_cat() and
// conv; forward(x) throws.
class UNetUp : public nn::Module {
 public:
  UNetUp(int64_t in, int64_t out, bool bilinear);
  Tensor forward(const Tensor& x) override;
  // x1 (N, in, h, w) from below, x2 (N, in/2, H, W) the skip (H >= 2h, W >= 2w)
  // -> (N, in, H, W), the DoubleConv's input
  Tensor up_cat(const Tensor& x1, const Tensor& x2);
  nn::ModulePtr up;  // nn::Upsample or nn::ConvTranspose2d
  std::shared_ptr<DoubleConv> conv;
};

// 1x1 conv with bias as `conv`: (N, in, H, W) -> (N, num_classes, H, W).
class UNetOutConv : public nn::Module {
 public:
  UNetOutConv(int64_t in, int64_t out);
  Tensor forward(const Tensor& x) override;
  std::shared_ptr<nn::Conv2d> conv;
};

struct UNetOptions {
  int64_t in_channels = 3;
  int64_t num_classes = 2;
  int64_t depth = 4;          // number of Down (and Up) blocks
  int64_t base_width = 64;    // channels of inc
  bool bilinear = false;      // milesial's default: transposed-conv upsampling
  int64_t first_stride = 1;   // 2: inc's first conv has stride 2 (see the file comment)
};

class UNet : public nn::Module {
 public:
  explicit UNet(const UNetOptions& o);
  // x: (N, in_channels, H, W) -> logits (N, num_classes, H, W)
  Tensor forward(const Tensor& x) override;
  // One stage, the whole forward with the recompute levels of recompute_segments() (file comment):
  // Module runs stages() when recompute segments are set, and a one-stage chain runs plainly, so
  // the levels decide what is recomputed.
  std::vector<nn::Stage> stages() override;
  // The smallest H (and W) the model takes: 2^depth, times 2 with the stride-2 first conv.
  int64_t min_size() const;
  const UNetOptions& options() const { return o_; }

 private:
  Tensor run(const Tensor& x, int levels);  // levels: how many resolution levels are recomputed

  UNetOptions o_;
  std::shared_ptr<DoubleConv> inc_;
  std::vector<std::shared_ptr<UNetDown>> down_;  // down1..downD
  std::vector<std::shared_ptr<UNetUp>> up_;      // up1..upD
  std::shared_ptr<UNetOutConv> outc_;
};

std::shared_ptr<UNet> unet(const UNetOptions& o);

}  // namespace kiln::models
