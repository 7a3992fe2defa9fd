// What the allocator tells users: the OOM path on a capacity-limited provider (release the
// cache, retry, then the full account), debug poisoning catching use-after-free, tag and module
// accounting with retag, and the snapshot / Chrome trace / text trace outputs.
#include <doctest/doctest.h>

#include <cstdio>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/core/error.h"
#include "engine/memory/caching_allocator.h"

using namespace kiln;

namespace {
const size_t MiB = size_t(1) << 20;
bool has(const std::string& s, const std::string& what) { return s.find(what) != std::string::npos; }
}  // namespace

TEST_CASE("alloc oom: releases the cache and retries before failing") {
  HostProvider host;
  LimitedProvider lim(&host, 8 * MiB);
  CachingAllocator a(Device::cpu(), &lim, parse_alloc_conf("expandable=0"));  // mapped segments
  // Fill three small segments (6 MiB), then free them: cached, not returned.
  std::vector<void*> v;
  for (int i = 0; i < 12; ++i) v.push_back(a.allocate(512 * 1024));
  CHECK(lim.mapped() == 6 * MiB);
  for (void* p : v) a.deallocate(p);
  CHECK(a.stats().total.reserved.current == (int64_t)(6 * MiB));
  // 6 MiB needs a fresh large segment: only fits after the cached small segments go back.
  void* big = a.allocate(6 * MiB);
  MemoryStats s = a.stats();
  CHECK(s.num_retries == 1);
  CHECK(s.num_ooms == 0);
  CHECK(s.total.reserved.current == (int64_t)(6 * MiB));
  a.deallocate(big);
  a.verify();
}

TEST_CASE("alloc oom: the message gives the full account and what to try") {
  HostProvider host;
  LimitedProvider lim(&host, 8 * MiB);
  CachingAllocator a(Device::cpu(), &lim, parse_alloc_conf("expandable=0"));  // mapped segments
  void *w, *act1, *act2, *d;
  {
    MemoryScope s(MemoryTag::param, "fc");
    w = a.allocate(1 * MiB + 1);
  }
  {
    MemoryScope s(MemoryTag::activation, "layer1.0.conv1");
    act1 = a.allocate(3 * MiB);
  }
  {
    MemoryScope s(MemoryTag::activation, "layer2.0.conv1");
    act2 = a.allocate(1 * MiB);  // small pool: a 2 MiB segment shared with the data below
  }
  {
    MemoryScope s(MemoryTag::data);
    d = a.allocate(100000);
  }
  std::string msg;
  try {
    MemoryScope s(MemoryTag::activation, "layer3");
    a.allocate(5 * MiB);
    FAIL("expected OutOfMemory");
  } catch (const OutOfMemory& e) {
    msg = e.what();
  }
  MESSAGE(msg);
  CHECK(has(msg, "out of memory on cpu"));
  CHECK(has(msg, "asked for 5.00 MiB (rounded to 5.00 MiB)"));
  CHECK(has(msg, "capacity 8.00 MiB"));
  CHECK(has(msg, "reserved 8.00 MiB"));
  CHECK(has(msg, "largest free block"));
  CHECK(has(msg, "fragmentation"));
  CHECK(has(msg, "cached but free"));
  CHECK(has(msg, "retried once"));
  CHECK(has(msg, "activation 5.00 MiB"));  // 3 MiB in a whole 4 MiB block + 1 MiB
  CHECK(has(msg, "data 98.00 KiB"));
  CHECK(has(msg, "cached but free 926.00 KiB"));  // the small segment's unused rest
  CHECK(has(msg, "param 2.00 MiB"));
  CHECK(has(msg, "layer1.0.conv1 4.00 MiB"));
  CHECK(has(msg, "layer2.0.conv1 1.00 MiB"));
  CHECK(has(msg, "fc 2.00 MiB"));
  CHECK(has(msg, "halving --batch frees ~"));
  CHECK(has(msg, "--accum"));
  CHECK(has(msg, "--amp"));
  CHECK(has(msg, "--checkpoint"));
  CHECK(has(msg, "--image-size"));
  MemoryStats st = a.stats();
  CHECK(st.num_ooms == 1);
  CHECK(st.num_retries == 1);
  a.verify();  // the failed request left nothing half-done
  for (void* p : {w, act1, act2, d}) a.deallocate(p);
  a.verify();
}

