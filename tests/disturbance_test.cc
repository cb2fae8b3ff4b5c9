// The disturbance meter (server/disturbance.h) on a fake /proc: Shoal's own CPU (shoald and its
// descendants, reaped ones through their parents' cutime) is not the outside's; the threshold;
// unknown stays absent; GPU processes that are not the experiment's disturb it too.
#include "server/disturbance.h"

#include <gtest/gtest.h>

namespace shoal {
namespace {

class FakeMachine : public MachineProcs {
 public:
  std::optional<uint64_t> busy;
  std::map<pid_t, ProcStat> procs;
  std::optional<uint64_t> BusyTicks() override { return busy; }
  std::vector<pid_t> Pids() override {
    std::vector<pid_t> out;
    for (const auto& [p, s] : procs) out.push_back(p);
    return out;
  }
  std::optional<ProcStat> Stat(pid_t pid) override {
    auto it = procs.find(pid);
    if (it == procs.end()) return std::nullopt;
    return it->second;
  }
};

ProcStat Proc(const char* comm, pid_t ppid, uint64_t utime, uint64_t cutime = 0) {
  ProcStat s;
  s.comm = comm;
  s.ppid = ppid;
  s.utime_ticks = utime;
  s.cutime_ticks = cutime;
  return s;
}

constexpr pid_t kDaemon = 100;
constexpr uint64_t kHz = 100;
constexpr uint64_t kSecond = 1'000'000'000ull;

// shoald (100) -> leader (200) -> worker (300); "stress" (500) outside. Over one second the
// experiment used 100 ticks (its leader and worker reaped into shoald's cutime by the end) and
// stress `outside` ticks.
std::optional<OutsideCpu> Measure(uint64_t outside) {
  FakeMachine m;
  m.busy = 1000;
  m.procs = {{kDaemon, Proc("shoald", 1, 10)},
             {200, Proc("shoal-worker", kDaemon, 5)},
             {300, Proc("shoal-worker", 200, 0)},
             {500, Proc("stress", 1, 100)},
             {600, Proc("sshd", 1, 7)}};
  const CpuSnapshot a = TakeCpuSnapshot(m, 10 * kSecond);
  m.busy = 1000 + 100 + outside;
  m.procs = {{kDaemon, Proc("shoald", 1, 12, 5 + 98)},  // leader 5+3, worker 95, reaped
             {500, Proc("stress", 1, 100 + outside)},
             {600, Proc("sshd", 1, 7)}};
  return OutsideOf(a, TakeCpuSnapshot(m, 11 * kSecond), kDaemon, kHz);
}

TEST(DisturbanceTest, ShoalsOwnTreeIsNotTheOutsides) {
  auto quiet = Measure(0);
  ASSERT_TRUE(quiet.has_value());
  EXPECT_DOUBLE_EQ(quiet->cores, 0);
  EXPECT_TRUE(quiet->top.empty());
  auto busy = Measure(97);
  ASSERT_TRUE(busy.has_value());
  EXPECT_DOUBLE_EQ(busy->cores, 0.97);
  ASSERT_EQ(busy->top.size(), 1u);
  EXPECT_EQ(busy->top[0], "stress (pid 500) 0.97");
}

TEST(DisturbanceTest, ShoaldsTreeIsItsDescendants) {
  FakeMachine m;
  m.busy = 1;
  m.procs = {{kDaemon, Proc("shoald", 1, 0)},
             {200, Proc("shoal-worker", kDaemon, 0)},
             {300, Proc("shoal-worker", 200, 0)},
             {500, Proc("stress", 1, 0)}};
  EXPECT_EQ(ProcessTree(TakeCpuSnapshot(m, 0), kDaemon), (std::set<pid_t>{kDaemon, 200, 300}));
}

TEST(DisturbanceTest, DisturbedFromHalfACoreOn) {
  v1::Result below, at;
  FillDisturbance(Measure(49), {}, kDisturbedCores, &below);
  EXPECT_TRUE(below.has_disturbed());
  EXPECT_FALSE(below.disturbed());
  EXPECT_EQ(below.disturbance(), "");
  EXPECT_DOUBLE_EQ(below.outside_cpu_cores(), 0.49);
  FillDisturbance(Measure(50), {}, kDisturbedCores, &at);
  EXPECT_TRUE(at.disturbed());
  EXPECT_EQ(at.disturbance(),
            "processes outside the experiment used 0.50 cores: stress (pid 500) 0.50");
  v1::Result strict;  // shoald --disturbed-cores 0.2
  FillDisturbance(Measure(30), {}, 0.2, &strict);
  EXPECT_TRUE(strict.disturbed());
}

TEST(DisturbanceTest, UnknownStaysAbsentAndGpuProcessesDisturbToo) {
  FakeMachine m;  // /proc/stat unreadable
  const CpuSnapshot a = TakeCpuSnapshot(m, kSecond), b = TakeCpuSnapshot(m, 2 * kSecond);
  const auto none = OutsideOf(a, b, kDaemon, kHz);
  EXPECT_FALSE(none.has_value());
  v1::Result r;
  FillDisturbance(none, {}, kDisturbedCores, &r);
  EXPECT_FALSE(r.has_disturbed());
  EXPECT_FALSE(r.has_outside_cpu_cores());
  FillDisturbance(none, {4242, 4243}, kDisturbedCores, &r);
  EXPECT_TRUE(r.disturbed());
  EXPECT_EQ(r.disturbance(), "2 other GPU process(es) on its devices (pid 4242, 4243)");
  EXPECT_FALSE(r.has_outside_cpu_cores());
}

TEST(DisturbanceTest, ParsesProcStatAndTheBusyTicks) {
  EXPECT_EQ(ParseBusyTicks("cpu  100 20 30 4000 5 6 7 8 0 0\ncpu0 50 10 15 2000\n"), 150u);
  EXPECT_FALSE(ParseBusyTicks("intr 1 2 3\n").has_value());
  EXPECT_FALSE(ParseBusyTicks("").has_value());
  auto s = ParseProcStat(
      "42 (my (odd) prog) S 7 42 42 0 -1 4194560 100 0 0 0 11 22 33 44 20 0 1 0 5 0 0");
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->comm, "my (odd) prog");
  EXPECT_EQ(s->ppid, 7);
  EXPECT_EQ(s->utime_ticks, 11u);
  EXPECT_EQ(s->stime_ticks, 22u);
  EXPECT_EQ(s->cutime_ticks, 33u);
  EXPECT_EQ(s->cstime_ticks, 44u);
}

}  // namespace
}  // namespace shoal
