#include "client/uploads.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>

#include "shared/spec/input_spec.h"
#include "shared/spec/spec.h"

namespace shoal::cli {
namespace {

// Each path once, however many times the command names it.
Status Resolve(ShoalClient& c, const std::string& field, std::string* value,
               std::map<std::string, std::string>* done) {
  if (IsSha256Ref(*value)) return Status::Ok();
  auto it = done->find(*value);
  if (it == done->end()) {
    StatusOr<v1::StoredFile> f = c.Upload(*value);
    if (!f.ok()) return Status(f.status().code(), field + ": " + f.status().message());
    std::fprintf(stderr, "uploaded %s (%.1f MiB) as %s\n", value->c_str(),
                 double(f->size_bytes()) / double(1 << 20), f->ref().c_str());
    it = done->emplace(*value, f->ref()).first;
  }
  *value = it->second;
  return Status::Ok();
}

// With a model file, a --dataset that is a file here is a tensor file to upload (a directory of
// IDX files is the daemon's path, and the daemon refuses it for a model file).
bool IsLocalFile(const std::string& value) {
  std::error_code ec;
  return value != "synthetic" && !IsSha256Ref(value) && std::filesystem::is_regular_file(value, ec);
}

// What the daemon would refuse anyway, before a large file travels for nothing.
Status CheckDescription(const v1::ExperimentSpec& spec) {
  if (!spec.has_input())
    return InvalidArgument("input: required with model_file (e.g. float32[B,784])");
  return ParseInputs(spec.input()).status();
}

}  // namespace

Status UploadModelFiles(ShoalClient& c, v1::ExperimentSpec* spec) {
  if (!spec->has_model_file()) return Status::Ok();
  RETURN_IF_ERROR(CheckDescription(*spec));
  std::map<std::string, std::string> done;
  RETURN_IF_ERROR(Resolve(c, "model_file", spec->mutable_model_file(), &done));
  if (IsLocalFile(spec->dataset()))
    RETURN_IF_ERROR(Resolve(c, "dataset", spec->mutable_dataset(), &done));
  return Status::Ok();
}

Status UploadModelFiles(ShoalClient& c, v1::SweepSpec* sweep) {
  v1::ExperimentSpec* base = sweep->mutable_base();
  auto axis_of = [&](const char* field) {
    return std::any_of(sweep->axes().begin(), sweep->axes().end(),
                       [&](const v1::Axis& a) { return a.field() == field; });
  };
  if (!base->has_model_file() && !axis_of("model_file")) return Status::Ok();
  if (!base->has_input() && !axis_of("input"))
    return InvalidArgument("input: required with model_file (e.g. float32[B,784])");
  std::map<std::string, std::string> done;
  if (base->has_model_file())
    RETURN_IF_ERROR(Resolve(c, "model_file", base->mutable_model_file(), &done));
  if (IsLocalFile(base->dataset()))
    RETURN_IF_ERROR(Resolve(c, "dataset", base->mutable_dataset(), &done));
  for (auto& axis : *sweep->mutable_axes()) {
    const bool model = axis.field() == "model_file";
    if (!model && axis.field() != "dataset") continue;
    for (auto& v : *axis.mutable_values())
      if (model || IsLocalFile(v)) RETURN_IF_ERROR(Resolve(c, axis.field(), &v, &done));
  }
  return Status::Ok();
}

}  // namespace shoal::cli