TEST_CASE("alloc debug: poisoned free memory catches a write after free") {
  HostProvider host;
  AllocatorConfig cfg;
  cfg.debug = true;
  CachingAllocator a(Device::cpu(), &host, cfg);
  char* p = static_cast<char*>(a.allocate(4096));
  char* guard = static_cast<char*>(a.allocate(4096));
  std::memset(p, 1, 4096);
  a.deallocate(p);
  CHECK((unsigned char)p[100] == detail::kPoisonByte);
  a.verify();  // clean so far
  p[100] = 7;  // use after free
  CHECK_THROWS_WITH_AS(a.verify(), doctest::Contains("use-after-free"), Error);
  CHECK_THROWS_WITH_AS(a.allocate(4096), doctest::Contains("use-after-free"), Error);
  p[100] = (char)detail::kPoisonByte;  // repaired: the block can be handed out again
  char* q = static_cast<char*>(a.allocate(4096));
  CHECK(q == p);
  a.deallocate(q);
  a.deallocate(guard);
  a.verify();
}

TEST_CASE("alloc debug: the config string turns it on, meta memory is never touched") {
  AllocatorConfig cfg = parse_alloc_conf("debug");
  CHECK(cfg.debug);
  VirtualProvider virt;
  CachingAllocator a(Device::meta(), &virt, cfg);
  void* p = a.allocate(1 << 20);  // would crash if it poisoned a fake address
  a.deallocate(p);
  a.verify();
}

TEST_CASE("alloc tags: per-tag and per-module bytes, retag moves the bytes") {
  HostProvider host;
  CachingAllocator a(Device::cpu(), &host, AllocatorConfig{});
  void *x, *y, *z;
  {
    MemoryScope s(MemoryTag::temporary, "layer1");
    ModuleScope m("0");
    x = a.allocate(1000);  // 1024 rounded
    {
      ModuleScope m2("conv1");
      y = a.allocate(5000);  // 5120
    }
  }
  z = a.allocate(512);  // other, top level
  MemoryStats s = a.stats();
  CHECK(s.tag_allocated[(int)MemoryTag::temporary].current == 1024 + 5120);
  CHECK(s.tag_requested[(int)MemoryTag::temporary].current == 6000);
  CHECK(s.tag_allocated[(int)MemoryTag::other].current == 512);
  auto top = a.top_modules(5);
  REQUIRE(top.size() == 3);
  CHECK(top[0].first == "layer1.0.conv1");
  CHECK(top[0].second == 5120);
  CHECK(top[1].first == "layer1.0");
  CHECK(top[2].first == "");
  a.retag(y, MemoryTag::activation);
  s = a.stats();
  CHECK(s.tag_allocated[(int)MemoryTag::temporary].current == 1024);
  CHECK(s.tag_allocated[(int)MemoryTag::activation].current == 5120);
  CHECK(s.tag_requested[(int)MemoryTag::activation].current == 5000);
  a.deallocate(y);
  s = a.stats();
  CHECK(s.tag_allocated[(int)MemoryTag::activation].current == 0);
  CHECK(s.tag_allocated[(int)MemoryTag::activation].peak == 5120);
  CHECK(s.tag_allocated[(int)MemoryTag::temporary].peak == 6144);
  a.reset_peak();
  CHECK(a.stats().tag_allocated[(int)MemoryTag::temporary].peak == 1024);
  CHECK_THROWS_AS(a.retag(y, MemoryTag::param), Error);
  CHECK_THROWS_AS(a.deallocate(y), Error);  // double free is caught
  a.deallocate(x);
  a.deallocate(z);
  a.verify();
}

