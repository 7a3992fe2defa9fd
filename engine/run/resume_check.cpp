// Differences between a saved training configuration and the resuming run (see resume_check.h).
#include "engine/run/resume_check.h"

#include <filesystem>

#include "engine/core/error.h"

namespace kiln {

namespace {

// Data paths compare as the files they name (a relative and an absolute spelling agree).
std::string canonical_path(const std::string& p) {
  if (p.empty()) return p;
  std::error_code ec;
  std::filesystem::path c = std::filesystem::weakly_canonical(p, ec);
  return ec ? p : c.string();
}

std::string show(const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

}  // namespace

std::vector<std::string> resume_differences(const nlohmann::json& saved, const RunConfig& now) {
  std::vector<std::string> out;
  if (!saved.is_object()) return out;
  const nlohmann::json cur = now.to_json();
  auto compare = [&](const nlohmann::json& a, const nlohmann::json& b, const std::string& name) {
    if (!a.is_null() && a != b) out.push_back(str_cat(name, ": saved ", show(a), ", now ", show(b)));
  };
  // The global batch decides an epoch's batches: --batch x ranks. A state saved by 2 ranks at --batch 8
  // resumes in one process at --batch 16 (or 4 ranks at --batch 4) on the same batches.
  auto compare_batch = [&] {
    const nlohmann::json saved_batch = saved.value("batch", nlohmann::json());
    if (!saved_batch.is_number_integer()) {
      compare(saved_batch, cur.value("batch", nlohmann::json()), "batch");
      return;
    }
    const nlohmann::json sr = saved.value("ranks", nlohmann::json());
    const int64_t saved_ranks = sr.is_number_integer() ? sr.get<int64_t>() : 1;
    if (saved_batch.get<int64_t>() * saved_ranks == now.batch * now.ranks) return;
    auto per = [](int64_t ranks) { return ranks > 1 ? str_cat(" x ", ranks, " ranks") : std::string(); };
    out.push_back(str_cat("batch: saved ", saved_batch.get<int64_t>(), per(saved_ranks), ", now ", now.batch,
                          per(now.ranks)));
  };
  for (const char* key : {"task", "loss", "optimizer", "lr", "momentum", "weight_decay", "schedule", "warmup", "clip",
                          "class_weights", "batch", "batch_memory", "accum", "drop_last", "limit", "seed"}) {
    if (std::string(key) == "batch") {
      compare_batch();
      continue;
    }
    // value(): a key absent now (loss outside --task segment) reads as null; const operator[] on a missing key is
    // undefined behaviour (an assertion in a Debug build).
    compare(saved.value(key, nlohmann::json()), cur.value(key, nlohmann::json()), key);
  }
  // --amp f16 <-> --amp bf16: the loss-scaled f16 training and the unscaled bf16 one are different runs (on or
  // off is not compared: see the header).
  const nlohmann::json saved_amp = saved.value("amp", nlohmann::json());
  if (saved_amp.is_boolean() && saved_amp.get<bool>() && now.amp) {
    const nlohmann::json sd = saved.value("amp_dtype", nlohmann::json("f16"));
    const std::string saved_dtype = sd.is_string() ? sd.get<std::string>() : sd.dump();
    if (saved_dtype != dtype_name(now.amp_dtype))
      out.push_back(str_cat("amp: saved --amp ", saved_dtype, ", now --amp ", dtype_name(now.amp_dtype)));
  }
  if (saved.contains("data") && saved["data"].is_string() &&
      canonical_path(saved["data"].get<std::string>()) != canonical_path(now.data))
    out.push_back(str_cat("data: saved ", saved["data"].get<std::string>(), ", now ", now.data));
  // The cosine schedule's LR at every step depends on the run's length.
  if (now.schedule == "cosine") compare(saved.value("epochs", nlohmann::json()), cur.value("epochs", nlohmann::json()), "epochs (cosine schedule)");
  if (saved.contains("image") && saved["image"].is_object()) {
    for (const char* key : {"image_size", "resize", "crop", "augment", "normalize", "balance", "channels"})
      compare(saved["image"].value(key, nlohmann::json()), cur.value("image", nlohmann::json::object()).value(key, nlohmann::json()), key);
  }
  return out;
}

bool optimizer_state_compatible(const nlohmann::json& saved, const RunConfig& now) {
  if (!saved.is_object()) return true;
  if (saved.value("optimizer", now.optimizer) != now.optimizer) return false;
  if (now.optimizer == "sgd") {
    const double m = saved.value("momentum", now.momentum);
    return (m > 0) == (now.momentum > 0);
  }
  return true;
}

}  // namespace kiln
