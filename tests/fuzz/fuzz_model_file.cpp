// libFuzzer target: model files (models/model_file.h, docs/model-files.md). The bytes are the file's
// text; build_graph_model reads it for a 3-channel 16x16 input and 3 classes. kiln::Error is the expected
// answer to a bad file; any other exception, a sanitizer report or a hang is a finding. A file that
// builds must run: a forward pass on a zero batch of 2 gives the shape the file's last layer declares
// (the shape inference and the ops agree), and a file that builds twice gives the same parameter names.
//
// Harness bound (not a rule of the format): files with an integer above 64 anywhere are skipped, so a
// fuzzed "out_channels": 1e9 or "count": 1e6 does not spend the run on allocation or loops; the
// parser's own checks for such values are covered by unit tests.
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/autograd/grad_mode.h"
#include "engine/ops/ops.h"
#include "fuzz/fuzz_support.h"
#include "models/model_file.h"

using namespace kiln;

namespace {
bool small_numbers(const nlohmann::json& j) {
  if (j.is_number_integer()) return j.get<int64_t>() <= 64;
  if (j.is_number_unsigned()) return j.get<uint64_t>() <= 64;
  if (j.is_number_float()) return j.get<double>() <= 64.0;
  if (j.is_string()) return j.get_ref<const std::string&>().size() <= 256;
  if (j.is_array() && j.size() > 64) return false;
  if (j.is_structured())
    for (const auto& v : j) if (!small_numbers(v)) return false;
  return true;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, false);
  if (!j.is_discarded() && !small_numbers(j)) return 0;
  const models::ModelInput input{3, 3, 16};
  std::shared_ptr<models::GraphModel> m;
  try {
    m = models::build_graph_model(text, "<fuzz>", input);
  } catch (const Error&) {
    return 0;
  }
  FUZZ_ASSERT(m && !m->layers().empty());
  // A model file may have hundreds of layers within the bound; keep one input cheap.
  if (m->layers().size() > 200) return 0;
  const std::vector<int64_t>& want = m->layers().back().out_shape;
  NoGradGuard no_grad;
  m->eval();
  Tensor y;
  try {
    y = (*m)(zeros({2, 3, 16, 16}));
  } catch (const Error&) {
    // The file built, so its shapes were inferred: an op refusing them at run time is a finding.
    FUZZ_ASSERT(false);
  }
  FUZZ_ASSERT(y.dim() == (int64_t)want.size() + 1 && y.size(0) == 2);
  for (size_t d = 0; d < want.size(); ++d) FUZZ_ASSERT(y.size((int64_t)d + 1) == want[d]);
  auto again = models::build_graph_model(text, "<fuzz>", input);
  const auto a = m->named_parameters(), b = again->named_parameters();
  FUZZ_ASSERT(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) FUZZ_ASSERT(a[i].first == b[i].first);
  return 0;
}
