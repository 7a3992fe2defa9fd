// Model files: parsing (names, scopes, references, blocks, repeats), checking (missing references,
// cycles, unused layers, shapes through models/model_file_layers.h) and the GraphModel that runs the
// result. The graph is fixed when the file is read; forward only walks it.
#include "models/model_file.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "engine/memory/tag.h"
#include "engine/nn/batch_norm2d.h"
#include "engine/nn/conv2d.h"
#include "engine/nn/init.h"
#include "models/model_file_layers.h"

namespace kiln::models {

using nlohmann::json;

namespace {

// A container in the module tree ("layer1", "layer1.0"): holds children, never runs.
class LayerGroup : public nn::Module {
 public:
  LayerGroup() : Module("LayerGroup") {}
  Tensor forward(const Tensor&) override {
    throw Error("a model-file layer group has no forward of its own (the GraphModel runs its layers)");
  }
  void add(const std::string& name, nn::ModulePtr m) { add_child(name, std::move(m)); }
};

// A reference to a layer by name, resolved in the scopes of the layer that wrote it (innermost first,
// "" last); `exact` refs are full names already (defaults: the previous layer, a scope's input).
struct Ref {
  std::string text;
  std::vector<std::string> scopes;
  bool exact = false;
};

// A name in the graph: a layer, or an alias (a block's or repeat's output, a scope's input "P@input").
struct Entry {
  bool is_layer = false;
  std::string name, type;
  const json* spec = nullptr;
  std::vector<Ref> refs;  // layer: its inputs; alias: exactly one target
  int layer = -1;         // index into the layer list
};

std::string join_name(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

std::string input_name(const std::string& scope) { return scope + "@input"; }

bool valid_local_name(const std::string& n) {
  if (n.empty() || n.front() == '.' || n.back() == '.' || n.find("..") != std::string::npos || n == "input")
    return false;
  for (char c : n)
    if (!(std::isalnum((unsigned char)c) || c == '_' || c == '.' || c == '-')) return false;
  return true;
}

std::string list_str(const std::vector<std::string>& v) {
  std::string s;
  for (const std::string& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

struct Parser {
  std::string src;  // "model file net.json"
  std::vector<Entry> entries;
  std::map<std::string, size_t> by_name;
  std::vector<size_t> layers;  // entry index of each layer, file order

  void add_entry(Entry e, const std::string& where) {
    KILN_CHECK(!by_name.count(e.name), where, ": the name '", e.name, "' is used twice");
    by_name[e.name] = entries.size();
    if (e.is_layer) {
      e.layer = (int)layers.size();
      layers.push_back(entries.size());
    }
    entries.push_back(std::move(e));
  }
  void add_alias(const std::string& name, Ref target, const std::string& where) {
    Entry e;
    e.name = name;
    e.refs.push_back(std::move(target));
    add_entry(std::move(e), where);
  }

  static void check_fields(const json& spec, const std::vector<std::string>& allowed, const std::string& where) {
    for (auto it = spec.begin(); it != spec.end(); ++it) {
      const std::string& k = it.key();
      if (k == "name" || k == "type") continue;
      KILN_CHECK(std::find(allowed.begin(), allowed.end(), k) != allowed.end(), where, ": unknown field '", k,
                 "' (known: ", list_str(allowed), ")");
    }
  }

  Ref input_ref(const json& spec, const std::string& field, const std::vector<std::string>& scopes,
                const std::string& where) {
    const json& v = spec.at(field);
    KILN_CHECK(v.is_string(), where, ": field '", field, "' must be a layer name, got ", v.dump());
    return Ref{v.get<std::string>(), scopes, false};
  }

  // Expands `list` inside scope `scopes[0]`; returns the full name of its last entry.
  std::string expand(const json& list, const std::vector<std::string>& scopes, const std::string& where_list) {
    const std::string& P = scopes.front();
    KILN_CHECK(list.is_array(), where_list, ": 'layers' must be a list, got ", list.dump());
    KILN_CHECK(!list.empty(), where_list, ": no layers (an empty model or block)");
    std::string prev = input_name(P);
    for (size_t k = 0; k < list.size(); ++k) {
      const json& spec = list[k];
      const std::string at = str_cat(where_list, ", entry ", k);
      KILN_CHECK(spec.is_object(), at, ": a layer must be a JSON object, got ", spec.dump());
      std::string local = std::to_string(k);
      if (spec.contains("name")) {
        KILN_CHECK(spec["name"].is_string() && valid_local_name(spec["name"].get<std::string>()), at,
                   ": bad name ", spec["name"].dump(), " (letters, digits, '_', '-', dots between parts; not 'input')");
        local = spec["name"].get<std::string>();
      }
      const std::string full = join_name(P, local);
      KILN_CHECK(spec.contains("type") && spec["type"].is_string(), src, ": layer '", full,
                 "': missing field 'type' (a string such as \"conv2d\")");
      const std::string type = spec["type"].get<std::string>();
      const std::string where = str_cat(src, ": layer '", full, "' (", type, ")");
      Ref dflt{prev, {}, true};
      Ref in = spec.contains("input") ? input_ref(spec, "input", scopes, where) : dflt;
      if (type == "block" || type == "repeat") {
        if (type == "block") check_fields(spec, {"input", "layers", "output"}, where);
        else check_fields(spec, {"input", "layers", "count", "start"}, where);
        KILN_CHECK(spec.contains("layers"), where, ": missing field 'layers'");
        add_alias(input_name(full), in, where);
        std::vector<std::string> inner = scopes;
        if (type == "block") {
          inner.insert(inner.begin(), full);
          const std::string last = expand(spec["layers"], inner, where);
          Ref out = spec.contains("output") ? input_ref(spec, "output", inner, where) : Ref{last, {}, true};
          add_alias(full, out, where);
        } else {
          auto get = [&](const char* f, int64_t def, int64_t min) -> int64_t {
            if (!spec.contains(f)) return def;
            KILN_CHECK(spec[f].is_number_integer() && spec[f].get<int64_t>() >= min, where, ": field '", f,
                       "' must be an integer >= ", min, ", got ", spec[f].dump());
            return spec[f].get<int64_t>();
          };
          KILN_CHECK(spec.contains("count"), where, ": missing field 'count'");
          const int64_t count = get("count", 1, 1), start = get("start", 0, 0);
          KILN_CHECK(count <= 10000, where, ": count ", count, " is more than 10000 repeats");
          std::string prev_it = input_name(full);
          inner.insert(inner.begin(), full);
          for (int64_t i = start; i < start + count; ++i) {
            const std::string it = join_name(full, std::to_string(i));
            add_alias(input_name(it), Ref{prev_it, {}, true}, where);
            std::vector<std::string> it_scopes = inner;
            it_scopes.insert(it_scopes.begin(), it);
            const std::string last = expand(spec["layers"], it_scopes, str_cat(where, " repeat ", i));
            add_alias(it, Ref{last, {}, true}, where);
            prev_it = it;
          }
          add_alias(full, Ref{prev_it, {}, true}, where);
        }
      } else {
        const LayerType* lt = find_layer_type(type);
        KILN_CHECK(lt != nullptr, where, ": unknown layer type '", type, "' (known: ", list_str(layer_type_names()),
                   ", block, repeat)");
        KILN_CHECK(lt->unavailable.empty(), where, ": layer type '", type, "' is not available in this build yet (",
                   lt->unavailable, ")");
        std::vector<std::string> allowed = lt->fields;
        allowed.push_back(lt->max_inputs > 1 ? "inputs" : "input");
        check_fields(spec, allowed, where);
        Entry e;
        e.is_layer = true;
        e.name = full;
        e.type = type;
        e.spec = &spec;
        if (lt->max_inputs > 1) {
          KILN_CHECK(spec.contains("inputs") && spec["inputs"].is_array(), where,
                     ": needs 'inputs': a list of layer names");
          const json& ins = spec["inputs"];
          KILN_CHECK((int)ins.size() >= lt->min_inputs && (int)ins.size() <= lt->max_inputs, where, ": takes ",
                     lt->min_inputs, " to ", lt->max_inputs, " inputs, got ", ins.size());
          for (const json& r : ins) {
            KILN_CHECK(r.is_string(), where, ": 'inputs' must hold layer names, got ", r.dump());
            e.refs.push_back(Ref{r.get<std::string>(), scopes, false});
          }
        } else {
          e.refs.push_back(in);
        }
        add_entry(std::move(e), where);
      }
      prev = full;
    }
    return prev;
  }

  // The layer a reference ends at (following aliases); -1 for the model input.
  int resolve(const Ref& r, const std::string& where) {
    std::string name;
    if (r.exact) {
      name = r.text;
    } else if (r.text == "input") {
      name = input_name(r.scopes.front());
    } else {
      std::vector<std::string> tried;
      for (const std::string& s : r.scopes) {
        tried.push_back(join_name(s, r.text));
        if (by_name.count(tried.back())) {
          name = tried.back();
          break;
        }
      }
      KILN_CHECK(!name.empty(), where, ": input '", r.text, "' is not a layer of this model (looked for ",
                 list_str(tried), ")");
    }
    std::vector<std::string> chain;
    for (;;) {
      if (name == input_name("")) return -1;
      auto it = by_name.find(name);
      KILN_CHECK(it != by_name.end(), where, ": internal: no entry '", name, "'");
      const Entry& e = entries[it->second];
      if (e.is_layer) return e.layer;
      KILN_CHECK(std::find(chain.begin(), chain.end(), name) == chain.end(), where,
                 ": a cycle: block outputs refer to each other (", list_str(chain), ")");
      chain.push_back(name);
      const Ref& t = e.refs[0];
      if (t.exact) name = t.text;
      else return resolve(t, str_cat(src, ": '", e.name.substr(0, e.name.find('@')), "'"));
    }
  }
};

std::pair<int, int> line_col(const std::string& text, size_t byte) {
  int line = 1, col = 1;
  for (size_t i = 0; i < byte && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      col = 1;
    } else {
      ++col;
    }
  }
  return {line, col};
}

json parse_json(const std::string& text, const std::string& src) {
  try {
    return json::parse(text);
  } catch (const json::parse_error& e) {
    const auto [line, col] = line_col(text, e.byte > 0 ? e.byte - 1 : 0);
    std::string what = e.what();
    const size_t c = what.find("column");
    const size_t colon = c == std::string::npos ? std::string::npos : what.find(": ", c);
    if (colon != std::string::npos) what = what.substr(colon + 2);
    throw Error(str_cat(src, ": not JSON: line ", line, ", column ", col, ": ", what));
  } catch (const json::exception& e) {  // a number beyond double's range (out_of_range 406; found by fuzz_model_file)
    std::string what = e.what();
    const size_t b = what.find("] ");
    throw Error(str_cat(src, ": not usable JSON: ", b == std::string::npos ? what : what.substr(b + 2)));
  }
}

}  // namespace

// ---- the built graph ----

struct GraphModel::Impl {
  struct Layer {
    std::string name, type;
    std::vector<int> inputs;  // positions in `order` of the inputs; -1: the model input
    nn::ModulePtr module;
    std::function<Tensor(const std::vector<Tensor>&)> join;
    int last_use = -1;  // the last position reading this layer's value
  };
  std::vector<Layer> order;  // dependency order (inputs first)
  int input_last_use = -1;
  std::vector<size_t> cuts;  // positions after which one tensor carries everything
};

GraphModel::GraphModel() : Module("GraphModel"), impl_(std::make_unique<Impl>()) {}
GraphModel::~GraphModel() = default;

Tensor GraphModel::run_range(size_t begin, size_t end, const Tensor& x) {
  std::vector<Tensor> vals(end - begin);
  auto value = [&](int q) -> const Tensor& { return q < (int)begin ? x : vals[(size_t)q - begin]; };
  for (size_t p = begin; p < end; ++p) {
    Impl::Layer& l = impl_->order[p];
    ModuleScope scope(l.name);
    if (l.module) {
      vals[p - begin] = l.module->forward(value(l.inputs[0]));
    } else {
      std::vector<Tensor> ins;
      for (int q : l.inputs) ins.push_back(value(q));
      vals[p - begin] = l.join(ins);
    }
    for (int q : l.inputs)  // drop values no later layer reads
      if (q >= (int)begin && impl_->order[(size_t)q].last_use == (int)p) vals[(size_t)q - begin] = Tensor();
  }
  return vals.back();
}

Tensor GraphModel::forward(const Tensor& x) {
  KILN_CHECK(x.dim() == 4 && x.size(1) == input_.in_channels && x.size(2) == input_.image_size &&
                 x.size(3) == input_.image_size,
             source_, ": expected input (N, ", input_.in_channels, ", ", input_.image_size, ", ", input_.image_size,
             "), got ", x.str());
  return run_range(0, impl_->order.size(), x);
}

std::vector<GraphStep> GraphModel::steps() const {
  std::vector<GraphStep> r;
  for (const Impl::Layer& l : impl_->order) {
    GraphStep s{l.name, l.type, {}, l.module.get()};
    for (int q : l.inputs) s.inputs.push_back(q < 0 ? std::string("input") : impl_->order[(size_t)q].name);
    r.push_back(std::move(s));
  }
  return r;
}

std::vector<nn::Stage> GraphModel::stages() {
  std::vector<nn::Stage> st;
  size_t begin = 0;
  for (size_t c : impl_->cuts) {
    const size_t end = c + 1;
    std::vector<nn::ModulePtr> mods;
    for (size_t p = begin; p < end; ++p)
      if (impl_->order[p].module) mods.push_back(impl_->order[p].module);
    std::string name = impl_->order[begin].name;
    if (end - begin > 1) name += ".." + impl_->order[end - 1].name;
    st.push_back(nn::Stage{name, mods, [this, begin, end](const Tensor& x) { return run_range(begin, end, x); }});
    begin = end;
  }
  return st;
}

bool is_model_file_name(const std::string& name) {
  return name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0;
}

std::shared_ptr<GraphModel> build_graph_model(const std::string& text, const std::string& source,
                                              const ModelInput& input) {
  const std::string src = "model file " + source;
  KILN_CHECK(input.in_channels >= 1 && input.image_size >= 1 && input.num_classes >= 1, src,
             ": bad input: channels ", input.in_channels, ", size ", input.image_size, ", classes ", input.num_classes);
  auto model = std::make_shared<GraphModel>();
  model->source_ = source;
  model->text_ = text;
  model->input_ = input;
  const json doc = parse_json(text, src);
  KILN_CHECK(doc.is_object(), src, ": expected a JSON object with \"layers\": [...], got ",
             doc.is_array() ? "a list" : doc.type_name());
  Parser::check_fields(doc, {"format", "input", "output", "init", "layers", "description"}, src);
  if (doc.contains("format"))
    KILN_CHECK(doc["format"] == "kiln-model-1", src, ": unknown format ", doc["format"].dump(),
               " (this build reads \"kiln-model-1\")");
  if (doc.contains("input")) {
    const json& in = doc["input"];
    KILN_CHECK(in.is_object(), src, ": 'input' must be an object {\"channels\": C, \"size\": S}");
    Parser::check_fields(in, {"channels", "size"}, src + ": input");
    auto want = [&](const char* k, int64_t have, const char* what) {
      if (!in.contains(k)) return;
      KILN_CHECK(in[k].is_number_integer(), src, ": input.", k, " must be an integer, got ", in[k].dump());
      KILN_CHECK(in[k].get<int64_t>() == have, src, ": the file is for input ", what, " ",
                 in[k].get<int64_t>(), " but the data has ", have, " (input (", input.in_channels, ", ",
                 input.image_size, ", ", input.image_size, "))");
    };
    want("channels", input.in_channels, "channels");
    want("size", input.image_size, "size");
  }
  KILN_CHECK(doc.contains("layers"), src, ": no \"layers\" (an empty model)");
  std::string init_rule = "default";
  if (doc.contains("init")) {
    KILN_CHECK(doc["init"].is_string() && (doc["init"] == "default" || doc["init"] == "kaiming_fan_out"), src,
               ": 'init' must be \"default\" or \"kaiming_fan_out\", got ", doc["init"].dump());
    init_rule = doc["init"].get<std::string>();
  }

  Parser ps;
  ps.src = src;
  const std::string last = ps.expand(doc["layers"], {""}, src);
  Ref out_ref = doc.contains("output") ? ps.input_ref(doc, "output", {""}, src) : Ref{last, {}, true};
  const int out_layer = ps.resolve(out_ref, src + ": output");
  KILN_CHECK(out_layer >= 0, src, ": the output is the model input itself (no layer runs)");

  // Inputs of every layer, then the order: depth-first from the output, inputs in the order written.
  const size_t n = ps.layers.size();
  std::vector<std::vector<int>> ins(n);
  for (size_t i = 0; i < n; ++i) {
    const Entry& e = ps.entries[ps.layers[i]];
    const std::string where = str_cat(src, ": layer '", e.name, "' (", e.type, ")");
    for (const Ref& r : e.refs) ins[i].push_back(ps.resolve(r, where));
  }
  std::vector<int> state(n, 0), order;  // 0 new, 1 on the stack, 2 done
  std::vector<int> stack;
  std::function<void(int)> visit = [&](int i) {
    if (state[(size_t)i] == 2) return;
    if (state[(size_t)i] == 1) {
      std::string cyc;
      auto from = std::find(stack.begin(), stack.end(), i);
      for (auto it = from; it != stack.end(); ++it) cyc += ps.entries[ps.layers[(size_t)*it]].name + " -> ";
      throw Error(str_cat(src, ": a cycle: ", cyc, ps.entries[ps.layers[(size_t)i]].name));
    }
    state[(size_t)i] = 1;
    stack.push_back(i);
    for (int q : ins[(size_t)i])
      if (q >= 0) visit(q);
    stack.pop_back();
    state[(size_t)i] = 2;
    order.push_back(i);
  };
  visit(out_layer);
  for (size_t i = 0; i < n; ++i) {
    const Entry& e = ps.entries[ps.layers[i]];
    KILN_CHECK(state[i] == 2, src, ": layer '", e.name, "' (", e.type, ") is not used: the output '",
               ps.entries[ps.layers[(size_t)out_layer]].name, "' does not depend on it");
  }

  // Shapes and modules, in dependency order.
  std::vector<int> pos(n, -1);
  for (size_t p = 0; p < order.size(); ++p) pos[(size_t)order[p]] = (int)p;
  const SampleShape in_shape = {input.in_channels, input.image_size, input.image_size};
  std::vector<SampleShape> shapes(n);
  std::vector<BuiltLayer> built(n);
  GraphModel::Impl& im = *model->impl_;
  im.order.resize(n);
  for (size_t p = 0; p < n; ++p) {
    const int i = order[p];
    const Entry& e = ps.entries[ps.layers[(size_t)i]];
    LayerArgs a{*e.spec, {}, {}, input, str_cat(src, ": layer '", e.name, "' (", e.type, ")")};
    for (int q : ins[(size_t)i]) {
      a.in.push_back(q < 0 ? in_shape : shapes[(size_t)q]);
      a.in_names.push_back(q < 0 ? std::string("input") : ps.entries[ps.layers[(size_t)q]].name);
    }
    {
      MemoryScope ms(MemoryTag::param);
      built[(size_t)i] = find_layer_type(e.type)->build(a);
    }
    shapes[(size_t)i] = built[(size_t)i].out;
    GraphModel::Impl::Layer& l = im.order[p];
    l.name = e.name;
    l.type = e.type;
    l.module = built[(size_t)i].module;
    l.join = built[(size_t)i].join;
    for (int q : ins[(size_t)i]) {
      const int qp = q < 0 ? -1 : pos[(size_t)q];
      l.inputs.push_back(qp);
      if (qp < 0) im.input_last_use = (int)p;
      else im.order[(size_t)qp].last_use = std::max(im.order[(size_t)qp].last_use, (int)p);
    }
  }
  // Cuts: after position p nothing but p's value is read later.
  int reach = im.input_last_use;
  for (size_t p = 0; p < n; ++p) {
    if (reach <= (int)p) im.cuts.push_back(p);
    reach = std::max(reach, im.order[p].last_use);
  }
  if (im.cuts.empty() || im.cuts.back() != n - 1) im.cuts.push_back(n - 1);

  // The module tree in file order: "layer1.0.conv1" under groups "layer1" and "layer1.0".
  std::map<std::string, nn::Module*> groups = {{"", model.get()}};
  std::set<std::string> leaves;
  for (size_t i = 0; i < n; ++i) {
    const nn::ModulePtr& m = built[i].module;
    const std::string& name = ps.entries[ps.layers[i]].name;
    if (!m) continue;
    KILN_CHECK(!groups.count(name), src, ": layer '", name, "' is also the name of a group of layers ('", name,
               ".*'); rename one");
    std::string parent;
    size_t start = 0;
    for (size_t dot = name.find('.'); dot != std::string::npos; dot = name.find('.', start)) {
      const std::string g = name.substr(0, dot), local = name.substr(start, dot - start);
      KILN_CHECK(!leaves.count(g), src, ": layer '", name, "' is inside '", g, "', which is a layer, not a group");
      if (!groups.count(g)) {
        auto grp = std::make_shared<LayerGroup>();
        groups[g] = grp.get();
        if (parent.empty()) model->add_child(local, grp);
        else static_cast<LayerGroup*>(groups[parent])->add(local, grp);
      }
      parent = g;
      start = dot + 1;
    }
    const std::string local = name.substr(start);
    if (parent.empty()) model->add_child(local, m);
    else static_cast<LayerGroup*>(groups[parent])->add(local, m);
    leaves.insert(name);
  }
  if (init_rule == "kaiming_fan_out")
    model->apply([](const std::string&, nn::Module& m) {
      if (auto* c = dynamic_cast<nn::Conv2d*>(&m)) {
        nn::init::kaiming_normal_(c->weight, 0.0, nn::init::FanMode::fan_out, "relu");
      } else if (auto* bn = dynamic_cast<nn::BatchNorm2d*>(&m)) {
        nn::init::constant_(bn->weight, 1.0);
        nn::init::constant_(bn->bias, 0.0);
      }
    });

  // What `kiln model show` lists: the layers in file order.
  for (size_t i = 0; i < n; ++i) {
    GraphLayer g;
    g.name = ps.entries[ps.layers[i]].name;
    g.type = ps.entries[ps.layers[i]].type;
    for (int q : ins[i]) g.inputs.push_back(q < 0 ? std::string("input") : ps.entries[ps.layers[(size_t)q]].name);
    g.out_shape = shapes[i];
    if (built[i].module) {
      for (const Tensor& t : built[i].module->parameters()) {
        g.params += t.numel();
        g.param_bytes += t.numel() * (int64_t)dtype_size(t.dtype());
      }
      for (const Tensor& t : built[i].module->buffers()) g.param_bytes += t.numel() * (int64_t)dtype_size(t.dtype());
    }
    model->info_.push_back(std::move(g));
  }
  model->name_tensors();
  return model;
}

std::shared_ptr<GraphModel> load_model_file(const std::string& path, const ModelInput& input) {
  std::ifstream f(path, std::ios::binary);
  KILN_CHECK(f.good(), "model file ", path, ": cannot open it");
  std::ostringstream ss;
  ss << f.rdbuf();
  return build_graph_model(ss.str(), path, input);
}

}  // namespace kiln::models
