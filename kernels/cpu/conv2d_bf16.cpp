// bf16 convolution through oneDNN with every byte in kiln's workspace (see conv2d_bf16.h).
// A Plan holds one pass's primitive, the reorders between kiln's NCHW (or NHWC) / KCRS tensors and the layouts
// oneDNN chose (format_tag::any; for NHWC the activations' own layout), and where each piece sits in the
// workspace:
//   [in0 reordered][in1 reordered][out in oneDNN's layout][scratchpad (max of the primitive's and the
//   reorders')], each 64-byte aligned; a piece is absent (0 bytes) when oneDNN takes kiln's layout as is.
// Passes: forward (in0 x, in1 w, out y), backward_input (in0 dy, in1 w, out dx), backward_weight (in0 x,
// in1 dy, out dw; the bias gradient is always plain). Built without oneDNN, every entry point but
// conv2d_bf16_uses_onednn (false) is an error.
#include "kernels/cpu/conv2d_bf16.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/core/error.h"
#include "kernels/cpu/bf16_path.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/conv2d_bf16_im2col.h"
#include "kernels/cpu/threads.h"

#if defined(KILN_WITH_ONEDNN)
#include <dnnl.hpp>
#endif

namespace kiln::cpu {

namespace {

[[maybe_unused]] const char* pass_name(Conv2dPass p) {
  switch (p) {
    case Conv2dPass::forward: return "forward";
    case Conv2dPass::backward_input: return "backward_input";
    default: return "backward_weight";
  }
}

[[maybe_unused]] std::string desc_str(const Conv2dDesc& d) {
  return str_cat("x (", d.N, ", ", d.C, ", ", d.H, ", ", d.W, "), w (", d.K, ", ", d.C / d.groups, ", ", d.R, ", ",
                 d.S, "), stride ", d.stride_h, ",", d.stride_w, ", padding ", d.pad_h, ",", d.pad_w, ", dilation ",
                 d.dil_h, ",", d.dil_w, ", groups ", d.groups);
}

constexpr size_t kAlign = 64;
[[maybe_unused]] size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

}  // namespace

// The measured rule (docs/cpu-bf16.md, bench_conv_cpu --bf16, AVX512-BF16 on an AMD EPYC, 1 thread): oneDNN's
// bf16 kernels beat kiln's f32 ones on every ResNet18 shape (0.05-0.8x the time, the 3-channel 7x7 stem
// included: 0.5x forward, 0.45x weight gradient) but not on the small CNN's 1->32 3x3 conv (0.98-1.2x forward
// and weight gradient, 1.7-2x input gradient): a reduction of C*R*S = 9 values per output is too short for
// the dot-product units. So oneDNN from C*R*S >= 16 on; below that kiln's direct kernel (conv2d_bf16_direct.h).
constexpr int64_t kMinReduction = 16;

bool conv2d_bf16_uses_onednn(const Conv2dDesc& d) {
  if (d.groups != 1 || d.C * d.R * d.S < kMinReduction) return false;
  return bf16_path() != Bf16Path::portable;
}

// The weight gradient with more than one thread (bench_conv_cpu --bf16-wgrad --threads 2, AMD EPYC avx512_bf16,
// a loaded 2-vCPU machine, docs/cpu-bf16.md): oneDNN's one call over all images reduces across its threads and
// took 1.05-8.6x kiln's f32 staging weighted over ResNet18's shapes (single shapes up to 43x: layer2.0 3x3/2 at
// 32x64, 690 ms against 16). Splitting the images between kiln's threads, each running oneDNN single-threaded
// into its own f32 partial, took 0.62-0.69x (8x224) and 0.61-0.85x (32x64) weighted, in four runs each; it lost
// on layer4's 3x3 at 32x64 (N*OH*OW = 128: the partials' sum, K*C*R*S per extra thread, weighs against 128
// products per weight; 1.2-1.9x) and won on layer4's stride-1 3x3 at 8x224 (N*OH*OW = 392; 0.73-0.89x). So:
// split from N*OH*OW >= kMinSplitReduction on (no ResNet18 shape between 128 and 392), f32 staging below and
// for one image; oneDNN's one call never. With one thread every pass is oneDNN's.
// Splitting by output channel instead (Bf16Wgrad::split_channels; each thread all the images, K / threads of
// the channels, no partials, no sum; bench_conv_cpu --bf16-wgrad, four ways, docs/cpu-bf16.md "Convolution
// reorders and the channel split"): on layer4 at 32x64, where the image split lost and the f32 staging ran,
// 0.66x the staging on the 3x3s and 0.94-1.06x on the strided one; on layer3 / layer4 at 8x224 0.47-0.87x the
// image split; on the layers with large x (layer1, layer2, the stem) even with it. So, with K >= 32 (two
// blocks of 16 channels): by channel where the image split does not apply (N*OH*OW < 256 or N = 1) or where
// x (bf16, repeated per extra part) is no larger than dw's f32 partial (N*H*W*2 <= K*R*S*4); else by image.
constexpr int64_t kMinSplitReduction = 256;
// A channel split's parts take whole blocks of 16 output channels (oneDNN's blocking on avx512).
constexpr int64_t kChannelBlock = 16;
// The numbers above are NCHW's (bench_conv_cpu --bf16-wgrad runs NCHW unless --channels-last). On NHWC
// (--channels-last, the channels-last step's calls; 2 threads, two runs each at 8x224 and 32x64, load 1.8-2.9,
// docs/cpu-bf16.md "The weight gradient on NHWC above one thread"), two changes:
// - im2col + matmul (the im2col and oneDNN's matmul both on all threads) where im2col_pays on NHWC and K >=
//   kNhwcIm2colMinK: 8x224 layer4.0 3x3/2 5.3-6.1 ms against the channel split's 8.2-10.0, layer4's 3x3
//   10.6-12.2 against 11.5-14.1; 32x64 layer3.0 / layer4.0 3x3/2 and layer4's 3x3 1.3-5.6 against 3.2-12.5.
//   With K = 128 (32x64 layer2.0 3x3/2) the im2col's copy (one per K products) weighs more: 3.9-4.7 ms against
//   the image split's 1.2-2.6, so not there. With the AVX-512 NHWC im2col (conv2d_bf16_im2col.cpp; layer4's
//   3x3 at 8x224 then 9.8-10.0 ms against the channel split's 12.0-12.2) that shape went either way (im2col
//   ahead in 3 of 4 runs by 0.8-0.9x, behind by 1.3x in one): K >= 256 kept.
// - A channel split from K >= kNhwcChannelSplitMinK on even where x is larger than dw's f32 partial: on NHWC
//   the parts read x as it lies (no reorder repeated per part), so only the parts' width counts: 8x224
//   layer3.0 3x3/2 7.0-7.9 ms against the image split's 7.7-10.2, the 1x1/2 downsamples of layer3 / layer4
//   0.4-1.0 against 0.4-1.5 (32x64 layer3's 0.37 against 0.55); with K 64 / 128 (the stem, layer2.0, layer2's
//   downsample at 8x224) the image split stays ahead (0.8-0.9x the channel split).
constexpr int64_t kNhwcIm2colMinK = 256;
constexpr int64_t kNhwcChannelSplitMinK = 256;

// One thread, the weight gradient as im2col + one oneDNN matmul (Bf16Wgrad::im2col) against oneDNN 2.6's
// direct bf16 kernel (jit_bf16:avx512_core_bf16), bench_conv_cpu --bf16-wgrad --threads 1 (docs/cpu-bf16.md,
// "Convolution reorders, the channel split, im2col + matmul"): the direct kernel is slow on small output
// planes with stride 2 (ResNet18 at 32x64: layer2.0, layer3.0, layer4.0 with 8x8, 4x4, 2x2 outputs; at 8x224
// layer4.0, 7x7) and on 2x2 outputs (layer4's 3x3 at 32x64), where im2col + matmul took 0.1-0.6x its time;
// even on 4x4 / 7x7 stride-1 3x3s and on 1x1s, slower on larger planes (layer1, layer2, the stem at 8x224:
// 1.3-1.6x). So: a window larger than 1x1 and an output plane of at most 64 values with a stride above 1 in
// either direction, or of at most 4 values. On NHWC also a stride-1 plane of at most 64 values with a
// reduction C*R*S >= 4096 (ResNet18 8x224 layer4's 512->512 3x3 on 7x7: oneDNN's NHWC jit kernel 13.8-16.0 ms,
// NHWC im2col + matmul 10.7-10.9 ms; the 256->256 on 4x4 and 128->128 on 8x8 at 32x64 stay on oneDNN: 3.3 /
// 2.9 ms against 3.5 / 4.3; 1 thread, docs/cpu-bf16.md "The channels-last step").
bool im2col_pays(const Conv2dDesc& d, Bf16Layout layout) {
  const int64_t plane = d.out_h() * d.out_w();
  if (d.R * d.S == 1) return false;
  if (layout == Bf16Layout::nhwc && plane <= 64 && d.C * d.R * d.S >= 4096) return true;
  return (plane <= 64 && (d.stride_h > 1 || d.stride_w > 1)) || plane <= 4;
}

namespace {

std::atomic<int> wgrad_forced{-1};  // -1: not read yet; else a Bf16Wgrad

Bf16Wgrad forced_wgrad() {
  int v = wgrad_forced.load(std::memory_order_acquire);
  if (v >= 0) return (Bf16Wgrad)v;
  Bf16Wgrad w = Bf16Wgrad::by_rule;
  if (const char* e = std::getenv("KILN_BF16_WGRAD")) {
    const std::string s = e;
    if (s == "onednn") w = Bf16Wgrad::onednn;
    else if (s == "split") w = Bf16Wgrad::split;
    else if (s == "f32") w = Bf16Wgrad::f32_staging;
    else if (s == "channels") w = Bf16Wgrad::split_channels;
    else if (s == "im2col") w = Bf16Wgrad::im2col;
    else KILN_CHECK(s.empty() || s == "auto", "KILN_BF16_WGRAD: '", s,
                    "' is not one of auto, onednn, split, channels, im2col, f32");
  }
  int expected = -1;
  wgrad_forced.compare_exchange_strong(expected, (int)w);
  return (Bf16Wgrad)wgrad_forced.load(std::memory_order_acquire);
}

}  // namespace

const char* bf16_wgrad_name(Bf16Wgrad w) {
  switch (w) {
    case Bf16Wgrad::onednn: return "onednn";
    case Bf16Wgrad::split: return "split";
    case Bf16Wgrad::f32_staging: return "f32 staging";
    case Bf16Wgrad::split_channels: return "split by channel";
    case Bf16Wgrad::im2col: return "im2col + matmul";
    default: return "by rule";
  }
}

Bf16Wgrad set_bf16_wgrad_forced(Bf16Wgrad w) {
  const Bf16Wgrad old = forced_wgrad();
  wgrad_forced.store((int)w, std::memory_order_release);
  return old;
}

Bf16Wgrad conv2d_bf16_wgrad(const Conv2dDesc& d, Bf16Layout layout) {
  const int threads = num_threads();
  Bf16Wgrad w = forced_wgrad();
  if (w == Bf16Wgrad::by_rule) {
    // The same rule on NHWC (conv2d_bf16_im2col.h's NHWC im2col): oneDNN's jit kernel on NHWC was as slow
    // on those planes (ResNet18 32x64 layer4's 3x3s: 2-2.5x NCHW's im2col + matmul, docs/cpu-bf16.md).
    if (threads == 1) return im2col_pays(d, layout) ? Bf16Wgrad::im2col : Bf16Wgrad::onednn;
    const bool nhwc = layout == Bf16Layout::nhwc;
    if (nhwc && d.K >= kNhwcIm2colMinK && im2col_pays(d, layout)) return Bf16Wgrad::im2col;
    const bool images = d.N > 1 && d.N * d.out_h() * d.out_w() >= kMinSplitReduction;
    // Each extra part of a channel split repeats x's reorder (N*C*H*W bf16 values; none on NHWC, see above);
    // of an image split it writes and sums an f32 partial of dw (K*C*R*S values): the channel split where its
    // repeat is no larger.
    const bool channels = d.K >= 2 * kChannelBlock && (!images || d.N * d.H * d.W * 2 <= d.K * d.R * d.S * 4 ||
                                                       (nhwc && d.K >= kNhwcChannelSplitMinK));
    w = channels ? Bf16Wgrad::split_channels : images ? Bf16Wgrad::split : Bf16Wgrad::f32_staging;
  }
  // A split needs two threads and two images (channel split: two blocks of 16 output channels): one thread is
  // oneDNN's one call, else the f32 staging.
  if (w == Bf16Wgrad::split && (threads == 1 || d.N == 1)) w = threads == 1 ? Bf16Wgrad::onednn : Bf16Wgrad::f32_staging;
  if (w == Bf16Wgrad::split_channels && (threads == 1 || d.K < 2 * kChannelBlock))
    w = threads == 1 ? Bf16Wgrad::onednn : Bf16Wgrad::f32_staging;
  return w;
}

bool conv2d_bf16_pass_uses_onednn(const Conv2dDesc& d, Conv2dPass pass, Bf16Layout layout) {
  if (!conv2d_bf16_uses_onednn(d)) return false;
  return !(pass == Conv2dPass::backward_weight && conv2d_bf16_wgrad(d, layout) == Bf16Wgrad::f32_staging);
}

#if defined(KILN_WITH_ONEDNN)

namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

dnnl::engine& cpu_engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

struct Slot {  // one tensor of the pass: kiln's layout, oneDNN's, and the reorder between them
  memory::desc user, prim;
  bool reorder = false;
  dnnl::reorder move;  // user -> prim for inputs, prim -> user for the output
  size_t offset = 0;   // of the reordered copy in the workspace
};

Slot slot(const memory::desc& user, const memory::desc& prim) {
  Slot s;
  s.user = user, s.prim = prim;
  return s;
}

struct Plan {
  dnnl::primitive prim;
  std::string impl;
  Slot in0, in1, out;
  memory::desc bias;  // plain (K), or zero desc
  size_t scratch_offset = 0, scratch_bytes = 0, total = 0;
};

using Key = std::vector<int64_t>;

// A split weight gradient's per-thread plan (built single-threaded): Part::images takes some of the images
// (f32 dw and db partials); Part::channels some of the output channels (d.K of k_total: dy is a channel slice
// of the whole (N, k_total, OH, OW) tensor, dw and db rows of the whole, in their own dtypes).
enum class Part { none, images, channels };

Key make_key(const Conv2dDesc& d, Conv2dPass pass, Bf16Bias bias, Bf16Path path, Part part, int64_t k_total,
             Bf16Layout layout) {
  return {d.N, d.C, d.H, d.W, d.K, d.R, d.S, d.stride_h, d.stride_w, d.pad_h, d.pad_w, d.dil_h, d.dil_w,
          d.groups, (int64_t)pass, (int64_t)bias, (int64_t)(part != Part::none ? 1 : num_threads()), (int64_t)path,
          (int64_t)part, k_total, (int64_t)layout};
}

dnnl::primitive_attr user_scratchpad() {
  dnnl::primitive_attr a;
  a.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return a;
}

// Fills slot's reorder (when oneDNN's layout differs from kiln's) and returns its scratchpad bytes.
size_t plan_slot(Slot& s, bool input) {
  s.reorder = s.prim != s.user;
  if (!s.reorder) return 0;
  const memory::desc& from = input ? s.user : s.prim;
  const memory::desc& to = input ? s.prim : s.user;
  dnnl::reorder::primitive_desc pd(cpu_engine(), from, cpu_engine(), to, user_scratchpad());
  s.move = dnnl::reorder(pd);
  return pd.scratchpad_desc().get_size();
}

bool starts_with(const char* s, const char* prefix) { return std::strncmp(s, prefix, std::strlen(prefix)) == 0; }

// part (backward_weight only; the caller sets one thread): Part::images makes dw and db f32 (a split's
// partials); Part::channels describes dy as d.K channels of a (N, k_total, OH, OW) tensor (strided).
// layout: kiln's activations (user descs). blocked: oneDNN picks the activations' layouts (format_tag::any,
// always for NCHW); else (NHWC only) the primitive runs on dense NHWC x, y, dy, dx.
std::shared_ptr<Plan> build_plan(const Conv2dDesc& d, Conv2dPass pass, Bf16Bias bias, Part part_kind, int64_t k_total,
                                 Bf16Layout layout, bool blocked) {
  const bool part = part_kind == Part::images;
  const bool nhwc = layout == Bf16Layout::nhwc;
  auto plan = std::make_shared<Plan>();
  const memory::dims xd = {d.N, d.C, d.H, d.W}, wd = {d.K, d.C, d.R, d.S}, yd = {d.N, d.K, d.out_h(), d.out_w()};
  const memory::dims strides = {d.stride_h, d.stride_w}, dil = {d.dil_h - 1, d.dil_w - 1};
  const memory::dims pad_l = {d.pad_h, d.pad_w};
  // The right/bottom padding that gives OH x OW (oneDNN wants it explicit; it may be below pad_l).
  const memory::dims pad_r = {(d.out_h() - 1) * d.stride_h + (d.R - 1) * d.dil_h + 1 - d.H - d.pad_h,
                              (d.out_w() - 1) * d.stride_w + (d.S - 1) * d.dil_w + 1 - d.W - d.pad_w};
  const tag act = nhwc ? tag::nhwc : tag::nchw, prim_act = blocked ? tag::any : tag::nhwc;
  const memory::desc x_any(xd, dt::bf16, prim_act), w_any(wd, dt::bf16, tag::any), y_any(yd, dt::bf16, prim_act);
  const memory::desc x_user(xd, dt::bf16, act), w_user(wd, dt::bf16, tag::oihw), y_user(yd, dt::bf16, act);
  if (bias != Bf16Bias::none) plan->bias = memory::desc({d.K}, bias == Bf16Bias::f32 ? dt::f32 : dt::bf16, tag::x);
  const auto algo = dnnl::algorithm::convolution_direct;
  const dnnl::primitive_attr attr = user_scratchpad();
  dnnl::convolution_forward::desc fd(dnnl::prop_kind::forward_training, algo, x_any, w_any,
                                     pass == Conv2dPass::forward ? plan->bias : memory::desc(), y_any, strides, dil,
                                     pad_l, pad_r);
  dnnl::convolution_forward::primitive_desc fpd(fd, attr, cpu_engine());
  if (!blocked && pass == Conv2dPass::forward && bf16_path() == Bf16Path::onednn_avx512_bf16 &&
      starts_with(fpd.impl_info_str(), "brgconv")) {
    // On NHWC with AVX512-BF16 oneDNN 2.6 picks brgconv for the forward: the same convolution time as its
    // jit_bf16 kernel on NHWC, but a weight layout that costs 2-5x more to reorder (layer4's 3x3 at 8x224: 2.6
    // against 0.5 ms; docs/cpu-bf16.md "Channels-last"). Take the next jit implementation when there is one.
    dnnl::convolution_forward::primitive_desc alt(fd, attr, cpu_engine());
    while (!starts_with(alt.impl_info_str(), "jit") && alt.next_impl()) {
    }
    if (starts_with(alt.impl_info_str(), "jit")) fpd = alt;
  }
  size_t scratch = 0;
  if (pass == Conv2dPass::forward) {
    plan->prim = dnnl::convolution_forward(fpd);
    plan->impl = fpd.impl_info_str();
    scratch = fpd.scratchpad_desc().get_size();
    plan->in0 = slot(x_user, fpd.src_desc());
    plan->in1 = slot(w_user, fpd.weights_desc());
    plan->out = slot(y_user, fpd.dst_desc());
  } else if (pass == Conv2dPass::backward_input) {
    dnnl::convolution_backward_data::desc bd(algo, x_any, w_any, y_any, strides, dil, pad_l, pad_r);
    dnnl::convolution_backward_data::primitive_desc bpd(bd, attr, cpu_engine(), fpd);
    plan->prim = dnnl::convolution_backward_data(bpd);
    plan->impl = bpd.impl_info_str();
    scratch = bpd.scratchpad_desc().get_size();
    plan->in0 = slot(y_user, bpd.diff_dst_desc());
    plan->in1 = slot(w_user, bpd.weights_desc());
    plan->out = slot(x_user, bpd.diff_src_desc());
  } else {
    const memory::desc dw_any = part ? memory::desc(wd, dt::f32, tag::any) : w_any;
    const memory::desc dw_user = part ? memory::desc(wd, dt::f32, tag::oihw) : w_user;
    if (part && bias != Bf16Bias::none) plan->bias = memory::desc({d.K}, dt::f32, tag::x);
    dnnl::convolution_backward_weights::desc bd(algo, x_any, dw_any, plan->bias, y_any, strides, dil, pad_l, pad_r);
    dnnl::convolution_backward_weights::primitive_desc bpd(bd, attr, cpu_engine(), fpd);
    plan->prim = dnnl::convolution_backward_weights(bpd);
    plan->impl = bpd.impl_info_str();
    scratch = bpd.scratchpad_desc().get_size();
    // A channel part reads its K channels of dy in place: image n's slice starts k_total * OH * OW values on
    // (NCHW), or pixel (n, p, q)'s k_total values on (NHWC; the caller offsets dy by the part's first channel).
    const memory::dim plane = d.out_h() * d.out_w();
    const memory::dims part_strides = nhwc ? memory::dims{k_total * plane, 1, d.out_w() * k_total, k_total}
                                           : memory::dims{k_total * plane, plane, d.out_w(), 1};
    const memory::desc dy_user = part_kind == Part::channels ? memory::desc(yd, dt::bf16, part_strides) : y_user;
    plan->in0 = slot(x_user, bpd.src_desc());
    plan->in1 = slot(dy_user, bpd.diff_dst_desc());
    plan->out = slot(dw_user, bpd.diff_weights_desc());
  }
  scratch = std::max(scratch, plan_slot(plan->in0, true));
  scratch = std::max(scratch, plan_slot(plan->in1, true));
  scratch = std::max(scratch, plan_slot(plan->out, false));
  size_t off = 0;
  for (Slot* s : {&plan->in0, &plan->in1, &plan->out}) {
    s->offset = off;
    if (s->reorder) off += align_up(s->prim.get_size());
  }
  plan->scratch_offset = off;
  plan->scratch_bytes = scratch;
  plan->total = off + align_up(scratch) + kAlign;  // + kAlign: room to align any base address
  return plan;
}

// True when oneDNN's implementation is its im2col + gemm or reference convolution (slow: plain layouts move
// oneDNN 2.6 there, docs/cpu-bf16.md).
bool slow_impl(const std::string& impl) {
  return impl.find("gemm") != std::string::npos || impl.find("ref") != std::string::npos;
}

std::shared_ptr<Plan> get_plan(const Conv2dDesc& d, Conv2dPass pass, Bf16Bias bias, Part part = Part::none,
                               int64_t k_total = 0, Bf16Layout layout = Bf16Layout::nchw) {
  KILN_CHECK(d.groups == 1, "conv2d bf16 (oneDNN): groups ", d.groups, " is not supported (", desc_str(d),
             "); only groups 1 takes this path");
  const Bf16Path path = bf16_path();
  KILN_CHECK(path != Bf16Path::portable, "conv2d bf16 (oneDNN): the bf16 path is ", bf16_path_name(path),
             " (cpu isa ", cpu_isa_name(cpu_isa()), "), not oneDNN, for ", desc_str(d));
  onednn_fix_path(path);  // before oneDNN's first primitive descriptor
  static std::mutex m;
  static std::map<Key, std::shared_ptr<Plan>> cache;
  if (part != Part::channels) k_total = d.K;
  const Key key = make_key(d, pass, bias, path, part, k_total, layout);
  std::lock_guard<std::mutex> lock(m);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  std::shared_ptr<Plan> plan;
  try {
    // A part runs inside one of kiln's threads: oneDNN must size it (threads, scratchpad) for one thread.
    ThreadScope one(part != Part::none ? 1 : 0);
    if (layout == Bf16Layout::nhwc) {
      // NHWC as is, unless oneDNN has no fast kernel there (or none at all): then the blocked layouts with
      // reorders from and to NHWC, as for NCHW.
      try {
        plan = build_plan(d, pass, bias, part, k_total, layout, false);
      } catch (const dnnl::error&) {
        plan = nullptr;
      }
      if (!plan || slow_impl(plan->impl)) {
        plan = build_plan(d, pass, bias, part, k_total, layout, true);
        plan->impl += " (blocked)";
      }
    } else {
      plan = build_plan(d, pass, bias, part, k_total, layout, true);
    }
  } catch (const dnnl::error& e) {
    throw Error(str_cat("conv2d bf16 ", pass_name(pass), " (oneDNN ", onednn_version(), ", ", bf16_path_name(path),
                        "): no primitive for ", desc_str(d), ": ", e.what()));
  }
  cache.emplace(key, plan);
  return plan;
}

// Runs a plan: reorders the inputs into the workspace, the primitive, the output back to kiln's layout.
// out_user: kiln's output; extra: DNNL_ARG_* -> pointer of the bias (forward, backward_weight).
void execute(const Plan& p, Conv2dPass pass, const void* in0, const void* in1, void* out_user, const void* bias,
             void* workspace) {
  KILN_CHECK(workspace != nullptr || p.total == 0, "conv2d bf16 ", pass_name(pass), ": workspace is null");
  char* base = (char*)(((uintptr_t)workspace + kAlign - 1) / kAlign * kAlign);
  dnnl::engine& eng = cpu_engine();
  dnnl::stream s(eng);
  memory scratch(memory::desc({(memory::dim)p.scratch_bytes}, dt::u8, tag::x), eng, base + p.scratch_offset);
  auto prepare_in = [&](const Slot& slot, const void* user) {
    memory um(slot.user, eng, const_cast<void*>(user));
    if (!slot.reorder) return um;
    memory pm(slot.prim, eng, base + slot.offset);
    slot.move.execute(s, {{DNNL_ARG_FROM, um}, {DNNL_ARG_TO, pm}, {DNNL_ARG_SCRATCHPAD, scratch}});
    return pm;
  };
  memory m0 = prepare_in(p.in0, in0), m1 = prepare_in(p.in1, in1);
  memory uo(p.out.user, eng, out_user);
  memory po = p.out.reorder ? memory(p.out.prim, eng, base + p.out.offset) : uo;
  std::unordered_map<int, memory> args;
  args.insert({DNNL_ARG_SCRATCHPAD, scratch});
  if (pass == Conv2dPass::forward) {
    args.insert({DNNL_ARG_SRC, m0});
    args.insert({DNNL_ARG_WEIGHTS, m1});
    args.insert({DNNL_ARG_DST, po});
    if (bias) args.insert({DNNL_ARG_BIAS, memory(p.bias, eng, const_cast<void*>(bias))});
  } else if (pass == Conv2dPass::backward_input) {
    args.insert({DNNL_ARG_DIFF_DST, m0});
    args.insert({DNNL_ARG_WEIGHTS, m1});
    args.insert({DNNL_ARG_DIFF_SRC, po});
  } else {
    args.insert({DNNL_ARG_SRC, m0});
    args.insert({DNNL_ARG_DIFF_DST, m1});
    args.insert({DNNL_ARG_DIFF_WEIGHTS, po});
    if (bias) args.insert({DNNL_ARG_DIFF_BIAS, memory(p.bias, eng, const_cast<void*>(bias))});
  }
  p.prim.execute(s, args);
  if (p.out.reorder) p.out.move.execute(s, {{DNNL_ARG_FROM, po}, {DNNL_ARG_TO, uo}, {DNNL_ARG_SCRATCHPAD, scratch}});
  s.wait();
}

void check_bias(const void* bias, Bf16Bias bt, const char* op) {
  KILN_CHECK((bias == nullptr) == (bt == Bf16Bias::none), op, ": bias pointer and bias type disagree (",
             bias ? "a pointer" : "null", " with type ", bt == Bf16Bias::none ? "none" : "f32/bf16", ")");
}

// A split weight gradient (Bf16Wgrad::split): P = min(threads, N) parts, part i takes images [n0_i, n0_i + n_i)
// (the first N % P parts one image more). Part i's piece of the workspace, at offset_i:
//   [its plan's reorders and scratchpad (plan total - kAlign)][f32 dw partial, KCRS][f32 db partial, K]
// Every piece 64-byte aligned; the whole is the sum of the pieces + kAlign.
struct Split {
  int P = 0;
  std::vector<int64_t> n0, n;
  std::vector<std::shared_ptr<Plan>> plan;
  std::vector<size_t> offset, dw_offset, db_offset;
  size_t total = 0;
};

Split split_of(const Conv2dDesc& d, Bf16Bias bias, Bf16Layout layout) {
  Split sp;
  sp.P = (int)std::min<int64_t>(num_threads(), d.N);
  const size_t dw_bytes = align_up((size_t)(d.K * d.C * d.R * d.S) * sizeof(float));
  const size_t db_bytes = bias == Bf16Bias::none ? 0 : align_up((size_t)d.K * sizeof(float));
  size_t off = 0;
  int64_t n0 = 0;
  for (int i = 0; i < sp.P; ++i) {
    const int64_t n = d.N / sp.P + (i < d.N % sp.P ? 1 : 0);
    Conv2dDesc di = d;
    di.N = n;
    sp.n0.push_back(n0), sp.n.push_back(n);
    sp.plan.push_back(get_plan(di, Conv2dPass::backward_weight, bias, Part::images, 0, layout));
    sp.offset.push_back(off);
    off += align_up(sp.plan.back()->total - kAlign);
    sp.dw_offset.push_back(off);
    off += dw_bytes;
    sp.db_offset.push_back(off);
    off += db_bytes;
    n0 += n;
  }
  sp.total = off + kAlign;
  return sp;
}

// The split weight gradient: each part's single-threaded oneDNN call on its own thread, into its f32 partials;
// then the partials summed (in part 0's, in part order) and rounded to dw (bf16) and dbias (bt).
void backward_weight_split(const Conv2dDesc& d, const bfloat16* x, const bfloat16* dy, bfloat16* dw, void* dbias,
                           Bf16Bias bt, void* workspace, Bf16Layout layout) {
  KILN_CHECK(workspace != nullptr, "conv2d bf16 backward_weight (split): workspace is null");
  const Split sp = split_of(d, bt, layout);  // images are outermost in NCHW and NHWC alike
  char* base = (char*)(((uintptr_t)workspace + kAlign - 1) / kAlign * kAlign);
  const int64_t x_img = d.C * d.H * d.W, y_img = d.K * d.out_h() * d.out_w();
  std::exception_ptr err;
#pragma omp parallel for schedule(static, 1) num_threads(sp.P)
  for (int i = 0; i < sp.P; ++i) {
    try {
      execute(*sp.plan[i], Conv2dPass::backward_weight, x + sp.n0[i] * x_img, dy + sp.n0[i] * y_img,
              base + sp.dw_offset[i], bt == Bf16Bias::none ? nullptr : base + sp.db_offset[i], base + sp.offset[i]);
    } catch (...) {
#pragma omp critical(kiln_conv2d_bf16_split)
      if (!err) err = std::current_exception();
    }
  }
  if (err) std::rethrow_exception(err);
  // Sum and round: per block of values, the extra parts added into part 0's, then stored rounded; the blocks
  // split over the threads.
  auto reduce = [&](const std::vector<size_t>& offs, int64_t count, auto store) {
    float* acc = (float*)(base + offs[0]);
    constexpr int64_t kBlock = 4096;
    const int64_t blocks = (count + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t lo = b * kBlock, hi = std::min(count, lo + kBlock);
      for (int i = 1; i < sp.P; ++i) {
        const float* part = (const float*)(base + offs[i]);
        for (int64_t j = lo; j < hi; ++j) acc[j] += part[j];
      }
      store(acc, lo, hi);
    }
  };
  auto to_bf16 = [](bfloat16* o) {
    return [o](const float* acc, int64_t lo, int64_t hi) {
      for (int64_t j = lo; j < hi; ++j) {  // engine/core/half.h's float_to_bf16_bits, branch-free (vectorizes)
        uint32_t f;
        std::memcpy(&f, acc + j, sizeof f);
        const uint32_t rounded = (f + 0x7fffu + ((f >> 16) & 1u)) >> 16, quiet = (f >> 16) | 0x40u;
        const uint16_t h = (uint16_t)((f & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
        std::memcpy(static_cast<void*>(o + j), &h, sizeof h);
      }
    };
  };
  reduce(sp.dw_offset, d.K * d.C * d.R * d.S, to_bf16(dw));
  if (bt == Bf16Bias::bf16) reduce(sp.db_offset, d.K, to_bf16((bfloat16*)dbias));
  if (bt == Bf16Bias::f32)
    reduce(sp.db_offset, d.K, [dbias](const float* acc, int64_t lo, int64_t hi) {
      std::memcpy((float*)dbias + lo, acc + lo, (size_t)(hi - lo) * sizeof(float));
    });
}

// A weight gradient split by output channel (Bf16Wgrad::split_channels): P = min(threads, K / 16) parts; part
// i computes dw rows [k0_i, k0_i + k_i) from all the images and its channels of dy (whole blocks of 16
// channels, the first K / 16 % P parts one block more, the last part also the K % 16 left), straight into dw
// and dbias in their dtypes: no partials, no sum. Each part reorders x itself (the x reorder is repeated P
// times; the shapes this serves have small x). Part i's piece of the workspace, at offset_i: its plan's
// reorders and scratchpad (plan total - kAlign), 64-byte aligned; the whole is their sum + kAlign.
struct ChannelSplit {
  int P = 0;
  std::vector<int64_t> k0, k;
  std::vector<std::shared_ptr<Plan>> plan;
  std::vector<size_t> offset;
  size_t total = 0;
};

ChannelSplit channel_split_of(const Conv2dDesc& d, Bf16Bias bias, Bf16Layout layout) {
  ChannelSplit sp;
  const int64_t blocks = d.K / kChannelBlock;
  sp.P = (int)std::min<int64_t>(num_threads(), blocks);
  KILN_CHECK(sp.P >= 2, "conv2d bf16 backward_weight (split by channel): ", num_threads(), " thread(s) and K ", d.K,
             " give no two parts of 16 channels (", desc_str(d), ")");
  size_t off = 0;
  int64_t k0 = 0;
  for (int i = 0; i < sp.P; ++i) {
    const int64_t k = i == sp.P - 1 ? d.K - k0 : (blocks / sp.P + (i < blocks % sp.P ? 1 : 0)) * kChannelBlock;
    Conv2dDesc di = d;
    di.K = k;
    sp.k0.push_back(k0), sp.k.push_back(k);
    sp.plan.push_back(get_plan(di, Conv2dPass::backward_weight, bias, Part::channels, d.K, layout));
    sp.offset.push_back(off);
    off += align_up(sp.plan.back()->total - kAlign);
    k0 += k;
  }
  sp.total = off + kAlign;
  return sp;
}

// The channel split: each part's single-threaded oneDNN call on its own thread, writing its rows of dw and
// its entries of dbias.
void backward_weight_channels(const Conv2dDesc& d, const bfloat16* x, const bfloat16* dy, bfloat16* dw, void* dbias,
                              Bf16Bias bt, void* workspace, Bf16Layout layout) {
  KILN_CHECK(workspace != nullptr, "conv2d bf16 backward_weight (split by channel): workspace is null");
  const ChannelSplit sp = channel_split_of(d, bt, layout);
  char* base = (char*)(((uintptr_t)workspace + kAlign - 1) / kAlign * kAlign);
  // Channel k of dy starts k * OH * OW values on (NCHW) or k values on (NHWC).
  const int64_t plane = layout == Bf16Layout::nhwc ? 1 : d.out_h() * d.out_w(), crs = d.C * d.R * d.S;
  const size_t bias_size = bt == Bf16Bias::f32 ? sizeof(float) : sizeof(bfloat16);
  std::exception_ptr err;
#pragma omp parallel for schedule(static, 1) num_threads(sp.P)
  for (int i = 0; i < sp.P; ++i) {
    try {
      execute(*sp.plan[i], Conv2dPass::backward_weight, x, dy + sp.k0[i] * plane, dw + sp.k0[i] * crs,
              bt == Bf16Bias::none ? nullptr : (char*)dbias + sp.k0[i] * bias_size, base + sp.offset[i]);
    } catch (...) {
#pragma omp critical(kiln_conv2d_bf16_split)
      if (!err) err = std::current_exception();
    }
  }
  if (err) std::rethrow_exception(err);
}

}  // namespace

size_t conv2d_bf16_workspace_bytes(const Conv2dDesc& d, Conv2dPass pass, Bf16Bias bias, Bf16Layout layout) {
  const Bf16Wgrad how = pass == Conv2dPass::backward_weight ? conv2d_bf16_wgrad(d, layout) : Bf16Wgrad::onednn;
  if (how == Bf16Wgrad::split) return split_of(d, bias, layout).total;
  if (how == Bf16Wgrad::split_channels) return channel_split_of(d, bias, layout).total;
  if (how == Bf16Wgrad::im2col) return conv2d_bf16_wgrad_im2col_bytes(d, layout);
  return get_plan(d, pass, pass == Conv2dPass::backward_input ? Bf16Bias::none : bias, Part::none, 0, layout)->total;
}

const char* conv2d_bf16_impl_name(const Conv2dDesc& d, Conv2dPass pass, Bf16Bias bias, Bf16Layout layout) {
  if (pass == Conv2dPass::backward_weight && conv2d_bf16_wgrad(d, layout) == Bf16Wgrad::im2col) {
    thread_local std::string name;
    name = std::string("im2col + matmul ") + conv2d_bf16_wgrad_im2col_impl(d, layout);
    return name.c_str();
  }
  return get_plan(d, pass, pass == Conv2dPass::backward_input ? Bf16Bias::none : bias, Part::none, 0, layout)
      ->impl.c_str();
}

void conv2d_bf16_forward(const Conv2dDesc& d, const bfloat16* x, const bfloat16* w, const void* bias, Bf16Bias bt,
                         bfloat16* y, void* workspace, Bf16Layout layout) {
  check_bias(bias, bt, "conv2d_bf16_forward");
  execute(*get_plan(d, Conv2dPass::forward, bt, Part::none, 0, layout), Conv2dPass::forward, x, w, y, bias, workspace);
}

void conv2d_bf16_backward_input(const Conv2dDesc& d, const bfloat16* dy, const bfloat16* w, bfloat16* dx,
                                void* workspace, Bf16Layout layout) {
  execute(*get_plan(d, Conv2dPass::backward_input, Bf16Bias::none, Part::none, 0, layout), Conv2dPass::backward_input,
          dy, w, dx, nullptr, workspace);
}

void conv2d_bf16_backward_weight(const Conv2dDesc& d, const bfloat16* x, const bfloat16* dy, bfloat16* dw,
                                 void* dbias, Bf16Bias bt, void* workspace, Bf16Layout layout) {
  check_bias(dbias, bt, "conv2d_bf16_backward_weight");
  const Bf16Wgrad how = conv2d_bf16_wgrad(d, layout);
  if (how == Bf16Wgrad::split) return backward_weight_split(d, x, dy, dw, dbias, bt, workspace, layout);
  if (how == Bf16Wgrad::split_channels) return backward_weight_channels(d, x, dy, dw, dbias, bt, workspace, layout);
  if (how == Bf16Wgrad::im2col) return conv2d_bf16_wgrad_im2col(d, x, dy, dw, dbias, bt, workspace, layout);
  execute(*get_plan(d, Conv2dPass::backward_weight, bt, Part::none, 0, layout), Conv2dPass::backward_weight, x, dy, dw,
          dbias, workspace);
}

#else  // built without oneDNN

namespace {
[[noreturn]] void no_onednn(const char* what) {
  throw Error(str_cat(what, ": this kiln build has no oneDNN (KILN_ONEDNN=OFF or libdnnl-dev not found); bf16 "
                            "convolutions take the portable path"));
}
}  // namespace

size_t conv2d_bf16_workspace_bytes(const Conv2dDesc&, Conv2dPass, Bf16Bias, Bf16Layout) {
  no_onednn("conv2d_bf16_workspace_bytes");
}
const char* conv2d_bf16_impl_name(const Conv2dDesc&, Conv2dPass, Bf16Bias, Bf16Layout) {
  no_onednn("conv2d_bf16_impl_name");
}
void conv2d_bf16_forward(const Conv2dDesc&, const bfloat16*, const bfloat16*, const void*, Bf16Bias, bfloat16*,
                         void*, Bf16Layout) {
  no_onednn("conv2d_bf16_forward");
}
void conv2d_bf16_backward_input(const Conv2dDesc&, const bfloat16*, const bfloat16*, bfloat16*, void*, Bf16Layout) {
  no_onednn("conv2d_bf16_backward_input");
}
void conv2d_bf16_backward_weight(const Conv2dDesc&, const bfloat16*, const bfloat16*, bfloat16*, void*, Bf16Bias,
                                 void*, Bf16Layout) {
  no_onednn("conv2d_bf16_backward_weight");
}

#endif

}  // namespace kiln::cpu
