// An experiment's captured output. Its leader and workers write stdout and stderr into one pipe
// (the leader gets the write end as fds 1 and 2; spawned and forked workers inherit them, and
// the forkserver hands its workers the leader's fd 2 with the fork request); shoald drains the
// pipe into STATE/logs/ID.log up to a cap, beyond which bytes are counted, dropped, and the log
// ends saying how many. A pipe rather than the file itself, so that a runaway worker cannot fill
// the disk.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "shared/status.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal {

constexpr uint64_t kLogCapBytes = 4ull << 20;  // per experiment

class LogCapture {
 public:
  static StatusOr<std::unique_ptr<LogCapture>> Open(const std::string& path,
                                                    uint64_t cap = kLogCapBytes);
  ~LogCapture();
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  int read_fd() const { return eof_ ? -1 : read_fd_; }  // -1 once at EOF: nothing to poll
  int write_fd() const { return write_fd_; }
  // Once the leader holds the write end: ours must go, or the pipe never reads EOF.
  void CloseWriteEnd();
  // Moves what is in the pipe now into the file; false once the pipe has reached EOF.
  bool Drain();
  // Everything left, then the note of what was dropped; closes both ends.
  void Finish();
  uint64_t written() const { return written_; }
  uint64_t dropped() const { return dropped_; }

 private:
  LogCapture(int file, int read_fd, int write_fd, uint64_t cap)
      : file_(file), read_fd_(read_fd), write_fd_(write_fd), cap_(cap) {}
  void Append(const char* data, size_t n);

  int file_, read_fd_, write_fd_;
  uint64_t cap_, written_ = 0, dropped_ = 0;
  bool eof_ = false;
};

std::string LogPath(const std::string& logs_dir, const std::string& experiment_id);

// `max_bytes` from `offset` of the log at `path`; complete when `ended` and nothing follows. A
// missing file reads as empty (an experiment that never started, or a daemon without capture).
StatusOr<v1::LogsResponse> ReadLog(const std::string& path, uint64_t offset, uint32_t max_bytes,
                                   bool ended);

}  // namespace shoal
