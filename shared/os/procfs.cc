#include "shared/os/procfs.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>

namespace shoal {
namespace {

// Value in kB of a "Key:   123 kB" line starting at `pos`.
bool ParseKbAfter(std::string_view text, size_t pos, uint64_t* out) {
  while (pos < text.size() && (text[pos] == ' ' || text[pos] == '\t')) ++pos;
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(text.data() + pos, text.data() + text.size(), v);
  if (ec != std::errc()) return false;
  (void)p;
  *out = v * 1024;
  return true;
}

// Where the value of the line "<key><sep>..." starts in `text`; npos when no line starts so.
size_t ValueOfLine(std::string_view text, std::string_view key, char sep) {
  for (size_t pos = 0; pos < text.size();) {
    if (text.compare(pos, key.size(), key) == 0 && pos + key.size() < text.size() &&
        text[pos + key.size()] == sep)
      return pos + key.size() + 1;
    pos = text.find('\n', pos);
    if (pos == std::string_view::npos) break;
    ++pos;
  }
  return std::string_view::npos;
}

}  // namespace

StatusOr<SmapsRollup> ParseSmapsRollup(std::string_view text) {
  SmapsRollup r;
  struct Field {
    std::string_view key;
    uint64_t* dst;
  } fields[] = {{"Rss:", &r.rss},
                {"Pss:", &r.pss},
                {"Shared_Clean:", &r.shared_clean},
                {"Shared_Dirty:", &r.shared_dirty},
                {"Private_Clean:", &r.private_clean},
                {"Private_Dirty:", &r.private_dirty},
                {"Swap:", &r.swap},
                {"Pss_Anon:", &r.pss_anon},
                {"Pss_File:", &r.pss_file},
                {"Pss_Shmem:", &r.pss_shmem},
                {"Anonymous:", &r.anonymous}};
  int found = 0, split = 0;
  size_t line = 0;
  while (line < text.size()) {
    size_t end = text.find('\n', line);
    if (end == std::string_view::npos) end = text.size();
    std::string_view l = text.substr(line, end - line);
    for (auto& f : fields) {
      if (l.substr(0, f.key.size()) == f.key) {
        if (!ParseKbAfter(l, f.key.size(), f.dst)) {
          return DataLoss("smaps_rollup: bad value in line '" + std::string(l) + "'");
        }
        const bool splits = f.key.substr(0, 4) == "Pss_" || f.key == "Anonymous:";
        ++(splits ? split : found);
      }
    }
    line = end + 1;
  }
  if (found < 6) return DataLoss("smaps_rollup: missing Rss/Pss/Shared/Private fields");
  r.has_split = split == 4;
  return r;
}

StatusOr<Statm> ParseStatm(std::string_view text, uint64_t page_size) {
  uint64_t v[3];
  const char* p = text.data();
  const char* end = text.data() + text.size();
  for (uint64_t& x : v) {
    while (p < end && *p == ' ') ++p;
    auto [q, ec] = std::from_chars(p, end, x);
    if (ec != std::errc()) return DataLoss("statm: cannot parse '" + std::string(text) + "'");
    p = q;
  }
  return Statm{v[0] * page_size, v[1] * page_size, v[2] * page_size};
}

StatusOr<ProcStat> ParseProcStat(std::string_view text) {
  size_t close = text.rfind(')');
  if (close == std::string_view::npos || close + 2 >= text.size()) {
    return DataLoss("stat: no command name in '" + std::string(text.substr(0, 64)) + "'");
  }
  ProcStat s;
  s.state = text[close + 2];
  // Fields after the name, 1-based from "state" = field 3: ppid is 4, flags 9, minflt 10,
  // utime 14, stime 15.
  size_t pos = close + 2;
  int field = 3;
  const char* end = text.data() + text.size();
  while (field < 14) {
    pos = text.find(' ', pos);
    if (pos == std::string_view::npos) return DataLoss("stat: too few fields");
    ++pos;
    ++field;
    if (field == 4 && std::from_chars(text.data() + pos, end, s.ppid).ec != std::errc())
      return DataLoss("stat: bad ppid");
    if (field == 9 && std::from_chars(text.data() + pos, end, s.flags).ec != std::errc())
      return DataLoss("stat: bad flags");
    if (field == 10 && std::from_chars(text.data() + pos, end, s.minflt).ec != std::errc())
      return DataLoss("stat: bad minflt");
  }
  auto [p, ec] = std::from_chars(text.data() + pos, end, s.utime_ticks);
  if (ec != std::errc() || p >= end) return DataLoss("stat: bad utime");
  auto [p2, ec2] = std::from_chars(p + 1, end, s.stime_ticks);
  if (ec2 != std::errc()) return DataLoss("stat: bad stime");
  // cutime and cstime (16, 17): its reaped children's, which the disturbance meter counts as its.
  int64_t cu = 0, cs = 0;
  auto [p3, ec3] = std::from_chars(p2 + (p2 < end ? 1 : 0), end, cu);
  if (ec3 == std::errc()) {
    auto [p4, ec4] = std::from_chars(p3 + (p3 < end ? 1 : 0), end, cs);
    (void)p4;
    if (ec4 != std::errc()) cs = 0;
  }
  s.cutime_ticks = uint64_t(std::max<int64_t>(0, cu));
  s.cstime_ticks = uint64_t(std::max<int64_t>(0, cs));
  for (; field < 22 && pos != std::string_view::npos; ++field) {  // on from utime (14) to 22
    pos = text.find(' ', pos);
    if (pos != std::string_view::npos) ++pos;
  }
  if (uint64_t start = 0; pos != std::string_view::npos &&
                          std::from_chars(text.data() + pos, end, start).ec == std::errc())
    s.start_ticks = start;
  if (const size_t open = text.find('('); open != std::string_view::npos && open < close)
    s.comm = std::string(text.substr(open + 1, close - open - 1));
  return s;
}

StatusOr<uint64_t> ParseStatusKb(std::string_view text, std::string_view key) {
  uint64_t v = 0;
  const size_t at = ValueOfLine(text, key, ':');
  if (at != std::string_view::npos && ParseKbAfter(text, at, &v)) return v;
  return NotFound("status: no field " + std::string(key));
}

StatusOr<uint64_t> ParseVmstatOomKills(std::string_view text) {
  const size_t at = ValueOfLine(text, "oom_kill", ' ');
  uint64_t v = 0;
  if (at != std::string_view::npos) {
    auto [end, ec] = std::from_chars(text.data() + at, text.data() + text.size(), v);
    if (ec == std::errc() && end != text.data() + at) return v;
  }
  return NotFound("vmstat: no oom_kill count");
}

std::optional<uint64_t> ReadOomKills() {
  auto text = ReadSmallFile("/proc/vmstat");
  if (!text.ok()) return std::nullopt;
  auto n = ParseVmstatOomKills(*text);
  return n.ok() ? std::optional<uint64_t>(*n) : std::nullopt;
}

namespace {
std::atomic<uint64_t> own_pss_peak{0};  // 0: none read
std::atomic<uint64_t> own_uss_peak{0};

void RaiseTo(std::atomic<uint64_t>& peak, uint64_t v) {
  uint64_t seen = peak.load();
  while (v > seen && !peak.compare_exchange_weak(seen, v)) {
  }
}

std::optional<uint64_t> Known(const std::atomic<uint64_t>& peak) {
  const uint64_t v = peak.load();
  return v > 0 ? std::optional<uint64_t>(v) : std::nullopt;
}
}  // namespace

void NoteOwnPss() {
  auto text = ReadSmallFile("/proc/self/smaps_rollup");
  if (!text.ok()) return;
  auto rollup = ParseSmapsRollup(*text);
  if (!rollup.ok()) return;
  RaiseTo(own_pss_peak, rollup->pss);
  RaiseTo(own_uss_peak, rollup->uss());
}

std::optional<uint64_t> OwnPssPeak() { return Known(own_pss_peak); }
std::optional<uint64_t> OwnUssPeak() { return Known(own_uss_peak); }

OwnPssWatch::OwnPssWatch(std::chrono::milliseconds every) {
  NoteOwnPss();
  thread_ = std::thread([this, every] {
    std::unique_lock<std::mutex> lock(mu_);
    while (!cv_.wait_for(lock, every, [this] { return done_; })) NoteOwnPss();
  });
}

OwnPssWatch::~OwnPssWatch() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
  }
  cv_.notify_one();
  thread_.join();
  NoteOwnPss();
}

StatusOr<std::string> ReadSmallFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NotFound(path + ": " + std::strerror(errno));
  std::string out;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      return NotFound(path + ": " + std::strerror(e));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

std::vector<pid_t> ThreadsOf(pid_t pid) {
  std::vector<pid_t> out;
  DIR* dir = ::opendir(("/proc/" + std::to_string(pid) + "/task").c_str());
  if (dir == nullptr) return out;
  while (const dirent* e = ::readdir(dir)) {
    pid_t tid = 0;
    const char* end = e->d_name + std::strlen(e->d_name);
    if (std::from_chars(e->d_name, end, tid).ec == std::errc() && tid > 0) out.push_back(tid);
  }
  ::closedir(dir);
  return out;
}

StatusOr<std::string> RealProcReader::Read(pid_t pid, const char* file) {
  return ReadSmallFile("/proc/" + std::to_string(pid) + "/" + file);
}

}  // namespace shoal
