// gRPC server reflection (grpc.reflection.v1alpha), answered by shoald itself so stock tools
// (grpcurl, grpc_cli, Postman) can list and describe shoal.v1.Shoal: gRPC's reflection plugin lists
// only typed services, and shoald's is a generic one (service.h says why).
#pragma once

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

#include <string>

namespace shoal {

// The full method names this serves.
extern const char* const kReflectionMethod;  // "/grpc.reflection.v1alpha.ServerReflection/..."

// One request (serialized ServerReflectionRequest) -> its response (serialized
// ServerReflectionResponse): the services, or a file and everything it imports, from the
// descriptors compiled into shoald; an error_response (NOT_FOUND, INVALID_ARGUMENT,
// UNIMPLEMENTED) otherwise.
std::string AnswerReflection(const std::string& request);

// A stream of requests, each answered in turn, until the client closes its side.
grpc::ServerGenericBidiReactor* NewReflectionCall();

}  // namespace shoal
