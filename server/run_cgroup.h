// A control group per run (issue 58): every process a run starts is in it, however it was
// started (by any thread, after setsid, double-forked), so it is found while it lives and ended
// with the run. cgroup v2's core files only (cgroup.procs, cgroup.kill): no controller is needed,
// so it works under a hybrid hierarchy's `unified` mount too. Where no cgroup v2 can be made
// (none mounted, not writable) the run falls back to its process group and /proc, and says so.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "shared/status.h"

namespace shoal {

// What the kernel counted of a run's memory, where its group has the memory controller.
struct RunMemory {
  // The most memory charged to the group at once (cgroup v2 memory.peak, v1
  // memory.max_usage_in_bytes): its processes' anonymous memory and page cache, a shared page
  // once; absent without the controller.
  std::optional<uint64_t> peak_bytes;
  // Processes of the group the kernel's OOM killer killed (memory.events' or memory.oom_control's
  // oom_kill); absent without the controller.
  std::optional<uint64_t> oom_kills;
};

class RunCgroups {
 public:
  virtual ~RunCgroups() = default;
  // Makes the run's group; its path (what `SHOAL_CGROUP` tells the leader), or why there is none.
  virtual StatusOr<std::string> Create(const std::string& run_id) = 0;
  // Moves `pid` (and the threads of its process) into the run's group.
  virtual Status Join(const std::string& run_id, pid_t pid) = 0;
  // The processes in the run's group now.
  virtual std::vector<pid_t> Procs(const std::string& run_id) = 0;
  // SIGKILL to every process in the group at once (cgroup.kill), or `sig` to each where not kill.
  virtual void Signal(const std::string& run_id, int sig) = 0;
  // Removes the emptied group.
  virtual void Remove(const std::string& run_id) = 0;
  // The environment a leader joins the run's groups with ("SHOAL_CGROUP=...", and
  // "SHOAL_MEMORY_CGROUP=..." where memory is a v1 hierarchy's).
  virtual std::vector<std::string> Environment(const std::string& run_id) = 0;
  virtual RunMemory Memory(const std::string& run_id) = 0;
  // The group's memory limit (v2 memory.max, v1 memory.limit_in_bytes).
  virtual Status SetMemoryLimit(const std::string& run_id, uint64_t bytes) = 0;
  // Where the memory figures come from ("cgroup v2", "cgroup v1 memory controller"), or "" when
  // no group has the memory controller.
  virtual std::string memory() const = 0;
};

// The real one, under this process's own cgroup v2 (/proc/self/cgroup's "0::" line on the
// cgroup2 mount), in `shoal-runs/KEY` made there (KEY: one daemon's, from its state folder, so
// daemons beside each other keep apart). What an earlier daemon of that key left (it was killed
// mid-run) is killed and removed. nullptr with `why` when no group can be made.
std::unique_ptr<RunCgroups> MakeRunCgroups(const std::string& key, std::string* why);

// cgroup v2 lets no group with processes hand a controller to its children ("no internal
// processes"), so a daemon in a delegated group of its own (a systemd service with Delegate=yes
// on a pure v2 host) could give its runs no memory controller. Where `group_dir` (a cgroup's
// folder) holds this process alone, moves it into the leaf `group_dir/daemon` (made), as systemd
// asks of delegated services; true when moved. A group shared with other processes is left.
bool LeaveGroupIfAlone(const std::string& group_dir);

}  // namespace shoal
