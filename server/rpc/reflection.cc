#include "server/rpc/reflection.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/descriptor.pb.h>

#include <set>
#include <vector>

#include "grpc/reflection/v1alpha/reflection.pb.h"
#include "server/rpc/wire.h"

namespace shoal {

const char* const kReflectionMethod =
    "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo";

namespace {

namespace refl = grpc::reflection::v1alpha;
using google::protobuf::DescriptorPool;
using google::protobuf::FileDescriptor;

// What reflection lists: the services whose descriptors shoald carries. (grpc.health.v1 is served
// but gRPC builds it without protobuf descriptors, so it cannot be described.)
const char* const kServices[] = {"shoal.v1.Shoal", "grpc.reflection.v1alpha.ServerReflection"};

// `file` and what it imports, transitively, imports first, each once.
void AddFile(const FileDescriptor* file, std::set<const FileDescriptor*>* seen,
             refl::FileDescriptorResponse* out) {
  if (!seen->insert(file).second) return;
  for (int i = 0; i < file->dependency_count(); ++i) AddFile(file->dependency(i), seen, out);
  google::protobuf::FileDescriptorProto proto;
  file->CopyTo(&proto);
  proto.SerializeToString(out->add_file_descriptor_proto());
}

void Error(refl::ServerReflectionResponse* resp, grpc::StatusCode code, const std::string& m) {
  resp->mutable_error_response()->set_error_code(int(code));
  resp->mutable_error_response()->set_error_message(m);
}

void AnswerFile(const FileDescriptor* file, const std::string& what,
                refl::ServerReflectionResponse* resp) {
  if (file == nullptr) return Error(resp, grpc::StatusCode::NOT_FOUND, what + " is not known");
  std::set<const FileDescriptor*> seen;
  AddFile(file, &seen, resp->mutable_file_descriptor_response());
}

}  // namespace

std::string AnswerReflection(const std::string& request) {
  refl::ServerReflectionRequest req;
  refl::ServerReflectionResponse resp;
  if (!req.ParseFromString(request)) {
    Error(&resp, grpc::StatusCode::INVALID_ARGUMENT, "not a ServerReflectionRequest");
    return resp.SerializeAsString();
  }
  resp.set_valid_host(req.host());
  *resp.mutable_original_request() = req;
  const DescriptorPool* pool = DescriptorPool::generated_pool();
  switch (req.message_request_case()) {
    case refl::ServerReflectionRequest::kListServices:
      for (const char* name : kServices)
        resp.mutable_list_services_response()->add_service()->set_name(name);
      break;
    case refl::ServerReflectionRequest::kFileByFilename:
      AnswerFile(pool->FindFileByName(req.file_by_filename()),
                 "file '" + req.file_by_filename() + "'", &resp);
      break;
    case refl::ServerReflectionRequest::kFileContainingSymbol:
      AnswerFile(pool->FindFileContainingSymbol(req.file_containing_symbol()),
                 "symbol '" + req.file_containing_symbol() + "'", &resp);
      break;
    case refl::ServerReflectionRequest::kFileContainingExtension:
    case refl::ServerReflectionRequest::kAllExtensionNumbersOfType:
      Error(&resp, grpc::StatusCode::NOT_FOUND, "shoald's messages have no extensions");
      break;
    default:
      Error(&resp, grpc::StatusCode::INVALID_ARGUMENT, "an empty ServerReflectionRequest");
  }
  return resp.SerializeAsString();
}

namespace {

// Reads a request, writes its answer, reads the next: one operation in flight at a time.
class ReflectionCall : public grpc::ServerGenericBidiReactor {
 public:
  ReflectionCall() { StartRead(&in_); }
  void OnReadDone(bool ok) override {
    if (!ok) return Finish(grpc::Status::OK);  // the client closed its side
    out_ = FromBytes(AnswerReflection(ToBytes(in_)));
    StartWrite(&out_);
  }
  void OnWriteDone(bool ok) override {
    if (!ok) return Finish(grpc::Status::CANCELLED);
    StartRead(&in_);
  }
  void OnDone() override { delete this; }

 private:
  grpc::ByteBuffer in_, out_;
};

}  // namespace

grpc::ServerGenericBidiReactor* NewReflectionCall() { return new ReflectionCall(); }

}  // namespace shoal
