#include "server/rpc/service.h"

#include <mutex>

#include "server/rpc/reflection.h"
#include "shared/spec/sweep.h"
#include "shared/spec/wire_check.h"
#include "spdlog/spdlog.h"

namespace shoal {
namespace {

constexpr size_t kMaxErrorBytes = 1024;  // a message is never an echo of a huge request
const std::string kPrefix = "/shoal.v1.Shoal/";

grpc::Status Invalid(const std::string& message) {
  return {grpc::StatusCode::INVALID_ARGUMENT, message};
}

// Ends at once with `status`.
class FailedCall : public grpc::ServerGenericBidiReactor {
 public:
  explicit FailedCall(const grpc::Status& status) { Finish(status); }
  void OnDone() override { delete this; }
};

// One request message, one response message.
class UnaryCall : public grpc::ServerGenericBidiReactor {
 public:
  UnaryCall(const ShoalService::Unary* fn, Caller caller) : fn_(fn), caller_(std::move(caller)) {
    StartRead(&in_);
  }
  void OnReadDone(bool ok) override {
    if (!ok) return Finish(Invalid("no request message"));
    std::string resp;
    grpc::Status st = (*fn_)(caller_, ToBytes(in_), &resp);
    if (!st.ok()) return Finish(st);
    out_ = FromBytes(resp);
    StartWriteAndFinish(&out_, grpc::WriteOptions(), grpc::Status::OK);
  }
  void OnDone() override { delete this; }

 private:
  const ShoalService::Unary* fn_;
  const Caller caller_;
  grpc::ByteBuffer in_, out_;
};

// Watch: the experiment's state first, then whatever the hub publishes for it, until it ends or
// the client goes. Writes are driven by the subscription's notifications: no thread waits.
class WatchCall : public grpc::ServerGenericBidiReactor {
 public:
  WatchCall(ExperimentService* coord, TelemetryHub* hub, std::atomic<int>* count)
      : coord_(coord), hub_(hub), count_(count) {
    StartRead(&in_);
  }
  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override {
    if (sub_) sub_->SetNotify(nullptr);  // no notification runs after this returns
    count_->fetch_sub(1);
    delete this;
  }

 private:
  void Pump();
  void FinishOnce(const grpc::Status& st) {  // mu_ held
    if (finished_) return;
    finished_ = true;
    Finish(st);
  }

  ExperimentService* coord_;
  TelemetryHub* hub_;
  std::atomic<int>* count_;
  grpc::ByteBuffer in_, out_;
  std::shared_ptr<Subscription> sub_;
  std::mutex mu_;
  v1::WatchEvent first_;
  bool first_sent_ = false, ended_ = false, writing_ = false, finished_ = false, cancelled_ = false;
};

void WatchCall::OnReadDone(bool ok) {
  v1::WatchRequest req;
  grpc::Status st = ok ? ParseRequest(ToBytes(in_), &req) : Invalid("no request message");
  if (st.ok()) st = ToGrpc(CheckId(req.id(), "x"));
  // An unknown id is answered before subscribing: no hub entry is left for it.
  if (st.ok()) st = ToGrpc(coord_->Get(req.id()).status());
  if (!st.ok()) {
    std::lock_guard<std::mutex> l(mu_);  // OnCancel may finish concurrently: finish once
    return FinishOnce(st);
  }
  // Subscribe, then read the state: an experiment that ends in between still closes us.
  sub_ = hub_->Subscribe(req.id());
  auto e = coord_->Get(req.id());
  if (!e.ok()) {
    hub_->Unsubscribe(req.id(), sub_);  // deleted meanwhile; other watchers are not ours to end
    std::lock_guard<std::mutex> l(mu_);
    return FinishOnce(ToGrpc(e.status()));
  }
  // Ended: its runner may not have published the last event yet, so only this watcher ends here
  // (closing them all would end the others' streams before they see the final state).
  if (IsTerminal(e->state())) hub_->Unsubscribe(req.id(), sub_);
  {
    std::lock_guard<std::mutex> l(mu_);
    first_.set_experiment_id(e->id());
    first_.set_state(e->state());
    ended_ = IsTerminal(e->state());
  }
  sub_->SetNotify([this] { Pump(); });
  Pump();
}

void WatchCall::Pump() {
  std::lock_guard<std::mutex> l(mu_);
  if (writing_ || finished_) return;
  v1::WatchEvent ev;
  if (!first_sent_) {
    ev = first_;
    first_sent_ = true;
  } else if (ended_ || cancelled_ || sub_->Finished()) {
    return FinishOnce(cancelled_ ? grpc::Status::CANCELLED : grpc::Status::OK);  // ended
  } else if (sub_->TryNext(&ev)) {
    ev.set_dropped(sub_->dropped());
  } else {
    return;  // the next notification brings more
  }
  out_ = FromBytes(ev.SerializeAsString());
  writing_ = true;
  StartWrite(&out_);
}

void WatchCall::OnWriteDone(bool ok) {
  {
    std::lock_guard<std::mutex> l(mu_);
    writing_ = false;
    if (!ok) return FinishOnce(grpc::Status::OK);  // the client is gone
  }
  Pump();
}

void WatchCall::OnCancel() {
  std::lock_guard<std::mutex> l(mu_);
  cancelled_ = true;
  if (!writing_) FinishOnce(grpc::Status::CANCELLED);  // else OnWriteDone finishes
}

// Upload: chunks in, one StoredFile out. The file is written as the chunks arrive; a call that
// fails or is cancelled drops its BlobUpload, which removes what was written.
class UploadCall : public grpc::ServerGenericBidiReactor {
 public:
  UploadCall(ExperimentService* coord, std::atomic<int>* count) : coord_(coord), count_(count) {
    StartRead(&in_);
  }
  void OnReadDone(bool ok) override {
    if (!ok) return Commit();  // the client has sent its last chunk
    v1::UploadChunk chunk;
    grpc::Status st = ParseRequest(ToBytes(in_), &chunk);
    if (st.ok() && upload_ == nullptr) {
      auto begun = coord_->BeginUpload(chunk.name(), chunk.size());
      if (begun.ok()) upload_ = std::move(begun).value();
      st = ToGrpc(begun.status());
    }
    if (st.ok()) st = ToGrpc(upload_->Append(chunk.data()));
    if (!st.ok()) {
      upload_.reset();
      return Finish(st);
    }
    StartRead(&in_);
  }
  void OnDone() override {
    upload_.reset();  // an upload cut short: its partial file goes before the slot is freed
    count_->fetch_sub(1);
    delete this;
  }

