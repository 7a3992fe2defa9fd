// Spike for issue 35: which oneDNN 2.6 implementation runs ResNet18's bf16 convolutions (fwd, bwd-data,
// bwd-weights) on this CPU. Run with ONEDNN_VERBOSE=1.
#include <dnnl.hpp>
#include <cstdio>
#include <vector>
using namespace dnnl;
int main() {
  engine eng(engine::kind::cpu, 0);
  stream s(eng);
  struct Shape { int n, ic, oc, h, k, st, pad; };
  for (Shape sh : {Shape{8, 3, 64, 224, 7, 2, 3}, Shape{8, 64, 64, 56, 3, 1, 1}, Shape{8, 128, 256, 28, 3, 2, 1}}) {
    const int oh = (sh.h + 2 * sh.pad - sh.k) / sh.st + 1;
    memory::dims src{sh.n, sh.ic, sh.h, sh.h}, wei{sh.oc, sh.ic, sh.k, sh.k}, dst{sh.n, sh.oc, oh, oh};
    memory::dims strides{sh.st, sh.st}, pads{sh.pad, sh.pad};
    auto bf = memory::data_type::bf16;
    auto md_s = memory::desc(src, bf, memory::format_tag::any), md_w = memory::desc(wei, bf, memory::format_tag::any),
         md_d = memory::desc(dst, bf, memory::format_tag::any);
    auto fd = convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct, md_s, md_w, md_d,
                                        strides, pads, pads);
    auto fpd = convolution_forward::primitive_desc(fd, eng);
    memory ms(fpd.src_desc(), eng), mw(fpd.weights_desc(), eng), md(fpd.dst_desc(), eng);
    convolution_forward(fpd).execute(s, {{DNNL_ARG_SRC, ms}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DST, md}});
    auto bdd = convolution_backward_data::desc(algorithm::convolution_direct, md_s, md_w, md_d, strides, pads, pads);
    auto bdpd = convolution_backward_data::primitive_desc(bdd, eng, fpd);
    memory mds(bdpd.diff_src_desc(), eng), mdd(bdpd.diff_dst_desc(), eng), mw2(bdpd.weights_desc(), eng);
    convolution_backward_data(bdpd).execute(s, {{DNNL_ARG_DIFF_SRC, mds}, {DNNL_ARG_WEIGHTS, mw2}, {DNNL_ARG_DIFF_DST, mdd}});
    auto bwd = convolution_backward_weights::desc(algorithm::convolution_direct, md_s, md_w, md_d, strides, pads, pads);
    auto bwpd = convolution_backward_weights::primitive_desc(bwd, eng, fpd);
    memory ms3(bwpd.src_desc(), eng), mdw(bwpd.diff_weights_desc(), eng), mdd3(bwpd.diff_dst_desc(), eng);
    convolution_backward_weights(bwpd).execute(s, {{DNNL_ARG_SRC, ms3}, {DNNL_ARG_DIFF_WEIGHTS, mdw}, {DNNL_ARG_DIFF_DST, mdd3}});
    s.wait();
    std::printf("shape n%d ic%d oc%d %dx%d k%d s%d: fwd %s | bwd_data %s | bwd_weights %s\n", sh.n, sh.ic, sh.oc, sh.h,
                sh.h, sh.k, sh.st, fpd.impl_info_str(), bdpd.impl_info_str(), bwpd.impl_info_str());
  }
}
