// bf16 matmul through oneDNN with its scratchpad in kiln's workspace (see matmul_bf16.h).
// A Plan holds the primitive and its scratchpad size; A, B, C are described to oneDNN with kiln's
// strides (a transposed operand is a stride swap, a broadcast one a batch dimension of 1), so oneDNN
// reads and writes kiln's buffers directly and the workspace is its scratchpad alone:
//   [scratchpad], 64-byte aligned inside a workspace of scratchpad + 64 bytes.
// Built without oneDNN, matmul_bf16_uses_onednn is false and every other entry point is an error.
#include "kernels/cpu/matmul_bf16.h"

#include <map>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "engine/core/error.h"
#include "kernels/cpu/bf16_path.h"
#include "kernels/cpu/cpu_isa.h"
#include "kernels/cpu/threads.h"

#if defined(KILN_WITH_ONEDNN)
#include <dnnl.hpp>
#endif

namespace kiln::cpu {

std::string matmul_bf16_desc_str(const MatmulBf16Desc& d) {
  const int64_t ar = d.trans_a ? d.K : d.M, ac = d.trans_a ? d.M : d.K;
  const int64_t br = d.trans_b ? d.N : d.K, bc = d.trans_b ? d.K : d.N;
  return str_cat("(batch ", d.batch, ") A", d.trans_a ? "^T" : "", " (", ar, ", ", ac, ", ld ", d.lda, ", batch stride ",
                 d.stride_a, ") x B", d.trans_b ? "^T" : "", " (", br, ", ", bc, ", ld ", d.ldb, ", batch stride ",
                 d.stride_b, ") -> C (", d.M, ", ", d.N, ")");
}

// The measured rule (docs/cpu-bf16.md; the small CNN's fc1 / fc2 products at batch 16 and 128, each pass, kernels
// alone, AVX512-BF16 on an AMD EPYC). 1 thread: oneDNN's bf16 matmul took 0.17-0.36x the f32 staging's time
// (two widening copies, OpenBLAS's sgemm, a rounding copy) and 0.40-0.49x OpenBLAS's f32 on fc1 (M*N*K 6.4 M at
// batch 16, 51 M at 128) and 0.33-0.60x the staging on fc2 at batch 128 (M*N*K 163840), but 1.07-1.40x the
// staging on fc2 at batch 16 (M*N*K 20480: 1-2 us either way, oneDNN's per-call cost): oneDNN from 65536 on.
// 2 threads: fc1 still 0.13-0.43x the staging, but every fc2 product 3.4-18x (34-52 us against 2-14 us: oneDNN
// opens an OpenMP parallel region per call): oneDNN from 2^20 on. Neither threshold is measured finer (between
// 20480 and 163840, and between 163840 and 6.4 M).
int64_t matmul_bf16_min_macs() { return num_threads() > 1 ? (int64_t)1 << 20 : 65536; }

bool matmul_bf16_uses_onednn(const MatmulBf16Desc& d) {
  if (d.M < 1 || d.N < 1 || d.K < 1 || d.batch < 1) return false;
  if (d.M * d.N * d.K < matmul_bf16_min_macs()) return false;
  if (d.batch > 1 && d.stride_a == 0 && d.stride_b == 0) return false;
  return bf16_path() != Bf16Path::portable;
}

#if defined(KILN_WITH_ONEDNN)

namespace {

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

constexpr size_t kAlign = 64;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

dnnl::engine& cpu_engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

struct Plan {
  dnnl::matmul prim;
  memory::desc a, b, c;
  std::string impl;
  size_t scratch_bytes = 0, total = 0;
};

using Key = std::vector<int64_t>;

Key make_key(const MatmulBf16Desc& d, Bf16Path path) {
  return {d.batch,  d.M,        d.N,        d.K,        (int64_t)d.trans_a,    (int64_t)d.trans_b, d.lda,
          d.ldb,    d.stride_a, d.stride_b, (int64_t)num_threads(), (int64_t)path};
}

// An operand (rows, cols) as oneDNN's (batch, rows, cols) with kiln's strides: stored transposed, its
// element (r, c) sits at c * ld + r; a batch stride of 0 becomes a batch dimension of 1 (broadcast).
memory::desc operand(int64_t batch, int64_t stride, int64_t rows, int64_t cols, bool trans, int64_t ld) {
  const int64_t b = stride == 0 ? 1 : batch;
  const int64_t extent = trans ? cols * ld : rows * ld;  // one matrix's span; any value serves a batch of 1
  return memory::desc({b, rows, cols}, dt::bf16,
                      trans ? memory::dims{stride == 0 ? extent : stride, 1, ld}
                            : memory::dims{stride == 0 ? extent : stride, ld, 1});
}

std::shared_ptr<Plan> build_plan(const MatmulBf16Desc& d) {
  auto plan = std::make_shared<Plan>();
  plan->a = operand(d.batch, d.stride_a, d.M, d.K, d.trans_a, d.lda);
  plan->b = operand(d.batch, d.stride_b, d.K, d.N, d.trans_b, d.ldb);
  plan->c = memory::desc({d.batch, d.M, d.N}, dt::bf16, memory::dims{d.M * d.N, d.N, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  dnnl::matmul::desc md(plan->a, plan->b, plan->c);
  dnnl::matmul::primitive_desc pd(md, attr, cpu_engine());
  plan->prim = dnnl::matmul(pd);
  plan->impl = pd.impl_info_str();
  plan->scratch_bytes = pd.scratchpad_desc().get_size();
  plan->total = align_up(plan->scratch_bytes) + kAlign;  // + kAlign: room to align any base address
  return plan;
}

std::shared_ptr<Plan> get_plan(const MatmulBf16Desc& d) {
  KILN_CHECK(d.M >= 1 && d.N >= 1 && d.K >= 1 && d.batch >= 1, "matmul bf16 (oneDNN): empty product ",
             matmul_bf16_desc_str(d));
  const Bf16Path path = bf16_path();
  KILN_CHECK(path != Bf16Path::portable, "matmul bf16 (oneDNN): the bf16 path is ", bf16_path_name(path),
             " (cpu isa ", cpu_isa_name(cpu_isa()), "), not oneDNN, for ", matmul_bf16_desc_str(d));
  onednn_fix_path(path);  // before oneDNN's first primitive descriptor
  static std::mutex m;
  static std::map<Key, std::shared_ptr<Plan>> cache;
  const Key key = make_key(d, path);
  std::lock_guard<std::mutex> lock(m);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  std::shared_ptr<Plan> plan;
  try {
    plan = build_plan(d);
  } catch (const dnnl::error& e) {
    throw Error(str_cat("matmul bf16 (oneDNN ", onednn_version(), ", ", bf16_path_name(path), "): no primitive for ",
                        matmul_bf16_desc_str(d), ": ", e.what()));
  }
  cache.emplace(key, plan);
  return plan;
}

}  // namespace

size_t matmul_bf16_workspace_bytes(const MatmulBf16Desc& d) { return get_plan(d)->total; }

const char* matmul_bf16_impl_name(const MatmulBf16Desc& d) { return get_plan(d)->impl.c_str(); }

void matmul_bf16(const MatmulBf16Desc& d, const bfloat16* A, const bfloat16* B, bfloat16* C, void* workspace) {
  const Plan& p = *get_plan(d);
  KILN_CHECK(workspace != nullptr, "matmul bf16 ", matmul_bf16_desc_str(d), ": workspace is null");
  char* base = (char*)(((uintptr_t)workspace + kAlign - 1) / kAlign * kAlign);
  dnnl::engine& eng = cpu_engine();
  dnnl::stream s(eng);
  memory scratch(memory::desc({(memory::dim)p.scratch_bytes}, dt::u8, tag::x), eng, base);
  memory ma(p.a, eng, const_cast<bfloat16*>(A)), mb(p.b, eng, const_cast<bfloat16*>(B)), mc(p.c, eng, C);
  p.prim.execute(s, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}, {DNNL_ARG_SCRATCHPAD, scratch}});
  s.wait();
}

#else  // built without oneDNN

namespace {
[[noreturn]] void no_onednn(const char* what) {
  throw Error(str_cat(what, ": this kiln build has no oneDNN (KILN_ONEDNN=OFF or libdnnl-dev not found); bf16 "
                            "matmuls take the portable path"));
}
}  // namespace

size_t matmul_bf16_workspace_bytes(const MatmulBf16Desc&) { no_onednn("matmul_bf16_workspace_bytes"); }
const char* matmul_bf16_impl_name(const MatmulBf16Desc&) { no_onednn("matmul_bf16_impl_name"); }
void matmul_bf16(const MatmulBf16Desc&, const bfloat16*, const bfloat16*, bfloat16*, void*) {
  no_onednn("matmul_bf16");
}

#endif

}  // namespace kiln::cpu
