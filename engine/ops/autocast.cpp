// Thread-local autocast state, the guard and the cast helpers the ops call (see autocast.h).
#include "engine/ops/autocast.h"

#include <unordered_map>
#include <vector>

#include "engine/memory/tag.h"
#include "engine/ops/ops.h"

namespace kiln {
namespace {

struct CachedCast {
  Tensor source;  // keeps the key's TensorImpl alive (so its address is not reused)
  uint64_t version = 0;
  DType dtype = DType::f16;
  Tensor cast;
};

struct State {
  bool enabled = false;
  DType dtype = DType::f16;
  std::unordered_map<const TensorImpl*, CachedCast> cache;
  std::vector<const TensorImpl*> order;  // the cache's keys as they were made
};

State& state() {
  thread_local State s;
  return s;
}

bool is_16bit(DType dt) { return dt == DType::f16 || dt == DType::bf16; }

}  // namespace

bool autocast_enabled() { return state().enabled; }
DType autocast_dtype() { return state().dtype; }

AutocastGuard::AutocastGuard(bool enabled, DType dtype) : prev_enabled_(state().enabled), prev_dtype_(state().dtype) {
  KILN_CHECK(is_16bit(dtype), "autocast: dtype must be f16 or bf16, got ", dtype_name(dtype));
  state().enabled = enabled;
  state().dtype = dtype;
}

AutocastGuard::~AutocastGuard() {
  State& s = state();
  s.enabled = prev_enabled_;
  s.dtype = prev_dtype_;
  if (!s.enabled) {
    // The copies are released in the order they were made, not in the map's (hash-of-address) order: the
    // allocation sequence must not depend on where the host heap put the tensors (a plan replays it).
    for (const TensorImpl* k : s.order) s.cache.erase(k);
    s.cache.clear();
    s.order.clear();
  }
}

namespace autocast_detail {

Tensor to_lower(const Tensor& t) {
  State& s = state();
  if (!t.defined() || !is_floating(t.dtype()) || t.dtype() == DType::f64 || t.dtype() == s.dtype) return t;
  // Parameters (leaves that require grad): one cached f16 copy per region, attributed apart.
  if (t.is_leaf() && t.requires_grad()) {
    auto it = s.cache.find(t.impl());
    if (it != s.cache.end() && it->second.version == t.version() && it->second.dtype == s.dtype)
      return it->second.cast;
    Tensor c;
    {
      MemoryScope ms(MemoryTag::param_f16);
      c = to_dtype(t, s.dtype);
    }
    if (it == s.cache.end()) s.order.push_back(t.impl());
    s.cache[t.impl()] = CachedCast{t, t.version(), s.dtype, c};
    return c;
  }
  return to_dtype(t, s.dtype);
}

Tensor to_f32(const Tensor& t) {
  if (!t.defined() || !is_16bit(t.dtype())) return t;
  return to_dtype(t, DType::f32);
}

size_t cache_size() { return state().cache.size(); }

Suspend::Suspend() : prev_(state().enabled) { state().enabled = false; }
Suspend::~Suspend() { state().enabled = prev_; }

}  // namespace autocast_detail
}  // namespace kiln
