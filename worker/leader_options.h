// The leader's command line, the same for `shoal-worker --role leader` and shoal-leader (shoald
// starts either with one argv).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "shared/spec/spec.h"
#include "worker/leader.h"

namespace shoal {

struct LeaderOptions {
  std::string experiment, spec_json, worker_bin, fork_server_socket;
  int status_fd = 3, parent = 0;
};

inline void AddLeaderOptions(CLI::App& app, LeaderOptions* o) {
  app.add_option("--experiment", o->experiment, "experiment id");
  app.add_option("--spec-json", o->spec_json, "the experiment spec (proto3 JSON)");
  app.add_option("--status-fd", o->status_fd, "leader: fd for length-delimited status messages");
  app.add_option("--parent", o->parent, "pid of the parent; we exit when it dies");
  app.add_option("--worker-bin", o->worker_bin, "leader: shoal-worker to spawn");
  app.add_option("--forkserver-socket", o->fork_server_socket, "leader: the forkserver's socket");
}

// The spec parsed; InvalidArgument naming what is missing or wrong.
inline StatusOr<LeaderArgs> ToLeaderArgs(const LeaderOptions& o) {
  if (o.experiment.empty() || o.spec_json.empty())
    return InvalidArgument("--experiment and --spec-json are required");
  ASSIGN_OR_RETURN(v1::ExperimentSpec spec, SpecFromJson(o.spec_json));
  return LeaderArgs{spec, o.experiment, o.status_fd, o.parent, o.worker_bin, o.fork_server_socket};
}

}  // namespace shoal
