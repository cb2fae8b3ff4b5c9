// What the rpc layer needs of the daemon's core: the interface server/rpc talks to (the
// Coordinator implements it; tests can put a fake behind the rpc layer).
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "shared/status.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal {

class ExperimentService {
 public:
  virtual ~ExperimentService() = default;
  virtual StatusOr<std::string> Submit(v1::ExperimentSpec spec) = 0;
  virtual StatusOr<v1::Experiment> Get(const std::string& id) = 0;
  virtual StatusOr<std::vector<v1::Experiment>> List() = 0;
  virtual StatusOr<v1::Experiment> Cancel(const std::string& id) = 0;
  virtual StatusOr<std::string> SubmitSweep(const v1::SweepSpec& spec) = 0;
  virtual StatusOr<v1::SweepReport> GetSweep(const std::string& id) = 0;
  virtual StatusOr<std::vector<v1::Sweep>> ListSweeps() = 0;
  virtual StatusOr<v1::Sweep> CancelSweep(const std::string& id) = 0;
  virtual pid_t fork_server_pid() const = 0;
  virtual int fork_server_restarts() const = 0;
};

}  // namespace shoal
