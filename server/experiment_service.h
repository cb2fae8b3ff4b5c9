// What the rpc layer needs of the daemon's core: the interface server/rpc talks to (the
// Coordinator implements it; tests can put a fake behind the rpc layer).
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "server/blob_store.h"
#include "shared/status.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal {

// One page of a listing, oldest first: `size` records after the one `token` names (empty: from
// the start).
struct PageRequest {
  uint32_t size = 100;
  std::string token;
};
// Which experiments a listing holds: every field given must match (none: all).
struct ExperimentFilter {
  std::optional<v1::ExperimentState> state;
  std::optional<std::string> kind, submitter;
  bool Matches(const v1::Experiment& e) const {
    return (!state || e.state() == *state) && (!kind || e.spec().kind() == *kind) &&
           (!submitter || e.submitter() == *submitter);
  }
};

template <typename T>
struct Page {
  std::vector<T> items;
  std::string next;  // the token of the next page; empty on the last
};

class ExperimentService {
 public:
  virtual ~ExperimentService() = default;
  // `submitter`: who asked (recorded on the experiment; see server/rpc/access.h).
  virtual StatusOr<std::string> Submit(v1::ExperimentSpec spec, const std::string& submitter) = 0;
  // Whether this daemon runs programs of its callers' (kind command; shoald --allow-commands).
  virtual bool AllowsCommands() const { return false; }
  virtual StatusOr<v1::Experiment> Get(const std::string& id) = 0;
  virtual StatusOr<Page<v1::Experiment>> List(const PageRequest& page,
                                              const ExperimentFilter& filter) = 0;
  virtual StatusOr<v1::Experiment> Cancel(const std::string& id) = 0;
  virtual StatusOr<std::string> SubmitSweep(const v1::SweepSpec& spec,
                                            const std::string& submitter) = 0;
  virtual StatusOr<v1::SweepReport> GetSweep(const std::string& id) = 0;
  virtual StatusOr<Page<v1::Sweep>> ListSweeps(const PageRequest& page) = 0;
  virtual StatusOr<v1::Sweep> CancelSweep(const std::string& id) = 0;
  // The kept samples of one experiment, oldest first (NOT_FOUND for an unknown id).
  virtual StatusOr<std::vector<v1::Sample>> Samples(const std::string& id) = 0;
  // The events of one experiment, oldest first (NOT_FOUND for an unknown id).
  virtual StatusOr<std::vector<v1::Event>> Events(const std::string& id) = 0;
  // A slice of an experiment's captured output (NOT_FOUND for an unknown id).
  virtual StatusOr<v1::LogsResponse> Logs(const v1::LogsRequest& req) = 0;
  // Deletes an ended experiment that is not a sweep's point, or an ended sweep with its points
  // (FAILED_PRECONDITION otherwise, saying what to do).
  virtual StatusOr<v1::DeleteResponse> Delete(const std::string& id) = 0;
  // Deletes ended records by age and/or count (see PruneRequest).
  virtual StatusOr<v1::DeleteResponse> Prune(const v1::PruneRequest& req) = 0;
  // An upload of a file (a model) of `size` bytes (see server/blob_store.h).
  virtual StatusOr<std::unique_ptr<BlobUpload>> BeginUpload(const std::string& name,
                                                            uint64_t size) = 0;
  virtual pid_t fork_server_pid() const = 0;
  virtual int fork_server_restarts() const = 0;
};

}  // namespace shoal
