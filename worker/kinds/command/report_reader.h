// What a command's ranks say they did: one JSON object per line on the pipe named by
// SHOAL_REPORT_FD ({"step": 12, "samples": 64, "loss": 0.53, "forward_ms": 3.1}, every field
// optional; phases data_ms, forward_ms, backward_ms, optimizer_ms), written into
// the rank's scoreboard slot as a built-in trainer would write it. A line that is not such an
// object, or is longer than 64 KiB, is counted and ignored, never trusted.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "shared/ipc/layout.h"
#include "shared/report/text.h"

namespace shoal {

// One rank's reports into its slot (no I/O: the reader feeds it bytes).
class RankReports {
 public:
  explicit RankReports(WorkerSlot* slot) : slot_(slot) {}
  void Feed(const char* data, size_t n);
  uint64_t ignored() const { return ignored_; }
  static constexpr size_t kMaxLine = 64 * 1024;

 private:
  bool Apply(const std::string& line);  // false: not a report
  // A loss on the curve: every `stride_`-th, the stride doubling (every other point dropped) each
  // time the curve fills, since a program's step count is not known ahead.
  void AddToCurve(float loss);
  WorkerSlot* slot_;
  uint64_t first_ns_ = 0, stride_ = 1, since_ = 0;
  std::string partial_;
  bool skipping_ = false;  // inside a line already past kMaxLine
  bool first_ = true;
  uint64_t ignored_ = 0;
};

// One rank's stdout and stderr into the leader's stderr (shoald's log of the run), each line
// prefixed "[rank N] " as torchrun prefixes "[default0]:", so `shoal logs ID --worker N` can
// pick a rank's lines out.
class RankOutput {
 public:
  explicit RankOutput(uint32_t rank) : prefix_(text::WorkerLinePrefix(rank)) {}
  void Feed(const char* data, size_t n);
  void Flush();  // a last line without its newline

 private:
  std::string prefix_, partial_;
};

// A thread reading every rank's pipes until each has closed (the rank and its children are gone).
class ReportReader {
 public:
  ReportReader() = default;
  ~ReportReader();
  // Takes `fd` (the read end of rank `slot`'s report pipe); call before Start.
  void Add(int fd, WorkerSlot* slot);
  // Takes `fd` (the read end of rank `rank`'s stdout and stderr); call before Start.
  void AddOutput(int fd, uint32_t rank);
  void Start();
  // Waits for every pipe to close, at most `grace_ms` (a rank's orphaned child may hold its end);
  // returns the lines ignored.
  uint64_t Finish(uint32_t grace_ms = 2000);

 private:
  void Run();
  std::vector<int> fds_;
  std::vector<RankReports> ranks_;
  std::vector<int> output_fds_;
  std::vector<RankOutput> outputs_;
  std::thread thread_;
  std::atomic<uint64_t> deadline_ns_{0};  // 0: none yet
  std::atomic<uint64_t> ignored_{0};
};

}  // namespace shoal