 private:
  void Commit() {
    if (upload_ == nullptr) return Finish(Invalid("upload: no chunk arrived"));
    StatusOr<v1::StoredFile> f = upload_->Commit();
    upload_.reset();
    if (!f.ok()) return Finish(ToGrpc(f.status()));
    out_ = FromBytes(f->SerializeAsString());
    StartWriteAndFinish(&out_, grpc::WriteOptions(), grpc::Status::OK);
  }

  ExperimentService* coord_;
  std::atomic<int>* count_;
  std::unique_ptr<BlobUpload> upload_;
  grpc::ByteBuffer in_, out_;
};

}  // namespace

grpc::Status ToGrpc(const Status& s) {
  std::string m = s.message();
  if (m.size() > kMaxErrorBytes) m = m.substr(0, kMaxErrorBytes) + "...";
  switch (s.code()) {
    case Code::kOk:
      return grpc::Status::OK;
    case Code::kInvalidArgument:
      return {grpc::StatusCode::INVALID_ARGUMENT, m};
    case Code::kNotFound:
      return {grpc::StatusCode::NOT_FOUND, m};
    case Code::kFailedPrecondition:
      return {grpc::StatusCode::FAILED_PRECONDITION, m};
    case Code::kResourceExhausted:
      return {grpc::StatusCode::RESOURCE_EXHAUSTED, m};
    case Code::kUnavailable:
      // Said by shoald, which is up (what it needs is not, Slurm's tools): a client tells this
      // from a shoald it cannot reach by the prefix.
      return {grpc::StatusCode::UNAVAILABLE, std::string(kDaemonSaysUnavailable) + m};
    case Code::kDataLoss:
      return {grpc::StatusCode::DATA_LOSS, m};
    case Code::kPermissionDenied:
      return {grpc::StatusCode::PERMISSION_DENIED, m};
    case Code::kUnauthenticated:
      return {grpc::StatusCode::UNAUTHENTICATED, m};
    case Code::kInternal:
      break;
  }
  spdlog::error("internal error: {}", m);
  return {grpc::StatusCode::INTERNAL, m};
}

ShoalService::ShoalService(ExperimentService* coord, TelemetryHub* hub, NodeInfoFn node_info,
                           IdentifyFn identify, int max_watchers)
    : coord_(coord),
      hub_(hub),
      node_info_(std::move(node_info)),
      identify_(std::move(identify)),
      max_watchers_(max_watchers) {
  AddUnaryMethods();
}

grpc::ServerGenericBidiReactor* ShoalService::CreateReactor(
    grpc::GenericCallbackServerContext* ctx) {
  const std::string& method = ctx->method();
  StatusOr<Caller> caller = identify_(ctx);
  if (!caller.ok()) {
    spdlog::warn("refused {} from {}: {}", QuoteShort(method), QuoteShort(ctx->peer()),
                 caller.status().message());
    return new FailedCall(ToGrpc(caller.status()));
  }
  if (method == kPrefix + "Watch") return NewWatch();
  if (method == kPrefix + "Upload") return NewUpload();
  if (method == kReflectionMethod) return NewReflectionCall();
  auto it = unary_.find(method);
  if (it == unary_.end())
    return new FailedCall({grpc::StatusCode::UNIMPLEMENTED, "no method " + QuoteShort(method)});
  return new UnaryCall(&it->second, std::move(caller).value());
}

grpc::ServerGenericBidiReactor* ShoalService::NewUpload() {
  if (uploads_.fetch_add(1) >= kMaxUploads) {
    uploads_.fetch_sub(1);
    return new FailedCall({grpc::StatusCode::RESOURCE_EXHAUSTED,
                           "upload: " + std::to_string(kMaxUploads) +
                               " uploads are in progress; try again when one has ended"});
  }
  return new UploadCall(coord_, &uploads_);
}

grpc::ServerGenericBidiReactor* ShoalService::NewWatch() {
  if (watchers_.fetch_add(1) >= max_watchers_) {
    watchers_.fetch_sub(1);
    return new FailedCall(
        {grpc::StatusCode::RESOURCE_EXHAUSTED,
         "too many watchers (" + std::to_string(max_watchers_) + ", shoald --max-watchers)"});
  }
  return new WatchCall(coord_, hub_, &watchers_);
}

}  // namespace shoal
