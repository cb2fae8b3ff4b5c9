#include "client/shoal_client.h"

#include <grpcpp/grpcpp.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace shoal::cli {
namespace {

// What a reply may weigh: a 10,000-point sweep placed on Slurm, with every point's record, is
// 11.7 MB, over gRPC's default 4 MiB (bench/slurm_bookkeeping.py).
constexpr int kMaxReplyBytes = 256 << 20;

grpc::ChannelArguments Arguments(const Endpoint& e) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(kMaxReplyBytes);
  if (e.keepalive_ms > 0) {
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, e.keepalive_ms);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, e.keepalive_ms);
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);  // a quiet watch is still pinged
  }
  return args;
}

std::shared_ptr<grpc::Channel> Connect(const Endpoint& e) {
  const grpc::ChannelArguments args = Arguments(e);
  if (e.target.empty()) {
    return grpc::CreateCustomChannel("unix:" + e.socket, grpc::InsecureChannelCredentials(), args);
  }
  if (e.insecure)
    return grpc::CreateCustomChannel(e.target, grpc::InsecureChannelCredentials(), args);
  grpc::SslCredentialsOptions o;
  o.pem_root_certs = e.tls_ca;  // empty: the system's roots
  o.pem_cert_chain = e.tls_cert;
  o.pem_private_key = e.tls_key;
  return grpc::CreateCustomChannel(e.target, grpc::SslCredentials(o), args);
}

}  // namespace

ShoalClient::ShoalClient(const Endpoint& e)
    : where_(e.target.empty() ? e.socket : e.target),
      token_(e.token),
      call_timeout_s_(e.call_timeout_s),
      stub_(v1::Shoal::NewStub(Connect(e))) {}

std::unique_ptr<grpc::ClientContext> ShoalClient::Ctx() const {
  auto c = std::make_unique<grpc::ClientContext>();
  c->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(call_timeout_s_));
  if (!token_.empty()) c->AddMetadata("authorization", "Bearer " + token_);
  return c;
}

Status ShoalClient::Convert(const grpc::Status& st) const {
  switch (st.error_code()) {
    case grpc::StatusCode::OK:
      return Status::Ok();
    case grpc::StatusCode::UNAVAILABLE:
      if (st.error_message().rfind(kDaemonSaysUnavailable, 0) == 0)
        return Unavailable(st.error_message());  // shoald answered: what it needs is not there
      return Unavailable("cannot reach shoald at " + where_ +
                         " (is it running?): " + st.error_message());
    case grpc::StatusCode::INVALID_ARGUMENT:
      return InvalidArgument(st.error_message());
    case grpc::StatusCode::NOT_FOUND:
      return NotFound(st.error_message());
    case grpc::StatusCode::FAILED_PRECONDITION:
      return FailedPrecondition(st.error_message());
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return ResourceExhausted(st.error_message());
    case grpc::StatusCode::PERMISSION_DENIED:
      return PermissionDenied(st.error_message());
    case grpc::StatusCode::UNAUTHENTICATED:
      return Unauthenticated(st.error_message());
    default:
      return Internal(st.error_message());
  }
}

StatusOr<v1::NodeInfoResponse> ShoalClient::NodeInfo() {
  v1::NodeInfoResponse r;
  RETURN_IF_ERROR(Convert(stub_->NodeInfo(Ctx().get(), {}, &r)));
  return r;
}

StatusOr<std::string> ShoalClient::Submit(const v1::ExperimentSpec& spec) {
  v1::SubmitRequest req;
  *req.mutable_spec() = spec;
  v1::SubmitResponse r;
  RETURN_IF_ERROR(Convert(stub_->Submit(Ctx().get(), req, &r)));
  return r.id();
}

StatusOr<v1::StoredFile> ShoalClient::Upload(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": cannot be read (" + std::strerror(errno) + ")");
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec || !std::filesystem::is_regular_file(path)) return InvalidArgument(path + ": not a file");
  auto ctx = Ctx();
  // A large file on a slow link: 30 s, and a second more for every 16 MiB.
  ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30 + (size >> 24)));
  v1::StoredFile r;
  auto writer = stub_->Upload(ctx.get(), &r);
  v1::UploadChunk chunk;
  chunk.set_name(std::filesystem::path(path).filename().string());
  chunk.set_size(size);
  std::string buf(1 << 20, '\0');
  uint64_t sent = 0;
  do {  // the first chunk names the file even when it is empty
    in.read(buf.data(), std::streamsize(buf.size()));
    chunk.set_data(buf.data(), size_t(in.gcount()));
    sent += uint64_t(in.gcount());
    if (!writer->Write(chunk)) break;  // the daemon refused it: Finish says why
    chunk.clear_name();
    chunk.clear_size();
  } while (in && sent < size);
  writer->WritesDone();
  RETURN_IF_ERROR(Convert(writer->Finish()));
  return r;
}

StatusOr<v1::Experiment> ShoalClient::Get(const std::string& id) {
  v1::GetRequest req;
  req.set_id(id);
  v1::Experiment r;
  RETURN_IF_ERROR(Convert(stub_->Get(Ctx().get(), req, &r)));
  return r;
}

