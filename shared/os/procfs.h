// Parsers for the /proc files the sampler reads, and an interface in front of /proc so the
// sampler can be tested with a fake.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "shared/status.h"

namespace shoal {

struct SmapsRollup {
  uint64_t rss = 0, pss = 0, shared_clean = 0, shared_dirty = 0, private_clean = 0,
           private_dirty = 0, swap = 0;  // bytes
  // Pss split by kind of page (kernels since 5.x), and the resident anonymous pages the walk saw
  // (statm's resident minus shared, at the walk's instant); has_split false when absent.
  uint64_t pss_anon = 0, pss_file = 0, pss_shmem = 0, anonymous = 0;
  bool has_split = false;
  uint64_t uss() const { return private_clean + private_dirty; }
};
StatusOr<SmapsRollup> ParseSmapsRollup(std::string_view text);

struct Statm {
  uint64_t size_bytes = 0, resident_bytes = 0, shared_bytes = 0;
};
StatusOr<Statm> ParseStatm(std::string_view text, uint64_t page_size);

struct ProcStat {
  char state = '?';
  pid_t ppid = 0;
  uint64_t utime_ticks = 0, stime_ticks = 0;
  uint64_t cutime_ticks = 0, cstime_ticks = 0;  // its children's that it has reaped
  uint64_t minflt = 0;  // minor faults, all its threads': a copy-on-write break is one
  uint32_t flags = 0;   // the kernel's PF_* flags of its main thread (field 9)
  // Its main thread is in do_exit: its memory is being torn down, and its pages' other sharers
  // take its share of them.
  bool exiting() const { return (flags & 0x4) != 0; }  // PF_EXITING
  std::string comm;                                    // its command name, as the kernel keeps it
  // When it started, in clock ticks since boot (field 22): with the pid, which process this is
  // (a pid is reused once its process is reaped). Absent from a line that stops before it.
  std::optional<uint64_t> start_ticks;
};
// /proc/<pid>/stat; the command name may hold spaces and parentheses.
StatusOr<ProcStat> ParseProcStat(std::string_view text);

// A "Key:   N kB" field of /proc/<pid>/status, in bytes (e.g. VmHWM).
StatusOr<uint64_t> ParseStatusKb(std::string_view text, std::string_view key);

// The "oom_kill N" line of /proc/vmstat: how many processes the kernel's OOM killer has killed
// since boot (Linux 4.13 and later; NOT_FOUND before).
StatusOr<uint64_t> ParseVmstatOomKills(std::string_view text);
// /proc/vmstat's count, read now; nullopt where it cannot be read.
std::optional<uint64_t> ReadOomKills();

// This process's own PSS (its /proc/self/smaps_rollup), read at moments it knows to be peaks
// (a leader's: its decoded data set and the data segment both resident, then just before its
// workers start), which a sampler ticking from outside mostly misses. OwnPssPeak and OwnUssPeak:
// the highest of each read so far (apart: not always at one reading); none before the first.
void NoteOwnPss();
std::optional<uint64_t> OwnPssPeak();
std::optional<uint64_t> OwnUssPeak();

// NoteOwnPss() every `every` on a thread of its own while it lives, and once as it starts and
// ends: for a phase whose peak lasts tens of milliseconds, which reads at chosen moments miss (a
// model file leader preparing: its probe step and synthetic set rose 30-40 MiB above its chosen
// reads for less than 25 ms, bench/results/2026-11-30/model_file_trace/). Destroyed, its thread
// is joined: a process must not fork with it alive.
class OwnPssWatch {
 public:
  explicit OwnPssWatch(std::chrono::milliseconds every);
  ~OwnPssWatch();
  OwnPssWatch(const OwnPssWatch&) = delete;
  OwnPssWatch& operator=(const OwnPssWatch&) = delete;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;
};

// The ids of a process's threads (/proc/<pid>/task); none when it cannot be read.
std::vector<pid_t> ThreadsOf(pid_t pid);

// Reads /proc/<pid>/<file>. Virtual so the sampler can run on fakes in unit tests.
class ProcReader {
 public:
  virtual ~ProcReader() = default;
  virtual StatusOr<std::string> Read(pid_t pid, const char* file) = 0;
  // Its threads' ids (each one's children are in task/<tid>/children): its main thread alone
  // unless a reader knows better.
  virtual std::vector<pid_t> Threads(pid_t pid) { return {pid}; }
};

class RealProcReader : public ProcReader {
 public:
  StatusOr<std::string> Read(pid_t pid, const char* file) override;
  std::vector<pid_t> Threads(pid_t pid) override { return ThreadsOf(pid); }
};

// Reads a small file with one open/read/close (no iostreams on the sampler's hot path).
StatusOr<std::string> ReadSmallFile(const std::string& path);

}  // namespace shoal
