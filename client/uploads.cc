#include "client/uploads.h"

#include <cstdio>
#include <map>

#include "shared/spec.h"

namespace shoal::cli {
namespace {

// Each path once, however many times the command names it.
Status Resolve(ShoalClient& c, std::string* value, std::map<std::string, std::string>* done) {
  if (IsSha256Ref(*value)) return Status::Ok();
  auto it = done->find(*value);
  if (it == done->end()) {
    StatusOr<v1::StoredFile> f = c.Upload(*value);
    if (!f.ok()) return Status(f.status().code(), "model_file: " + f.status().message());
    std::fprintf(stderr, "uploaded %s (%.1f MiB) as %s\n", value->c_str(),
                 double(f->size_bytes()) / double(1 << 20), f->ref().c_str());
    it = done->emplace(*value, f->ref()).first;
  }
  *value = it->second;
  return Status::Ok();
}

}  // namespace

Status UploadModelFiles(ShoalClient& c, v1::ExperimentSpec* spec) {
  if (!spec->has_model_file()) return Status::Ok();
  std::map<std::string, std::string> done;
  return Resolve(c, spec->mutable_model_file(), &done);
}

Status UploadModelFiles(ShoalClient& c, v1::SweepSpec* sweep) {
  std::map<std::string, std::string> done;
  if (sweep->base().has_model_file())
    RETURN_IF_ERROR(Resolve(c, sweep->mutable_base()->mutable_model_file(), &done));
  for (auto& axis : *sweep->mutable_axes()) {
    if (axis.field() != "model_file") continue;
    for (auto& v : *axis.mutable_values()) RETURN_IF_ERROR(Resolve(c, &v, &done));
  }
  return Status::Ok();
}

}  // namespace shoal::cli
