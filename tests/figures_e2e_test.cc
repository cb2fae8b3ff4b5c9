// Shoal's figures against an independent reading: a reader written here, not in the project,
// walks /proc/<pid>/smaps_rollup of every process under shoald every 50 ms (multi_model and the
// model files: 5 ms)
// and keeps the peaks of the summed PSS, RSS and USS, and each process's VmHWM; Shoal's must agree
// within 2% (USS: 4%), or, where the peak is a moment, lie between what the reader saw held and
// its highest read. Where the peak is a level, the reader's is over its still reads: those during
// which no process's shared pages moved (a sum read one process after another while they map
// shared pages counts some twice; server/sampler.cc, kStillMoves, the rule Shoal follows too), or
// only one process was read.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>
#include <vector>

#include "tests/testutil.h"

namespace shoal {
namespace {

using nlohmann::json;
using testing::CommandResult;
using testing::Daemon;
using testing::TempDir;
using testing::WaitFor;

using testing::kFashion;

constexpr double kDisturbedCoresForTest = 0.5;  // server/disturbance.h's kDisturbedCores
using testing::Parse;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The state and parent of /proc/<pid>/stat (fields 3 and 4, after the parenthesised name).
bool StateAndParent(const std::string& pid, char* state, pid_t* parent) {
  const std::string stat = Slurp("/proc/" + pid + "/stat");
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return false;
  std::istringstream rest(stat.substr(close + 2));
  long ppid = 0;
  rest >> *state >> ppid;
  *parent = pid_t(ppid);
  return bool(rest);
}

struct Memory {
  uint64_t rss_kb = 0, pss_kb = 0, uss_kb = 0;
};

// One read of the run's processes: each one's role (the word after --role), pid and figures.
struct Snapshot {
  struct Process {
    pid_t pid;
    std::string role;
    Memory memory;
  };
  int64_t ms = 0;  // since the reader first found one of the run's processes
  std::vector<Process> processes;
};

Memory ReadRollup(pid_t pid) {
  std::istringstream in(Slurp("/proc/" + std::to_string(pid) + "/smaps_rollup"));
  Memory m;
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string key;
    uint64_t kb = 0;
    if (!(fields >> key >> kb)) continue;  // the header line
    if (key == "Rss:") m.rss_kb = kb;
    if (key == "Pss:") m.pss_kb = kb;
    if (key == "Private_Clean:" || key == "Private_Dirty:") m.uss_kb += kb;
  }
  return m;
}

// Every descendant of `root`, from the parents /proc gives. A process's parent is read once, when
// it is first seen (it changes only if its parent dies, and then it is no experiment's): a scan is
// then a listing of /proc, cheap enough before every read, so a worker forked a moment ago is
// read too. Scanning in full every 50 ms, the reader missed a multi_model run's fork moment (the
// leader's pages still resident beside its three new children, ~15 ms) that Shoal's RSS caught.
class ProcessTree {
 public:
  std::vector<pid_t> Descendants(pid_t root) {
    std::map<pid_t, pid_t> live;
    DIR* d = ::opendir("/proc");
    while (dirent* e = d ? ::readdir(d) : nullptr) {
      if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
      const pid_t pid = pid_t(std::stol(e->d_name));
      auto known = parent_.find(pid);
      char state = 0;
      pid_t parent = 0;
      if (known != parent_.end()) {
        live.emplace(pid, known->second);
      } else if (StateAndParent(e->d_name, &state, &parent) && state != 'Z') {
        live.emplace(pid, parent);
      }
    }
    if (d) ::closedir(d);
    parent_ = live;  // a pid that ended is forgotten: reused, it is read afresh
    std::multimap<pid_t, pid_t> children;
    for (const auto& [pid, parent] : live) children.emplace(parent, pid);
    std::vector<pid_t> out, todo{root};
    while (!todo.empty()) {
      const pid_t p = todo.back();
      todo.pop_back();
      for (auto [it, end] = children.equal_range(p); it != end; ++it) {
        out.push_back(it->second);
        todo.push_back(it->second);
      }
    }
    return out;
  }

 private:
  std::map<pid_t, pid_t> parent_;
};

// Whether `pid` is one of the experiment's: a leader or worker (a forked worker keeps its
// leader's argv), and the forkserver with its children only when the run uses them. shoald's
// other children are not: the `shoal-worker --version` it runs at start (75 MiB of PSS, which
// a small run's reader took for its peak), or a forkserver it keeps while idle and stops as a
// run that does not use it starts.
bool OfTheForkServer(const std::string& argv) {  // argv NUL-separated, as /proc gives it
  return argv.find(std::string("--role\0forkserver\0", 18)) != std::string::npos;
}

bool OfTheExperiment(const std::string& argv, bool fork_server) {
  if (OfTheForkServer(argv)) return fork_server;
  return argv.find(std::string("--role\0", 7)) != std::string::npos;
}

using SteadyTime = std::chrono::steady_clock::time_point;

// The highest level a series of reads held for 100 ms at least (every read of a stretch that
// long): a level no sampler ticking every 50 ms can miss, whatever moments above it it missed.
class HeldLevel {
 public:
  void Add(SteadyTime t, uint64_t value) {
    const auto window = std::chrono::milliseconds(100);
    recent_.push_back({t, value});
    // Keeps the reads of the last 100 ms and the one before them.
    while (recent_.size() > 2 && t - recent_[1].first >= window) recent_.pop_front();
    if (t - recent_.front().first < window) return;
    uint64_t least = UINT64_MAX;
    for (const auto& [when, v] : recent_) least = std::min(least, v);
    level_ = std::max(level_, least);
  }
  uint64_t level() const { return level_; }

