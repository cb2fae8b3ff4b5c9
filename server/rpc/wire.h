// Requests as bytes to typed messages and back, for the callback service's methods.
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <string>
#include <vector>

#include "server/rpc/access.h"
#include "shared/status.h"

namespace shoal {

grpc::Status ToGrpc(const Status& s);

// A call's message as bytes, and back (the generic service sees ByteBuffers).
inline std::string ToBytes(const grpc::ByteBuffer& buf) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!buf.Dump(&slices).ok()) return out;
  for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}
inline grpc::ByteBuffer FromBytes(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

// A unary method: who calls, the request's bytes in, the response's bytes out.
using UnaryFn = std::function<grpc::Status(const Caller& caller, const std::string& request,
                                           std::string* response)>;

// The request, without the fields this daemon does not know (they would be stored with it). Bytes
// that are not a valid message of the method are INVALID_ARGUMENT.
template <typename Req>
grpc::Status ParseRequest(const std::string& bytes, Req* req) {
  if (!req->ParseFromString(bytes)) {
    return {grpc::StatusCode::INVALID_ARGUMENT,
            "the request is not a valid " + req->GetTypeName() + " message"};
  }
  req->DiscardUnknownFields();
  return grpc::Status::OK;
}

// A unary method from a typed function of the domain.
template <typename Req, typename Resp>
UnaryFn Typed(std::function<StatusOr<Resp>(const Caller&, const Req&)> fn) {
  return [fn = std::move(fn)](const Caller& caller, const std::string& in, std::string* out) {
    Req req;
    if (grpc::Status st = ParseRequest(in, &req); !st.ok()) return st;
    StatusOr<Resp> resp = fn(caller, req);
    if (!resp.ok()) return ToGrpc(resp.status());
    *out = resp->SerializeAsString();
    return grpc::Status::OK;
  };
}

}  // namespace shoal
