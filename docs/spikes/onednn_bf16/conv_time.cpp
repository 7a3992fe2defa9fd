// Spike timing: ResNet18's layer1 3x3 conv (n8, 64->64, 56x56) forward, bwd-data, bwd-weights in bf16 and f32
// through oneDNN 2.6, median of 15 runs each (after 3 warm-ups).
#include <dnnl.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <vector>
using namespace dnnl;
double med(const std::function<void()>& f) {
  for (int i = 0; i < 3; ++i) f();
  std::vector<double> t;
  for (int i = 0; i < 15; ++i) {
    auto a = std::chrono::steady_clock::now();
    f();
    t.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[7];
}
int main() {
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  memory::dims src{8, 64, 56, 56}, wei{64, 64, 3, 3}, dst{8, 64, 56, 56}, st{1, 1}, pd{1, 1};
  for (auto dt : {memory::data_type::f32, memory::data_type::bf16}) {
    auto ms_ = memory::desc(src, dt, memory::format_tag::any), mw_ = memory::desc(wei, dt, memory::format_tag::any),
         md_ = memory::desc(dst, dt, memory::format_tag::any);
    auto fpd = convolution_forward::primitive_desc(
        convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct, ms_, mw_, md_, st, pd, pd), eng);
    memory ms(fpd.src_desc(), eng), mw(fpd.weights_desc(), eng), md(fpd.dst_desc(), eng);
    convolution_forward f(fpd);
    double tf = med([&] { f.execute(s, {{DNNL_ARG_SRC, ms}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DST, md}}); s.wait(); });
    auto bpd = convolution_backward_data::primitive_desc(
        convolution_backward_data::desc(algorithm::convolution_direct, ms_, mw_, md_, st, pd, pd), eng, fpd);
    memory a(bpd.diff_src_desc(), eng), b(bpd.weights_desc(), eng), c(bpd.diff_dst_desc(), eng);
    convolution_backward_data bd(bpd);
    double tb = med([&] { bd.execute(s, {{DNNL_ARG_DIFF_SRC, a}, {DNNL_ARG_WEIGHTS, b}, {DNNL_ARG_DIFF_DST, c}}); s.wait(); });
    auto wpd = convolution_backward_weights::primitive_desc(
        convolution_backward_weights::desc(algorithm::convolution_direct, ms_, mw_, md_, st, pd, pd), eng, fpd);
    memory x(wpd.src_desc(), eng), y(wpd.diff_weights_desc(), eng), z(wpd.diff_dst_desc(), eng);
    convolution_backward_weights bw(wpd);
    double tw = med([&] { bw.execute(s, {{DNNL_ARG_SRC, x}, {DNNL_ARG_DIFF_WEIGHTS, y}, {DNNL_ARG_DIFF_DST, z}}); s.wait(); });
    std::printf("%s: fwd %.2f ms (%s), bwd_data %.2f ms, bwd_weights %.2f ms (%s)\n", dt == memory::data_type::f32 ? "f32 " : "bf16",
                tf, fpd.impl_info_str(), tb, tw, wpd.impl_info_str());
  }
}
