// `kiln predict` (see predict.h): flags against the weights' model card, then the eval pass.
#include "tools/predict.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <unordered_map>

#include "engine/autograd/grad_mode.h"
#include "engine/core/devices.h"
#include "engine/core/percent.h"
#include "engine/io/atomic_file.h"
#include "engine/io/tensor_io.h"
#include "engine/memory/tag.h"
#include "engine/ops/ops.h"
#include "engine/train/train_state.h"
#include "models/model_file.h"
#include "tools/predict_memory.h"
#include "tools/predict_segment.h"
#include "tools/trained_size.h"
#include "engine/run/run_model.h"
#include "engine/run/predict_pass.h"
#include "engine/run/run_data.h"

namespace kiln {

namespace {
// A CSV field, quoted when it holds a comma, quote or newline.
std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char ch : s) q += ch == '"' ? std::string("\"\"") : std::string(1, ch);
  return q + "\"";
}

std::string rounded_list(const std::vector<double>& v) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? "," : "") + str_cat(std::round(v[i] * 1e4) / 1e4);
  return s;
}

// "a, b, c" (at most 20 names, then "and N more").
std::string name_list(const std::vector<std::string>& names) {
  std::string s;
  for (size_t i = 0; i < names.size() && i < 20; ++i) s += (i ? ", " : "") + names[i];
  if (names.size() > 20) s += str_cat(" and ", names.size() - 20, " more");
  return s;
}

// The stored normalization in words: "auto (mean 0.4,.. std 0.2,..)".
std::string stored_norm_words(const Preprocessing& p) {
  return str_cat(p.normalize.empty() ? "" : p.normalize + ": ", "mean ", rounded_list(p.mean), " std ",
                 rounded_list(p.std));
}

// Whether the given (non-auto) --normalize applies the stored values at `channels` channels.
bool same_normalization(const Normalization& n, const Preprocessing& p, int channels) {
  float m[3], s[3];
  n.values(channels, m, s);
  for (int ch = 0; ch < channels; ++ch) {
    const size_t i = std::min<size_t>((size_t)ch, p.mean.size() - 1);
    if (std::fabs(m[ch] - p.mean[i]) > 1e-6 * std::max(1.0, std::fabs(p.mean[i])) ||
        std::fabs(s[ch] - p.std[i]) > 1e-6 * std::max(1.0, std::fabs(p.std[i])))
      return false;
  }
  return true;
}

// Each given flag that contradicts the card, as "--flag VALUE (the weights: ...)".
std::vector<std::string> differences(const PredictConfig& c, const ModelCard& card) {
  const Preprocessing& p = card.preprocessing;
  auto given = [&](const char* k) { return c.given.count(k) > 0; };
  std::vector<std::string> d;
  if (!c.task.empty() && c.task != card.task)
    d.push_back(str_cat("--task ", c.task, " (the weights hold a ", card.task, " model)"));
  if (!c.model.empty() && !card.model.empty() && !same_model(card.model, c.model))
    d.push_back(str_cat("--model ", c.model, " (the weights hold a ", card.model, ")"));
  if (c.num_classes > 0 && card.num_classes > 0 && c.num_classes != card.num_classes)
    d.push_back(str_cat("--num-classes ", c.num_classes, " (trained with ", card.num_classes, ")"));
  int64_t size = p.image_size;
  if (given("image-size") && p.image_size > 0) {
    size = ImageSizeSchedule::parse(c.image.image_size).final_size();
    if (size != p.image_size) d.push_back(kiln_cli::image_size_difference(c.image.image_size, p.image_size));
  }
  if (given("channels") && p.channels > 0 && c.image.channels != p.channels)
    d.push_back(str_cat("--channels ", c.image.channels, " (trained with ", p.channels, ")"));
  if (given("crop") && !p.crop.empty() && c.image.crop != p.crop)
    d.push_back(str_cat("--crop ", c.image.crop, " (trained with ", p.crop, ")"));
  if (given("resize") && p.resize > 0 && (c.image.resize > 0 ? c.image.resize : size) != p.resize)
    d.push_back(str_cat("--resize ", c.image.resize, " (trained with ", p.resize, ")"));
  if (given("normalize") && p.has_normalization()) {
    const Normalization n = Normalization::parse(c.image.normalize);
    const int channels = (int)(given("channels") ? c.image.channels : p.channels > 0 ? p.channels : 3);
    const bool same = n.kind == Normalization::Kind::automatic
                          ? p.normalize == "auto"
                          : (p.mean.size() == 1 || (int)p.mean.size() == channels) && same_normalization(n, p, channels);
    if (!same)
      d.push_back(str_cat("--normalize ", c.image.normalize, " (trained with ", stored_norm_words(p), ")"));
  }
  return d;
}

