// `kiln predict`'s device work (see predict_pass.h).
#include "engine/run/predict_pass.h"

#include <optional>

#include "engine/autograd/grad_mode.h"
#include "engine/core/error.h"
#include "engine/memory/host_scratch.h"
#include "engine/memory/tag.h"
#include "engine/nn/init.h"
#include "engine/ops/confusion.h"
#include "engine/ops/ops.h"
#include "engine/run/run_model.h"
#include "engine/train/segment_task.h"
#include "models/model_file.h"

namespace kiln {

nn::ModulePtr build_predict_model(const PredictModelSpec& spec, const std::vector<NamedArray>* tensors, Device device) {
  nn::ModulePtr model;
  {
    HostScratchScope scratch;  // the build and the loaded values stay out of the device's allocator
    nn::init::SkipRandomInitGuard shapes_only;  // every value comes from the weights (a strict load)
    if (!spec.model_json.empty())
      model = models::build_graph_model(spec.model_json, spec.json_source,
                                        {spec.num_classes, spec.channels, spec.image_size});
    else
      model = build_model(spec.name, spec.num_classes, spec.channels, spec.image_size);
    if (tensors) {
      NamedTensors state;
      for (const NamedArray& a : *tensors) state.emplace_back(a.name, from_host_array(a.array, Device::cpu()));
      model->load_state_dict(state, true);
    }
  }
  model->rehome(device);
  model->eval();
  return model;
}

namespace {

// A segmentation model's output for a batch without masks: (N, K, H, W) at the input's size.
void check_segment_scores(const Tensor& out, const Tensor& x, const std::string& who) {
  KILN_CHECK(out.dim() == 4 && out.size(0) == x.size(0) && out.size(2) == x.size(2) && out.size(3) == x.size(3) &&
                 out.size(1) >= 1 && out.size(1) <= train::kSegmentMaxClasses,
             who, ": gives output ", shape_str(out.sizes()), " for images ", shape_str(x.sizes()),
             "; segmentation needs (N, K, H, W) class scores at the images' size");
}

}  // namespace

void predict_pass(nn::Module& model, DataSource& data, const PredictPassOptions& o, Tensor* counts,
                  const std::function<void(const SourceBatch&, const PredictBatchOutput&)>& use) {
  model.eval();
  NoGradGuard no_grad;
  data.start_epoch(0, o.batch, false);
  SourceBatch b;
  while (data.next(&b)) {
    if (b.x.size(0) == 0) continue;
    MemoryScope scope(MemoryTag::temporary);
    PredictBatchOutput r;
    if (!o.segment) {
      r.out = contiguous(model(b.x));
    } else {
      r.out = model(b.x);
      const bool masks = b.y.defined() && b.y.dim() == 3;
      if (masks) train::check_segmentation_output(r.out, b.y, o.who);
      else check_segment_scores(r.out, b.x, o.who);
      KILN_CHECK(r.out.size(1) == o.num_classes, o.who, " gives ", r.out.size(1), " classes, the weights ",
                 o.num_classes);
      if (masks && counts) {
        if (!counts->defined()) *counts = zeros({o.num_classes, o.num_classes}, DType::i64, r.out.device());
        confusion_matrix_add_(*counts, r.out, b.y, train::kSegmentIgnoreIndex);
      }
      r.cls = argmax(r.out, 1);
    }
    use(b, r);
  }
}

}  // namespace kiln
