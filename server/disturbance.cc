#include "server/disturbance.h"

#include <dirent.h>

#include <algorithm>
#include <cstdio>
#include <sstream>

namespace shoal {
namespace {

class RealProcs : public MachineProcs {
 public:
  std::optional<uint64_t> BusyTicks() override {
    auto text = ReadSmallFile("/proc/stat");
    if (!text.ok()) return std::nullopt;
    return ParseBusyTicks(*text);
  }
  std::vector<pid_t> Pids() override {
    std::vector<pid_t> out;
    DIR* d = ::opendir("/proc");
    if (d == nullptr) return out;
    while (const dirent* e = ::readdir(d)) {
      char* end = nullptr;
      const long pid = std::strtol(e->d_name, &end, 10);
      if (end != e->d_name && *end == '\0' && pid > 0) out.push_back(pid_t(pid));
    }
    ::closedir(d);
    return out;
  }
  std::optional<ProcStat> Stat(pid_t pid) override {
    auto text = reader_.Read(pid, "stat");
    if (!text.ok()) return std::nullopt;  // gone since the listing
    auto s = ParseProcStat(*text);
    if (!s.ok()) return std::nullopt;
    return *s;
  }

 private:
  RealProcReader reader_;
};

uint64_t Total(const ProcStat& s) {
  return s.utime_ticks + s.stime_ticks + s.cutime_ticks + s.cstime_ticks;
}

// `root` and every process descending from it.
std::set<pid_t> Tree(const std::map<pid_t, ProcStat>& procs, pid_t root) {
  std::map<pid_t, std::vector<pid_t>> children;
  for (const auto& [pid, s] : procs) children[s.ppid].push_back(pid);
  std::set<pid_t> out;
  std::vector<pid_t> todo = {root};
  while (!todo.empty()) {
    const pid_t p = todo.back();
    todo.pop_back();
    if (!out.insert(p).second) continue;
    for (pid_t c : children[p]) todo.push_back(c);
  }
  return out;
}

uint64_t TreeTicks(const CpuSnapshot& s, pid_t root) {
  uint64_t sum = 0;
  for (pid_t p : Tree(s.procs, root))
    if (auto it = s.procs.find(p); it != s.procs.end()) sum += Total(it->second);
  return sum;
}

std::vector<std::string> TopOutside(const CpuSnapshot& a, const CpuSnapshot& b, pid_t daemon,
                                    double ticks_per_window) {
  const std::set<pid_t> ours = Tree(b.procs, daemon);
  std::vector<std::pair<double, std::string>> used;
  for (const auto& [pid, s] : b.procs) {
    if (ours.count(pid)) continue;
    auto before = a.procs.find(pid);
    const bool same = before != a.procs.end() && before->second.comm == s.comm;
    const uint64_t own = s.utime_ticks + s.stime_ticks;
    const uint64_t was = same ? before->second.utime_ticks + before->second.stime_ticks : 0;
    const double cores = double(own - std::min(own, was)) / ticks_per_window;
    if (cores >= 0.01) used.push_back({cores, s.comm + " (pid " + std::to_string(pid) + ")"});
  }
  std::sort(used.begin(), used.end(),
            [](const auto& x, const auto& y) { return x.first > y.first; });
  std::vector<std::string> out;
  for (size_t i = 0; i < used.size() && i < 3; ++i) {
    char buf[32];
    std::snprintf(buf, sizeof buf, " %.2f", used[i].first);
    out.push_back(used[i].second + buf);
  }
  return out;
}

}  // namespace

std::unique_ptr<MachineProcs> RealMachineProcs() { return std::make_unique<RealProcs>(); }

std::optional<uint64_t> ParseBusyTicks(const std::string& proc_stat) {
  std::istringstream in(proc_stat);
  std::string label;
  uint64_t user = 0, nice = 0, system = 0;
  if (!(in >> label >> user >> nice >> system) || label != "cpu") return std::nullopt;
  return user + nice + system;
}

std::set<pid_t> ProcessTree(const CpuSnapshot& s, pid_t root) { return Tree(s.procs, root); }

CpuSnapshot TakeCpuSnapshot(MachineProcs& m, uint64_t mono_ns) {
  CpuSnapshot s;
  s.mono_ns = mono_ns;
  s.busy = m.BusyTicks();
  for (pid_t p : m.Pids())
    if (auto st = m.Stat(p)) s.procs[p] = std::move(*st);
  return s;
}

std::optional<OutsideCpu> OutsideOf(const CpuSnapshot& a, const CpuSnapshot& b, pid_t daemon,
                                    uint64_t ticks_per_sec) {
  if (!a.busy || !b.busy || b.mono_ns <= a.mono_ns || ticks_per_sec == 0) return std::nullopt;
  const double seconds = double(b.mono_ns - a.mono_ns) / 1e9;
  const double ticks_per_window = double(ticks_per_sec) * seconds;
  const int64_t busy = int64_t(*b.busy) - int64_t(*a.busy);
  const int64_t ours = int64_t(TreeTicks(b, daemon)) - int64_t(TreeTicks(a, daemon));
  OutsideCpu out;
  // Tick accounting of the machine and of processes differ by a tick or so: never below 0.
  out.cores = double(std::max<int64_t>(0, busy - ours)) / ticks_per_window;
  out.top = TopOutside(a, b, daemon, ticks_per_window);
  return out;
}

void FillDisturbance(const std::optional<OutsideCpu>& cpu, const std::set<pid_t>& foreign_gpu,
                     double threshold_cores, v1::Result* r) {
  std::string why;
  if (cpu) {
    r->set_outside_cpu_cores(cpu->cores);
    if (cpu->cores >= threshold_cores) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "processes outside the experiment used %.2f cores",
                    cpu->cores);
      why = buf;
      for (size_t i = 0; i < cpu->top.size(); ++i) why += (i == 0 ? ": " : ", ") + cpu->top[i];
    }
  }
  if (!foreign_gpu.empty()) {
    std::string pids;
    for (pid_t p : foreign_gpu) pids += (pids.empty() ? "" : ", ") + std::to_string(p);
    why += (why.empty() ? "" : "; ") + std::to_string(foreign_gpu.size()) +
           " other GPU process(es) on its devices (pid " + pids + ")";
  }
  if (!cpu && foreign_gpu.empty()) return;  // unknown: absent
  r->set_disturbed(!why.empty());
  r->set_disturbance(why);
}

}  // namespace shoal
