// C++ side of the PyTorch oracle for parity tests: writes inputs as .npy and a batch SPEC, runs
// `/usr/bin/python3 tests/support/oracle/oracle.py SPEC` once for all cases, and reads the outputs,
// gradients and updated buffers back as HostArrays. Header-only (test support, not part of libkiln);
// it must never be used by kiln itself. The SPEC format is documented at the top of oracle.py.
#pragma once
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "engine/core/error.h"
#include "engine/io/npy.h"

#ifndef KILN_SOURCE_DIR
#error "oracle_client.h needs KILN_SOURCE_DIR (set for every test executable by CMakeLists.txt)"
#endif

namespace kiln::oracle {

// One positional argument of the torch call: an array, None, or a python scalar.
struct Arg {
  std::optional<HostArray> array;
  nlohmann::json literal;  // null (None) or a number / bool when array is empty
  Arg(HostArray a) : array(std::move(a)) {}  // NOLINT: implicit on purpose
  Arg(std::nullptr_t) {}                       // NOLINT
  Arg(double v) : literal(v) {}                // NOLINT
};

struct Case {
  std::string op;                                // torch op name (oracle.py OPS)
  std::vector<Arg> inputs;                       // positional, torch's order
  nlohmann::json kwargs = nlohmann::json::object();
  std::vector<std::optional<HostArray>> grad_out;  // empty: ones for every floating output
  std::vector<int> requires_grad;                // empty: oracle.py's default (1/0 per input)
  std::string dtype;                             // e.g. "float64": cast floating inputs first
  bool expect_error = false;
};

struct Result {
  std::vector<HostArray> outputs;      // out / out_<k>
  std::map<int, HostArray> grads;      // input index -> gradient
  std::map<int, HostArray> buffers;    // input index -> value after the op (BN running stats)
  std::string error;                   // torch's error text, empty on success
};

// Runs every case in one python process under `dir` (created; files are left for inspection).
inline std::vector<Result> run(const std::vector<Case>& cases, const std::string& dir) {
  namespace fs = std::filesystem;
  using nlohmann::json;
  fs::create_directories(dir);
  json spec = json::array();
  for (size_t k = 0; k < cases.size(); ++k) {
    const Case& c = cases[k];
    const std::string sub = "c" + std::to_string(k);
    fs::create_directories(fs::path(dir) / sub);
    json jc = {{"op", c.op}, {"kwargs", c.kwargs}, {"out", sub}, {"expect_error", c.expect_error}};
    json in = json::array();
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      if (c.inputs[i].array) {
        std::string f = sub + "/in_" + std::to_string(i) + ".npy";
        write_npy((fs::path(dir) / f).string(), *c.inputs[i].array);
        in.push_back(f);
      } else {
        in.push_back(c.inputs[i].literal);
      }
    }
    jc["inputs"] = in;
    if (!c.grad_out.empty()) {
      json g = json::array();
      for (size_t i = 0; i < c.grad_out.size(); ++i) {
        if (!c.grad_out[i]) { g.push_back(nullptr); continue; }
        std::string f = sub + "/gout_" + std::to_string(i) + ".npy";
        write_npy((fs::path(dir) / f).string(), *c.grad_out[i]);
        g.push_back(f);
      }
      jc["grad_out"] = g;
    }
    if (!c.requires_grad.empty()) {
      json rg = json::array();
      for (int r : c.requires_grad) rg.push_back(r != 0);
      jc["requires_grad"] = rg;
    }
    if (!c.dtype.empty()) jc["dtype"] = c.dtype;
    spec.push_back(jc);
  }
  const std::string spec_path = (fs::path(dir) / "spec.json").string();
  std::ofstream(spec_path) << json{{"cases", spec}}.dump(1);
  const std::string cmd = std::string("/usr/bin/python3 ") + KILN_SOURCE_DIR +
                          "/tests/support/oracle/oracle.py '" + spec_path + "' > '" + dir + "/oracle.log' 2>&1";
  const int rc = std::system(cmd.c_str());
  std::vector<Result> out;
  for (size_t k = 0; k < cases.size(); ++k) {
    const fs::path sub = fs::path(dir) / ("c" + std::to_string(k));
    std::ifstream rf(sub / "result.json");
    KILN_CHECK(rf.good(), "oracle: no result for case ", k, " (", cases[k].op, "); python exit status ", rc,
               ", see ", dir, "/oracle.log");
    json r = json::parse(rf);
    Result res;
    if (!r["error"].is_null()) res.error = r["error"].get<std::string>();
    for (const auto& o : r["outputs"]) res.outputs.push_back(read_npy((sub / o["file"].get<std::string>()).string()));
    for (auto it = r["grads"].begin(); it != r["grads"].end(); ++it)
      res.grads[std::stoi(it.key())] = read_npy((sub / it.value().get<std::string>()).string());
    for (auto it = r["buffers"].begin(); it != r["buffers"].end(); ++it)
      res.buffers[std::stoi(it.key())] = read_npy((sub / it.value().get<std::string>()).string());
    out.push_back(std::move(res));
  }
  return out;
}

}  // namespace kiln::oracle
