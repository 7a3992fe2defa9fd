// `kiln predict` (see predict.h).
#include "tools/predict.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "data/array_dataset.h"
#include "engine/autograd/grad_mode.h"
#include "engine/memory/tag.h"
#include "engine/ops/ops.h"
#include "engine/io/atomic_file.h"
#include "engine/io/safetensors.h"
#include "engine/io/tensor_io.h"
#include "engine/core/devices.h"
#include "engine/train/evaluate.h"
#include "tools/train_components.h"
#include "tools/train_data.h"

namespace kiln {

namespace {
// A CSV field, quoted when it holds a comma, quote or newline.
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return q + "\"";
}
}  // namespace

PredictResult run_predict(const PredictConfig& c, std::ostream& log) {
  std::string note;
  const Device device = resolve_device(c.device, &note);
  if (!note.empty()) log << note << "\n";
  check_model_name(c.model);
  SafetensorsFile wf = read_safetensors(c.weights);
  // Image data: the weights know the size and channels they were trained at.
  ImageOptions image = c.image;
  auto meta_int = [&](const char* key) -> int64_t {
    auto it = wf.metadata.find(key);
    return it == wf.metadata.end() ? 0 : std::stoll(it->second);
  };
  if (image.image_size.empty() && meta_int("image_size") > 0) image.image_size = std::to_string(meta_int("image_size"));
  if (meta_int("in_channels") == 1 || meta_int("in_channels") == 3) image.channels = (int)meta_int("in_channels");
  std::unique_ptr<DataSource> src = open_predict_data(c.data, image, device);
  DataSource& data = *src;
  const bool images = !data.path(0).empty();
  int64_t num_classes = c.num_classes;
  if (num_classes <= 0) {
    auto it = wf.metadata.find("num_classes");
    KILN_CHECK(it != wf.metadata.end(), "predict: ", c.weights,
               " has no num_classes metadata (not written by kiln train --save); pass --num-classes");
    num_classes = std::stoll(it->second);
  }
  auto mit = wf.metadata.find("model");
  KILN_CHECK(mit == wf.metadata.end() || same_model(mit->second, c.model), "predict: ", c.weights, " holds a ", mit->second,
             ", not a ", c.model);
  nn::ModulePtr model = build_model(c.model, num_classes, data.channels(), data.image_size(0));
  model->to(device);
  NamedTensors state;
  for (const NamedArray& a : wf.tensors) state.emplace_back(a.name, from_host_array(a.array, device));
  try {
    model->load_state_dict(state, true);
  } catch (const Error& e) {
    // A model whose classifier is sized for its input (small_cnn) fits only images of the trained size.
    const int64_t trained = meta_int("image_size"), given = data.image_size(0);
    if (trained <= 0 || trained == given) throw;
    throw Error(str_cat("predict: ", c.weights, " was trained on ", trained, " px images and ", c.model,
                        "'s layers are sized for them, but the data is ", given, " px: ",
                        images ? str_cat("pass --image-size ", trained) : std::string("give data of that size"),
                        " (", e.what(), ")"));
  }

  std::ostringstream csv;
  csv << (images ? "index,path,label,predicted" : "index,label,predicted");
  for (int64_t k = 0; k < num_classes; ++k) csv << ",logit_" << k;
  csv << "\n";
  // Predictions need no targets: a label the model has no class for is written and not scored.
  int64_t n = 0, scored = 0, correct = 0;
  auto write_rows = [&](const Tensor& logits, const SourceBatch& batch) {
    const std::vector<float> l = logits.to_vector<float>();
    const int64_t b = logits.size(0), k = logits.size(1);
    char buf[32];
    for (int64_t i = 0; i < b; ++i) {
      int64_t best = 0;
      for (int64_t j = 1; j < k; ++j)
        if (l[(size_t)(i * k + j)] > l[(size_t)(i * k + best)]) best = j;
      const int64_t idx = batch.indices[(size_t)i];
      ++n;
      if (data.label(idx) >= 0 && data.label(idx) < k) {
        ++scored;
        correct += best == data.label(idx);
      }
      csv << idx << ",";
      if (images) csv << csv_field(data.path(idx)) << ",";
      csv << data.label(idx) << "," << best;
      for (int64_t j = 0; j < k; ++j) {
        std::snprintf(buf, sizeof buf, ",%.7g", l[(size_t)(i * k + j)]);
        csv << buf;
      }
      csv << "\n";
    }
  };
  model->eval();
  {
    NoGradGuard no_grad;
    data.start_epoch(0, c.batch, false);
    SourceBatch b;
    while (data.next(&b)) {
      MemoryScope scope(MemoryTag::temporary);
      write_rows(contiguous(to_device((*model)(b.x), Device::cpu())), b);
    }
  }
  report_bad_samples(data, log);
  const std::string s = csv.str();
  atomic_write_file(c.out, s.data(), s.size());
  const double accuracy = scored ? (double)correct / (double)scored : 0.0;
  log << "predict: " << n << " samples from " << data.source() << " -> " << c.out << "; accuracy "
      << 100 * accuracy << "%";
  if (scored < n)
    log << " over the " << scored << " whose label is one of the model's " << num_classes << " classes ("
        << n - scored << " have another label: predicted, not scored)";
  log << "\n";
  return {n, accuracy};
}

}  // namespace kiln
