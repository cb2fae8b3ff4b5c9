// Process creation and lifetime helpers. Processes are only ever started with argv vectors
// (posix_spawn, no shell), and every fd we open is close-on-exec.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "shared/status.h"

namespace shoal {

struct SpawnOptions {
  std::vector<std::pair<int, int>> dup_fds;       // {fd here, fd number in the child}
  bool new_process_group = false;                 // the child leads a new process group
  const std::vector<std::string>* env = nullptr;  // "NAME=value"s; nullptr: inherit ours
  bool search_path = false;  // argv[0] without a '/' is looked up on our PATH (posix_spawnp)
  const std::string* cwd = nullptr;  // the child's working directory; nullptr: ours
};

// The variables shoald passes to the processes of an experiment: what they need to run and to
// find their libraries and devices. Everything else (OMP_*, MKL_*, MALLOC_*, LD_PRELOAD, ...) of
// whoever started shoald would change what is measured, unrecorded, and is dropped.
const std::vector<std::string>& PassedEnvironmentNames();
// This process's values of those names, as "NAME=value" (only the ones set).
std::vector<std::string> CleanEnvironment();

// posix_spawn of argv[0] with argv; signals reset to default and unblocked in the child.
StatusOr<pid_t> SpawnProcess(const std::vector<std::string>& argv, const SpawnOptions& opts);

// A leader's first act: into the run's control group named by SHOAL_CGROUP (writing "0" to its
// cgroup.procs moves the writer), so that nothing it starts is outside the run's group (issue
// 58). OK when the variable is absent (no group: the run is contained by its process group).
Status JoinRunCgroup();

// Without a run's control group (SHOAL_CGROUP absent), a leader adopts what the processes it
// starts orphan (a double fork's grandchild, a worker's child once the worker is gone), as a
// child subreaper: where shoald's walks of its children find them. With one, nothing: the group
// holds them. Whether it did.
bool AdoptOrphansWithoutCgroup();
// The leader's last act where it adopted: SIGKILL to what is left of its children (strays; its
// workers are reaped by then). How many.
int EndAdoptedStrays();

// Directory of the running executable (to find sibling binaries).
std::string SelfExeDir();

// Asks the kernel to send `sig` (SIGKILL by default) when our parent dies, and exits now if it
// already has.
void DieWithParent(pid_t expected_parent, int sig = 9);

uint64_t RealtimeNs();
// Milliseconds since the epoch, as records store times (submitted_unix_ms, ...).
int64_t RealtimeMs();
uint64_t MonotonicNs();
uint64_t ThreadCpuNs();
// Nanoseconds as the milliseconds records hold.
inline double NsToMs(uint64_t ns) { return double(ns) / 1e6; }

// Writes all of `data` to `fd`, retrying short writes and EINTR; false when the reader is gone.
bool WriteAll(int fd, std::string_view data);

// "exited with code 3" / "killed by signal 9" for a waitpid status.
std::string DescribeWaitStatus(int status);

// Makes the calling process the kernel OOM killer's first choice (oom_score_adj 1000, which any
// process may raise): a worker that outgrows memory is killed, not shoald or the user's shell.
void VolunteerForOomKiller();

// Lets go of this process's resident pages of clean file mappings (shared libraries' code and
// read-only data): MADV_DONTNEED on every private, never-writable mapping of a file (never a
// device's: nothing under /dev) that holds no page copied on write (smaps "Anonymous: 0"). Their
// pages are the file's and fault back from the page cache if touched again; relocated data
// (RELRO: copied pages) and writable mappings are never touched. A fork leader has read ~80 MiB
// of LibTorch's libraries while it initialised, pages its workers never touch; it keeps none of
// them while it only supervises. Returns the bytes of the mappings advised.
uint64_t DropCleanFilePages();

// Ends this process now with `code`, stdio flushed, running no destructor and no atexit
// handler: a worker whose results are on its scoreboard slot has nothing left to tear down that
// the kernel does not, and tearing down faults back the code of LibTorch's destructors that
// DropCleanFilePages let go (16-37 MiB of file pages a worker in its last 20 ms, measured with a
// 1 ms reader), a moment that read as the run's peak PSS sum in one run and not in the next.
[[noreturn]] void EndProcessNow(int code);

// Peak RSS of this process from the kernel's high-water mark (VmHWM), in bytes.
uint64_t SelfVmHwm();
// A bytes figure of this process's /proc/self/status ("VmRSS", "VmHWM"); 0 when unreadable.
uint64_t SelfStatusBytes(std::string_view key);

}  // namespace shoal
