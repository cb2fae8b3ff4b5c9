#include "client/uploads.h"

#include <cstdio>
#include <filesystem>
#include <map>

#include "shared/spec.h"

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

}  // namespace

// With a model file, a --dataset that is a file here is a tensor file to upload (a directory of
// IDX files is the daemon's path, and the daemon refuses it for a model file).
static bool IsLocalFile(const std::string& value) {
  std::error_code ec;
  return value != "synthetic" && !IsSha256Ref(value) && std::filesystem::is_regular_file(value, ec);
}

Status UploadModelFiles(ShoalClient& c, v1::ExperimentSpec* spec) {
  if (!spec->has_model_file()) return Status::Ok();
  std::map<std::string, std::string> done;
  RETURN_IF_ERROR(Resolve(c, "model_file", spec->mutable_model_file(), &done));
  if (IsLocalFile(spec->dataset()))
    RETURN_IF_ERROR(Resolve(c, "dataset", spec->mutable_dataset(), &done));
  return Status::Ok();
}

Status UploadModelFiles(ShoalClient& c, v1::SweepSpec* sweep) {
  std::map<std::string, std::string> done;
  v1::ExperimentSpec* base = sweep->mutable_base();
  bool model_files = base->has_model_file();
  if (base->has_model_file())
    RETURN_IF_ERROR(Resolve(c, "model_file", base->mutable_model_file(), &done));
  for (auto& axis : *sweep->mutable_axes()) {
    if (axis.field() != "model_file") continue;
    model_files = true;
    for (auto& v : *axis.mutable_values()) RETURN_IF_ERROR(Resolve(c, "model_file", &v, &done));
  }
  if (!model_files) return Status::Ok();
  if (IsLocalFile(base->dataset()))
    RETURN_IF_ERROR(Resolve(c, "dataset", base->mutable_dataset(), &done));
  for (auto& axis : *sweep->mutable_axes()) {
    if (axis.field() != "dataset") continue;
    for (auto& v : *axis.mutable_values())
      if (IsLocalFile(v)) RETURN_IF_ERROR(Resolve(c, "dataset", &v, &done));
  }
  return Status::Ok();
}

}  // namespace shoal::cli
