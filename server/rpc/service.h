// The gRPC face of the coordinator: unpacks requests, calls the domain, converts Status once.
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>

#include "server/experiment_service.h"
#include "server/telemetry_hub.h"
#include "shared/sweep.h"
#include "shoal/v1/shoal.grpc.pb.h"

namespace shoal {

grpc::Status ToGrpc(const Status& s);

class ShoalService final : public v1::Shoal::Service {
 public:
  using NodeInfoFn = std::function<v1::NodeInfoResponse()>;
  ShoalService(ExperimentService* coord, TelemetryHub* hub, NodeInfoFn node_info)
      : coord_(coord), hub_(hub), node_info_(std::move(node_info)) {}

  grpc::Status Submit(grpc::ServerContext*, const v1::SubmitRequest*, v1::SubmitResponse*) override;
  grpc::Status Get(grpc::ServerContext*, const v1::GetRequest*, v1::Experiment*) override;
  grpc::Status List(grpc::ServerContext*, const v1::ListRequest*, v1::ListResponse*) override;
  grpc::Status Cancel(grpc::ServerContext*, const v1::CancelRequest*, v1::Experiment*) override;
  grpc::Status Watch(grpc::ServerContext*, const v1::WatchRequest*,
                     grpc::ServerWriter<v1::WatchEvent>*) override;
  grpc::Status SubmitSweep(grpc::ServerContext*, const v1::SubmitSweepRequest*,
                           v1::SubmitResponse*) override;
  grpc::Status GetSweep(grpc::ServerContext*, const v1::GetRequest*, v1::SweepReport*) override;
  grpc::Status ListSweeps(grpc::ServerContext*, const v1::ListRequest*,
                          v1::ListSweepsResponse*) override;
  grpc::Status CancelSweep(grpc::ServerContext*, const v1::CancelRequest*, v1::Sweep*) override;
  grpc::Status NodeInfo(grpc::ServerContext*, const v1::NodeInfoRequest*,
                        v1::NodeInfoResponse*) override;

 private:
  ExperimentService* coord_;
  TelemetryHub* hub_;
  NodeInfoFn node_info_;
};

}  // namespace shoal
