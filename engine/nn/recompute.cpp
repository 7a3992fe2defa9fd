// Recompute-on-backward segments (see recompute.h). Memory: the forward keeps only its input x
// (saved through FunctionNode::save, so it is accounted as an activation and version-checked);
// the backward re-creates the segment's activations, consumes them and frees them before the
// next segment's recompute starts.
#include "engine/nn/recompute.h"

#include "engine/autograd/grad_hook.h"

#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/core/generator.h"
#include "engine/core/rng_rows.h"
#include "engine/memory/tag.h"
#include "engine/ops/autocast.h"

namespace kiln::nn {

namespace {
thread_local int g_recompute_depth = 0;

// Marks the thread as recomputing and replays the generator (and its data-parallel keyed rows) from
// `replay`, restoring the state at construction when it ends (also on an exception).
class RecomputeScope {
 public:
  RecomputeScope(const RngState& replay, const RngRows& rows) : saved_(global_rng()), saved_rows_(rng_rows()) {
    global_rng() = replay;
    rng_rows() = rows;
    ++g_recompute_depth;
  }
  ~RecomputeScope() {
    --g_recompute_depth;
    global_rng() = saved_;
    rng_rows() = saved_rows_;
  }
  RecomputeScope(const RecomputeScope&) = delete;
  RecomputeScope& operator=(const RecomputeScope&) = delete;

 private:
  RngState saved_;
  RngRows saved_rows_;
};
}  // namespace

bool recomputing() { return g_recompute_depth > 0; }

Tensor recompute(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& xs,
                 const std::vector<Tensor>& params, const std::string& label) {
  KILN_CHECK(!xs.empty(), label, ": no input");
  for (size_t i = 0; i < xs.size(); ++i) KILN_CHECK(xs[i].defined(), label, ": undefined input ", i);
  const size_t n_x = xs.size();
  std::vector<Tensor> inputs = xs;
  inputs.insert(inputs.end(), params.begin(), params.end());
  if (!any_requires_grad(inputs)) return fn(xs);  // nothing to differentiate: a plain run keeps nothing either

  const RngState rng = global_rng();  // the state fn starts from; the recompute replays it
  const RngRows rows = rng_rows();
  // The autocast state fn runs under; the recompute (in backward, normally outside the region)
  // re-enters it so it computes the same dtypes, and the same values, as the forward.
  const bool ac_enabled = autocast_enabled();
  const DType ac_dtype = autocast_dtype();
  Tensor y;
  {
    NoGradGuard ng;
    y = fn(xs);
  }
  KILN_CHECK(y.defined(), label, ": the segment returned an undefined tensor");
  for (const Tensor& x : xs)
    if (y.is_same(x)) {
      y = y.detach();  // never overwrite an input's own history
      break;
    }
  const size_t n_inputs = inputs.size();
  auto node = record_op(label.c_str(), inputs, {y},
                        [fn, rng, rows, ac_enabled, ac_dtype, n_inputs, n_x, label](FunctionNode& nd,
                                                                                const std::vector<Tensor>& g) {
                          std::vector<Tensor> xd(n_x);
                          for (size_t i = 0; i < n_x; ++i) {
                            xd[i] = nd.saved(i).detach();  // x_i: same data, a fresh leaf
                            if (nd.needs_input_grad(i)) xd[i].set_requires_grad(true);
                          }
                          Tensor yr;
                          {
                            RecomputeScope rs(rng, rows);
                            EnableGradGuard eg;
                            AutocastGuard ac(ac_enabled, ac_dtype);
                            yr = fn(xd);
                          }
                          KILN_CHECK(yr.sizes() == g[0].sizes(), label, ": the recomputed output ", yr.str(),
                                     " does not match the gradient ", shape_str(g[0].sizes()));
                          // Parameters get their gradients here (AccumulateGrad), as in a plain backward.
                          // The gradient-accumulated hook is off meanwhile: a parameter this segment shares
                          // with another (or with the plain part) is not complete yet; the outer backward's
                          // AccumulateGrad of each listed parameter runs after every segment that lists it
                          // and calls the hook once (engine/autograd/grad_hook.h).
                          if (yr.requires_grad()) {
                            GradAccumulatedHookGuard no_hook(nullptr);
                            run_backward({yr}, {g[0]}, /*retain_graph=*/false);
                          }
                          std::vector<Tensor> out(n_inputs);
                          for (size_t i = 0; i < n_x; ++i) {
                            if (!nd.needs_input_grad(i) || !xd[i].grad().defined()) continue;
                            out[i] = xd[i].grad();
                            // AccumulateGrad tagged it `grad`; it is a gradient in flight, as in a plain backward.
                            if (out[i].storage()) out[i].storage()->retag(MemoryTag::temporary);
                          }
                          return out;
                        });
  if (node)
    for (const Tensor& x : xs) node->save(x);
  return y;
}

Tensor recompute(const std::function<Tensor(const Tensor&)>& fn, const Tensor& x, const std::vector<Tensor>& params,
                 const std::string& label) {
  KILN_CHECK(x.defined(), label, ": undefined input");
  return recompute([fn](const std::vector<Tensor>& v) { return fn(v[0]); }, std::vector<Tensor>{x}, params, label);
}

std::vector<std::pair<size_t, size_t>> segment_bounds(size_t num_stages, int segments) {
  KILN_CHECK(segments >= 1, "recompute_sequential: segments must be >= 1, got ", segments);
  KILN_CHECK(num_stages >= 1, "recompute_sequential: no stages to split");
  const size_t n = std::min(num_stages, (size_t)segments);
  std::vector<std::pair<size_t, size_t>> b;
  size_t begin = 0;
  for (size_t s = 0; s < n; ++s) {
    const size_t len = num_stages / n + (s < num_stages % n ? 1 : 0);
    b.emplace_back(begin, begin + len);
    begin += len;
  }
  return b;
}

Tensor recompute_sequential(const std::vector<Stage>& stages, int segments, const Tensor& x) {
  const auto bounds = segment_bounds(stages.size(), segments);
  Tensor y = x;
  for (size_t s = 0; s < bounds.size(); ++s) {
    const std::vector<Stage> part(stages.begin() + (long)bounds[s].first, stages.begin() + (long)bounds[s].second);
    auto run = [part](const Tensor& in) {
      Tensor t = in;
      for (const Stage& st : part) t = st.fn(t);
      return t;
    };
    if (s + 1 == bounds.size()) {
      y = run(y);
      break;
    }
    std::vector<Tensor> params;
    for (const Stage& st : part)
      for (const ModulePtr& m : st.modules)
        for (const Tensor& p : m->parameters()) params.push_back(p);
    const std::string label = part.size() == 1 ? "recompute(" + part[0].name + ")"
                                               : "recompute(" + part.front().name + ".." + part.back().name + ")";
    y = recompute(run, y, params, label);
  }
  return y;
}

Recompute::Recompute(ModulePtr inner) : Module("Recompute"), inner_(std::move(inner)) {
  KILN_CHECK(inner_ != nullptr, "Recompute: null module");
  add_child("module", inner_);
}

Tensor Recompute::forward(const Tensor& x) {
  ModulePtr m = inner_;
  return recompute([m](const Tensor& in) { return (*m)(in); }, x, m->parameters(),
                    "recompute(" + m->type_name() + ")");
}

std::vector<Stage> sequential_stages(Module& seq) {
  std::vector<Stage> out;
  for (const auto& [name, m] : seq.children()) {
    ModulePtr mm = m;
    out.push_back(Stage{name, {mm}, [mm](const Tensor& x) { return (*mm)(x); }});
  }
  return out;
}

}  // namespace kiln::nn
