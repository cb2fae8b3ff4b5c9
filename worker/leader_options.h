// The leader's command line, the same for `shoal-worker --role leader` and shoal-leader (shoald
// starts either with one argv).
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "shared/spec/spec.h"
#include "worker/leader.h"

namespace shoal {

struct LeaderOptions {
  std::string experiment, spec_json, worker_bin, fork_server_socket, leader_bin;
  int status_fd = 3, parent = 0, hand_off_fd = -1;
};

inline void AddLeaderOptions(CLI::App& app, LeaderOptions* o) {
  app.add_option("--experiment", o->experiment, "experiment id");
  app.add_option("--spec-json", o->spec_json, "the experiment spec (proto3 JSON)");
  app.add_option("--status-fd", o->status_fd, "leader: fd for length-delimited status messages");
  app.add_option("--parent", o->parent, "pid of the parent; we exit when it dies");
  app.add_option("--worker-bin", o->worker_bin, "leader: shoal-worker to spawn");
  app.add_option("--forkserver-socket", o->fork_server_socket, "leader: the forkserver's socket");
  app.add_option("--leader-bin", o->leader_bin,
                 "shoal-worker's leader: shoal-leader, to exec once a model file is prepared "
                 "(shared/spec ChooseLeader hands_off)");
  app.add_option(
      "--hand-off-fd", o->hand_off_fd,
      "shoal-leader: fd of the LeaderHandOff shoal-worker's leader wrote before its exec");
}

// The spec parsed; InvalidArgument naming what is missing or wrong.
inline StatusOr<LeaderArgs> ToLeaderArgs(const LeaderOptions& o) {
  if (o.experiment.empty() || o.spec_json.empty())
    return InvalidArgument("--experiment and --spec-json are required");
  ASSIGN_OR_RETURN(v1::ExperimentSpec spec, SpecFromJson(o.spec_json));
  LeaderArgs a;
  a.spec = std::move(spec);
  a.experiment_id = o.experiment;
  a.status_fd = o.status_fd;
  a.parent = o.parent;
  a.worker_bin = o.worker_bin;
  a.fork_server_socket = o.fork_server_socket;
  a.leader_bin = o.leader_bin;
  if (o.hand_off_fd >= 0) {
    ASSIGN_OR_RETURN(a.handed_off, ReadHandOff(o.hand_off_fd));
  }
  return a;
}

}  // namespace shoal