 private:
  std::deque<std::pair<SteadyTime, uint64_t>> recent_;
  uint64_t level_ = 0;
};

// Sums the RSS, PSS and USS of every process under shoald (the experiment's leader and workers,
// and, in a forkserver run, the forkserver with its children), every `interval`, until stopped,
// and keeps the peak of each sum.
class IndependentReader {
 public:
  // `any_program`: every descendant of shoald is the experiment's but the forkserver's (kind
  // command's ranks and their children are no shoal-worker).
  IndependentReader(pid_t daemon, bool fork_server, std::chrono::milliseconds interval,
                    bool any_program = false)
      : daemon_(daemon),
        fork_server_(fork_server),
        any_program_(any_program),
        interval_(interval),
        thread_([this] { Loop(); }) {}
  ~IndependentReader() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  Memory peak() const { return peak_; }  // after Stop
  // The peaks of the PSS and USS sums over the reads no process's shared pages moved during.
  Memory still_peak() const { return still_; }
  // The highest of every read's sums less what moved while it read them (Bracket).
  Memory lower_peak() const { return lower_; }
  int moving_reads() const { return moving_reads_; }
  // The highest level each sum held (see HeldLevel).
  Memory sustained() const { return {held_rss_.level(), held_pss_.level(), held_uss_.level()}; }
  int reads() const { return reads_; }
  // What the reads that set the still PSS peak and the RSS peak held, process by process, and
  // when (ms since the first read that found one of the run's processes): beside Shoal's kept
  // samples, they name the process a failing sum was wrong about, or one only the reader
  // counted (after Stop).
  std::string PeakReads() const {
    auto print = [](const char* what, const Snapshot& at, uint64_t Memory::*field) {
      std::string out =
          std::string("  reader's ") + what + " at t~" + std::to_string(at.ms) + " ms:";
      for (const auto& [pid, role, m] : at.processes)
        out += " " + role + "(" + std::to_string(pid) + "):" + std::to_string(m.*field / 1024);
      return out + " (MiB)\n";
    };
    return print("still PSS peak", still_read_, &Memory::pss_kb) +
           print("RSS peak", rss_read_, &Memory::rss_kb);
  }
  // The highest PSS read of each process (after Stop).
  uint64_t PssKb(pid_t pid) const {
    auto it = pss_kb_.find(pid);
    return it == pss_kb_.end() ? 0 : it->second;
  }
  // The highest VmHWM read of each process (after Stop).
  uint64_t HwmKb(pid_t pid) const {
    auto it = hwm_kb_.find(pid);
    return it == hwm_kb_.end() ? 0 : it->second;
  }

