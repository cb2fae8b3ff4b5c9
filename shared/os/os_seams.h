// Interfaces in front of the OS calls that start and reap processes, for shoald's core and for
// shoal-worker's leader and forkserver, so their logic can be unit-tested on fakes (tests/fakes.h)
// while the end-to-end tests use the real ones below. RealChildWaiter holds the tree's only
// waitpid(-1), RealProcessControl its only fork.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "shared/os/process.h"
#include "shared/status.h"

namespace shoal {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual uint64_t MonotonicNs() = 0;
  virtual uint64_t RealtimeNs() = 0;
};

// Starts processes (posix_spawn, argv only; or fork) and signals them.
class ProcessControl {
 public:
  virtual ~ProcessControl() = default;
  virtual StatusOr<pid_t> Spawn(const std::vector<std::string>& argv, const SpawnOptions& o) = 0;
  // A child that runs `child` and _exits with what it returns (it may also never return).
  virtual StatusOr<pid_t> Fork(const std::function<int()>& child) = 0;
  virtual void Signal(pid_t pid, int sig) = 0;
  virtual void SignalGroup(pid_t pgid, int sig) = 0;
  // True while any process of the group exists (zombies included: they are not yet reaped).
  virtual bool GroupExists(pid_t pgid) = 0;
};

// Reaps children: the one place a process of Shoal calls waitpid(-1).
class ChildWaiter {
 public:
  virtual ~ChildWaiter() = default;
  // One ended child, if any: true with its pid and wait status; false when none is waiting.
  virtual bool ReapOne(pid_t* pid, int* status) = 0;
};

// The experiment's shared memory segments in /dev/shm.
class SegmentJanitor {
 public:
  virtual ~SegmentJanitor() = default;
  virtual int Remove(const std::string& prefix) = 0;  // how many were removed
  virtual size_t Count(const std::string& prefix) = 0;
};

// The real OS.
class RealClock : public Clock {
 public:
  uint64_t MonotonicNs() override { return shoal::MonotonicNs(); }
  uint64_t RealtimeNs() override { return shoal::RealtimeNs(); }
};

class RealProcessControl : public ProcessControl {
 public:
  StatusOr<pid_t> Spawn(const std::vector<std::string>& argv, const SpawnOptions& o) override;
  StatusOr<pid_t> Fork(const std::function<int()>& child) override;
  void Signal(pid_t pid, int sig) override;
  void SignalGroup(pid_t pgid, int sig) override;
  bool GroupExists(pid_t pgid) override;
};

class RealChildWaiter : public ChildWaiter {
 public:
  bool ReapOne(pid_t* pid, int* status) override;
};

// The process's one instance of each (stateless).
ProcessControl& RealProcesses();
ChildWaiter& RealChildren();

class RealSegmentJanitor : public SegmentJanitor {
 public:
  int Remove(const std::string& prefix) override;
  size_t Count(const std::string& prefix) override;
};

}  // namespace shoal
