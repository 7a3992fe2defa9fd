// Meta-device training steps through a fresh caching allocator (see mem_predict.h).
#include "tools/lib/mem_predict.h"

#include <unistd.h>

#include <algorithm>
#include <map>

#include "engine/autograd/grad_mode.h"
#include "engine/core/meta_target.h"
#include "engine/memory/provider.h"
#include "engine/nn/checkpoint.h"
#include "engine/ops/ops.h"
#include "tools/lib/amp_training.h"
#include "tools/lib/devices.h"
#include "tools/lib/memory_peak.h"
#include "tools/lib/train_components.h"

namespace kiln {

namespace {

// The meta device's allocator for one prediction: a fresh CachingAllocator over virtual
// addresses with the target's policy, installed with set_allocator(meta) while it lives. It
// watches every allocation for the moment the total allocated bytes peak (the tags then) and,
// when asked, snapshots the segment map the first time the total reaches a known peak.
class MetaSession : public Allocator {
 public:
  explicit MetaSession(const AllocatorConfig& cfg) : alloc_(Device::meta(), &provider_, cfg) {
    set_allocator(Device::meta(), this);
  }
  ~MetaSession() override { set_allocator(Device::meta(), nullptr); }

  Device device() const override { return Device::meta(); }
  void* allocate(size_t nbytes, StreamId stream) override {
    void* p = alloc_.allocate(nbytes, stream);
    const MemoryStats s = alloc_.stats();
    const int64_t cur = s.total.allocated.current;
    if (cur > best_) {
      best_ = cur;
      for (int t = 0; t < kNumMemoryTags; ++t) at_best_[t] = s.tag_allocated[t].current;
    }
    if (capture_at_ > 0 && !captured_ && cur == capture_at_) {
      segments_ = alloc_.segments();
      captured_ = true;
    }
    return p;
  }
  void deallocate(void* p) override { alloc_.deallocate(p); }
  void retag(void* p, MemoryTag t) override { alloc_.retag(p, t); }
  void record_stream(void* p, StreamId s) override { alloc_.record_stream(p, s); }

  // Starts a step: peaks restart from the live bytes.
  void begin_step() {
    alloc_.reset_peak();
    best_ = alloc_.stats().total.allocated.current;
    for (int t = 0; t < kNumMemoryTags; ++t) at_best_[t] = alloc_.stats().tag_allocated[t].current;
  }
  StepPeak end_step() const {
    StepPeak p;
    const MemoryStats s = alloc_.stats();
    p.allocated = s.total.allocated.peak;
    p.reserved = s.total.reserved.peak;
    for (int t = 0; t < kNumMemoryTags; ++t) p.tag_peak[t] = s.tag_allocated[t].peak;
    p.at_peak = at_best_;
    return p;
  }
  void capture_segments_at(int64_t allocated) { capture_at_ = allocated, captured_ = false; }