 private:
  void Loop() {
    while (!stop_) {
      const SteadyTime now = std::chrono::steady_clock::now();
      const std::vector<pid_t> pids = Experiment();
      if (!pids.empty() && !first_read_) first_read_ = now;
      const std::map<pid_t, uint64_t> shared_before = SharedKb(pids);
      Memory sum;
      Snapshot read{
          first_read_
              ? std::chrono::duration_cast<std::chrono::milliseconds>(now - *first_read_).count()
              : 0,
          {}};
      for (pid_t pid : pids) {
        const std::string status = Slurp("/proc/" + std::to_string(pid) + "/status");
        if (const auto at = status.find("VmHWM:"); at != std::string::npos)
          hwm_kb_[pid] = std::max<uint64_t>(hwm_kb_[pid], std::stoull(status.substr(at + 6)));
        const Memory m = ReadRollup(pid);
        pss_kb_[pid] = std::max(pss_kb_[pid], m.pss_kb);
        read.processes.push_back({pid, roles_[pid], m});
        sum.rss_kb += m.rss_kb;
        sum.pss_kb += m.pss_kb;
        sum.uss_kb += m.uss_kb;
      }
      if (sum.rss_kb > peak_.rss_kb) rss_read_ = read;
      peak_.rss_kb = std::max(peak_.rss_kb, sum.rss_kb);
      peak_.pss_kb = std::max(peak_.pss_kb, sum.pss_kb);
      peak_.uss_kb = std::max(peak_.uss_kb, sum.uss_kb);
      // One process read is one instant, its pages counted once however they moved (the
      // sampler's rule too): a model file's leader, alone and reading its file as it peaks, is
      // a forked run's peak USS sum.
      const std::optional<uint64_t> moved =
          pids.size() == 1 ? 0 : Moved(shared_before, SharedKb(pids));
      if (moved && *moved * 200 <= sum.pss_kb) {  // within 0.5% of the sum: still
        if (sum.pss_kb > still_.pss_kb) still_read_ = std::move(read);
        still_.pss_kb = std::max(still_.pss_kb, sum.pss_kb);
        still_.uss_kb = std::max(still_.uss_kb, sum.uss_kb);
      } else {
        ++moving_reads_;
      }
      if (moved) Bracket(sum, *moved);
      held_rss_.Add(now, sum.rss_kb);
      held_pss_.Add(now, sum.pss_kb);
      held_uss_.Add(now, sum.uss_kb);
      ++reads_;
      std::this_thread::sleep_for(interval_);
    }
  }
  // Each process's file and shared-memory resident pages (statm's third field, a read without a
  // page-table walk); a process gone reads as none.
  static std::map<pid_t, uint64_t> SharedKb(const std::vector<pid_t>& pids) {
    std::map<pid_t, uint64_t> out;
    for (pid_t pid : pids) {
      std::istringstream statm(Slurp("/proc/" + std::to_string(pid) + "/statm"));
      uint64_t size = 0, resident = 0, shared = 0;
      if (statm >> size >> resident >> shared) out[pid] = shared * (::getpagesize() / 1024);
    }
    return out;
  }
  // How much the processes' shared pages moved while they were read one after another, all of
  // them together; unknown when a process came or went meanwhile.
  static std::optional<uint64_t> Moved(const std::map<pid_t, uint64_t>& before,
                                       const std::map<pid_t, uint64_t>& after) {
    if (before.size() != after.size()) return std::nullopt;
    uint64_t moved = 0;
    for (const auto& [pid, kb] : before) {
      auto it = after.find(pid);
      if (it == after.end()) return std::nullopt;
      moved += kb > it->second ? kb - it->second : it->second - kb;
    }
    return moved;
  }
  // A read's PSS and USS sums less what moved while it read them: a page that moved is counted
  // at most once too often, so the processes held at least that at some instant of the read.
  void Bracket(const Memory& sum, uint64_t moved) {
    auto less = [&](uint64_t kb) { return kb - std::min(kb, moved); };
    lower_.pss_kb = std::max(lower_.pss_kb, less(sum.pss_kb));
    lower_.uss_kb = std::max(lower_.uss_kb, less(sum.uss_kb));
  }
  // The word after --role in a NUL-separated argv ("-" when it has none: a command run's).
  static std::string Role(const std::string& argv) {
    const std::string flag("--role\0", 7);
    const auto at = argv.find(flag);
    if (at == std::string::npos) return "-";
    return argv.substr(at + flag.size(), argv.find('\0', at + flag.size()) - at - flag.size());
  }
  // The experiment's processes, found again before every read (see ProcessTree).
  std::vector<pid_t> Experiment() {
    std::vector<pid_t> out;
    for (pid_t pid : tree_.Descendants(daemon_)) {
      const std::string argv = Slurp("/proc/" + std::to_string(pid) + "/cmdline");
      if (OfTheExperiment(argv, fork_server_) || (any_program_ && !OfTheForkServer(argv))) {
        out.push_back(pid);
        roles_[pid] = Role(argv);
      }
    }
    return out;
  }
  pid_t daemon_;
  bool fork_server_, any_program_;
  std::chrono::milliseconds interval_;
  ProcessTree tree_;
  std::atomic<bool> stop_{false};
  Memory peak_, still_, lower_;
  std::atomic<int> moving_reads_{0};
  HeldLevel held_rss_, held_pss_, held_uss_;
  std::map<pid_t, uint64_t> hwm_kb_, pss_kb_;
  std::map<pid_t, std::string> roles_;  // the reader's thread's only
  std::optional<SteadyTime> first_read_;
  Snapshot still_read_, rss_read_;
  std::atomic<int> reads_{0};
  std::thread thread_;
};

// (workers, start, kind): multi_model runs its workers one after another, so its peak falls
// where a fork leaves the leader's pages shared and unwalked, the moment a sampler gets wrong.
class FiguresE2E : public ::testing::TestWithParam<std::tuple<int, const char*, const char*>> {
 protected:
  void SetUp() override {
    daemon_ = std::make_unique<Daemon>(dir_ / "state", dir_ / "s.sock");
    ASSERT_TRUE(daemon_->Start());
  }
  void ExpectSamplesReadBack(const std::string& id, int workers, double peak);
  TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
};

// `get --samples` gives the run's kept samples back: every worker in them, no total above the
// peak the result reports, and the SVG draws each process.
void FiguresE2E::ExpectSamplesReadBack(const std::string& id, int workers, double peak) {
  const json kept = Parse(daemon_->Cli({"get", id, "--samples", "--format", "json"}));
  ASSERT_TRUE(kept["samples"].is_array()) << kept.dump();
  ASSERT_GE(kept["samples"].size(), 2u);
  std::set<std::string> seen;
  double last_t = -1;
  for (const auto& s : kept["samples"]) {
    if (!s.value("sharing_moved", false)) {  // a moving tick's sum sets no peak
      EXPECT_LE(s["total_pss_bytes"].get<double>(), peak);
    }
    EXPECT_GT(s["t_ms"].get<double>(), last_t);
    last_t = s["t_ms"].get<double>();
    for (const auto& p : s["processes"])
      if (p["role"] == "worker") seen.insert(std::to_string(p["index"].get<int>()));
  }
  EXPECT_EQ(seen.size(), size_t(workers));
  const auto svg = daemon_->Cli({"get", id, "--samples", "--format", "svg"});
  ASSERT_EQ(svg.exit_code, 0) << svg.err;
  for (int w = 0; w < workers; ++w)
    EXPECT_NE(svg.out.find("<title>worker " + std::to_string(w) + "</title>"), std::string::npos);
}

// A failing run's kept samples, one line each (t, PSS sum, each process's PSS/RSS and the age
// of its walk), for the log: the failures seen so far came from machines slower than this one,
// and a failure whose samples were lost could not be looked into.
void PrintSamplesIfFailed(const Daemon& daemon, const std::string& id) {
  if (!::testing::Test::HasFailure()) return;
  const json kept = Parse(daemon.Cli({"get", id, "--samples", "--format", "json"}));
  for (const auto& s : kept.value("samples", json::array())) {
    std::printf("  t=%.0f pss=%.1f%s", s["t_ms"].get<double>(),
                s["total_pss_bytes"].get<double>() / 1048576,
                s.value("sharing_moved", false) ? " moved" : "");
    for (const auto& p : s["processes"])
      std::printf(" %s%d:%.0f/%.0f/a%.0f", p["role"].get<std::string>().c_str(),
                  p.value("index", -1), p["pss_bytes"].get<double>() / 1048576,
                  p["rss_bytes"].get<double>() / 1048576, p.value("pss_age_ms", -1.0));
    std::printf("\n");
  }
}

// A ratio Shoal / reader allowed: [low, high].
struct Band {
  double low, high;
};

// Shoal's peak sum against the reader's, within `band`.
void ExpectBetween(const char* what, double shoal_bytes, uint64_t independent_kb, Band band) {
  const double independent = double(independent_kb) * 1024;
  std::printf("  %s: Shoal %.1f MiB, independent %.1f MiB, ratio %.4f (allowed %.2f-%.2f)\n", what,
              shoal_bytes / (1 << 20), independent / (1 << 20), shoal_bytes / independent, band.low,
              band.high);
  EXPECT_GE(shoal_bytes / independent, band.low) << what;
  EXPECT_LE(shoal_bytes / independent, band.high) << what;
}

void ExpectAgrees(const char* what, double shoal_bytes, uint64_t independent_kb, double tolerance) {
  ExpectBetween(what, shoal_bytes, independent_kb, {1 - tolerance, 1 + tolerance});
}

// A peak sum against the reader's still sweeps (`pss`: the PSS sums, else the USS), within `band`.
// Where no still sweep read the run near its highest read (within 5%), the still peak is no
// reference: 16 forkserver workers' 34 processes beside a busy loop once moved pages in every
// sweep while the workers trained, and its still peak was 165 MiB, the leader and the
// forkserver's tree before they started, to Shoal's 508 and the reader's highest read 520 (once
// in the 1125 figure-soak readings kept before it, bench/results/2026-11-30/
// figures_soak_no_still_read). There Shoal's must be at least `band.low` times the
// highest of the sweeps' sums less what moved during each (a lower bound on what was held), and
// at most `band.high` times the highest read (a sweep while pages move counts them more than
// whole, not less; the sums plus what moved reach GiBs while a data set is mapped, no bound).
void ExpectAgainstStillReads(const char* what, double shoal_bytes, const IndependentReader& reader,
                             bool pss, Band band) {
  auto of = [pss](const Memory& m) { return pss ? m.pss_kb : m.uss_kb; };
  const uint64_t still = of(reader.still_peak()), highest = of(reader.peak());
  if (double(still) >= 0.95 * double(highest)) return ExpectBetween(what, shoal_bytes, still, band);
  const double lower = double(of(reader.lower_peak())) * 1024, upper = double(highest) * 1024;
  std::printf(
      "  %s: no still read near the highest (%.1f MiB still): Shoal %.1f MiB, the reads less "
      "what moved at most %.1f MiB, the highest read %.1f (allowed %.2fx the first to %.2fx the "
      "second)\n",
      what, still / 1024.0, shoal_bytes / (1 << 20), lower / (1 << 20), upper / (1 << 20), band.low,
      band.high);
  EXPECT_GE(shoal_bytes, lower * band.low) << what;
  EXPECT_LE(shoal_bytes, upper * band.high) << what;
}

// The accuracy of the peak PSS sum docs/figures.md states ("How close"), by start method and
// worker count, against the reader's still sweeps: within 2% at 1-16 workers of every start
// method. Fork at 8-16 read 1.031-1.116x and spawn 1.009-1.030x in 20 runs beside a busy loop
// (bench/results/2026-11-30/figures_soak_moment) until a new peak doubted a worker unwalked for
// 400 ms whose pages the others mapped (server/sampler.cc, Doubt). Forkserver at 8 read
// 0.952-1.071x over the runs of 2026-11-30 and at 16 0.916-0.994x, 12 of its 16 workers unwalked
// for 12 s at the budget's pace with their estimates low, until such workers were walked when the
// sum could be a missed peak (WalkMissedPeak): 0.990-0.995x at 16 since
// (bench/results/2026-11-30/missed_peak_experiment/paced). A 1-worker spawn run read 1.027x once
// until a stale leader's doubt counted (Doubt).
constexpr Band kPssBand{0.98, 1.02};

// A peak that is a moment: at least `band.low` times the reader's sustained level, at most
// `band.high` times its highest read (a moment only Shoal's ticks caught: with turns Shoal samples
// every 20 ms while a worker traces the step, the reader every 50; forkserver runs of 4-16 workers
// beside a busy loop read their USS sum up to 1.180x the reader's highest in the 20-run soaks of
// 2026-11-30, and 8 forkserver workers 1.225x: UssMomentBand).
void ExpectWithin(const char* what, double shoal_bytes, uint64_t sustained_kb, uint64_t peak_kb,
                  Band band = {0.98, 1.20}) {
  const double held = double(sustained_kb) * 1024, peak = double(peak_kb) * 1024;
  std::printf(
      "  %s: Shoal %.1f MiB, independent held %.1f MiB, highest %.1f MiB (allowed %.2fx held to "
      "%.2fx highest)\n",
      what, shoal_bytes / (1 << 20), held / (1 << 20), peak / (1 << 20), band.low, band.high);
  EXPECT_GE(shoal_bytes, held * band.low) << what;
  EXPECT_LE(shoal_bytes, peak * band.high) << what;
}

// The peak USS sum with turns, the traced step's moment, against the reader's held level and
// highest read (ExpectWithin). 0.98x held where the ticks catch it, 0.92 where the
// point's ticks are known to miss moments (16 forkserver workers' read 0.94x the held level once
// beside a busy loop, bench/results/2026-11-30/figures_soak_rerun, run 8, before idle pool twins
// shared a walk). 8 forkserver workers: 26 processes, whose sweep takes the reader 200-250 ms
// beside a busy loop (37-46 reads in a 10 s run for its 50 ms interval), so a one-second moment
// is caught whole, in part or twice by the reader: in 45 runs (20 of the figure soak, 25 of this
// point alone, 2026-11-30, bench/results/2026-11-30/forkserver8_uss_moment) Shoal read 194-206 MiB
// in every one, the reader's highest read 167-213 and its held level 132-209: Shoal 0.938-1.55x
// the held level, 0.923-1.225x the highest. 16 forkserver workers' read 0.883x the held level once
// in 9 runs (figures_soak_torn, run 9: their unwalked workers' estimates low, as for kPssBand,
// walked since).
Band UssMomentBand(int workers, const std::string& start) {
  if (start == "forkserver" && workers == 8) return {0.92, 1.30};
  return {0.98, 1.20};
}

// The sampler's CPU (its thread's, all walks and reads, over the run's wall time), as
// docs/figures.md states it: 0.7-5.0% of a core over this grid beside a busy loop on 2026-12-01
// (1% is the budget of its rationed walks alone; a process's first walk, jumps, peak
// confirmations and missed-peak walks are outside it).
constexpr double kSamplerCpuPercentAtMost = 8;

// multi_model's peak sum was a handover: the next worker's first steps while the last one
// exited, which Shoal's 50 ms ticks caught or missed (measured against the 5 ms reader: Shoal
// 0.87-1.04x its highest PSS read, 0.93-1.07x its RSS); since 2026-11-30 a worker starts once
// the one before it has exited, and the peak is a level. Shoal's must reach what the reader
// saw held for 100 ms, and stay within 20% of its highest read (ExpectWithin): before the parent of
// a fork was walked at once, Shoal read 29-36% high; before the parent of a worker that left was,
// its USS read down to 0.71x. Its peak USS sum is the leader's just before it forks, with
// LibTorch's library pages its own: counted in PSS but not USS between walks, it read 0.79x
// what the reader saw held (CI, 2026-11-29); 1.00-1.02x the reader's highest since.
// With turns (hogwild's default where the cores hold fewer steps than workers), the peak USS sum
// is the traced step's: one worker's unique pages rise and fall for a second (266-416 MiB read
// every 10 ms, 2026-11-27), which shoald samples at each of the leader's reports meanwhile (every
// 20 ms) and the reader every 50: a moment, as multi_model's handover was. PSS and RSS peak later,
// with the shared arenas, a level.
void ExpectPeakSums(const json& r, const IndependentReader& reader, bool handover, bool turns,
                    Band pss_band, Band uss_moment) {
  const double pss = r["peak_pss_sum_bytes"].get<double>();
  if (handover) {
    ExpectWithin("PSS", pss, reader.sustained().pss_kb, reader.peak().pss_kb);
    ExpectWithin("RSS", r["peak_rss_sum_bytes"].get<double>(), reader.sustained().rss_kb,
                 reader.peak().rss_kb);
    ExpectWithin("USS", r["peak_uss_sum_bytes"].get<double>(), reader.sustained().uss_kb,
                 reader.peak().uss_kb);
  } else {
    // kPssBand: 2%. A 2-worker forkserver run's 20 processes read 1.022-1.033x here
    // and on CI until the walks stopped paying for every tick's statm and stat reads and the
    // leader's stake stopped waiting behind the idle children's (server/sampler.cc): 1.005x since.
    std::printf("  reader's highest PSS sum %.1f MiB, %.1f MiB over its %d still reads\n",
                reader.peak().pss_kb / 1024.0, reader.still_peak().pss_kb / 1024.0,
                reader.reads() - reader.moving_reads());
    ExpectAgainstStillReads("PSS", pss, reader, /*pss=*/true, pss_band);
    // RSS is read whole every tick (statm), USS estimated between walks as PSS is.
    ExpectAgrees("RSS", r["peak_rss_sum_bytes"].get<double>(), reader.peak().rss_kb, 0.02);
    if (turns) {
      ExpectWithin("USS", r["peak_uss_sum_bytes"].get<double>(), reader.sustained().uss_kb,
                   reader.peak().uss_kb, uss_moment);
    } else {
      ExpectAgainstStillReads("USS", r["peak_uss_sum_bytes"].get<double>(), reader,
                              /*pss=*/false, {0.96, 1.04});
    }
  }
}

// The leader's own peak PSS falls just before its workers start, between two samples: it
// reads itself then, at every sample tick and at its end. Sampled only, a 2-worker fork leader
// read 147 MiB to the reader's 201. A multi_model leader (no data set: its peak is LibTorch's
// pages once no worker shares them) grows 3-9 MiB more as it exits, after its last reading
// has been sent: file pages, the code of the exit path faulting in (traced every 2 ms: file
// PSS 89 -> 98 MiB while anonymous fell 57 -> 55). 147-153 MiB to the 5 ms reader's highest
// 150-154 (0.956-1.00, 2026-11-26, 12 runs), so 0.94 there. Elsewhere 0.97: a 2-worker
// forkserver run's leader beside a busy loop read 56.3 MiB to the reader's 57.7 (0.976x).
void ExpectLeaderPeak(const json& e, const IndependentReader& reader, bool handover) {
  const double leader_tolerance = handover ? 0.94 : 0.97;
  for (const auto& p : e["processes"]) {
    if (p["role"] != "leader") continue;
    const double reader_kb = double(reader.PssKb(p["pid"].get<int>()));
    std::printf("  leader peak PSS: Shoal %.1f MiB, independent %.1f MiB\n",
                p["peak_pss_bytes"].get<double>() / 1048576, reader_kb / 1024);
    EXPECT_GE(p["peak_pss_bytes"].get<double>(), reader_kb * 1024 * leader_tolerance);
    // And above: no PSS exceeds the process's RSS, nor so its kernel high-water mark (VmHWM),
    // read by the reader (2% for what it grew after the reader's last read).
    const double hwm_kb = double(reader.HwmKb(p["pid"].get<int>()));
    std::printf("  leader peak PSS below its VmHWM %.1f MiB\n", hwm_kb / 1024);
    EXPECT_LE(p["peak_pss_bytes"].get<double>(), hwm_kb * 1024 * 1.02);
  }
}

// torchvision's efficientnet_b0, scripted (tests/models/make_zoo.py, the models ZooE2E trains:
// made once for both). A forkserver's worker is its idle pool child until it trains: walked then,
// its pages all shared 18 ways, and unwalked after behind the pool, it read 146 MiB to an
// independent reader's 180 (the run's peak PSS sum 0.91x, bench/results/2026-11-30/
// model_file_trace/) until the sampler counted what its estimate may be missing.
std::string ZooModel(const std::string& name) {
  std::string error;
  const std::string dir = testing::MadeZoo(&error);
  EXPECT_FALSE(dir.empty()) << error;
  return dir + "/" + name + ".pt";
}

TEST_P(FiguresE2E, PeakSumsAgreeWithAnIndependentReader) {
  const auto [workers, start, kind] = GetParam();
  const bool handover = std::string(kind) == "multi_model";
  const bool forkserver = std::string(start) == "forkserver";
  std::vector<std::string> args = {"submit", "--start", start, "--json"};
  if (std::string(kind) != "model_file") args.insert(args.end(), {"--kind", kind});
  if (handover) {  // 3 workers for n = 2: mlinear, mconv1d, gconv1d
    args.insert(args.end(), {"--models", "2", "--iterations", "200", "--sample-interval-ms", "50"});
  } else if (std::string(kind) == "model_file") {
    args.insert(args.end(), {"--model-file", ZooModel("efficientnet_b0"), "--input",
                             "float32[B,3,64,64]", "--classes", "10", "--workers",
                             std::to_string(workers), "--batches", "8", "--batch-size", "8"});
  } else {
    args.insert(args.end(),
                {"--workers", std::to_string(workers), "--batches", "8", "--dataset", kFashion,
                 "--eval-samples", "0", "--batch-size", workers >= 8 ? "16" : "64"});
  }
  // Started before the submit: it sees every process born. multi_model's peak is a handover of
  // 10-30 ms (see ExpectPeakSums). A reader ticking every 50 ms caught it in 5 runs of 8 here and
  // missed it on CI, where Shoal's ticks caught it 12.5% above the reader's highest read: there it
  // reads every 5 ms (a read every 15 ms, as reading the four processes takes 10), and its highest
  // PSS read was 170-189 MiB in 12 runs to Shoal's 164-177. hogwild's peak is a level held for
  // seconds, and reading five 300 MB processes every 5 ms would take a core from the run. A model
  // file's leader peaks as it prepares, for less than 25 ms (its probe step and synthetic set):
  // alone then, that is the forked run's peak USS sum, which a 50 ms reader read 284-312 MiB in
  // two runs to Shoal's 319 (the leader reads itself every 5 ms then): read every 5 ms too.
  const bool moment = handover || std::string(kind) == "model_file";
  IndependentReader reader(daemon_->pid(), forkserver, std::chrono::milliseconds(moment ? 5 : 50));
  const std::string id = Parse(daemon_->Cli(args))["id"];
  ASSERT_FALSE(id.empty());
  json e;
  ASSERT_TRUE(WaitFor(
      [&] {
        e = Parse(daemon_->Cli({"get", id, "--json"}));
        return e["state"] != "RUNNING" && e["state"] != "QUEUED";
      },
      180));
  reader.Stop();
  ASSERT_EQ(e["state"], "SUCCEEDED") << e["error"];
  ASSERT_GT(reader.reads(), 20);
  const json& r = e["result"];
  std::printf("peak sums, %s, %d workers %s, over %d reads:\n", kind, workers, start,
              reader.reads());
  const double pss = r["peak_pss_sum_bytes"].get<double>();
  // Absent: not a field of the kind (only hogwild's settings have it).
  const json steps_at_once =
      e["spec"].contains("hogwild") ? e["spec"]["hogwild"]["concurrent_steps"] : json();
  const bool turns = steps_at_once.is_number() && steps_at_once.get<int>() < workers;
  std::printf("  %s\n", turns ? "taking turns at the steps" : "every worker steps at once");
  ExpectPeakSums(r, reader, handover, turns, kPssBand, UssMomentBand(workers, start));
  std::printf("  sampler %.2f%% of a core, %d walks\n", r.value("sampler_cpu_percent", -1.0),
              r.value("smaps_reads", -1));
  EXPECT_LE(r["sampler_cpu_percent"].get<double>(), kSamplerCpuPercentAtMost);
  // Each process's own high-water mark, summed over the leader and the workers: the reader's
  // last VmHWM of each is at most 50 ms older than the one the process read as it ended.
  uint64_t hwm_kb = 0;
  for (const auto& p : e["processes"])
    if (p["role"] == "leader" || p["role"] == "worker") hwm_kb += reader.HwmKb(p["pid"].get<int>());
  ExpectAgrees("VmHWM", r["peak_rss_hwm_sum_bytes"].get<double>(), hwm_kb, 0.02);
  ExpectLeaderPeak(e, reader, handover);
  // The sum of each process's own peak is at least the peak of the sum, and is the table's
  // column summed: the experiment's processes and (forkserver) the forkserver's.
  EXPECT_GE(r["sum_of_peak_pss_bytes"].get<double>(), pss * 0.999);
  uint64_t table = 0;
  for (const char* list : {"processes", "fork_server_processes"})
    for (const auto& p : e.value(list, json::array())) table += p.value("peak_pss_bytes", 0ull);
  EXPECT_EQ(table, r["sum_of_peak_pss_bytes"].get<uint64_t>());
  EXPECT_EQ(!e.value("fork_server_processes", json::array()).empty(), forkserver);
  ExpectSamplesReadBack(id, workers, pss);
  // What its steps go to: workers x batches, or multi_model's workers x iterations.
  const json kept = Parse(daemon_->Cli({"get", id, "--samples", "--format", "json"}));
  EXPECT_EQ(kept["samples"].back()["steps_total"], workers * (handover ? 200 : 8));
  if (HasFailure()) std::printf("%s", reader.PeakReads().c_str());
  PrintSamplesIfFailed(*daemon_, id);
}

// The accuracy docs/figures.md claims, where it claims it: every start method at 1, 2, 4, 8 and
// 16 workers (8 and 16 with batches of 16: what they print, not how long they train, is
// checked), multi_model, and a user's model file (efficientnet_b0) forked and under the
// forkserver. The forkserver runs count the forkserver and its idle children on both sides.
std::vector<std::tuple<int, const char*, const char*>> Grid() {
  std::vector<std::tuple<int, const char*, const char*>> out;
  for (const char* start : {"fork", "spawn", "forkserver"})
    for (int workers : {1, 2, 4, 8, 16}) out.emplace_back(workers, start, "hogwild");
  out.emplace_back(3, "fork", "multi_model");
  for (const char* start : {"fork", "forkserver"}) out.emplace_back(2, start, "model_file");
  return out;
}
// Named by the point ("hogwild_fork_16"), not by gtest's print of the tuple (its pointers).
std::string PointName(const ::testing::TestParamInfo<FiguresE2E::ParamType>& info) {
  const auto& [workers, start, kind] = info.param;
  return std::string(kind) + "_" + start + "_" + std::to_string(workers);
}
INSTANTIATE_TEST_SUITE_P(Workers, FiguresE2E, ::testing::ValuesIn(Grid()), PointName);

// Kind command: a user's script of 2 ranks, each with a 2-worker DataLoader. The loader
// processes are found, attributed to their rank and counted in the sums, which agree with the
// independent reader's (every process under shoald but the forkserver's).
constexpr const char* kLoaderScript = R"PY(
import os, sys, time, torch
sys.path.insert(0, sys.argv[1])
import shoal_report
torch.set_num_threads(1)
data = torch.utils.data.TensorDataset(torch.randn(4096, 256), torch.randint(0, 10, (4096,)))
loader = torch.utils.data.DataLoader(data, batch_size=64, num_workers=2)
model = torch.nn.Linear(256, 10)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad(); loss.backward(); opt.step()
    shoal_report.step(samples=len(x), loss=loss.item())
    time.sleep(0.05)
)PY";