// Unlabelled images (see predict.h): path,class,score,class_1,score_1,...
PredictResult predict_unlabelled(const PredictConfig& c, nn::Module& model, DataSource& data, const PredictPassOptions& pass,
                                 const std::vector<std::string>& names, std::ostream& log) {
  const int64_t k = (int64_t)names.size(), top = std::min<int64_t>(5, k);
  std::ostringstream csv;
  csv << "path,class,score";
  for (int64_t t = 1; t <= top; ++t) csv << ",class_" << t << ",score_" << t;
  csv << "\n";
  int64_t n = 0;
  char buf[32];
  predict_pass(model, data, pass, nullptr, [&](const SourceBatch& b, const PredictBatchOutput& r) {
    const Tensor logits = contiguous(to_device(r.out, Device::cpu()));
    const std::vector<float> l = logits.to_vector<float>();
    for (int64_t i = 0; i < logits.size(0); ++i) {
      // softmax in double, max subtracted
      const float* row = l.data() + i * k;
      const double mx = *std::max_element(row, row + k);
      std::vector<double> p((size_t)k);
      double sum = 0;
      for (int64_t j = 0; j < k; ++j) sum += p[(size_t)j] = std::exp((double)row[j] - mx);
      std::vector<int64_t> order((size_t)k);
      for (int64_t j = 0; j < k; ++j) order[(size_t)j] = j;
      // best first; equal scores: the lower class index first (argmax's rule)
      std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t bb) { return row[a] > row[bb]; });
      csv << csv_field(data.path(b.indices[(size_t)i]));
      for (int64_t t = 0; t <= top; ++t) {
        const int64_t j = order[(size_t)std::max<int64_t>(0, t - 1)];
        std::snprintf(buf, sizeof buf, "%.6f", p[(size_t)j] / sum);
        csv << "," << csv_field(names[(size_t)j]) << "," << buf;
      }
      csv << "\n";
      ++n;
    }
  });
  report_bad_samples(data, log);
  const std::string s = csv.str();
  atomic_write_file(c.out, s.data(), s.size());
  log << "predict: " << n << " images from " << data.source() << " -> " << c.out
      << " (no labels: path, class, score and the top " << top << " classes; no accuracy)\n";
  return {n, 0, 0.0};
}

}  // namespace

