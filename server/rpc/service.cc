#include "server/rpc/service.h"

#include "spdlog/spdlog.h"

namespace shoal {

grpc::Status ToGrpc(const Status& s) {
  switch (s.code()) {
    case Code::kOk:
      return grpc::Status::OK;
    case Code::kInvalidArgument:
      return {grpc::StatusCode::INVALID_ARGUMENT, s.message()};
    case Code::kNotFound:
      return {grpc::StatusCode::NOT_FOUND, s.message()};
    case Code::kFailedPrecondition:
      return {grpc::StatusCode::FAILED_PRECONDITION, s.message()};
    case Code::kResourceExhausted:
      return {grpc::StatusCode::RESOURCE_EXHAUSTED, s.message()};
    case Code::kUnavailable:
      return {grpc::StatusCode::UNAVAILABLE, s.message()};
    case Code::kDataLoss:
      return {grpc::StatusCode::DATA_LOSS, s.message()};
    case Code::kInternal:
      break;
  }
  spdlog::error("internal error: {}", s.message());
  return {grpc::StatusCode::INTERNAL, s.message()};
}

grpc::Status ShoalService::Submit(grpc::ServerContext*, const v1::SubmitRequest* req,
                                  v1::SubmitResponse* resp) {
  auto id = coord_->Submit(req->spec());
  if (!id.ok()) return ToGrpc(id.status());
  resp->set_id(*id);
  return grpc::Status::OK;
}

grpc::Status ShoalService::Get(grpc::ServerContext*, const v1::GetRequest* req,
                               v1::Experiment* resp) {
  auto e = coord_->Get(req->id());
  if (!e.ok()) return ToGrpc(e.status());
  *resp = std::move(e).value();
  return grpc::Status::OK;
}

grpc::Status ShoalService::List(grpc::ServerContext*, const v1::ListRequest*,
                                v1::ListResponse* resp) {
  auto all = coord_->List();
  if (!all.ok()) return ToGrpc(all.status());
  for (auto& e : *all) *resp->add_experiments() = std::move(e);
  return grpc::Status::OK;
}

grpc::Status ShoalService::Cancel(grpc::ServerContext*, const v1::CancelRequest* req,
                                  v1::Experiment* resp) {
  auto e = coord_->Cancel(req->id());
  if (!e.ok()) return ToGrpc(e.status());
  *resp = std::move(e).value();
  return grpc::Status::OK;
}

grpc::Status ShoalService::Watch(grpc::ServerContext* ctx, const v1::WatchRequest* req,
                                 grpc::ServerWriter<v1::WatchEvent>* writer) {
  // Subscribe before reading the state: an experiment that ends in between still closes us.
  auto sub = hub_->Subscribe(req->id());
  auto e = coord_->Get(req->id());
  if (!e.ok() || IsTerminal(e->state())) hub_->Close(req->id());  // nothing will close it later
  if (!e.ok()) return ToGrpc(e.status());
  v1::WatchEvent first;
  first.set_experiment_id(e->id());
  first.set_state(e->state());
  if (!writer->Write(first)) return grpc::Status::OK;
  if (IsTerminal(e->state())) return grpc::Status::OK;
  while (!ctx->IsCancelled()) {
    v1::WatchEvent ev;
    if (sub->Next(&ev, std::chrono::milliseconds(250))) {
      ev.set_dropped(sub->dropped());
      if (!writer->Write(ev)) break;
    } else if (sub->Finished()) {
      break;
    }
  }
  return grpc::Status::OK;
}

grpc::Status ShoalService::NodeInfo(grpc::ServerContext*, const v1::NodeInfoRequest*,
                                    v1::NodeInfoResponse* resp) {
  *resp = node_info_();
  return grpc::Status::OK;
}

grpc::Status ShoalService::SubmitSweep(grpc::ServerContext*, const v1::SubmitSweepRequest* req,
                                       v1::SubmitResponse* resp) {
  auto id = coord_->SubmitSweep(req->spec());
  if (!id.ok()) return ToGrpc(id.status());
  resp->set_id(*id);
  return grpc::Status::OK;
}

grpc::Status ShoalService::GetSweep(grpc::ServerContext*, const v1::GetRequest* req,
                                    v1::SweepReport* resp) {
  auto r = coord_->GetSweep(req->id());
  if (!r.ok()) return ToGrpc(r.status());
  *resp = std::move(r).value();
  return grpc::Status::OK;
}

grpc::Status ShoalService::ListSweeps(grpc::ServerContext*, const v1::ListRequest*,
                                      v1::ListSweepsResponse* resp) {
  auto all = coord_->ListSweeps();
  if (!all.ok()) return ToGrpc(all.status());
  for (auto& s : *all) *resp->add_sweeps() = std::move(s);
  return grpc::Status::OK;
}

grpc::Status ShoalService::CancelSweep(grpc::ServerContext*, const v1::CancelRequest* req,
                                       v1::Sweep* resp) {
  auto s = coord_->CancelSweep(req->id());
  if (!s.ok()) return ToGrpc(s.status());
  *resp = std::move(s).value();
  return grpc::Status::OK;
}

}  // namespace shoal
