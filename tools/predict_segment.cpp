// `kiln predict --task segment` (see predict_segment.h).
#include "tools/predict_segment.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "data/png_io.h"
#include "data/segmentation_overlay.h"
#include "engine/autograd/grad_mode.h"
#include "engine/core/devices.h"
#include "engine/core/percent.h"
#include "engine/io/atomic_file.h"
#include "engine/io/tensor_io.h"
#include "engine/memory/tag.h"
#include "engine/ops/confusion.h"
#include "engine/ops/ops.h"
#include "engine/train/segment_task.h"
#include "models/model_file.h"
#include "engine/run/run_model.h"
#include "engine/run/predict_pass.h"
#include "engine/run/run_data.h"
#include "tools/predict_memory.h"

namespace kiln {
namespace fs = std::filesystem;

namespace {

// The input as the model saw it, back in 0..255 (HWC, 1 or 3 channels): the normalization undone
// with the card's mean/std (one value for every channel, or one per channel).
Image input_image(const float* x, int64_t channels, int64_t h, int64_t w, const Preprocessing& p) {
  Image im;
  im.w = (int)w, im.h = (int)h, im.c = channels == 1 ? 1 : 3;
  im.px.resize((size_t)(w * h * im.c));
  for (int64_t ch = 0; ch < im.c; ++ch)
    for (int64_t p_ = 0; p_ < h * w; ++p_) {
      double v = x[ch * h * w + p_];
      if (p.has_normalization()) {
        const size_t i = std::min(p.mean.size() - 1, (size_t)ch);
        v = v * p.std[i] + p.mean[i];
      }
      im.px[(size_t)(p_ * im.c + ch)] = (uint8_t)std::lround(std::clamp(v, 0.0, 1.0) * 255.0);
    }
  return im;
}

// Each sample's output name: its path relative to the deepest folder holding every image, without the
// extension (images/a/x.png and images/b/x.png give a/x and b/x), so equal file names in different
// folders stay apart; two files differing only by extension keep it (x_png, x_jpg); array data:
// sample_NNNNN (the index).
std::vector<std::string> output_names(const DataSource& data) {
  const int64_t n = data.size();
  std::vector<std::string> names((size_t)n);
  if (n == 0 || data.path(0).empty()) {
    char buf[32];
    for (int64_t i = 0; i < n; ++i) {
      std::snprintf(buf, sizeof buf, "sample_%05lld", (long long)i);
      names[(size_t)i] = buf;
    }
    return names;
  }
  fs::path root = fs::path(data.path(0)).lexically_normal().parent_path();
  auto under = [](const fs::path& p, const fs::path& dir) {
    auto d = dir.begin(), q = p.begin();
    for (; d != dir.end(); ++d, ++q)
      if (q == p.end() || *d != *q) return false;
    return true;
  };
  for (int64_t i = 1; i < n; ++i) {
    const fs::path p = fs::path(data.path(i)).lexically_normal();
    while (!root.empty() && !under(p, root)) root = root.parent_path();
  }
  std::map<std::string, int> seen;
  std::vector<fs::path> rel((size_t)n);
  for (int64_t i = 0; i < n; ++i) {
    rel[(size_t)i] = fs::path(data.path(i)).lexically_normal().lexically_relative(root);
    names[(size_t)i] = (rel[(size_t)i].parent_path() / rel[(size_t)i].stem()).generic_string();
    ++seen[names[(size_t)i]];
  }
  for (int64_t i = 0; i < n; ++i)
    if (seen[names[(size_t)i]] > 1) {
      const std::string ext = rel[(size_t)i].extension().string();
      names[(size_t)i] += "_" + (ext.empty() ? std::string("noext") : ext.substr(1));
    }
  return names;
}

nlohmann::json number_or_null(double v) { return std::isnan(v) ? nlohmann::json() : nlohmann::json(v); }

}  // namespace

PredictResult run_segment_predict(const PredictConfig& c, WeightsFile& wf, const ImageOptions& image,
                                  const std::string& model_name, int64_t num_classes, std::ostream& log) {
  const Device device = resolve_device(c.device);
  const ModelCard& card = wf.card;
  KILN_CHECK(num_classes <= train::kSegmentMaxClasses, "predict --task segment: ", num_classes,
             " classes (masks are 8-bit: at most ", train::kSegmentMaxClasses, ")");
  {
    std::error_code ec;
    KILN_CHECK(!fs::exists(c.out, ec) || fs::is_directory(c.out, ec), "predict --task segment: --out ", c.out,
               " is a file; give a folder for the mask and overlay PNGs");
    if (!c.dry_run) fs::create_directories(c.out, ec);
    KILN_CHECK(c.dry_run || fs::is_directory(c.out, ec), "predict --task segment: --out ", c.out, ": cannot create the folder (",
               ec.message(), ")");
  }
  KILN_CHECK(c.inputs.size() <= 1, "predict --task segment: --data takes one folder or CSV, got ", c.inputs.size(),
             " inputs");
  std::unique_ptr<DataSource> src = open_segment_predict_data(c.data, image, device, num_classes);
  DataSource& data = *src;
  KILN_CHECK(data.size() > 0, "predict: ", c.data, " holds no images");
  // Every file this run writes, checked before any is: an existing one is refused unless --force.
  const std::vector<std::string> names = output_names(data);
  if (!c.dry_run) {
    std::vector<std::string> existing;
    std::error_code ec;
    for (const std::string& n : names)
      for (const char* suffix : {"_mask.png", "_overlay.png"})
        if (fs::exists(fs::path(c.out) / (n + suffix), ec)) existing.push_back((fs::path(c.out) / (n + suffix)).string());
    if (fs::exists(fs::path(c.out) / "summary.json", ec)) existing.push_back((fs::path(c.out) / "summary.json").string());
    KILN_CHECK(existing.empty() || c.force, "predict --task segment: --out ", c.out, " already holds ", existing.size(),
               " of the files this would write (", existing.front(), existing.size() > 1 ? ", ..." : "",
               "): pass --force to overwrite them, or give another --out");
  }

  PredictModelSpec spec{model_name, "", c.weights + " (model_json)", num_classes, data.channels(), data.image_size(0)};
  if (models::is_model_file_name(model_name) && !wf.model_json.empty() && !fs::exists(model_name))
    spec.model_json = wf.model_json;
  PredictPassOptions pass;
  pass.batch = c.batch;
  pass.segment = true;
  pass.num_classes = num_classes;
  pass.who = str_cat("predict: --model ", model_name);
  // ---- the memory plan: the same model and pass on the meta device ----
  const RunPlan plan = plan_predict_memory(c, spec, data, pass, device, log);
  if (c.dry_run) return dry_run_result(plan, log);
  RunPeaks peaks;  // from the model's copy to the device, as planned
  peaks.start(device);
  nn::ModulePtr model = build_predict_model(spec, &wf.tensors, device);
  wf.tensors.clear();

  const std::vector<PngColor> palette = class_palette((int)num_classes);
  nlohmann::json images = nlohmann::json::array();
  Tensor counts;  // the set's confusion matrix on the device, when the data has masks
  PredictResult result;
  predict_pass(*model, data, pass, &counts, [&](const SourceBatch& b, const PredictBatchOutput& r) {
    const Tensor& out = r.out;
    const Tensor cls = to_device(r.cls, Device::cpu());
    const Tensor x = contiguous(to_device(b.x, Device::cpu()));
    const int64_t bn = out.size(0), h = out.size(2), w = out.size(3), ch = x.size(1);
    const int64_t* cp = cls.data<int64_t>();
    for (int64_t i = 0; i < bn; ++i) {
      const int64_t index = b.indices[(size_t)i];
      const std::string& stem = names[(size_t)index];
      if (stem.find('/') != std::string::npos) fs::create_directories(fs::path(c.out) / fs::path(stem).parent_path());
      Image mask;
      mask.w = (int)w, mask.h = (int)h, mask.c = 1;
      mask.px.resize((size_t)(w * h));
      std::vector<int64_t> per_class((size_t)num_classes, 0);
      for (int64_t p = 0; p < h * w; ++p) {
        const int64_t k = cp[i * h * w + p];
        mask.px[(size_t)p] = (uint8_t)k;
        ++per_class[(size_t)k];
      }
      write_png_palette((fs::path(c.out) / (stem + "_mask.png")).string(), mask, palette);
      const Image in = input_image(x.data<float>() + i * ch * h * w, ch, h, w, card.preprocessing);
      write_png((fs::path(c.out) / (stem + "_overlay.png")).string(), side_by_side_overlay(in, mask, palette, 0.5f));
      images.push_back({{"index", index}, {"stem", stem}, {"path", data.path(index)},
                        {"pixels_per_class", per_class}});
      ++result.n;
    }
  });
  report_bad_samples(data, log);
  nlohmann::json summary = {{"weights", c.weights}, {"model", model_name}, {"data", data.source()},
                            {"num_classes", num_classes}, {"images", images}};
  log << "predict: " << result.n << " images from " << data.source() << " -> " << c.out
      << "/ (<stem>_mask.png, <stem>_overlay.png, summary.json)";
  if (counts.defined()) {
    const train::SegmentMetrics m =
        train::segment_metrics(to_device(counts, Device::cpu()).to_vector<int64_t>(), num_classes, c.ignore_background);
    nlohmann::json iou = nlohmann::json::array(), dice = nlohmann::json::array();
    for (int64_t k = 0; k < num_classes; ++k) {
      iou.push_back(number_or_null(m.iou[(size_t)k]));
      dice.push_back(number_or_null(m.dice[(size_t)k]));
    }
    summary["metrics"] = {{"pixel_accuracy", number_or_null(m.pixel_accuracy)}, {"mean_iou", number_or_null(m.mean_iou)},
                          {"mean_dice", number_or_null(m.mean_dice)}, {"iou", iou}, {"dice", dice},
                          {"pixels", m.pixels}, {"ignore_background", m.ignore_background}};
    int64_t correct = 0;
    for (int64_t k = 0; k < num_classes; ++k) correct += m.confusion[(size_t)(k * num_classes + k)];
    char buf[64];
    std::snprintf(buf, sizeof buf, ", mean Dice %.4f", m.mean_dice);
    log << "; against the data's masks: pixel accuracy " << percent_text(correct, m.pixels) << ", mIoU "
        << percent_text(m.mean_iou) << (m.ignore_background ? " (no background)" : "") << buf;
    result.scored = m.pixels;
    result.accuracy = m.pixels > 0 ? m.pixel_accuracy : 0.0;
  }
  log << "\n";
  const std::string text = summary.dump(1) + "\n";
  atomic_write_file((fs::path(c.out) / "summary.json").string(), text.data(), text.size());
  report_predict_memory(peaks, plan, result, log);
  return result;
}

}  // namespace kiln