PredictResult run_predict(const PredictConfig& c, std::ostream& log) {
  std::string note;
  const Device device = resolve_device(c.device, &note);
  if (!note.empty()) log << note << "\n";
  WeightsFile wf = read_weights(c.weights);
  const ModelCard& card = wf.card;
  const Preprocessing& p = card.preprocessing;
  auto given = [&](const char* k) { return c.given.count(k) > 0; };

  // ---- the flags against the card ----
  const std::vector<std::string> diffs = differences(c, card);
  KILN_CHECK(diffs.empty() || c.force, "predict: ", kiln_cli::trained_otherwise(c.weights, diffs));
  for (const std::string& d : diffs) log << "predict: --force: " << d << "\n";
  const std::string model_name = !c.model.empty() ? c.model : card.model;
  KILN_CHECK(!model_name.empty(), "predict: ", c.weights, " names no model (not written by kiln train --save); pass --model");
  check_model_name(model_name);
  const int64_t num_classes = c.num_classes > 0 ? c.num_classes : card.num_classes;
  KILN_CHECK(num_classes > 0, "predict: ", c.weights,
             " has no num_classes metadata (not written by kiln train --save); pass --num-classes");

  // ---- the input pipeline: the card's, or a given flag where the card has nothing (or --force) ----
  ImageOptions image = c.image;
  image.image_size = given("image-size") ? c.image.image_size : p.image_size > 0 ? std::to_string(p.image_size) : "";
  image.channels = given("channels") ? c.image.channels : p.channels == 1 || p.channels == 3 ? (int)p.channels : 3;
  image.crop = given("crop") ? c.image.crop : !p.crop.empty() ? p.crop : "center";
  image.resize = given("resize") ? c.image.resize : (int)p.resize;
  // --force --image-size S at another size than trained: the resize scales with it (as kiln export does).
  if (given("image-size") && !given("resize") && p.image_size > 0 && p.resize > 0) {
    const int64_t size = ImageSizeSchedule::parse(c.image.image_size).final_size();
    if (size != p.image_size) {
      image.resize = (int)kiln_cli::scaled_resize(p.resize, p.image_size, size);
      log << "predict: --force: " << kiln_cli::scaled_resize_note(p.resize, p.image_size, size) << "\n";
    }
  }
  const bool auto_norm = given("normalize") && Normalization::parse(c.image.normalize).kind == Normalization::Kind::automatic;
  if (given("normalize") && !auto_norm) {
    image.normalize = c.image.normalize;
  } else if (p.has_normalization()) {
    image.normalize = p.normalize_text();  // the training set's values, exactly
  } else {
    KILN_CHECK(!auto_norm, "predict: --normalize auto: ", c.weights,
               " holds no training statistics (written before kiln stored them), and predict never measures the "
               "data it predicts; give the training run's values (--normalize m1,m2,m3:s1,s2,s3: its ledger's "
               "data.mean and data.std, or `kiln data TRAIN_FOLDER`)");
    image.normalize = "none";
  }
  // IDX data: normalized with the training statistics when the card has one value (IDX, or 1 channel).
  double idx_stats[2] = {0, 1};
  const bool idx_given = p.has_normalization() && p.mean.size() == 1;
  if (idx_given) {
    idx_stats[0] = p.mean[0];
    idx_stats[1] = p.std[0];
  }
  // A segmentation model: masks and overlays into a folder (tools/predict_segment.h).
  if ((!c.task.empty() ? c.task : card.task) == "segment")
    return run_segment_predict(c, wf, image, model_name, num_classes, log);
  const std::vector<std::string> inputs = c.inputs.empty() ? std::vector<std::string>{c.data} : c.inputs;
  std::unique_ptr<DataSource> src = open_predict_data(inputs, image, device, idx_given ? idx_stats : nullptr);
  DataSource& data = *src;
  const bool images = !data.path(0).empty();

  // ---- one warning for a file without a (complete) card ----
  if (!card.missing.empty()) {
    std::vector<std::string> assumed;
    for (const std::string& m : card.missing) {
      if (m == "model") assumed.push_back("--model " + model_name);
      else if (m == "number of classes") assumed.push_back(str_cat("--num-classes ", num_classes));
      else if (m == "image size") assumed.push_back(str_cat("--image-size ", data.image_size(0)));
      else if (m == "channels") assumed.push_back(str_cat("--channels ", data.channels()));
      else if (m == "resize/crop")
        assumed.push_back(str_cat("--crop ", image.crop, image.resize > 0 ? str_cat(" --resize ", image.resize) : ""));
      else if (m == "normalization mean/std")
        assumed.push_back(images ? "--normalize " + image.normalize
                                 : "the IDX folder's own training-split mean/std (npy: as stored)");
      else if (m == "class names") assumed.push_back("the model's classes are the data's in sorted order");
    }
    log << "predict: warning: " << c.weights << " has no " << name_list(card.missing)
        << " (written before kiln stored a model's preprocessing); assumed " << name_list(assumed) << "\n";
  }

  // A model file's text travels in the weights: a moved or missing file still predicts.
  PredictModelSpec spec{model_name, "", c.weights + " (model_json)", num_classes, data.channels(), data.image_size(0)};
  if (models::is_model_file_name(model_name) && !wf.model_json.empty() && !std::filesystem::exists(model_name))
    spec.model_json = wf.model_json;
  PredictPassOptions pass;
  pass.batch = c.batch;
  // ---- the memory plan: the same model and pass on the meta device ----
  const RunPlan plan = plan_predict_memory(c, spec, data, pass, device, log);
  if (c.dry_run) return dry_run_result(plan, log);
  RunPeaks peaks;  // from the model's copy to the device, as planned
  peaks.start(device);
  nn::ModulePtr model;
  try {
    model = build_predict_model(spec, &wf.tensors, device);
  } catch (const Error& e) {
    // A model whose classifier is sized for its input (small_cnn) fits only images of the trained size.
    const int64_t trained = p.image_size, size = data.image_size(0);
    if (trained <= 0 || trained == size) throw;
    throw Error(str_cat("predict: ", c.weights, " was trained on ", trained, " px images and ", model_name,
                        "'s layers are sized for them, but the data is ", size, " px: ",
                        images ? str_cat("pass --image-size ", trained) : std::string("give data of that size"),
                        " (", e.what(), ")"));
  }
  wf.tensors.clear();

  // ---- the data's classes matched to the model's by name ----
  std::vector<std::string> data_names = data.class_names();
  if (data_names.empty())  // IDX / npy: the labels are the names
    for (int64_t k = 0; k <= data.max_label(); ++k) data_names.push_back(std::to_string(k));
  std::vector<std::string> model_names = card.class_names;
  if (model_names.empty())  // an older file: by the data's order, as kiln did before it stored names
    for (int64_t k = 0; k < num_classes; ++k)
      model_names.push_back(k < (int64_t)data_names.size() ? data_names[(size_t)k] : std::to_string(k));
  model_names.resize((size_t)num_classes);
  for (int64_t k = 0; k < num_classes; ++k)
    if (model_names[(size_t)k].empty()) model_names[(size_t)k] = std::to_string(k);  // --force --num-classes
  // Images without labels: path, the class and its probability, the top classes; no accuracy.
  if (images && data_names.empty()) {
    PredictResult r = predict_unlabelled(c, *model, data, pass, model_names, log);
    report_predict_memory(peaks, plan, r, log);
    return r;
  }
  std::unordered_map<std::string, int64_t> model_index;
  for (int64_t k = 0; k < num_classes; ++k) model_index.emplace(model_names[(size_t)k], k);
  std::vector<int64_t> to_model(data_names.size(), -1);
  std::vector<std::string> unknown, absent;
  for (size_t d = 0; d < data_names.size(); ++d) {
    auto it = model_index.find(data_names[d]);
    if (it != model_index.end()) to_model[d] = it->second;
    else unknown.push_back(data_names[d]);
  }
  {
    std::unordered_map<std::string, int> in_data;
    for (const std::string& n : data_names) in_data.emplace(n, 1);
    for (const std::string& n : model_names)
      if (!in_data.count(n)) absent.push_back(n);
  }
  if (!unknown.empty())
    log << "predict: the data's class" << (unknown.size() > 1 ? "es " : " ") << name_list(unknown)
        << (unknown.size() > 1 ? " are" : " is") << " not among the model's " << num_classes
        << " classes: predicted, not scored\n";
  if (!absent.empty())
    log << "predict: the model's class" << (absent.size() > 1 ? "es " : " ") << name_list(absent)
        << (absent.size() > 1 ? " have" : " has") << " no samples in " << c.data << "\n";

  std::ostringstream csv;
  csv << (images ? "index,path,label,predicted" : "index,label,predicted") << ",label_name,predicted_name";
  for (int64_t k = 0; k < num_classes; ++k) csv << ",logit_" << k;
  csv << "\n";
  // Predictions need no targets: a class the model does not have is written and not scored.
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
      const int64_t data_label = data.label(idx);
      const bool named = data_label >= 0 && data_label < (int64_t)data_names.size();
      const int64_t label = named ? to_model[(size_t)data_label] : -1;
      ++n;
      if (label >= 0) {
        ++scored;
        correct += best == label;
      }
      csv << idx << ",";
      if (images) csv << csv_field(data.path(idx)) << ",";
      csv << label << "," << best << "," << (named ? csv_field(data_names[(size_t)data_label]) : "") << ","
          << csv_field(model_names[(size_t)best]);
      for (int64_t j = 0; j < k; ++j) {
        std::snprintf(buf, sizeof buf, ",%.7g", l[(size_t)(i * k + j)]);
        csv << buf;
      }
      csv << "\n";
    }
  };
  predict_pass(*model, data, pass, nullptr, [&](const SourceBatch& b, const PredictBatchOutput& r) {
    write_rows(contiguous(to_device(r.out, Device::cpu())), b);
  });
  report_bad_samples(data, log);
  const std::string s = csv.str();
  atomic_write_file(c.out, s.data(), s.size());
  const double accuracy = scored ? (double)correct / (double)scored : 0.0;
  log << "predict: " << n << " samples from " << data.source() << " -> " << c.out;
  if (scored == 0) {
    log << "; no accuracy: no sample's label is one of the model's " << num_classes << " classes";
  } else {
    log << "; accuracy " << percent_text(correct, scored);
    if (scored < n)
      log << " over the " << scored << " whose label is one of the model's " << num_classes << " classes ("
          << n - scored << " have another label: predicted, not scored)";
  }
  log << "\n";
  PredictResult r{n, scored, accuracy};
  report_predict_memory(peaks, plan, r, log);
  return r;
}

}  // namespace kiln
