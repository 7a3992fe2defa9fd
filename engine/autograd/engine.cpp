// The backward engine: counts dependencies from the roots, then runs every node once all the
// gradients flowing into it have arrived (a topological order), accumulating along edges.
// It calls ops (add, ones) for gradient arithmetic, as PyTorch's engine does.
#include <unordered_map>
#include <unordered_set>

#include "engine/autograd/anomaly_mode.h"
#include "engine/autograd/grad_mode.h"
#include "engine/autograd/node.h"
#include "engine/ops/ops.h"

namespace kiln {

void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph) {
  NoGradGuard ng;
  MemoryScope tag_scope(MemoryTag::temporary);
  KILN_CHECK(roots.size() == grads.size(), "backward: ", roots.size(), " roots but ", grads.size(), " gradients");
  std::vector<Edge> root_edges;
  std::vector<Tensor> root_grads;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    KILN_CHECK(r.defined(), "backward: undefined tensor");
    KILN_CHECK(r.requires_grad(), "backward: tensor ", r.str(),
               " does not require grad and has no grad_fn (nothing to differentiate)");
    Tensor g = grads[i];
    if (!g.defined()) {
      KILN_CHECK(r.numel() == 1, "backward: grad can be implicitly created only for one-element outputs; tensor ",
                 r.str(), " needs an explicit gradient");
      g = ones(r.sizes(), r.dtype(), r.device());
    } else {
      KILN_CHECK(g.sizes() == r.sizes(), "backward: gradient shape ", shape_str(g.sizes()),
                 " does not match the output shape ", shape_str(r.sizes()));
    }
    root_edges.push_back(gradient_edge(r));
    root_grads.push_back(g);
  }

  // Dependency counts: how many edges point at each node from the reachable graph.
  std::unordered_map<Node*, int> deps;
  std::unordered_set<Node*> seen;
  std::vector<Node*> stack;
  for (auto& e : root_edges)
    if (e.fn && seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (auto& e : n->next_edges) {
      if (!e.fn) continue;
      deps[e.fn.get()]++;
      if (seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
    }
  }

  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  std::unordered_map<Node*, std::shared_ptr<Node>> owners;
  auto deliver = [&](const Edge& e, const Tensor& g) {
    if (!e.fn || !g.defined()) return;
    auto& buf = buffers[e.fn.get()];
    owners[e.fn.get()] = e.fn;
    size_t n = std::max<size_t>(e.fn->outputs.size(), 1);
    if (buf.size() < n) buf.resize(n);
    Tensor& slot = buf[e.input_nr];
    if (!slot.defined()) slot = g;
    else slot = add(slot, g);
  };
  std::vector<Node*> ready;
  for (size_t i = 0; i < root_edges.size(); ++i) deliver(root_edges[i], root_grads[i]);
  for (auto& e : root_edges)
    if (e.fn && deps[e.fn.get()] == 0 &&
        std::find(ready.begin(), ready.end(), e.fn.get()) == ready.end())
      ready.push_back(e.fn.get());

  while (!ready.empty()) {
    Node* n = ready.back();
    ready.pop_back();
    std::shared_ptr<Node> keep = owners[n];
    std::vector<Tensor> in = std::move(buffers[n]);
    buffers.erase(n);
    in.resize(std::max<size_t>(n->outputs.size(), 1));
    // Outputs that received no gradient get zeros, so formulas need no special cases.
    for (size_t i = 0; i < n->outputs.size(); ++i)
      if (!in[i].defined() && is_floating(n->outputs[i].dtype))
        in[i] = zeros(n->outputs[i].sizes, n->outputs[i].dtype, n->outputs[i].device);
    std::vector<Tensor> out;
    {
      MemoryScope module_scope(MemoryTag::temporary, n->module);
      out = n->apply(std::move(in));
    }
    if (anomaly_mode_enabled()) check_op_gradients(n->name(), n->module, out);
    if (!retain_graph) n->release_saved();
    for (size_t i = 0; i < n->next_edges.size(); ++i) {
      const Edge& e = n->next_edges[i];
      if (!e.fn) continue;
      if (i < out.size()) deliver(e, out[i]);
      if (--deps[e.fn.get()] == 0) ready.push_back(e.fn.get());
    }
    owners.erase(n);
  }
}

}  // namespace kiln
