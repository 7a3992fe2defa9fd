// Compiles kernels/cuda/elementwise.cu to PTX with nvcc (no GPU needed) and asserts that the
// contiguous unary/binary kernels use 128-bit vector memory instructions: ld.global[.nc].v4 and
// st.global.v4 for f32/f16/bf16, .v2.f64 for f64. Without alignas(16) on Vec16 nvcc emits scalar
// loads only, and this test fails. Skips with a visible line when nvcc is not installed (a machine
// without the CUDA toolkit). Must not run anything on a GPU; PTX generation only (~5 s CPU).
#include <doctest/doctest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

// nvcc from $KILN_NVCC, $CUDACXX, /usr/local/cuda/bin, or PATH; empty when none runs.
std::string find_nvcc() {
  std::vector<std::string> cands;
  for (const char* env : {"KILN_NVCC", "CUDACXX"})
    if (const char* v = std::getenv(env); v && *v) cands.push_back(v);
  cands.push_back("/usr/local/cuda/bin/nvcc");
  cands.push_back("nvcc");
  for (const auto& c : cands)
    if (std::system(("'" + c + "' --version > /dev/null 2>&1").c_str()) == 0) return c;
  return "";
}

// PTX text of each .entry whose name contains `kernel` and the dtype's mangled template argument.
std::vector<std::string> entries(const std::string& ptx, const std::string& kernel, const std::string& targ) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = ptx.find(".entry ", pos)) != std::string::npos) {
    const size_t next = ptx.find(".entry ", pos + 7);
    const std::string body = ptx.substr(pos, next == std::string::npos ? std::string::npos : next - pos);
    const std::string name = body.substr(0, body.find('('));
    if (name.find(kernel + targ) != std::string::npos) out.push_back(body);
    pos = next == std::string::npos ? ptx.size() : next;
  }
  return out;
}

}  // namespace

TEST_CASE("cuda ptx: the contiguous elementwise path uses 128-bit vector loads and stores") {
  const std::string nvcc = find_nvcc();
  if (nvcc.empty()) {
    MESSAGE("cuda ptx test skipped: nvcc not found (set KILN_NVCC or CUDACXX, or install the CUDA toolkit)");
    return;
  }
  const fs::path src = fs::path(KILN_SOURCE_DIR);
  const fs::path dir = fs::path(KILN_BINARY_DIR) / "ptx_check";
  fs::create_directories(dir);
  const fs::path ptx = dir / "elementwise.ptx", log = dir / "elementwise.log";
  const std::string cmd = "'" + nvcc + "' -ptx -arch=compute_80 -std=c++17 --expt-relaxed-constexpr -I'" +
                          src.string() + "' '" + (src / "kernels/cuda/elementwise.cu").string() + "' -o '" +
                          ptx.string() + "' > '" + log.string() + "' 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream lf(log);
  std::stringstream lss;
  lss << lf.rdbuf();
  INFO("nvcc command: " << cmd << "\nnvcc output: " << lss.str());
  REQUIRE(rc == 0);
  std::ifstream f(ptx);
  std::stringstream ss;
  ss << f.rdbuf();
  const std::string text = ss.str();
  REQUIRE(!text.empty());

  auto has = [](const std::string& body, const char* a) { return body.find(a) != std::string::npos; };
  auto has_ld = [&](const std::string& body, const char* vec) {
    return has(body, (std::string("ld.global.") + vec).c_str()) || has(body, (std::string("ld.global.nc.") + vec).c_str());
  };
  // Mangled template arguments: f, d, kiln::half, kiln::bfloat16.
  for (const char* kernel : {"12unary_contig", "13binary_contig"}) {
    for (const char* targ : {"IfE", "INS_4halfE", "INS_8bfloat16E"}) {
      const auto es = entries(text, kernel, targ);
      CAPTURE(kernel);
      CAPTURE(targ);
      REQUIRE(es.size() == 1);
      CHECK(has_ld(es[0], "v4."));
      CHECK(has(es[0], "st.global.v4."));
    }
    const auto es = entries(text, kernel, "IdE");
    CAPTURE(kernel);
    REQUIRE(es.size() == 1);
    CHECK(has_ld(es[0], "v2.f64"));
    CHECK(has(es[0], "st.global.v2.f64"));
  }
}