TEST(CommandFiguresE2E, ADataLoadersWorkersAreTheirRanksAndTheSumsAgree) {
  TempDir dir;
  std::ofstream(dir / "loader.py") << kLoaderScript;
  Daemon daemon(dir / "state", dir / "s.sock");
  ASSERT_TRUE(daemon.Start({"--allow-commands"}));
  IndependentReader reader(daemon.pid(), false, std::chrono::milliseconds(50), true);
  const CommandResult r = daemon.Cli({"submit", "--kind", "command", "--workers", "2", "--wait",
                                      "--json", "--", "/usr/bin/python3", dir / "loader.py",
                                      std::string(SHOAL_SOURCE_DIR) + "/client/python"});
  reader.Stop();
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const json e = Parse(r);
  ASSERT_EQ(e["state"], "SUCCEEDED") << e["error"];
  EXPECT_EQ(e["result"]["steps"].get<uint64_t>(), 2u * 64u);
  std::map<int, int> loaders;  // rank -> its DataLoader's processes seen
  for (const auto& p : e["processes"])
    if (p["role"] == "child") ++loaders[p["index"].get<int>()];
  EXPECT_EQ(loaders[0], 2);
  EXPECT_EQ(loaders[1], 2);
  ASSERT_GT(reader.reads(), 20);
  std::printf("peak sums, command, 2 ranks with 2 loaders each, over %d reads:\n", reader.reads());
  // 2%, as docs/figures.md claims: beside a busy loop its PSS read 0.987-0.994x the reader's and
  // its RSS 1.000x in the 70 figure-soak runs before the band was 3% no more, 0.990-0.994x in the
  // 20 since (bench/results/2026-11-30/figures_soak*).
  ExpectAgainstStillReads("PSS", e["result"]["peak_pss_sum_bytes"].get<double>(), reader,
                          /*pss=*/true, {0.98, 1.02});
  ExpectAgrees("RSS", e["result"]["peak_rss_sum_bytes"].get<double>(), reader.peak().rss_kb, 0.02);
  PrintSamplesIfFailed(daemon, e["id"].get<std::string>());
}