  VirtualProvider provider_;
  CachingAllocator alloc_;
  int64_t best_ = 0;
  TagBytes at_best_{};
  int64_t capture_at_ = 0;
  bool captured_ = false;
  std::vector<SegmentInfo> segments_;
};

// Activation bytes per module path among the live blocks, in the model's module order (pre-order,
// which is forward order for kiln's models); paths outside the tree last.
std::vector<std::pair<std::string, int64_t>> activations_by_module(const CachingAllocator& a, nn::Module& model) {
  std::vector<BlockInfo> blocks;
  for (const SegmentInfo& s : a.segments())
    for (const BlockInfo& b : s.blocks)
      if (b.state == "allocated" && b.tag == MemoryTag::activation) blocks.push_back(b);
  std::sort(blocks.begin(), blocks.end(), [](const BlockInfo& x, const BlockInfo& y) { return x.address < y.address; });
  std::vector<std::pair<std::string, int64_t>> out;
  std::map<std::string, size_t> index;
  for (const BlockInfo& b : blocks) {
    const std::string m = b.module.empty() ? "(top level)" : b.module;
    auto it = index.find(m);
    if (it == index.end()) {
      index[m] = out.size();
      out.emplace_back(m, (int64_t)b.size);
    } else {
      out[it->second].second += (int64_t)b.size;
    }
  }
  std::map<std::string, size_t> order;
  for (auto& [name, m] : model.named_modules()) order.emplace(name.empty() ? "(top level)" : name, order.size());
  auto rank = [&](const std::string& m) {
    auto it = order.find(m);
    return it == order.end() ? order.size() : it->second;
  };
  std::stable_sort(out.begin(), out.end(), [&](const auto& x, const auto& y) { return rank(x.first) < rank(y.first); });
  return out;
}

int64_t num_classes_of(const MemConfig& c) { return c.train.num_classes > 0 ? c.train.num_classes : c.num_classes; }

}  // namespace

int model_num_stages(const MemConfig& c) {
  nn::ModulePtr m = build_model(c.train.model, num_classes_of(c), c.in_channels, c.image_size);
  return (int)m->stages().size();
}

MemPrediction predict_memory(const MemConfig& c) {
  KILN_CHECK(c.train.batch >= 1 && c.train.accum >= 1 && c.train.accum <= c.train.batch, "mem: --batch ",
             c.train.batch, " and --accum ", c.train.accum, " must be >= 1 with accum <= batch");
  KILN_CHECK(c.image_size >= 1 && c.in_channels >= 1, "mem: bad --image-size ", c.image_size, " or --in-channels ",
             c.in_channels);
  KILN_CHECK(c.checkpoint >= 0, "mem: --checkpoint must be >= 0, got ", c.checkpoint);
  MemPrediction r;
  r.config = c;
  const Device target = c.train.device == "auto" ? resolve_device("auto") : Device::parse(c.train.device);
  r.target = target.str();
  CachingAllocator* target_alloc = caching_allocator_for(target.is_meta() ? Device::cpu() : target);
  AllocatorConfig cfg = target_alloc ? target_alloc->config() : alloc_config_from_env();
  // No GPU here to ask: assume the usual CUDA allocation granularity (2 MiB) for its arena.
  if (!target_alloc && target.is_cuda()) cfg.granule = std::max(cfg.granule, size_t(2) << 20);
  MetaTargetScope imitate(target);
  const uint64_t seed_before = global_rng().seed, offset_before = global_rng().offset;

  MetaSession session(cfg);
  {
    // The model is built on the CPU (constructors initialize there) and moved; only the meta
    // copies stay.
    nn::ModulePtr model = build_model(c.train.model, num_classes_of(c), c.in_channels, c.image_size);
    r.num_stages = (int)model->stages().size();
    model->to(Device::meta());
    if (CachingAllocator* host = caching_allocator_for(Device::cpu())) host->empty_cache();
    model->train();
    if (c.checkpoint > 0) model->set_checkpoint_segments(c.checkpoint);
    std::unique_ptr<TrainOptimizer> opt = build_optimizer(c.train, *model);
    Tensor class_weights;  // the loop's class-weight tensor (allocated untagged, like train's)
    if (!c.train.class_weights.empty())
      class_weights = empty({num_classes_of(c)}, DType::f32, Device::meta());
    // --amp: the loop's AmpTraining (its scaler's state tensors come after the class weights, as
    // in train_loop), so autocast's f16 weight copies and the scaler's ops are replayed as well.
    AmpTraining amp(c.train, Device::meta());
    const int64_t n_step = c.train.batch, micro = (n_step + c.train.accum - 1) / c.train.accum;

    auto step = [&](bool last) {
      // The loop loads the whole step's batch before zero_grad; micro-batches are views of it.
      Tensor x_step, y_step;
      {
        MemoryScope ds(MemoryTag::data);
        x_step = empty({n_step, c.in_channels, c.image_size, c.image_size}, DType::f32, Device::meta());
        y_step = empty({n_step}, DType::i64, Device::meta());
      }
      model->zero_grad();
      for (int64_t mb = 0; mb < n_step; mb += micro) {
        const int64_t m = std::min(n_step, mb + micro) - mb;
        Tensor x = narrow(x_step, 0, mb, m), y = narrow(y_step, 0, mb, m);
        Tensor logits, loss;
        {
          MemoryScope scope(MemoryTag::temporary);
          auto autocast = amp.region();
          logits = (*model)(x);
          loss = cross_entropy(logits, y, class_weights);
        }
        if (last && mb + micro >= n_step) {
          r.layer_activations = activations_by_module(session.alloc_, *model);
          r.activations = 0;
          for (auto& [n, b] : r.layer_activations) r.activations += b;
        }
        amp.backward(mul(loss, (double)m / (double)n_step));
      }
      if (c.train.clip > 0) {
        amp.unscale(model->parameters());
        // clip_grad_norm's allocations: per gradient an f64 copy, its square and the sum (the
        // norm itself needs data, so the scaling is not replayed; it is in place anyway).
        NoGradGuard ng;
        MemoryScope ms(MemoryTag::temporary);
        for (const Tensor& p : model->parameters())
          if (p.grad().defined()) {
            Tensor g64 = to_dtype(p.grad(), DType::f64);
            sum(mul(g64, g64));
          }
      }
      opt->set_lr(c.train.lr);
      amp.step(model->parameters(), [&opt] { opt->step(); });
    };

    session.begin_step();
    step(false);
    r.first = session.end_step();
    session.begin_step();
    step(!c.detail);
    r.steady = session.end_step();
    if (c.detail) {
      // One more identical step: the event trace and the segment map at the known peak.
      session.alloc_.enable_trace(size_t(1) << 20);
      session.capture_segments_at(r.steady.allocated);
      session.begin_step();
      step(true);
      r.segments_at_peak = session.segments_;
      r.trace = session.alloc_.chrome_trace();
      session.alloc_.enable_trace(0);
    }
    const MemoryStats s = session.alloc_.stats();
    r.params = s.tag_allocated[(int)MemoryTag::param].current;
    r.grads = s.tag_allocated[(int)MemoryTag::grad].current;
    r.optimizer = s.tag_allocated[(int)MemoryTag::optimizer].current;
    r.data = std::max(r.first.tag_peak[(int)MemoryTag::data], r.steady.tag_peak[(int)MemoryTag::data]);
  }
  if (CachingAllocator* host = caching_allocator_for(Device::cpu())) host->empty_cache();
  global_rng().seed = seed_before;
  global_rng().offset = offset_before;
  const StepPeak& hi = r.first.allocated >= r.steady.allocated ? r.first : r.steady;
  r.peak_allocated = hi.allocated;
  r.peak_reserved = std::max(r.first.reserved, r.steady.reserved);
  r.temporaries_at_peak = hi.at_peak[(int)MemoryTag::temporary];
  r.slack = r.peak_reserved - r.peak_allocated;
  return r;
}

int recomputed_stages(int stages, int segments) {
  if (segments <= 1 || stages <= 0) return 0;
  const auto b = nn::segment_bounds((size_t)stages, segments);
  return (int)b.back().first;
}

int choose_checkpoint(const MemConfig& c, int64_t budget, std::vector<std::pair<int, int64_t>>* tried) {
  const int stages = model_num_stages(c);
  std::vector<int> candidates = {0};
  for (int s = 2; s <= stages; ++s) candidates.push_back(s);
  int best = -1, best_cost = 1 << 30;
  int64_t best_peak = 0, smallest = INT64_MAX;
  for (int s : candidates) {
    MemConfig k = c;
    k.checkpoint = s;
    k.detail = false;
    const int64_t peak = predict_memory(k).peak_reserved;
    if (tried) tried->emplace_back(s, peak);
    smallest = std::min(smallest, peak);
    const int cost = recomputed_stages(stages, s);
    if (peak <= budget && (best < 0 || cost < best_cost || (cost == best_cost && peak < best_peak))) {
      best = s, best_cost = cost, best_peak = peak;
    }
  }
  char need[32], have[32];
  KILN_CHECK(best >= 0, "--checkpoint auto: no segment count fits the budget of ",
             format_bytes(budget, have, sizeof have), "; the smallest predicted peak is ",
             format_bytes(smallest, need, sizeof need), " (try a smaller --batch, --accum or --image-size)");
  return best;
}

MaxBatchResult find_max_batch(const MemConfig& c, int64_t budget, double margin) {
  KILN_CHECK(margin >= 0 && margin < 1, "--margin must be in [0, 1), got ", margin);
  const double limit = (double)budget * (1.0 - margin);
  MaxBatchResult r;
  auto fits = [&](int64_t b, int64_t* peak) {
    MemConfig k = c;
    k.train.batch = b;
    k.train.accum = std::min<int64_t>(c.train.accum, b);
    k.detail = false;
    *peak = predict_memory(k).peak_reserved;
    r.probes.emplace_back(b, *peak);
    return (double)*peak <= limit;
  };
  int64_t peak = 0;
  if (!fits(1, &peak)) return r;
  int64_t lo = 1, lo_peak = peak, hi = 2;
  const int64_t cap = int64_t(1) << 24;
  while (hi <= cap && fits(hi, &peak)) {
    lo = hi, lo_peak = peak;
    hi *= 2;
  }
  while (hi - lo > 1) {  // lo fits, hi does not
    const int64_t mid = lo + (hi - lo) / 2;
    if (fits(mid, &peak)) lo = mid, lo_peak = peak;
    else hi = mid;
  }
  r.batch = lo;
  r.peak_reserved = lo_peak;
  return r;
}

int64_t device_budget(Device d) {
  CachingAllocator* a = caching_allocator_for(d);
  if (a) return (int64_t)a->stats().capacity;
  return (int64_t)sysconf(_SC_PHYS_PAGES) * (int64_t)sysconf(_SC_PAGE_SIZE);
}

nlohmann::json MemPrediction::to_json() const {
  auto tags = [](const TagBytes& b) {
    nlohmann::json j;
    for (int t = 0; t < kNumMemoryTags; ++t) j[tag_name((MemoryTag)t)] = b[t];
    return j;
  };
  auto step = [&](const StepPeak& p) {
    return nlohmann::json{{"peak_allocated", p.allocated}, {"peak_reserved", p.reserved},
                          {"tag_peak", tags(p.tag_peak)}, {"tags_at_peak", tags(p.at_peak)}};
  };
  nlohmann::json layers = nlohmann::json::array();
  for (const auto& [m, b] : layer_activations) layers.push_back({{"module", m}, {"bytes", b}});
  const TrainConfig& t = config.train;
  return {{"model", t.model},
          {"batch", t.batch},
          {"accum", t.accum},
          {"image_size", config.image_size},
          {"in_channels", config.in_channels},
          {"num_classes", t.num_classes > 0 ? t.num_classes : config.num_classes},
          {"optimizer", t.optimizer},
          {"momentum", t.momentum},
          {"checkpoint", config.checkpoint},
          {"amp", t.amp},
          {"num_stages", num_stages},
          {"device", target},
          {"parameters", params},
          {"gradients", grads},
          {"optimizer_state", optimizer},
          {"activations", activations},
          {"temporaries_at_peak", temporaries_at_peak},
          {"input_data", data},
          {"allocator_slack", slack},
          {"peak_allocated", peak_allocated},
          {"peak_reserved", peak_reserved},
          {"first_step", step(first)},
          {"steady_step", step(steady)},
          {"layer_activations", layers}};
}

}  // namespace kiln
