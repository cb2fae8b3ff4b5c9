// command: each worker is the user's program, spawned directly (never through a shell) with the
// environment torchrun gives a rank — RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT (a port free when the leader looked), CUDA_VISIBLE_DEVICES from --cuda-devices —
// plus the spec's env and SHOAL_REPORT_FD, the pipe its reports go to (report_reader.h).
#pragma once

#include <memory>

#include "worker/kind.h"
#include "worker/kinds/command/report_reader.h"

namespace shoal {

class CommandKind : public WorkerKind {
 public:
  Status Prepare(LeaderEnv& env) override;
  // Never called: the launcher starts the program itself.
  int RunWorker(WorkerEnv& env, bool forked_from_leader) override;
  StatusOr<std::unique_ptr<WorkerLauncher>> Launcher(const LaunchContext& c,
                                                     Scoreboard& board) override;
  void Finish(ipc::v1::LeaderResult* result) override;
  std::vector<std::string> SegmentWhats() const override { return {}; }

 private:
  uint16_t master_port_ = 0;
  ReportReader reports_;
};

// Rank `rank` of `world`'s environment: `inherited` (shoald's clean one, SHOAL_* dropped), the
// spec's env, then the launcher's variables.
std::vector<std::string> RankEnvironment(const v1::ExperimentSpec& spec,
                                         const std::vector<std::string>& inherited, uint32_t rank,
                                         uint16_t master_port, int report_fd);

}  // namespace shoal
