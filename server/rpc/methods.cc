// The unary methods of shoal.v1.Shoal: each checks what the domain cannot (ids, strings, page
// arguments), then calls it.
#include <optional>

#include "client/report/html.h"
#include "client/report/trace.h"
#include "server/rpc/access.h"
#include "server/rpc/service.h"
#include "shared/kinds/kind.h"
#include "shared/spec/spec.h"
#include "shared/spec/spec_fields.h"
#include "shared/spec/sweep.h"
#include "shared/spec/wire_check.h"

namespace shoal {
namespace {

StatusOr<PageRequest> PageOf(const v1::ListRequest& req) {
  constexpr uint32_t kDefault = 100, kMax = 1000;
  PageRequest page{kDefault, req.page_token()};
  if (req.has_page_size()) {
    if (req.page_size() == 0 || req.page_size() > kMax) {
      return InvalidArgument("page_size: " + std::to_string(req.page_size()) +
                             " is outside the allowed range 1.." + std::to_string(kMax));
    }
    page.size = req.page_size();
  }
  RETURN_IF_ERROR(CheckText("page_token", page.token, kMaxWordBytes));
  return page;
}

StatusOr<ExperimentFilter> FilterOf(const Caller& caller, const v1::ListRequest& req) {
  ExperimentFilter f;
  if (req.has_state()) {
    if (!v1::ExperimentState_IsValid(req.state()) || req.state() == v1::STATE_UNSPECIFIED)
      return InvalidArgument("state: " + std::to_string(int(req.state())) + " is not a state");
    f.state = req.state();
  }
  if (req.has_kind()) {
    RETURN_IF_ERROR(CheckText("kind", req.kind(), kMaxWordBytes));
    // A filter no record can match is a typo, not an empty answer.
    RETURN_IF_ERROR(OneOf("kind", req.kind(), KindNames()));
    f.kind = req.kind();
  }
  if (req.has_submitter()) {
    RETURN_IF_ERROR(CheckText("submitter", req.submitter(), kMaxNameBytes));
    RETURN_IF_ERROR(CheckCallerName("submitter", req.submitter()));
    f.submitter = req.submitter();
  }
  if (req.mine()) {
    if (f.submitter && *f.submitter != caller.name)
      return InvalidArgument("mine, submitter: give one of them");
    f.submitter = caller.name;
  }
  return f;
}

bool HasFilter(const v1::ListRequest& req) {
  return req.has_state() || req.has_kind() || req.has_submitter() || req.has_mine();
}

// Every kind a sweep may run: its base's and its kind axis's values.
std::vector<std::string> SweepKinds(const v1::SweepSpec& spec) {
  std::vector<std::string> kinds = {spec.base().kind()};
  for (const auto& a : spec.axes())
    if (a.field() == "kind") kinds.insert(kinds.end(), a.values().begin(), a.values().end());
  return kinds;
}

}  // namespace

Status ShoalService::MayChange(const Caller& caller, const std::string& id) {
  if (!id.empty() && id[0] == 's') {
    ASSIGN_OR_RETURN(v1::SweepReport sw, coord_->GetSweep(id));
    return MayModify(caller, sw.sweep().submitter(), "sweep " + id);
  }
  ASSIGN_OR_RETURN(v1::Experiment e, coord_->Get(id));
  return MayModify(caller, e.submitter(), "experiment " + id);
}

void ShoalService::Add(const std::string& name, Unary fn) {
  unary_["/shoal.v1.Shoal/" + name] = std::move(fn);
}

void ShoalService::AddUnaryMethods() {
  AddExperimentMethods();
  AddSweepMethods();
  AddRecordMethods();
}

void ShoalService::AddExperimentMethods() {
  using namespace v1;
  Add("Submit",
      Typed<SubmitRequest, SubmitResponse>(
          [this](const Caller& caller, const SubmitRequest& req) -> StatusOr<SubmitResponse> {
            SubmitRequest r = req;
            RETURN_IF_ERROR(SetSpecFieldTexts(r.mutable_spec(), r.fields()));
            RETURN_IF_ERROR(CheckSpecStrings(r.spec()));
            RETURN_IF_ERROR(MayRunKinds(caller, coord_->AllowsCommands(), {r.spec().kind()}));
            v1::ExperimentSpec spec = r.spec();
            ClearDaemonSetFields(&spec);
            ASSIGN_OR_RETURN(std::string id, coord_->Submit(std::move(spec), caller.name));
            SubmitResponse resp;
            resp.set_id(id);
            return resp;
          }));
  Add("Get", Typed<GetRequest, Experiment>(
                 [this](const Caller&, const GetRequest& r) -> StatusOr<Experiment> {
                   RETURN_IF_ERROR(CheckId(r.id(), "x"));
                   return coord_->Get(r.id());
                 }));
  Add("Cancel", Typed<CancelRequest, Experiment>(
                    [this](const Caller& caller, const CancelRequest& r) -> StatusOr<Experiment> {
                      RETURN_IF_ERROR(CheckId(r.id(), "x"));
                      RETURN_IF_ERROR(MayChange(caller, r.id()));
                      return coord_->Cancel(r.id());
                    }));
  Add("GetSamples", Typed<GetRequest, SamplesResponse>(
                        [this](const Caller&, const GetRequest& r) -> StatusOr<SamplesResponse> {
                          RETURN_IF_ERROR(CheckId(r.id(), "x"));
                          ASSIGN_OR_RETURN(auto all, coord_->Samples(r.id()));
                          SamplesResponse resp;
                          for (auto& s : all) *resp.add_samples() = std::move(s);
                          return resp;
                        }));
  Add("GetLogs", Typed<LogsRequest, LogsResponse>(
                     [this](const Caller&, const LogsRequest& r) -> StatusOr<LogsResponse> {
                       RETURN_IF_ERROR(CheckId(r.id(), "x"));
                       return coord_->Logs(r);
                     }));
  Add("List", Typed<ListRequest, ListResponse>(
                  [this](const Caller& caller, const ListRequest& r) -> StatusOr<ListResponse> {
                    ASSIGN_OR_RETURN(PageRequest page, PageOf(r));
                    ASSIGN_OR_RETURN(ExperimentFilter filter, FilterOf(caller, r));
                    ASSIGN_OR_RETURN(Page<Experiment> got, coord_->List(page, filter));
                    ListResponse resp;
                    for (auto& e : got.items) *resp.add_experiments() = std::move(e);
                    resp.set_next_page_token(got.next);
                    return resp;
                  }));
}

void ShoalService::AddSweepMethods() {
  using namespace v1;
  Add("SubmitSweep",
      Typed<SubmitSweepRequest, SubmitResponse>(
          [this](const Caller& caller, const SubmitSweepRequest& req) -> StatusOr<SubmitResponse> {
            SubmitSweepRequest r = req;
            RETURN_IF_ERROR(SetSpecFieldTexts(r.mutable_spec()->mutable_base(), r.spec().fields()));
            r.mutable_spec()->clear_fields();
            RETURN_IF_ERROR(CheckSweepStrings(r.spec()));
            RETURN_IF_ERROR(MayRunKinds(caller, coord_->AllowsCommands(), SweepKinds(r.spec())));
            v1::SweepSpec spec = r.spec();
            ClearDaemonSetFields(spec.mutable_base());
            ASSIGN_OR_RETURN(std::string id, coord_->SubmitSweep(spec, caller.name));
            SubmitResponse resp;
            resp.set_id(id);
            return resp;
          }));
  Add("GetSweep", Typed<GetRequest, SweepReport>(
                      [this](const Caller&, const GetRequest& r) -> StatusOr<SweepReport> {
                        RETURN_IF_ERROR(CheckId(r.id(), "s"));
                        return coord_->GetSweep(r.id());
                      }));
  Add("CancelSweep", Typed<CancelRequest, Sweep>(
                         [this](const Caller& caller, const CancelRequest& r) -> StatusOr<Sweep> {
                           RETURN_IF_ERROR(CheckId(r.id(), "s"));
                           RETURN_IF_ERROR(MayChange(caller, r.id()));
                           return coord_->CancelSweep(r.id());
                         }));
  Add("ListSweeps",
      Typed<ListRequest, ListSweepsResponse>(
          [this](const Caller&, const ListRequest& r) -> StatusOr<ListSweepsResponse> {
            if (HasFilter(r))
              return InvalidArgument(
                  "state, kind, submitter, mine: filter experiments (List) only");
            ASSIGN_OR_RETURN(PageRequest page, PageOf(r));
            ASSIGN_OR_RETURN(Page<Sweep> got, coord_->ListSweeps(page));
            ListSweepsResponse resp;
            for (auto& s : got.items) *resp.add_sweeps() = std::move(s);
            resp.set_next_page_token(got.next);
            return resp;
          }));
}

// Deleting records and what the node has.
void ShoalService::AddRecordMethods() {
  using namespace v1;
  Add("Delete",
      Typed<DeleteRequest, DeleteResponse>(
          [this](const Caller& caller, const DeleteRequest& r) -> StatusOr<DeleteResponse> {
            RETURN_IF_ERROR(CheckId(r.id(), "xs"));
            RETURN_IF_ERROR(MayChange(caller, r.id()));
            return coord_->Delete(r.id());
          }));
  Add("Prune",
      Typed<PruneRequest, DeleteResponse>(
          [this](const Caller& caller, const PruneRequest& r) -> StatusOr<DeleteResponse> {
            // Prune deletes whoever's records are old enough: admins only.
            if (!caller.admin)
              return PermissionDenied("prune: only an admin (root, the daemon's user) may prune; " +
                                      caller.name + " may rm its own records");
            return coord_->Prune(r);
          }));
  Add("Report", Typed<ReportRequest, ReportResponse>(
                    [this](const Caller&, const ReportRequest& r) -> StatusOr<ReportResponse> {
                      RETURN_IF_ERROR(CheckId(r.id(), "s"));
                      ASSIGN_OR_RETURN(SweepReport got, coord_->GetSweep(r.id()));
                      // Only the HTML page shows the node: the other formats skip reading it
                      // (NVML, /proc, /dev/shm).
                      std::optional<v1::NodeInfoResponse> node;
                      if (r.format() == "html") node = node_info_();
                      ASSIGN_OR_RETURN(std::string body,
                                       RenderReport(ReportInputOf(got), r.format(), r.plot(),
                                                    node ? &*node : nullptr));
                      ReportResponse resp;
                      resp.set_body(std::move(body));
                      return resp;
                    }));
  Add("Trace",
      Typed<GetRequest, ReportResponse>(
          [this](const Caller&, const GetRequest& r) -> StatusOr<ReportResponse> {
            RETURN_IF_ERROR(CheckId(r.id(), "x"));
            ASSIGN_OR_RETURN(Experiment e, coord_->Get(r.id()));
            if (!IsTerminal(e.state()))
              return FailedPrecondition("experiment " + r.id() + " is " +
                                        ExperimentState_Name(e.state()) +
                                        ": its trace is whole once it has ended");
            ASSIGN_OR_RETURN(auto samples, coord_->Samples(r.id()));
            ASSIGN_OR_RETURN(auto events, coord_->Events(r.id()));
            ReportResponse resp;
            // Bytes that are not UTF-8 (a program's words in an event) are replaced, never thrown
            // on.
            resp.set_body(RenderTrace(e, samples, events)
                              .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
                          "\n");
            return resp;
          }));
  Add("NodeInfo", Typed<NodeInfoRequest, NodeInfoResponse>(
                      [this](const Caller&, const NodeInfoRequest&) -> StatusOr<NodeInfoResponse> {
                        return node_info_();
                      }));
}

}  // namespace shoal
