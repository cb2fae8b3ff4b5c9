// command: each worker runs a program the user named (`-- python3 train.py ...`), launched as
// torchrun launches ranks (RANK, WORLD_SIZE, MASTER_ADDR/PORT in its environment), measured like
// every other kind's processes; its steps and losses come from the lines it writes to
// SHOAL_REPORT_FD, when it writes any (docs/kinds/command.md).
#include <algorithm>
#include <set>

#include "shared/kinds/command/figures.h"
#include "shared/kinds/kind.h"
#include "shared/spec/nodes.h"
#include "shared/spec/spec_fields.h"

namespace shoal {
namespace {

constexpr size_t kMaxArgs = 256, kMaxArgBytes = 4096, kMaxEnv = 64;

// What the launcher sets for every rank, and what would change what runs or what is measured.
bool ReservedName(const std::string& name) {
  static const std::set<std::string> launcher = {
      "RANK",        "LOCAL_RANK",           "NODE_RANK",
      "WORLD_SIZE",  "LOCAL_WORLD_SIZE",     "MASTER_ADDR",
      "MASTER_PORT", "CUDA_VISIBLE_DEVICES", "SHOAL_REPORT_FD"};
  return launcher.count(name) > 0 || name.rfind("LD_", 0) == 0 || name.rfind("SHOAL_", 0) == 0;
}

Status ValidateEnv(const v1::ExperimentSpec& s) {
  if (size_t(s.command().env_size()) > kMaxEnv)
    return InvalidArgument("env: " + std::to_string(s.command().env_size()) +
                           " variables; at most " + std::to_string(kMaxEnv));
  std::set<std::string> seen;
  for (const std::string& kv : s.command().env()) {
    const std::string name = kv.substr(0, kv.find('='));
    if (kv.find('=') == std::string::npos || !IsEnvironmentName(name) || kv.size() > kMaxArgBytes)
      return InvalidArgument("env: '" + kv.substr(0, 80) + "' is not NAME=value");
    if (ReservedName(name))
      return InvalidArgument("env: " + name +
                             " is not yours to set (the launcher sets RANK, WORLD_SIZE, "
                             "MASTER_*, CUDA_VISIBLE_DEVICES and SHOAL_REPORT_FD; LD_* and "
                             "SHOAL_* would change what runs or what is measured)");
    if (!seen.insert(name).second) return InvalidArgument("env: " + name + " given twice");
  }
  return Status::Ok();
}

Status Validate(const v1::ExperimentSpec& s, const SpecLimits& limits) {
  RETURN_IF_ERROR(ValidateNodes(s, limits));
  if (s.command().argv().empty() || s.command().argv(0).empty())
    return InvalidArgument(
        "command: give the program each worker runs after --, as in `shoal submit --kind "
        "command --workers 2 -- python3 train.py`");
  if (size_t(s.command().argv_size()) > kMaxArgs)
    return InvalidArgument("command: " + std::to_string(s.command().argv_size()) +
                           " arguments; at most " + std::to_string(kMaxArgs));
  for (const std::string& arg : s.command().argv()) {
    if (arg.size() > kMaxArgBytes || arg.find('\0') != std::string::npos)
      return InvalidArgument("command: an argument is longer than 4096 bytes or holds a NUL");
  }
  if (s.start() != "spawn")
    return InvalidArgument(
        "start: a command is spawned (fork and forkserver copy a warm shoal-worker, which is not "
        "your program); give spawn or leave it out");
  if (s.command().has_cwd() && (s.command().cwd().empty() || s.command().cwd()[0] != '/'))
    return InvalidArgument("cwd: '" + s.command().cwd().substr(0, 80) +
                           "' is not an absolute path");
  return ValidateEnv(s);
}

void Defaults(v1::ExperimentSpec* s, const SpecLimits& limits) {
  if (!s->has_model()) s->set_model("command");
  if (!s->has_start()) s->set_start("spawn");
  NodeDefaults(s, limits);  // torchrun's --nnodes: its ranks meet across nodes
}

// What a command holds is unknown before it runs: the admission check counts the leader and a
// small worker each, and the sampler measures what it really takes.
StatusOr<ExperimentEstimate> Estimate(const v1::ExperimentSpec& s) {
  constexpr uint64_t kLeaderBytes = 64ull << 20, kWorkerBytes = 64ull << 20;
  ExperimentEstimate e;
  e.memory_bytes = kLeaderBytes + kWorkerBytes * s.workers();
  e.shm_bytes = 64ull << 10;  // the scoreboard
  return e;
}

}  // namespace

KindRules CommandRules() {
  KindRules k;
  k.name = "command";
  k.summary = "N processes of your own program, launched as torchrun launches ranks";
  k.models = {"command"};
  k.devices = {"cpu", "cuda"};
  k.runs_user_code = true;
  k.leader_without_libtorch = true;
  k.defaults = Defaults;
  k.validate = Validate;
  k.estimate = Estimate;
  // Every common field but these is about training Shoal's own models.
  k.ignores =
      CommonFieldsBut({"kind", "model", "workers", "start", "device", "cuda_devices", "name",
                       "force", "sample_interval_ms", "nodes", "node_rank", "master"});
  k.spec_lines = command::SpecLines;
  k.summarize = command::Summarize;
  k.result_lines = command::ResultLines;
  return k;
}

}  // namespace shoal
