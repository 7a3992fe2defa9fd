// Where a bench program finds its PyTorch/PIL peers: bench/peers/, next to the program's source file.
// __FILE__ is that source's path as the compiler was given it: absolute in a plain build, but relative
// to the build folder when ccache rewrites paths under its base_dir (this workplace's ccache.conf has
// base_dir = /work: __FILE__ is then "../bench/bench_train_step.cpp", and a program run from the
// repository root found no peer). A relative __FILE__ is therefore resolved against the folder of the
// running executable, which is the build folder the compiler ran in. Header only; Linux (/proc/self/exe).
// It must not search other places or guess: a wrong path shows up as the peer's error line.
#pragma once
#include <filesystem>
#include <string>
#include <system_error>

namespace kiln_bench {

// The folder bench/peers of the source file `source_file` (pass __FILE__).
inline std::string peers_dir(const char* source_file) {
  namespace fs = std::filesystem;
  fs::path f(source_file);
  if (f.is_relative()) {
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) f = exe.parent_path() / f;
  }
  return (f.parent_path() / "peers").lexically_normal().string();
}

}  // namespace kiln_bench
