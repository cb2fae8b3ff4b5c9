// Fakes of the OS seams (shared/os/os_seams.h, shared/os/procfs.h) for unit tests of the daemon's
// core: no process is started, no signal sent, no clock read.
#pragma once

#include <signal.h>
#include <unistd.h>

#include <deque>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "shared/os/os_seams.h"
#include "shared/os/procfs.h"

namespace shoal::testing {

class FakeClock : public Clock {
 public:
  uint64_t mono = 1'000'000'000'000ull, real = 1'700'000'000'000'000'000ull;
  uint64_t MonotonicNs() override { return mono; }
  uint64_t RealtimeNs() override { return real; }
  void Advance(uint64_t ns) {
    mono += ns;
    real += ns;
  }
};

// Records what it was asked to do; process groups live until told otherwise.
class FakeProcessControl : public ProcessControl {
 public:
  pid_t next_pid = 1000;
  bool fail_spawn = false, fail_fork = false;
  std::vector<std::vector<std::string>> spawned;
  std::vector<SpawnOptions> spawn_options;
  std::vector<std::function<int()>> forked;          // each child's body, never run
  std::vector<std::pair<pid_t, int>> signals;        // (pid, sig)
  std::vector<std::pair<pid_t, int>> group_signals;  // (pgid, sig)
  std::set<pid_t> live_groups;

  StatusOr<pid_t> Spawn(const std::vector<std::string>& argv, const SpawnOptions& o) override {
    if (fail_spawn) return Internal("posix_spawn: no such file");
    spawned.push_back(argv);
    spawn_options.push_back(o);
    const pid_t pid = next_pid++;
    if (o.new_process_group) live_groups.insert(pid);
    return pid;
  }
  StatusOr<pid_t> Fork(const std::function<int()>& child) override {
    if (fail_fork) return Internal("fork: Cannot allocate memory");
    forked.push_back(child);
    return next_pid++;
  }
  void Signal(pid_t pid, int sig) override { signals.push_back({pid, sig}); }
  void SignalGroup(pid_t pgid, int sig) override { group_signals.push_back({pgid, sig}); }
  bool GroupExists(pid_t pgid) override { return live_groups.count(pgid) > 0; }
  int CountGroupSignals(int sig) const {
    int n = 0;
    for (const auto& [g, s] : group_signals) n += s == sig;
    return n;
  }
};

class FakeChildWaiter : public ChildWaiter {
 public:
  std::deque<std::pair<pid_t, int>> ended;
  bool ReapOne(pid_t* pid, int* status) override {
    if (ended.empty()) return false;
    *pid = ended.front().first;
    *status = ended.front().second;
    ended.pop_front();
    return true;
  }
};

class FakeSegmentJanitor : public SegmentJanitor {
 public:
  std::map<std::string, int> left;  // prefix -> segments still there
  std::vector<std::string> removed;
  int Remove(const std::string& prefix) override {
    removed.push_back(prefix);
    return std::exchange(left[prefix], 0);
  }
  size_t Count(const std::string& prefix) override { return size_t(left[prefix]); }
};

// A /proc with settable figures; each smaps_rollup read costs `walk_cost_ns` of fake CPU.
class FakeProc : public ProcReader {
 public:
  struct P {
    uint64_t rss_kb = 100000, pss_kb = 60000, uss_kb = 50000, ticks = 0;
    // statm's shared (file + shmem) resident, and the kernel's Pss split when `split`.
    uint64_t shared_kb = 40;
    bool split = false;
    uint64_t pss_anon_kb = 0, pss_file_kb = 0, pss_shmem_kb = 0;
    pid_t ppid = 1;
    uint64_t minflt = 0;     // stat's minor faults
    std::string comm = "w";  // stat's command name: another after an exec
    uint32_t flags = 0;      // stat's PF_* flags: 0x4 while it exits
  };
  std::map<pid_t, P> procs;
  std::map<pid_t, std::string> children;        // task/TID/children: "501 502"
  std::map<pid_t, std::vector<pid_t>> threads;  // its threads beside its main one

  std::vector<pid_t> Threads(pid_t pid) override {
    std::vector<pid_t> all = {pid};
    for (pid_t tid : threads[pid]) all.push_back(tid);
    return all;
  }
  std::map<pid_t, int> walks;
  uint64_t cpu_ns = 0;
  uint64_t walk_cost_ns = 1'500'000;
  uint64_t cheap_cost_ns = 0;  // each statm or stat read
  // Runs just before a walk reads a process: what changed between its statm and its walk.
  std::function<void(P&)> before_walk;
  // Runs just after a walk read it: what changed back before the next statm.
  std::function<void(P&)> after_walk;

  StatusOr<std::string> Read(pid_t pid, const char* file) override {
    auto it = procs.find(pid);
    if (it == procs.end()) return NotFound("gone");
    P& p = it->second;
    const std::string f = file;
    if (f.rfind("task/", 0) == 0) return children[std::stoi(f.substr(5))];  // the thread's
    const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
    if (f == "statm" || f == "stat") cpu_ns += cheap_cost_ns;
    if (f == "statm")
      return std::to_string(p.rss_kb * 4) + " " + std::to_string(p.rss_kb * 1024 / page) + " " +
             std::to_string(p.shared_kb * 1024 / page) + " 1 0 1 0\n";
    if (f == "stat")
      return std::to_string(pid) + " (" + p.comm + ") R " + std::to_string(p.ppid) + " 1 1 0 -1 " +
             std::to_string(p.flags) + " " + std::to_string(p.minflt) + " 0 0 0 " +
             std::to_string(p.ticks) + " 0 0 0";
    if (before_walk) before_walk(p);
    cpu_ns += walk_cost_ns;
    ++walks[pid];
    const std::string rollup = Rollup(p);
    if (after_walk) after_walk(p);
    return rollup;
  }

 private:
  static std::string Rollup(const P& p) {
    return "Rss: " + std::to_string(p.rss_kb) + " kB\nPss: " + std::to_string(p.pss_kb) +
           " kB\nShared_Clean: 0 kB\nShared_Dirty: 0 kB\nPrivate_Clean: 0 kB\nPrivate_Dirty: " +
           std::to_string(p.uss_kb) + " kB\nSwap: 0 kB\n" +
           (p.split ? "Pss_Anon: " + std::to_string(p.pss_anon_kb) +
                          " kB\nPss_File: " + std::to_string(p.pss_file_kb) +
                          " kB\nPss_Shmem: " + std::to_string(p.pss_shmem_kb) +
                          " kB\nAnonymous: " + std::to_string(p.rss_kb - p.shared_kb) + " kB\n"
                    : std::string());
  }
};

}  // namespace shoal::testing