// CPU time of a process (utime + stime, USER_HZ ticks), from its /proc/<pid>/stat.
double LoopCpuTicks(pid_t pid) {
  const std::string stat = Slurp("/proc/" + std::to_string(pid) + "/stat");
  const auto close = stat.rfind(')');
  std::istringstream rest(stat.substr(close + 2));
  std::string skip;
  for (int field = 3; field < 14; ++field) rest >> skip;
  double utime = 0, stime = 0;
  rest >> utime >> stime;
  return utime + stime;
}

// Disturbed runs: a run beside a busy loop outside shoald is marked disturbed, naming the loop,
// and its outside CPU agrees with the loop's own CPU time, read here; the same run alone is not.
TEST(DisturbanceE2E, ABusyLoopBesideARunDisturbsItAndNothingElseDoes) {
  TempDir dir;
  Daemon daemon(dir / "state", dir / "s.sock");
  ASSERT_TRUE(daemon.Start());
  const std::vector<std::string> run = {
      "submit", "--workers",      "1", "--threads", "1",      "--batches", "12",    "--batch-size",
      "32",     "--eval-samples", "0", "--dataset", kFashion, "--wait",    "--json"};
  const json quiet = Parse(daemon.Cli(run));
  ASSERT_EQ(quiet["state"], "SUCCEEDED") << quiet["error"];
  EXPECT_EQ(quiet["result"]["disturbed"], false) << quiet["result"].dump();
  EXPECT_LT(quiet["result"]["outside_cpu_cores"].get<double>(), kDisturbedCoresForTest);
  std::printf("alone: outside CPU %.2f cores\n",
              quiet["result"]["outside_cpu_cores"].get<double>());

  const pid_t loop = ::fork();
  ASSERT_GE(loop, 0);
  if (loop == 0) {
    ::execl("/bin/sh", "sh", "-c", "while :; do :; done", static_cast<char*>(nullptr));
    ::_exit(127);
  }
  const double ticks0 = LoopCpuTicks(loop);
  const auto t0 = std::chrono::steady_clock::now();
  const json busy = Parse(daemon.Cli(run));
  const double loop_cores =
      (LoopCpuTicks(loop) - ticks0) / double(::sysconf(_SC_CLK_TCK)) /
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::kill(loop, SIGKILL);
  ::waitpid(loop, nullptr, 0);
  ASSERT_EQ(busy["state"], "SUCCEEDED") << busy["error"];
  EXPECT_EQ(busy["result"]["disturbed"], true) << busy["result"].dump();
  const std::string why = busy["result"]["disturbance"];
  EXPECT_NE(why.find("sh (pid " + std::to_string(loop) + ")"), std::string::npos) << why;
  const double outside = busy["result"]["outside_cpu_cores"];
  std::printf("outside CPU %.2f cores; the loop's own, read here: %.2f cores\n", outside,
              loop_cores);
  EXPECT_GT(outside, 0.8 * loop_cores);
  EXPECT_LT(outside, loop_cores + 0.3);
  const CommandResult text = daemon.Cli({"get", busy["id"]});
  EXPECT_NE(text.out.find("DISTURBED: processes outside the experiment used"), std::string::npos)
      << text.out;
}

}  // namespace
}  // namespace shoal