TEST_CASE("alloc snapshot: valid JSON listing segments, blocks, tags and modules") {
  HostProvider host;
  CachingAllocator a(Device::cpu(), &host, parse_alloc_conf("expandable=0"));  // one small, one large segment
  void* p;
  void* big;
  {
    MemoryScope s(MemoryTag::activation, "layer4.1.bn2");
    p = a.allocate(3000);
    big = a.allocate(3 * MiB);
  }
  void* q = a.allocate(700);
  a.deallocate(q);
  nlohmann::json j = nlohmann::json::parse(a.snapshot().dump());
  CHECK(j["device"] == "cpu");
  REQUIRE(j["segments"].size() == 2);
  bool found = false;
  for (const auto& seg : j["segments"]) {
    size_t total = 0, expect_off = 0;
    for (const auto& b : seg["blocks"]) {
      CHECK(b["offset"].get<size_t>() == expect_off);
      expect_off += b["size"].get<size_t>();
      total += b["size"].get<size_t>();
      if (b["state"] == "allocated" && b["module"] == "layer4.1.bn2" && b["size"] == 3072) {
        CHECK(b["tag"] == "activation");
        CHECK(b["requested"] == 3000);
        found = true;
      }
    }
    CHECK(total == seg["size"].get<size_t>());
  }
  CHECK(found);
  CHECK(j["stats"]["tags"]["activation"]["allocated"]["current"] == 3072 + 3 * MiB);  // split from a shared 20 MiB segment
  CHECK(j["stats"]["counts"]["allocs"] == 3);
  CHECK(j["stats"]["counts"]["frees"] == 1);
  a.deallocate(p);
  a.deallocate(big);
}

TEST_CASE("alloc trace: Chrome trace JSON with tag counters and segment events, text trace") {
  HostProvider host;
  LimitedProvider lim(&host, 4 * MiB);
  AllocatorConfig cfg = parse_alloc_conf("trace=1000");
  CachingAllocator a(Device::cpu(), &lim, cfg);
  void *p, *g;
  {
    MemoryScope s(MemoryTag::activation, "conv1");
    p = a.allocate(10000);
  }
  {
    MemoryScope s(MemoryTag::grad);
    g = a.allocate(20000);
  }
  a.deallocate(p);
  CHECK_THROWS_AS(a.allocate(64 * MiB), OutOfMemory);
  nlohmann::json t = nlohmann::json::parse(a.chrome_trace().dump());
  int act_counters = 0, maps = 0, ooms = 0;
  int64_t last_act = -1;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] == "C" && e["name"] == "activation bytes") {
      ++act_counters;
      last_act = e["args"]["bytes"].get<int64_t>();
    }
    if (e["ph"] == "i" && e["name"] == "segment map") ++maps;
    if (e["ph"] == "i" && e["name"] == "oom") ++ooms;
  }
  CHECK(act_counters >= 3);  // start level, alloc, free
  CHECK(last_act == 0);
  CHECK(maps == 1);
  CHECK(ooms == 1);

  std::string path = std::string(KILN_BINARY_DIR) + "/test_alloc_trace.txt";
  a.write_trace_file(path);
  std::ifstream f(path);
  std::string line, all;
  int allocs = 0, frees = 0;
  while (std::getline(f, line)) {
    if (line.rfind("a ", 0) == 0) ++allocs;
    if (line.rfind("f ", 0) == 0) ++frees;
    all += line + "\n";
  }
  CHECK(allocs == 2);
  CHECK(frees == 1);
  CHECK(has(all, "a 1 10000 activation"));
  CHECK(has(all, "a 2 20000 grad"));
  CHECK(has(all, "f 1\n"));
  std::remove(path.c_str());
  a.deallocate(g);
}
