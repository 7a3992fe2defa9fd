// bench_alloc: replays allocation traces through (a) kiln's bins (CachingAllocator; with the
// configured policy and again with mapped segments forced), (b) kiln's
// plan mode (record the first round, replay the rest from the arena), (c) the raw provider
// (aligned_alloc/free per request), and prints, side by side, ns per alloc+free pair and peak
// reserved bytes over peak live bytes (1.00 is the limit). Also times the bins' hit path (the
// same size allocated and freed in a loop). Times are thread CPU time (see now_s).
//
// Usage: bench_alloc [trace.txt ...] [--rounds N] [--write-synthetic PATH]   (--help: the flags)
// Trace format (CachingAllocator::write_trace_file writes it): one event per line,
//   a <id> <bytes> <tag>    allocate
//   f <id>                  free
// '#' starts a comment. With no trace argument the bench uses a SYNTHETIC CNN-like trace (a
// ResNet-shaped forward/backward at two batch sizes, generated below), not a recorded one.
#include <algorithm>
#include <stdexcept>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/core/error.h"
#include "engine/memory/caching_allocator.h"

#include "bench/bench_cli.h"

using namespace kiln;

namespace {

struct Op {
  bool alloc;
  uint32_t slot;  // dense index of the trace id
  size_t bytes;
};
struct Trace {
  std::string name;
  std::vector<Op> ops;
  uint32_t slots = 0;
  size_t allocs = 0;
  size_t peak_live = 0;  // requested bytes: the lower bound of any allocator
};

void finish(Trace& t) {
  size_t live = 0;
  std::vector<size_t> sz(t.slots, 0);
  for (const Op& o : t.ops) {
    if (o.alloc) {
      live += o.bytes;
      sz[o.slot] = o.bytes;
      ++t.allocs;
      t.peak_live = std::max(t.peak_live, live);
    } else {
      live -= sz[o.slot];
    }
  }
}

Trace read_trace(const std::string& path) {
  std::ifstream f(path);
  KILN_CHECK(f, "bench_alloc: cannot open trace '", path, "'");
  Trace t;
  t.name = path.substr(path.find_last_of('/') + 1);
  std::unordered_map<uint64_t, uint32_t> slot;
  std::string line;
  size_t lineno = 0;
  while (std::getline(f, line)) {
    ++lineno;
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    char kind;
    uint64_t id;
    in >> kind >> id;
    KILN_CHECK(in && (kind == 'a' || kind == 'f'), "bench_alloc: ", path, ":", lineno, ": bad line '", line, "'");
    if (kind == 'a') {
      size_t bytes = 0;
      in >> bytes;
      KILN_CHECK(in && bytes > 0, "bench_alloc: ", path, ":", lineno, ": bad size in '", line, "'");
      KILN_CHECK(!slot.count(id), "bench_alloc: ", path, ":", lineno, ": id ", id, " allocated twice");
      slot[id] = t.slots++;
      t.ops.push_back({true, slot[id], bytes});
    } else {
      auto it = slot.find(id);
      KILN_CHECK(it != slot.end(), "bench_alloc: ", path, ":", lineno, ": free of unknown id ", id);
      t.ops.push_back({false, it->second, 0});
      slot.erase(it);
    }
  }
  finish(t);
  return t;
}

// SYNTHETIC: a ResNet18-shaped step (stem, 4 stages of 2 basic blocks, fc) at batch `batch` and
// `px` pixels, f32. Forward keeps each conv/bn/relu output (activation) and uses a workspace per
// conv (temporary); backward allocates each input gradient, frees activations in reverse, keeps
// weight gradients until the optimizer step. Parameters live for the whole trace.
Trace synthetic(int batch, int px) {
  Trace t;
  t.name = "synthetic-cnn-b" + std::to_string(batch) + "-" + std::to_string(px) + "px";
  auto alloc = [&](size_t bytes) {
    t.ops.push_back({true, t.slots, bytes});
    return t.slots++;
  };
  auto free_ = [&](uint32_t s) { t.ops.push_back({false, s, 0}); };
  struct Layer {
    size_t act, weight;
  };
  std::vector<Layer> layers;
  int h = px / 2, c = 64;
  layers.push_back({(size_t)batch * c * h * h * 4, (size_t)c * 3 * 49 * 4});
  h /= 2;
  for (int stage = 0; stage < 4; ++stage) {
    if (stage) {
      c *= 2;
      h = std::max(1, h / 2);
    }
    for (int conv = 0; conv < 4; ++conv) layers.push_back({(size_t)batch * c * h * h * 4, (size_t)c * c * 9 * 4});
  }
  std::vector<uint32_t> params;
  for (const Layer& l : layers) params.push_back(alloc(l.weight));
  uint32_t input = alloc((size_t)batch * 3 * px * px * 4);
  for (int step = 0; step < 3; ++step) {
    std::vector<uint32_t> saved;
    for (const Layer& l : layers) {
      uint32_t ws = alloc(l.act / 8 + 4096);
      uint32_t out = alloc(l.act);  // conv output
      free_(ws);
      saved.push_back(out);
      saved.push_back(alloc(l.act));  // bn output
      saved.push_back(alloc(256 * 4));  // bn saved mean/invstd
    }
    uint32_t logits = alloc((size_t)batch * 1000 * 4), loss = alloc(4);
    uint32_t g = alloc((size_t)batch * 1000 * 4);
    free_(logits);
    std::vector<uint32_t> wgrads;
    for (size_t i = layers.size(); i-- > 0;) {
      uint32_t ws = alloc(layers[i].act / 8 + 4096);
      uint32_t gin = alloc(layers[i].act);
      wgrads.push_back(alloc(layers[i].weight));
      free_(ws);
      free_(g);
      for (int k = 0; k < 3; ++k) {
        free_(saved.back());
        saved.pop_back();
      }
      g = gin;
    }
    free_(g);
    free_(loss);
    for (uint32_t w : wgrads) free_(w);
  }
  free_(input);
  for (uint32_t p : params) free_(p);
  finish(t);
  return t;
}

// Thread CPU time, not wall time: the build machines are shared and heavily loaded, and an
// allocator never blocks, so CPU time is what it costs (wall time adds other processes' turns).
double now_s() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

struct Result {
  double ns_per_pair = 0;
  double ratio = 0;  // peak reserved / peak live
  uint64_t diverged = 0;
};

// Runs the trace `rounds` times; after each round frees whatever the trace left alive.
template <typename Alloc, typename Free>
double replay(const Trace& t, std::vector<void*>& ptrs, Alloc&& alloc, Free&& free_) {
  double t0 = now_s();
  for (const Op& o : t.ops) {
    if (o.alloc) ptrs[o.slot] = alloc(o.bytes);
    else {
      free_(ptrs[o.slot]);
      ptrs[o.slot] = nullptr;
    }
  }
  for (void*& p : ptrs)
    if (p) {
      free_(p);
      p = nullptr;
    }
  return now_s() - t0;
}

Result run_bins(const Trace& t, int rounds, const AllocatorConfig& cfg) {
  HostProvider host;
  CachingAllocator a(Device::cpu(), &host, cfg);
  std::vector<void*> ptrs(t.slots, nullptr);
  auto al = [&](size_t n) { return a.allocate(n); };
  auto fr = [&](void* p) { a.deallocate(p); };
  replay(t, ptrs, al, fr);  // warm: segments mapped
  double secs = 0;
  for (int r = 0; r < rounds; ++r) secs += replay(t, ptrs, al, fr);
  Result res;
  res.ns_per_pair = secs * 1e9 / ((double)t.allocs * rounds);
  res.ratio = (double)a.stats().total.reserved.peak / (double)t.peak_live;
  return res;
}

Result run_plan(const Trace& t, int rounds) {
  HostProvider host;
  CachingAllocator a(Device::cpu(), &host, alloc_config_from_env());
  std::vector<void*> ptrs(t.slots, nullptr);
  auto al = [&](size_t n) { return a.allocate(n); };
  auto fr = [&](void* p) { a.deallocate(p); };
  a.begin_record();
  replay(t, ptrs, al, fr);
  a.end_record();
  a.empty_cache();  // the recording round's bin segments go back: only the arena remains
  a.reset_peak();
  double secs = 0;
  for (int r = 0; r < rounds; ++r) {
    a.begin_replay();
    secs += replay(t, ptrs, al, fr);
    a.end_replay();
  }
  Result res;
  res.ns_per_pair = secs * 1e9 / ((double)t.allocs * rounds);
  res.ratio = (double)a.stats().total.reserved.peak / (double)t.peak_live;
  res.diverged = a.plan_report().diverged_steps;
  return res;
}

Result run_raw(const Trace& t, int rounds) {
  HostProvider host;
  std::vector<size_t> sizes(t.slots, 0);
  size_t mapped = 0, peak = 0;
  std::vector<void*> ptrs(t.slots, nullptr);
  double secs = 0;
  for (int r = 0; r < rounds + 1; ++r) {
    double t0 = now_s();
    for (const Op& o : t.ops) {
      if (o.alloc) {
        ptrs[o.slot] = host.map(o.bytes);
        sizes[o.slot] = (o.bytes + 4095) / 4096 * 4096;
        mapped += sizes[o.slot];
        peak = std::max(peak, mapped);
      } else {
        host.unmap(ptrs[o.slot], sizes[o.slot]);
        mapped -= sizes[o.slot];
        ptrs[o.slot] = nullptr;
      }
    }
    for (uint32_t s = 0; s < t.slots; ++s)
      if (ptrs[s]) {
        host.unmap(ptrs[s], sizes[s]);
        mapped -= sizes[s];
        ptrs[s] = nullptr;
      }
    if (r) secs += now_s() - t0;  // round 0 warms the heap
  }
  Result res;
  res.ns_per_pair = secs * 1e9 / ((double)t.allocs * rounds);
  res.ratio = (double)peak / (double)t.peak_live;
  return res;
}

// The bins' hit path: the same sizes allocated and freed in a tight loop.
void hit_path() {
  HostProvider host;
  CachingAllocator a(Device::cpu(), &host, alloc_config_from_env());
  const size_t sizes[] = {512, 4096, 65536, 1 << 20, 4 << 20};
  std::printf("hit path (allocate + deallocate of one size, after warm-up):\n");
  for (size_t n : sizes) {
    a.deallocate(a.allocate(n));
    const int iters = 2000000;
    double t0 = now_s();
    for (int i = 0; i < iters; ++i) a.deallocate(a.allocate(n));
    double ns = (now_s() - t0) * 1e9 / iters;
    void* p = std::malloc(n);
    std::free(p);
    t0 = now_s();
    for (int i = 0; i < iters; ++i) {
      void* q = std::malloc(n);
      __asm__ __volatile__("" : : "r"(q) : "memory");
      std::free(q);
    }
    double ns_m = (now_s() - t0) * 1e9 / iters;
    std::printf("  %9s  kiln bins %6.1f ns/pair   malloc/free %6.1f ns/pair\n", format_bytes((double)n).c_str(), ns,
                ns_m);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"bench_alloc: replays allocation traces through kiln's bins, plan mode and the raw provider "
               "(malloc), side by side: ns per alloc+free pair and peak reserved / peak live bytes"};
  app.name("bench_alloc");
  std::vector<std::string> trace_files;
  std::string synthetic_out;
  int rounds = 20;
  app.add_option("traces", trace_files, "trace files (a <id> <bytes> <tag> / f <id> lines; default: SYNTHETIC "
                                        "CNN-like traces, not recorded from a run)")
      ->check(CLI::ExistingFile);
  app.add_option("--rounds", rounds, "replays of each trace")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--write-synthetic", synthetic_out, "write the synthetic trace (batch 32, 64 px) to PATH");
  return kiln_bench::run(app, argc, argv, [&]() -> int {
  std::vector<Trace> traces;
  const bool wrote = !synthetic_out.empty();
  if (wrote) {
    Trace t = synthetic(32, 64);
    std::ofstream f(synthetic_out);
    if (!f) throw std::runtime_error("cannot write " + synthetic_out);
    f << "# SYNTHETIC CNN-like trace (bench_alloc synthetic(32, 64)), not recorded from a run\n";
    for (const Op& o : t.ops)
      if (o.alloc) f << "a " << o.slot << " " << o.bytes << " other\n";
      else f << "f " << o.slot << "\n";
  }
  for (const std::string& a : trace_files) traces.push_back(read_trace(a));
  if (traces.empty() && wrote) return 0;
  if (traces.empty()) {
    std::printf("no trace given: using SYNTHETIC CNN-like traces (not recorded from a run)\n");
    traces.push_back(synthetic(32, 64));
    traces.push_back(synthetic(128, 64));
    traces.push_back(synthetic(16, 224));
  }
  hit_path();
  std::printf("\ntrace replay, %d rounds each (reserved/peak: peak reserved bytes over peak live bytes, 1.00 is the limit)\n",
              rounds);
  // "kiln bins" is the configured policy (by default the expandable arena, what the host and meta
  // devices get); "segments" forces mapped segments (expandable=0), what cuda and pinned memory get
  // until their providers can grow a range.
  const AllocatorConfig cfg = alloc_config_from_env();
  AllocatorConfig seg_cfg = cfg;
  seg_cfg.expandable = false;
  std::printf("bins: %s arena, granule %s\n", cfg.expandable ? "expandable" : "no expandable",
              format_bytes((double)cfg.granule).c_str());
  std::printf("%-28s %7s %10s | %-19s | %-19s | %-28s | %-19s\n", "trace", "allocs", "peak live", "kiln bins",
              "kiln bins, segments", "kiln plan", "raw provider");
  std::printf("%-28s %7s %10s | %8s %10s | %8s %10s | %8s %10s %8s | %8s %10s\n", "", "", "", "ns/pair", "res/peak",
              "ns/pair", "res/peak", "ns/pair", "res/peak", "diverged", "ns/pair", "res/peak");
  for (const Trace& t : traces) {
    Result b = run_bins(t, rounds, cfg), s = run_bins(t, rounds, seg_cfg), p = run_plan(t, rounds),
           r = run_raw(t, rounds);
    std::printf("%-28s %7zu %10s | %8.1f %10.3f | %8.1f %10.3f | %8.1f %10.3f %8llu | %8.1f %10.3f\n", t.name.c_str(),
                t.allocs, format_bytes((double)t.peak_live).c_str(), b.ns_per_pair, b.ratio, s.ns_per_pair, s.ratio,
                p.ns_per_pair, p.ratio, (unsigned long long)p.diverged, r.ns_per_pair, r.ratio);
  }
  return 0;
  });
}
