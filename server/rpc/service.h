// The gRPC face of the coordinator, on gRPC's callback API: no thread is held per call or per
// watcher. Requests arrive as bytes and are parsed here, so a request that is not a valid message
// of its method is INVALID_ARGUMENT (the typed API would answer INTERNAL); unknown fields are
// dropped and ids and strings checked (shared/spec/wire_check.h) before the domain sees them;
// domain Status is converted to gRPC once, in ToGrpc.
#pragma once

#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <functional>
#include <map>
#include <string>

#include "server/experiment_service.h"
#include "server/rpc/wire.h"
#include "server/telemetry_hub.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal {

class ShoalService final : public grpc::CallbackGenericService {
 public:
  using NodeInfoFn = std::function<v1::NodeInfoResponse()>;
  using Unary = UnaryFn;
  // Who is calling: the caller, or PERMISSION_DENIED / UNAUTHENTICATED (the call ends with it).
  using IdentifyFn = std::function<StatusOr<Caller>(grpc::GenericCallbackServerContext*)>;

  ShoalService(ExperimentService* coord, TelemetryHub* hub, NodeInfoFn node_info,
               IdentifyFn identify, int max_watchers = 1024);

  grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* ctx) override;

 private:
  void AddUnaryMethods();
  void AddExperimentMethods();
  void AddSweepMethods();
  void AddRecordMethods();
  void Add(const std::string& name, Unary fn);
  // OK when the caller may cancel or delete the experiment or sweep `id` (its submitter, or an
  // admin); PERMISSION_DENIED naming who submitted it otherwise.
  Status MayChange(const Caller& caller, const std::string& id);
  grpc::ServerGenericBidiReactor* NewWatch();
  // At most kMaxUploads at once: each holds a descriptor and a partial file until it ends.
  grpc::ServerGenericBidiReactor* NewUpload();
  static constexpr int kMaxUploads = 8;

  ExperimentService* coord_;
  TelemetryHub* hub_;
  NodeInfoFn node_info_;
  IdentifyFn identify_;
  const int max_watchers_;
  std::atomic<int> watchers_{0};
  std::atomic<int> uploads_{0};
  std::map<std::string, Unary> unary_;  // by full method name, "/shoal.v1.Shoal/Get"
};

}  // namespace shoal
