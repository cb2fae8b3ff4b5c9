#include "shared/spec.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>

#include "shared/idx.h"

namespace shoal {
namespace {

Status OneOf(const std::string& field, const std::string& value,
             std::initializer_list<const char*> allowed) {
  std::string list;
  for (const char* a : allowed) {
    if (value == a) return Status::Ok();
    list += (list.empty() ? "" : ", ");
    list += a;
  }
  return InvalidArgument(field + ": '" + value + "' is not one of: " + list);
}

Status InRange(const std::string& field, uint64_t v, uint64_t lo, uint64_t hi) {
  if (v >= lo && v <= hi) return Status::Ok();
  return InvalidArgument(field + ": " + std::to_string(v) + " is outside the allowed range " +
                         std::to_string(lo) + ".." + std::to_string(hi));
}

}  // namespace

void ApplyDefaults(v1::ExperimentSpec* s, const SpecLimits& limits) {
  if (s->kind().empty()) s->set_kind("hogwild");
  if (s->model().empty()) s->set_model("mnist_convnet");
  if (s->dataset().empty()) s->set_dataset("synthetic");
  if (s->workers() == 0) s->set_workers(1);
  if (s->start().empty()) s->set_start("fork");
  if (!s->has_share()) s->set_share(true);
  if (s->device().empty()) s->set_device("cpu");
  if (s->batch_size() == 0) s->set_batch_size(64);
  if (s->batches() == 0) s->set_batches(20);
  auto* o = s->mutable_optimizer();
  if (o->name().empty()) o->set_name("sgd");
  if (!o->has_lr()) o->set_lr(0.01);
  if (!o->has_momentum()) o->set_momentum(0.5);
  if (s->threads() == 0)
    s->set_threads(std::max<uint32_t>(1, limits.cores / std::max<uint32_t>(1, s->workers())));
  if (!s->has_seed()) s->set_seed(1);
  if (s->sample_interval_ms() == 0) s->set_sample_interval_ms(200);
  if (s->allocator().empty()) s->set_allocator("cache");
  if (!s->has_eval_samples()) s->set_eval_samples(1000);
  if (s->stall_timeout_ms() == 0) s->set_stall_timeout_ms(60000);
}

Status ValidateSpec(const v1::ExperimentSpec& s, const SpecLimits& limits) {
  RETURN_IF_ERROR(OneOf("kind", s.kind(), {"hogwild"}));
  RETURN_IF_ERROR(OneOf("model", s.model(), {"mnist_convnet"}));
  RETURN_IF_ERROR(InRange("workers", s.workers(), 1, limits.max_workers));
  RETURN_IF_ERROR(OneOf("start", s.start(), {"fork", "spawn", "forkserver"}));
  if (s.device() == "cuda") {
    return InvalidArgument(
        "device: 'cuda' is not available in this build of shoald (CPU only); allowed: cpu");
  }
  RETURN_IF_ERROR(OneOf("device", s.device(), {"cpu"}));
  RETURN_IF_ERROR(InRange("batch_size", s.batch_size(), 1, limits.max_batch_size));
  RETURN_IF_ERROR(InRange("batches", s.batches(), 1, limits.max_batches));
  RETURN_IF_ERROR(OneOf("optimizer.name", s.optimizer().name(), {"sgd"}));
  const double lr = s.optimizer().lr();
  if (!(std::isfinite(lr) && lr > 0 && lr <= 10)) {
    return InvalidArgument("optimizer.lr: " + std::to_string(lr) +
                           " is outside the allowed range (0, 10]");
  }
  const double m = s.optimizer().momentum();
  if (!(std::isfinite(m) && m >= 0 && m < 1)) {
    return InvalidArgument("optimizer.momentum: " + std::to_string(m) +
                           " is outside the allowed range [0, 1)");
  }
  RETURN_IF_ERROR(InRange("threads", s.threads(), 1, limits.max_threads));
  RETURN_IF_ERROR(InRange("sample_interval_ms", s.sample_interval_ms(),
                          limits.min_sample_interval_ms, limits.max_sample_interval_ms));
  RETURN_IF_ERROR(OneOf("allocator", s.allocator(), {"cache", "retain", "system"}));
  RETURN_IF_ERROR(InRange("eval_samples", s.eval_samples(), 0, limits.max_eval_samples));
  RETURN_IF_ERROR(InRange("stall_timeout_ms", s.stall_timeout_ms(), limits.min_stall_timeout_ms,
                          limits.max_stall_timeout_ms));
  if (s.name().size() > 128) return InvalidArgument("name: longer than 128 characters");
  if (s.dataset().empty())
    return InvalidArgument("dataset: empty (want a directory or 'synthetic')");
  return Status::Ok();
}

Status CheckDataset(const std::string& dataset, const std::vector<std::string>& data_roots) {
  if (dataset == "synthetic") return Status::Ok();
  if (!data_roots.empty()) {
    char buf[PATH_MAX];
    if (::realpath(dataset.c_str(), buf) == nullptr) {
      return InvalidArgument(
          "dataset: '" + dataset +
          "' is not a directory (want a directory of MNIST IDX files, or 'synthetic')");
    }
    const std::string real = buf;
    bool inside = false;
    std::string list;
    for (const auto& root : data_roots) {
      list += (list.empty() ? "" : ", ") + root;
      char rbuf[PATH_MAX];
      if (::realpath(root.c_str(), rbuf) == nullptr) continue;
      const std::string r = rbuf;
      if (real == r || real.compare(0, r.size() + 1, r + "/") == 0) inside = true;
    }
    if (!inside) {
      return InvalidArgument("dataset: '" + dataset + "' is outside the data roots (" + list + ")");
    }
  }
  return FindMnistFiles(dataset).status();
}

std::string SpecToJson(const v1::ExperimentSpec& spec) {
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(spec, &out);
  return out;
}

StatusOr<v1::ExperimentSpec> SpecFromJson(const std::string& json) {
  v1::ExperimentSpec spec;
  auto st = google::protobuf::util::JsonStringToMessage(json, &spec);
  if (!st.ok()) return InvalidArgument("spec JSON: " + std::string(st.message()));
  return spec;
}

}  // namespace shoal