// Calls a listing method page after page until the daemon says there is no next page.
template <typename Resp, typename Item, typename Call, typename Items>
StatusOr<std::vector<Item>> ShoalClient::AllPages(v1::ListRequest req, uint32_t page_size,
                                                  Call call, Items items) {
  std::vector<Item> all;
  if (page_size > 0) req.set_page_size(page_size);
  do {
    Resp r;
    RETURN_IF_ERROR(Convert(call(Ctx().get(), req, &r)));
    all.insert(all.end(), items(r).begin(), items(r).end());
    req.set_page_token(r.next_page_token());
  } while (!req.page_token().empty());
  return all;
}

StatusOr<std::vector<v1::Experiment>> ShoalClient::List(uint32_t page_size,
                                                        const v1::ListRequest& filter) {
  return AllPages<v1::ListResponse, v1::Experiment>(
      filter, page_size,
      [this](auto* ctx, const auto& req, auto* r) { return stub_->List(ctx, req, r); },
      [](const v1::ListResponse& r) -> const auto& { return r.experiments(); });
}

StatusOr<v1::Experiment> ShoalClient::Cancel(const std::string& id) {
  v1::CancelRequest req;
  req.set_id(id);
  v1::Experiment r;
  RETURN_IF_ERROR(Convert(stub_->Cancel(Ctx().get(), req, &r)));
  return r;
}

StatusOr<std::string> ShoalClient::SubmitSweep(const v1::SweepSpec& spec) {
  v1::SubmitSweepRequest req;
  *req.mutable_spec() = spec;
  v1::SubmitResponse r;
  RETURN_IF_ERROR(Convert(stub_->SubmitSweep(Ctx().get(), req, &r)));
  return r.id();
}

StatusOr<v1::SweepReport> ShoalClient::GetSweep(const std::string& id) {
  v1::GetRequest req;
  req.set_id(id);
  v1::SweepReport r;
  RETURN_IF_ERROR(Convert(stub_->GetSweep(Ctx().get(), req, &r)));
  return r;
}

StatusOr<std::vector<v1::Sweep>> ShoalClient::ListSweeps() {
  return AllPages<v1::ListSweepsResponse, v1::Sweep>(
      {}, 0, [this](auto* ctx, const auto& req, auto* r) { return stub_->ListSweeps(ctx, req, r); },
      [](const v1::ListSweepsResponse& r) -> const auto& { return r.sweeps(); });
}

StatusOr<v1::DeleteResponse> ShoalClient::Delete(const std::string& id) {
  v1::DeleteRequest req;
  req.set_id(id);
  v1::DeleteResponse r;
  RETURN_IF_ERROR(Convert(stub_->Delete(Ctx().get(), req, &r)));
  return r;
}

StatusOr<v1::DeleteResponse> ShoalClient::Prune(const v1::PruneRequest& req) {
  v1::DeleteResponse r;
  RETURN_IF_ERROR(Convert(stub_->Prune(Ctx().get(), req, &r)));
  return r;
}

StatusOr<v1::Sweep> ShoalClient::CancelSweep(const std::string& id) {
  v1::CancelRequest req;
  req.set_id(id);
  v1::Sweep r;
  RETURN_IF_ERROR(Convert(stub_->CancelSweep(Ctx().get(), req, &r)));
  return r;
}

StatusOr<std::vector<v1::Sample>> ShoalClient::Samples(const std::string& id) {
  v1::GetRequest req;
  req.set_id(id);
  v1::SamplesResponse r;
  RETURN_IF_ERROR(Convert(stub_->GetSamples(Ctx().get(), req, &r)));
  return std::vector<v1::Sample>(r.samples().begin(), r.samples().end());
}

StatusOr<v1::LogsResponse> ShoalClient::Logs(const std::string& id, uint64_t offset) {
  v1::LogsRequest req;
  req.set_id(id);
  req.set_offset(offset);
  req.set_max_bytes(1u << 20);
  v1::LogsResponse r;
  RETURN_IF_ERROR(Convert(stub_->GetLogs(Ctx().get(), req, &r)));
  return r;
}

StatusOr<std::string> ShoalClient::Trace(const std::string& id) {
  v1::GetRequest req;
  req.set_id(id);
  v1::ReportResponse r;
  RETURN_IF_ERROR(Convert(stub_->Trace(Ctx().get(), req, &r)));
  return std::move(*r.mutable_body());
}

Status ShoalClient::Watch(const std::string& id,
                          const std::function<void(const v1::WatchEvent&)>& on_event) {
  grpc::ClientContext ctx;  // no deadline: a watch lasts as long as the experiment
  if (!token_.empty()) ctx.AddMetadata("authorization", "Bearer " + token_);
  {
    std::lock_guard<std::mutex> l(watches_mu_);
    if (watches_cancelled_) return Unavailable("the watch of " + id + " was cancelled");
    watches_.insert(&ctx);
  }
  v1::WatchRequest req;
  req.set_id(id);
  auto reader = stub_->Watch(&ctx, req);
  v1::WatchEvent ev;
  while (reader->Read(&ev)) on_event(ev);
  const grpc::Status st = reader->Finish();
  std::lock_guard<std::mutex> l(watches_mu_);
  watches_.erase(&ctx);
  return Convert(st);
}

void ShoalClient::CancelWatches() {
  std::lock_guard<std::mutex> l(watches_mu_);
  watches_cancelled_ = true;
  for (grpc::ClientContext* c : watches_) c->TryCancel();
}

}  // namespace shoal::cli
