#include "server/sampler.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <functional>
#include <map>

#include "tests/fakes.h"

namespace shoal {
namespace {

using testing::FakeProc;

constexpr uint64_t kMs = 1'000'000;

// A worker holding 100 MB, its 20 MB of libraries its own alone.
FakeProc::P AWorkerOf100Mb() {
  FakeProc::P f;
  f.split = true;
  f.rss_kb = 100000;
  f.shared_kb = 20000;
  f.pss_kb = 100000;
  f.uss_kb = 100000;
  f.pss_anon_kb = 80000;
  f.pss_file_kb = 20000;
  return f;
}

// It maps `kb` of a shared segment, `own_kb` of them its share.
void MapShared(FakeProc::P& f, uint64_t kb, uint64_t own_kb) {
  f.rss_kb += kb;
  f.shared_kb += kb;
  f.pss_kb += own_kb;
  f.pss_shmem_kb += own_kb;
}

TEST(SamplerTest, WalksEachProcessOnceThenOnlyWhenRssMoves) {
  FakeProc proc;
  proc.procs[10] = {};
  proc.procs[11] = {};
  ProcessSampler s(&proc, SamplerOptions{}, [&] { return proc.cpu_ns; });
  s.Track(10, "leader", -1);
  s.Track(11, "worker", 0);
  v1::Sample out;
  s.Tick(1000 * kMs, &out);
  EXPECT_EQ(proc.walks[10], 1);
  EXPECT_EQ(proc.walks[11], 1);
  EXPECT_EQ(out.total_pss_bytes(), 120000ull * 1024);
  for (int i = 1; i <= 10; ++i) {
    out.Clear();
    s.Tick((1000 + 200 * i) * kMs, &out);
  }
  EXPECT_EQ(proc.walks[10], 1);  // nothing moved, not stale yet
  // Worker grows by 50 MB: it is walked again once the budget allows; meanwhile PSS is carried.
  proc.procs[11].rss_kb += 50000;
  proc.procs[11].pss_kb += 50000;
  out.Clear();
  s.Tick(4000 * kMs, &out);
  EXPECT_EQ(proc.walks[11], 2);
  EXPECT_EQ(out.total_pss_bytes(), 170000ull * 1024);
  EXPECT_LE(out.total_pss_bytes(), out.total_rss_bytes());
}

TEST(SamplerTest, WalksStayWithinTheCpuBudget) {
  FakeProc proc;
  for (pid_t p = 100; p < 116; ++p) proc.procs[p] = {};
  SamplerOptions o;
  o.budget_fraction = 0.01;
  ProcessSampler s(&proc, o, [&] { return proc.cpu_ns; });
  for (pid_t p = 100; p < 116; ++p) s.Track(p, "worker", p - 100);
  // RSS changes every tick for 60 s at 5 Hz: an unbudgeted sampler would walk 16 x 300 times.
  uint64_t t = 1000 * kMs;
  for (int i = 0; i < 300; ++i) {
    for (auto& [pid, p] : proc.procs) p.rss_kb = 100000 + uint64_t((i % 2) * 20000);
    v1::Sample out;
    s.Tick(t, &out);
    t += 200 * kMs;
  }
  const double seconds = 60.0;
  const double used = double(s.cpu_ns()) / 1e9 / seconds;
  EXPECT_LE(used, 0.0125) << "sampler used " << used * 100 << "% of a core";
  EXPECT_GT(s.smaps_reads(), 16u);  // but it did keep walking
}

// The bucket rations walks, not the statm and stat reads every tick needs: 20 processes whose
// cheap reads cost 2% of a core (more than the budget) must not starve the walks. A forkserver
// run's leader, whose data set its workers were mapping, went unwalked for 6 s so, its PSS 43%
// high.
TEST(SamplerTest, ManyProcessesCheapReadsDoNotStarveTheWalks) {
  FakeProc proc;
  proc.cheap_cost_ns = 100'000;  // 20 processes x 2 reads x 5 ticks a second: 2% of a core
  FakeProc::P leader;
  leader.split = true;
  leader.rss_kb = 57000;
  leader.shared_kb = 40000;  // the data set's segment
  leader.pss_anon_kb = 17000;
  leader.pss_shmem_kb = 40000;
  leader.pss_kb = 57000;
  leader.uss_kb = 57000;
  proc.procs[10] = leader;
  for (pid_t w : {11, 12}) proc.procs[w] = AWorkerOf100Mb();
  for (pid_t pool = 13; pool < 30; ++pool) proc.procs[pool] = {};
  ProcessSampler s(&proc, SamplerOptions{}, [&] { return proc.cpu_ns; });
  for (const auto& [pid, p] : proc.procs) s.Track(pid, pid == 10 ? "leader" : "worker", 0);
  uint64_t t = 1000 * kMs;
  v1::Sample out;
  s.Tick(t, &out);
  // The workers map the whole data set within a second; the leader's share of it falls to a third.
  for (int i = 1; i <= 5; ++i) {
    for (pid_t w : {11, 12}) MapShared(proc.procs[w], 8000, 8000 / 3);
    proc.procs[10].pss_shmem_kb = 40000 - i * 8000 * 2 / 3;
    proc.procs[10].pss_kb = 17000 + proc.procs[10].pss_shmem_kb;
    out.Clear();
    s.Tick(t += 200 * kMs, &out);
  }
  for (int i = 0; i < 10; ++i) {
    out.Clear();
    s.Tick(t += 200 * kMs, &out);
  }
  EXPECT_GE(proc.walks[10], 2);
  for (const auto& p : out.processes()) {
    if (p.pid() != 10) continue;
    EXPECT_NEAR(double(p.pss_bytes()) / 1024, 17000.0 + 40000 / 3.0, 200);
  }
}

// Two workers map the same 800 MB of shared memory at once (hogwild's shared step arenas): each
// now holds half of it, a share the estimate cannot know (it would count the new pages at the
// share of their older shared pages: whole, here). Both are walked at once though the budget
// allows one dear walk at most, and the sum is exact.
TEST(SamplerTest, AJumpInSharedPagesIsWalkedAtOnceOutsideTheBudget) {
  FakeProc proc;
  proc.walk_cost_ns = 50'000'000;  // a walk costs 5 s of a 1% budget
  for (pid_t p : {20, 21}) proc.procs[p] = AWorkerOf100Mb();
  ProcessSampler s(&proc, SamplerOptions{}, [&] { return proc.cpu_ns; });
  s.Track(20, "worker", 0);
  s.Track(21, "worker", 1);
  v1::Sample out;
  s.Tick(1000 * kMs, &out);
  ASSERT_EQ(proc.walks[20], 1);
  ASSERT_EQ(proc.walks[21], 1);
  for (pid_t p : {20, 21}) MapShared(proc.procs[p], 800000, 400000);
  out.Clear();
  s.Tick(1200 * kMs, &out);
  EXPECT_EQ(proc.walks[20], 2);
  EXPECT_EQ(proc.walks[21], 2);
  EXPECT_EQ(out.total_pss_bytes(), 2 * 500000ull * 1024);  // estimated: 2 x 900000
  out.Clear();
  s.Tick(1400 * kMs, &out);  // nothing jumped since: no more walks outside the budget
  EXPECT_EQ(proc.walks[20] + proc.walks[21], 4);
}

// Two workers holding 100 MB each, their 20 MB of libraries alone, then mapping 800 MB of shared
// memory over many ticks, 40 MB a tick, as a slower machine populates hogwild's shared arenas.
class SamplerBurstTest : public ::testing::Test {
 protected:
  SamplerBurstTest() : s_(&proc_, SamplerOptions{}, [this] { return proc_.cpu_ns; }) {
    proc_.walk_cost_ns = 50'000'000;  // the budget allows no rationed walk in these 2 s
    for (pid_t p : {20, 21}) {
      proc_.procs[p] = AWorkerOf100Mb();
      s_.Track(p, "worker", p - 20);
    }
    Ticks(1, nullptr);
  }
  // `who` maps `kb` more of the segment: pages nobody held (`sharer` 0), or pages `sharer` holds,
  // half of each then its.
  void Map(pid_t who, uint64_t kb, pid_t sharer) {
    MapShared(proc_.procs[who], kb, sharer == 0 ? kb : kb / 2);
    if (sharer != 0) {
      proc_.procs[sharer].pss_kb -= kb / 2;
      proc_.procs[sharer].pss_shmem_kb -= kb / 2;
    }
  }
  void Ticks(int n, const std::function<void()>& each) {
    for (int i = 0; i < n; ++i) {
      if (each) each();
      out_.Clear();
      s_.Tick(t_ += 20 * kMs, &out_);
    }
  }
  static constexpr uint64_t kTruth = (2 * 100000ull + 800000) * 1024;
  FakeProc proc_;
  ProcessSampler s_;
  v1::Sample out_;
  uint64_t t_ = 1000 * kMs;
};

// Both at once, each page's two sharers within a tick of each other: no tick reaches the 64 MiB
// of a jump, so the bursts are walked as they double and once more as they end, and the sum and
// its peak are exact (counted at the walks' shares they read 1800 MB for 1000). A few walks, not
// one a tick.
TEST_F(SamplerBurstTest, SharedPagesMappedOverManyTicksAreWalkedAsTheyDoubleAndEnd) {
  Ticks(20, [&] {
    Map(20, 20000, 0);
    Map(21, 20000, 20);
    Map(21, 20000, 0);
    Map(20, 20000, 21);
  });
  Ticks(3, nullptr);
  EXPECT_NEAR(double(out_.total_pss_bytes()) / double(kTruth), 1.0, 0.01);
  ASSERT_TRUE(s_.peak_pss_sum().has_value());
  EXPECT_NEAR(double(*s_.peak_pss_sum()) / double(kTruth), 1.0, 0.02);
  EXPECT_LE(proc_.walks[20] + proc_.walks[21], 2 + 2 * 8);
}

// One after the other: the second takes half of every page from the first, whose RSS does not
// move. The first is walked with the second's burst and as it ends: the sum comes back exact.
// Between walks the second's new pages count at its walk's share and the first's not at all: the
// sum reads high by up to half of what was mapped since (docs/figures.md).
TEST_F(SamplerBurstTest, PagesMappedFromAnotherAreTakenFromItWhenTheBurstEnds) {
  Ticks(20, [&] { Map(20, 40000, 0); });
  Ticks(3, nullptr);
  Ticks(20, [&] { Map(21, 40000, 20); });
  Ticks(3, nullptr);
  EXPECT_NEAR(double(out_.total_pss_bytes()) / double(kTruth), 1.0, 0.01);
  EXPECT_LE(proc_.walks[20] + proc_.walks[21], 2 + 2 * 12);
}

// The second maps the first's pages between the two walks of one tick: the first's walk counted
// them whole, the second's at half, and that tick's sum reads 400 MB more than the pages they
// hold. Such a tick, a jump's, says so and sets no peak of the PSS sum; the peak is the settled
// sum's. (A tick whose pages only moved sets its sum less what moved: see the next test.)
TEST_F(SamplerBurstTest, ASumReadWhileSharedPagesMoveSetsNoPeak) {
  Ticks(3, nullptr);
  proc_.before_walk = [&](FakeProc::P& f) {
    if (&f != &proc_.procs[21]) return;
    proc_.before_walk = nullptr;
    Map(21, 800000, 20);
  };
  Ticks(1, [&] { Map(20, 800000, 0); });
  EXPECT_TRUE(out_.sharing_moved());
  EXPECT_GT(double(out_.total_pss_bytes()), 1.3 * double(kTruth));
  EXPECT_LT(double(*s_.peak_pss_sum()), 0.3 * double(kTruth));  // the 200 MB before
  Ticks(5, nullptr);
  EXPECT_FALSE(out_.sharing_moved());
  EXPECT_NEAR(double(out_.total_pss_bytes()) / double(kTruth), 1.0, 0.01);
  EXPECT_NEAR(double(*s_.peak_pss_sum()) / double(kTruth), 1.0, 0.01);
}

// Pages that only move while a tick reads (no jump: the second maps 10 MB the first holds, between
// the two walks) are counted at most once too often: the tick says so, and its sum less what
// moved, a lower bound of what they held, may set the peak. Dropped whole, such ticks left the
// traced step's moment of 8 forkserver workers unread (docs/figures.md).
TEST(SamplerTest, ATickWhosePagesMovedSetsItsSumLessWhatMoved) {
  FakeProc proc;
  for (pid_t p : {20, 21}) proc.procs[p] = AWorkerOf100Mb();
  MapShared(proc.procs[20], 10000, 10000);
  ProcessSampler s(&proc, SamplerOptions{}, [&] { return proc.cpu_ns; });
  s.Track(20, "worker", 0);
  s.Track(21, "worker", 1);
  proc.before_walk = [&](FakeProc::P& f) {
    if (&f != &proc.procs[21]) return;
    proc.before_walk = nullptr;
    MapShared(f, 10000, 5000);
    proc.procs[20].pss_kb -= 5000;
    proc.procs[20].pss_shmem_kb -= 5000;
  };
  v1::Sample out;
  s.Tick(1000 * kMs, &out);
  const uint64_t truth = 210000ull * 1024;
  EXPECT_TRUE(out.sharing_moved());
  EXPECT_EQ(out.total_pss_bytes(), truth + 5000 * 1024);  // 20's walk counted them whole
  EXPECT_EQ(*s.peak_pss_sum(), truth - 5000 * 1024);      // 215 MB less the 10 that moved
}

// A lone process's tick is one instant whatever it maps: its sums set the peak as they come.
TEST(SamplerTest, ALoneProcessMappingFastStillSetsThePeak) {
  FakeProc proc;
  auto& f = proc.procs[10] = AWorkerOf100Mb();
  ProcessSampler s(&proc, SamplerOptions{}, [&] { return proc.cpu_ns; });
  s.Track(10, "worker", 0);
  v1::Sample out;
  s.Tick(1000 * kMs, &out);
  MapShared(f, 800000, 800000);
  out.Clear();
  s.Tick(1020 * kMs, &out);
  EXPECT_FALSE(out.sharing_moved());
  EXPECT_EQ(*s.peak_pss_sum(), 900000ull * 1024);
}

TEST(SamplerTest, CpuPercentFromTicks) {
  FakeProc proc;
  proc.procs[5] = {};
  ProcessSampler s(&proc, SamplerOptions{}, [&] { return proc.cpu_ns; });
  s.Track(5, "worker", 0);
  v1::Sample out;
  s.Tick(1000 * kMs, &out);
  ASSERT_EQ(out.processes_size(), 1);
  EXPECT_FALSE(out.processes(0).has_cpu_percent());  // one reading: no rate yet, not 0
  proc.procs[5].ticks += static_cast<uint64_t>(sysconf(_SC_CLK_TCK));  // one CPU-second
  out.Clear();
  s.Tick(2000 * kMs, &out);
  ASSERT_EQ(out.processes_size(), 1);
  EXPECT_NEAR(out.processes(0).cpu_percent(), 100.0, 1.0);
}

TEST(SamplerTest, ExitedProcessesDropOutButKeepTheirPeak) {
  FakeProc proc;
  proc.procs[7] = {};
  ProcessSampler s(&proc, SamplerOptions{}, [&] { return proc.cpu_ns; });
  s.Track(7, "worker", 0);
  v1::Sample out;
  s.Tick(1000 * kMs, &out);
  proc.procs.erase(7);
  out.Clear();
  s.Tick(1200 * kMs, &out);
  EXPECT_EQ(out.processes_size(), 0);
  s.Untrack(7);
  EXPECT_EQ(s.PeakPss(7), 60000ull * 1024);
}

// A process gone before any tick read it has no peak, and before any tick there are no sums:
// unknown, not 0.
TEST(SamplerTest, WhatNoTickReadHasNoPeak) {
  FakeProc proc;
  proc.procs[7] = {};
  ProcessSampler s(&proc, SamplerOptions{}, [&] { return proc.cpu_ns; });
  s.Track(7, "worker", 0);
  s.Track(8, "worker", 1);  // exited before the first tick: /proc has nothing of it
  EXPECT_FALSE(s.peak_pss_sum().has_value());
  EXPECT_FALSE(s.sum_of_peak_pss().has_value());
  v1::Sample out;
  s.Tick(1000 * kMs, &out);
  s.Untrack(8);
  EXPECT_FALSE(s.PeakPss(8).has_value());
  EXPECT_EQ(s.PeakPss(7), 60000ull * 1024);
  EXPECT_EQ(s.peak_pss_sum(), 60000ull * 1024);
  EXPECT_EQ(s.sum_of_peak_pss(), 60000ull * 1024);
}

// A leader's reading of itself, taken between ticks at its peak, raises its own peak and the sum
// of peaks; the peak of the sum (every process at one instant) only while it is the one process
// tracked. A lower reading changes nothing, and it outlives the process.
TEST(SamplerTest, AProcesssOwnReadingRaisesTheSumOnlyWhileItIsAlone) {
  FakeProc proc;
  proc.procs[7] = {};
  proc.procs[8] = {};
  ProcessSampler s(&proc, SamplerOptions{}, [&] { return proc.cpu_ns; });
  s.Track(7, "leader", -1);
  s.Track(8, "worker", 0);
  s.NoteOwnReading(7, 190000ull * 1024);
  EXPECT_EQ(s.PeakPss(7), 190000ull * 1024);
  EXPECT_FALSE(s.peak_pss_sum().has_value());  // no tick yet
  v1::Sample out;
  s.Tick(1000 * kMs, &out);
  s.NoteOwnReading(7, 1000);
  EXPECT_EQ(s.PeakPss(7), 190000ull * 1024);
  EXPECT_EQ(s.sum_of_peak_pss(), 250000ull * 1024);
  EXPECT_EQ(s.peak_pss_sum(), 120000ull * 1024);  // what the tick read: 7 was not alone
  s.Untrack(8);
  s.NoteOwnReading(7, 200000ull * 1024);  // alone now: the run's sum at that instant
  EXPECT_EQ(s.peak_pss_sum(), 200000ull * 1024);
  EXPECT_EQ(s.peak_uss_sum(), 100000ull * 1024);  // no USS read: the tick's stands
  s.NoteOwnReading(7, 1000, 150000ull * 1024);
  EXPECT_EQ(s.peak_pss_sum(), 200000ull * 1024);
  EXPECT_EQ(s.peak_uss_sum(), 150000ull * 1024);
  s.Untrack(7);
  EXPECT_EQ(s.PeakPss(7), 200000ull * 1024);
  s.NoteOwnReading(9, 5);  // not tracked: ignored
  EXPECT_FALSE(s.PeakPss(9).has_value());
  ProcessSampler early(&proc, SamplerOptions{}, [&] { return proc.cpu_ns; });
  early.Track(5, "leader", -1);
  early.NoteOwnReading(5, 4096);
  early.Untrack(5);  // gone before any tick: its own reading stays, the sums stay unknown
  EXPECT_EQ(early.PeakPss(5), 4096u);
  EXPECT_FALSE(early.peak_pss_sum().has_value());
  EXPECT_FALSE(early.sum_of_peak_pss().has_value());
}

// Beside the leader only the forkserver and its idle pool: their pages stand still, so the
// leader's own reading plus what the last tick read of them is the sum at that instant. Not so
// with a worker tracked (its pages move), nor with a pool process no tick has read (unknown).
TEST(SamplerTest, ALeadersOwnReadingCountsAnIdleForkserverTreeAsItsLastTickRead) {
  FakeProc proc;
  proc.procs[3] = {};
  proc.procs[4] = {};
  proc.procs[7] = {};
  ProcessSampler s(&proc, SamplerOptions{}, [&] { return proc.cpu_ns; });
  s.Track(3, "forkserver", -1);
  s.Track(4, "pool", -1);
  s.Track(7, "leader", -1);
  v1::Sample out;
  s.Tick(1000 * kMs, &out);
  EXPECT_EQ(s.peak_pss_sum(), 180000ull * 1024);
  s.NoteOwnReading(7, 200000ull * 1024, 190000ull * 1024);
  EXPECT_EQ(s.peak_pss_sum(), 320000ull * 1024);  // 200000 + the tick's 60000 + 60000
  EXPECT_EQ(s.peak_uss_sum(), 290000ull * 1024);  // 190000 + the tick's 50000 + 50000
  proc.procs[5] = {};
  s.Track(5, "pool", -1);  // no tick has read it yet
  s.NoteOwnReading(7, 300000ull * 1024);
  EXPECT_EQ(s.peak_pss_sum(), 320000ull * 1024);
  s.Tick(2000 * kMs, &out);
  proc.procs[8] = {};
  s.Track(8, "worker", 0);
  s.NoteOwnReading(7, 400000ull * 1024);
  EXPECT_EQ(s.peak_pss_sum(), 320000ull * 1024);  // a worker beside it: no instant
  EXPECT_EQ(s.PeakPss(7), 400000ull * 1024);
}

}  // namespace
}  // namespace shoal

namespace shoal {
namespace {

using testing::FakeProc;

// A sampler without budget: each process gets its first walk and no more.
ProcessSampler WalkedOnce(FakeProc* proc) {
  SamplerOptions opts;
  opts.budget_fraction = 0;
  opts.burst_ns = 0;
  return ProcessSampler(proc, opts, [proc] { return proc->cpu_ns; });
}

// A worker that maps more of a segment four processes share gains a quarter of each new page's
// PSS, not the whole page; new anonymous memory counts whole.
TEST(SamplerTest, SharedPagesTouchedBetweenWalksCountAtTheirShare) {
  FakeProc proc;
  FakeProc::P w;
  w.rss_kb = 400000;
  w.shared_kb = 100000;  // 100 MB of the shared segment resident, shared by four
  w.split = true;
  w.pss_anon_kb = 300000;
  w.pss_shmem_kb = 25000;
  w.pss_kb = 325000;
  w.uss_kb = 300000;
  proc.procs[10] = w;
  ProcessSampler s = WalkedOnce(&proc);
  s.Track(10, "worker", 0);
  v1::Sample out;
  s.Tick(1000 * kMs, &out);
  EXPECT_EQ(out.total_pss_bytes(), 325000ull * 1024);
  // It reads 40 MB more of the segment and allocates 20 MB of its own.
  proc.procs[10].rss_kb += 60000;
  proc.procs[10].shared_kb += 40000;
  out.Clear();
  s.Tick(1200 * kMs, &out);
  EXPECT_EQ(proc.walks[10], 1);
  EXPECT_EQ(out.total_pss_bytes(), (325000ull + 20000 + 10000) * 1024);
  EXPECT_EQ(out.total_uss_bytes(), (300000ull + 20000) * 1024);
  EXPECT_EQ(s.peak_pss_sum(), (325000ull + 20000 + 10000) * 1024);
  EXPECT_EQ(s.sum_of_peak_pss(), s.peak_pss_sum());  // one process: the two peaks agree
}

// A leader alone loading its libraries faults in file pages no other process maps: between its
// walks they count in its USS at the part of its file pages its walk found private (here 80 of
// 100 MB), as they count in its PSS at their share. Counted in PSS alone, a multi_model leader's
// USS just before it forked, the run's peak USS sum, read 0.79x an independent reader's.
TEST(SamplerTest, PrivateLibraryPagesFaultedInBetweenWalksCountInUss) {
  FakeProc proc;
  FakeProc::P leader;
  leader.split = true;
  leader.rss_kb = 150000;
  leader.shared_kb = 100000;  // its libraries: 80 MB of them its alone, 20 MB shared with others
  leader.pss_anon_kb = 50000;
  leader.pss_file_kb = 90000;
  leader.pss_kb = 140000;
  leader.uss_kb = 130000;
  proc.procs[10] = leader;
  ProcessSampler s = WalkedOnce(&proc);
  s.Track(10, "leader", -1);
  v1::Sample out;
  s.Tick(1000 * kMs, &out);
  EXPECT_EQ(out.total_uss_bytes(), 130000ull * 1024);
  // 50 MB more of its libraries and 10 MB of its own anonymous memory, unwalked (no budget).
  proc.procs[10].rss_kb += 60000;
  proc.procs[10].shared_kb += 50000;
  out.Clear();
  s.Tick(1200 * kMs, &out);
  EXPECT_EQ(proc.walks[10], 1);
  EXPECT_EQ(out.total_uss_bytes(), (130000ull + 10000 + 40000) * 1024);
  EXPECT_EQ(out.total_pss_bytes(), (140000ull + 10000 + 45000) * 1024);
}

// A process that execs (a model file's leader becoming shoal-leader) is another image on the
// same pid: its next tick walks it, even with no budget, instead of carrying the old image's
// walk forward (which read its USS at 184 MiB beside a PSS of 7); its peak stays the old one's.
TEST(SamplerTest, AProcessThatExecsIsWalkedAfreshKeepingItsPeak) {
  FakeProc proc;
  FakeProc::P leader;
  leader.comm = "shoal-worker";
  leader.split = true;
  leader.rss_kb = 348000;
  leader.shared_kb = 40000;
  leader.pss_kb = 343000;
  leader.uss_kb = 340000;
  leader.pss_anon_kb = 308000;
  leader.pss_file_kb = 35000;
  proc.procs[10] = leader;
  ProcessSampler s = WalkedOnce(&proc);
  s.Track(10, "leader", -1);
  v1::Sample out;
  s.Tick(1000 * kMs, &out);
  FakeProc::P& now = proc.procs[10];
  now.comm = "shoal-leader";
  now.rss_kb = 8000;
  now.shared_kb = 6000;
  now.pss_kb = 7000;
  now.uss_kb = 1500;
  now.pss_anon_kb = 1500;
  now.pss_file_kb = 5500;
  out.Clear();
  s.Tick(1200 * kMs, &out);
  EXPECT_EQ(proc.walks[10], 2);
  EXPECT_EQ(out.total_pss_bytes(), 7000ull * 1024);
  EXPECT_EQ(out.total_uss_bytes(), 1500ull * 1024);
  EXPECT_EQ(s.PeakPss(10), 343000ull * 1024);
  out.Clear();
  s.Tick(1400 * kMs, &out);  // the same image again: no walk (no budget)
  EXPECT_EQ(proc.walks[10], 2);
}

// A worker just forked faults its libraries in between the tick's statm and its walk. The share
// of each shared page must come from the walk alone (a fifth here), or every library page it
// touches later would count whole: this was 50 MB too much per worker in a 4-worker fork run.
TEST(SamplerTest, TheShareOfSharedPagesIsTheWalksOwn) {
  FakeProc proc;
  FakeProc::P w;
  w.rss_kb = 85000;
  w.shared_kb = 5000;
  w.split = true;
  proc.procs[10] = w;
  proc.before_walk = [](FakeProc::P& p) {  // 20 MB of library pages, shared by five, faulted in
    p.rss_kb += 20000;
    p.shared_kb += 20000;
    p.pss_anon_kb = 20000;
    p.pss_file_kb = 5000;
    p.pss_kb = 25000;
  };
  ProcessSampler s = WalkedOnce(&proc);
  s.Track(10, "worker", 0);
  v1::Sample out;
  s.Tick(1000 * kMs, &out);
  EXPECT_EQ(out.total_pss_bytes(), 25000ull * 1024);  // the walk's PSS, as it read it
  proc.before_walk = nullptr;
  proc.procs[10].rss_kb += 35000;  // 35 MB more of the libraries, at the same fifth
  proc.procs[10].shared_kb += 35000;
  out.Clear();
  s.Tick(1200 * kMs, &out);
  EXPECT_EQ(proc.walks[10], 1);
  EXPECT_EQ(out.total_pss_bytes(), (20000ull + 60000 / 5) * 1024);
}

// A walk dearer than the whole bucket (12 ms against a 5 ms burst) slows walks down without
// stopping them: once the first walks were dear, the sampler used to walk nobody again, and every
// process's PSS was an estimate carried for the rest of the run.
TEST(SamplerTest, WalksDearerThanTheBurstStillHappenWithinTheBudget) {
  FakeProc proc;
  proc.walk_cost_ns = 12'000'000;
  for (pid_t p = 100; p < 105; ++p) proc.procs[p] = {};
  ProcessSampler s(&proc, SamplerOptions{}, [&] { return proc.cpu_ns; });
  for (pid_t p = 100; p < 105; ++p) s.Track(p, "worker", p - 100);
  uint64_t t = 1000 * kMs;
  for (int i = 0; i < 300; ++i) {  // 60 s at 5 Hz, every RSS moving 20% each tick
    for (auto& [pid, p] : proc.procs) p.rss_kb = 100000 + uint64_t((i % 2) * 20000);
    v1::Sample out;
    s.Tick(t, &out);
    t += 200 * kMs;
  }
  // 1% of 60 s buys 50 walks of 12 ms: ten a process, none starved.
  for (pid_t p = 100; p < 105; ++p) EXPECT_GE(proc.walks[p], 8) << "pid " << p;
  // Beyond each process's first walk, which the budget does not ration, its debt repaid.
  EXPECT_LE(double(s.cpu_ns() - 5 * proc.walk_cost_ns) / 60e9, 0.0105);
}

// Workers whose RSS moves every tick must not starve a leader whose RSS stands still while its
// PSS falls (the workers map the segments it holds): past refresh_after it is walked first.
TEST(SamplerTest, AStaleProcessOutranksMovingOnes) {
  FakeProc proc;
  proc.walk_cost_ns = 12'000'000;  // one walk a second fits the budget
  for (pid_t p = 100; p < 105; ++p) proc.procs[p] = {};
  ProcessSampler s(&proc, SamplerOptions{}, [&] { return proc.cpu_ns; });
  s.Track(100, "leader", -1);
  for (pid_t p = 101; p < 105; ++p) s.Track(p, "worker", p - 101);
  uint64_t t = 1000 * kMs;
  auto run = [&](int ticks) {
    for (int i = 0; i < ticks; ++i, t += 200 * kMs) {
      for (pid_t p = 101; p < 105; ++p) proc.procs[p].rss_kb += 5000;  // 5% a tick
      v1::Sample out;
      s.Tick(t, &out);
    }
  };
  run(5);
  ASSERT_EQ(proc.walks[100], 1);
  proc.procs[100].pss_kb = 30000;  // shared with the workers now: half its PSS, the same RSS
  run(60);                         // 12 s
  EXPECT_GE(proc.walks[100], 2);
  v1::Sample out;
  s.Tick(t, &out);
  ASSERT_EQ(out.processes(0).pid(), 100);
  EXPECT_EQ(out.processes(0).pss_bytes(), 30000ull * 1024);
}

// A process whose walk gives the kernel's split: its RSS, the file+shmem part of it, its PSS of
// anonymous, file and shmem pages (which add up to its PSS), and its USS.
FakeProc::P SplitProcess(uint64_t rss_kb, uint64_t shared_kb, std::array<uint64_t, 3> pss_kb,
                         uint64_t uss_kb) {
  FakeProc::P p;
  p.rss_kb = rss_kb;
  p.shared_kb = shared_kb;
  p.split = true;
  p.pss_anon_kb = pss_kb[0];
  p.pss_file_kb = pss_kb[1];
  p.pss_shmem_kb = pss_kb[2];
  p.pss_kb = pss_kb[0] + pss_kb[1] + pss_kb[2];
  p.uss_kb = uss_kb;
  return p;
}

// A forked worker of 200 MB, walked while 100 MB of it were anonymous pages shared with its
// parent (half its share), then changed by `each` at each of `ticks` ticks 200 ms apart and left
// for `after` more (one walk a second fits the budget); its last tick's PSS, its walks in `walks`.
uint64_t ForkedWorkerAfter(int ticks, int after, const std::function<void(FakeProc::P&)>& each,
                           int* walks) {
  FakeProc proc;
  proc.walk_cost_ns = 10'000'000;
  proc.procs[101] = SplitProcess(200000, 20000, {130000, 10000, 0}, 80000);
  ProcessSampler s(&proc, SamplerOptions{}, [&] { return proc.cpu_ns; });
  s.Track(101, "worker", 0);
  uint64_t t = 1000 * kMs;
  v1::Sample out;
  s.Tick(t, &out);
  for (int i = 1; i <= ticks + after; ++i) {
    if (i <= ticks) each(proc.procs[101]);
    out.Clear();
    s.Tick(t += 200 * kMs, &out);
  }
  *walks = proc.walks[101];
  return out.processes(0).pss_bytes();
}

const uint64_t kPageKb = uint64_t(sysconf(_SC_PAGESIZE)) / 1024;

// It writes 40 MB of its shared pages: each write a copy-on-write fault, its PSS up 20 MB, its
// RSS where it was. Its minor faults say so: it is walked as the budget allows, not after
// refresh_after (5 s).
TEST(SamplerTest, SharedPagesBecomingItsOwnWithNoRssMovingAreWalkedSoon) {
  int walks = 0;
  const uint64_t pss = ForkedWorkerAfter(
      5, 5,
      [](FakeProc::P& p) {  // 8 MB of its shared pages written a tick: 4 MB more its own
        p.minflt += 8000 / kPageKb;
        p.pss_anon_kb += 4000;
        p.pss_kb += 4000;
      },
      &walks);
  EXPECT_GE(walks, 2) << "its copy-on-write breaks waited for refresh_after";
  EXPECT_EQ(pss, 160000ull * 1024);
}

// Minor faults that grew its RSS as much are pages the estimate follows (new anonymous pages are
// its own): they ask for no walk beyond the RSS move's.
TEST(SamplerTest, FaultsThatGrewItsRssAreNotCopyOnWriteBreaks) {
  int walks = 0;
  const uint64_t pss = ForkedWorkerAfter(
      15, 0,
      [](FakeProc::P& p) {  // 0.2 MB of new pages a tick: under the RSS move's 2%
        p.minflt += 200 / kPageKb;
        p.rss_kb += 200;
        p.pss_anon_kb += 200;
        p.pss_kb += 200;
      },
      &walks);
  EXPECT_EQ(walks, 1);
  EXPECT_EQ(pss, 143000ull * 1024);
}

// A forkserver's idle pool child, walked with all its pages shared 18 ways, becomes a worker:
// it writes pages it shared, faults in library pages at a share far above the walk's, and grows
// 150 MB of its own. Its walk's PSS (6 MB per 258 MB walked) ranked it behind the 16 pool
// children whose sharing its start changed, unwalked for 3 s (an efficientnet_b0 worker read
// 146 MiB to an independent reader's 180, bench/results/2026-11-30/model_file_trace/): what its
// estimate may be missing puts it first.
TEST(SamplerTest, APoolChildBecomeAWorkerIsWalkedBeforeTheIdlePool) {
  FakeProc proc;
  proc.walk_cost_ns = 3'000'000;  // the pool's 16 due walks take 5 s of the budget
  // 78 MB: 70 MB of anonymous pages and 8 MB of libraries, each shared 18 ways.
  const FakeProc::P pool = SplitProcess(78000, 8000, {3900, 450, 0}, 1000);
  for (pid_t p = 200; p <= 216; ++p) proc.procs[p] = pool;
  ProcessSampler s(&proc, SamplerOptions{}, [&] { return proc.cpu_ns; });
  for (pid_t p = 200; p <= 216; ++p) s.Track(p, "pool", -1);
  uint64_t t = 1000 * kMs;
  v1::Sample out;
  s.Tick(t, &out);
  s.Track(200, "worker", 0);  // every walk is due again
  FakeProc::P& w = proc.procs[200];
  for (int i = 1; i <= 10; ++i) {  // a tick: 15 MB of its own, 1.6 MB written, 3 MB of libraries
    w.rss_kb += 18000;
    w.shared_kb += 3000;
    w.minflt += (15000 + 1600 + 3000) / kPageKb;
    w.pss_anon_kb += 15000 + 1600 * 17 / 18;
    w.pss_file_kb += 1500;
    w.pss_kb = w.pss_anon_kb + w.pss_file_kb;
    out.Clear();
    s.Tick(t += 100 * kMs, &out);
  }
  for (int i = 0; i < 5; ++i) {
    out.Clear();
    s.Tick(t += 100 * kMs, &out);
  }
  EXPECT_GE(proc.walks[200], 2) << "the worker waited behind the idle pool";
  for (const auto& p : out.processes()) {
    if (p.pid() == 200) {
      EXPECT_EQ(p.pss_bytes(), w.pss_kb * 1024);
    }
  }
}

// A forkserver's idle children, walked when they were made, lose PSS alike as the workers map the
// pages they share, their RSS unmoved: one's walk tells every twin's, and the budget walks one.
TEST(SamplerTest, AnIdlePoolChildsWalkIsItsTwins) {
  FakeProc proc;
  proc.walk_cost_ns = 10'000'000;  // one walk a second fits the budget
  for (pid_t p = 300; p < 304; ++p) proc.procs[p] = SplitProcess(66000, 8000, {4500, 500, 0}, 900);
  ProcessSampler s(&proc, SamplerOptions{}, [&] { return proc.cpu_ns; });
  for (pid_t p = 300; p < 304; ++p) s.Track(p, "pool", -1);
  uint64_t t = 1000 * kMs;
  v1::Sample out;
  s.Tick(t, &out);
  for (pid_t p = 300; p < 304; ++p) {  // the workers share their pages now: a lower share each
    proc.procs[p].pss_anon_kb = 3300;
    proc.procs[p].pss_kb = 3800;
  }
  proc.procs[310] = AWorkerOf100Mb();
  s.Track(310, "worker", 0);  // every walk is due
  for (int i = 0; i < 15; ++i) {
    out.Clear();
    s.Tick(t += 200 * kMs, &out);
  }
  int pool_walks = 0;
  for (pid_t p = 300; p < 304; ++p) pool_walks += proc.walks[p];
  EXPECT_EQ(pool_walks, 4 + 1);  // each first walk, then one for all
  for (const auto& p : out.processes()) {
    if (p.role() == "pool") {
      EXPECT_EQ(p.pss_bytes(), 3800ull * 1024) << p.pid();
    }
  }
}

// Workers read a leader's data set segment for seconds after they start: its PSS falls while its
// RSS stands still, and what statm shows of it is the workers' shared pages growing. The leader
// is walked again within a second, not after refresh_after (a 2-worker spawn run's leader read
// 142 MiB at the peak where a walk found 116).
TEST(SamplerTest, ALeaderWhosePagesTheOthersMapIsWalkedAgainSoon) {
  FakeProc proc;
  proc.walk_cost_ns = 10'000'000;  // one walk a second fits the budget
  proc.procs[100] = SplitProcess(211000, 150000, {60000, 32000, 50000}, 100000);  // the leader
  proc.procs[101] = SplitProcess(680000, 107000, {570000, 35000, 0}, 570000);     // workers
  proc.procs[102] = proc.procs[101];
  ProcessSampler s(&proc, SamplerOptions{}, [&] { return proc.cpu_ns; });
  s.Track(100, "leader", -1);
  s.Track(101, "worker", 0);
  s.Track(102, "worker", 1);
  uint64_t t = 1000 * kMs;
  v1::Sample out;
  s.Tick(t, &out);  // the first walks
  ASSERT_EQ(proc.walks[100], 1);
  for (int i = 1; i <= 10; ++i) {  // 2 s: each worker maps 3 MB more of the segment a tick
    for (pid_t w : {101, 102}) proc.procs[w].shared_kb += 3000;
    proc.procs[100].pss_kb -= 1000;  // the leader's share of those pages, gone to the workers
    proc.procs[100].pss_shmem_kb -= 1000;
    out.Clear();
    s.Tick(t += 200 * kMs, &out);
  }
  EXPECT_GE(proc.walks[100], 2) << "the leader waited for refresh_after";
  EXPECT_EQ(out.processes(0).pid(), 100);
  EXPECT_LE(out.processes(0).pss_bytes(), 138000ull * 1024);
}

// Beside shared step arenas (every worker maps 880 MB of shared pages), the workers faulting in
// the data set hardly move the others' shared sum, but they take the leader's share of it: the
// leader is walked again within the second, and first, its walk being the cheap one.
TEST(SamplerTest, ALeaderIsWalkedSoonBesideTheWorkersSharedArenas) {
  FakeProc proc;
  proc.walk_cost_ns = 10'000'000;  // one walk a second fits the budget
  proc.procs[100] = SplitProcess(118000, 73000, {21000, 24000, 16000}, 42000);  // the leader
  for (pid_t w = 101; w <= 104; ++w)
    proc.procs[w] = SplitProcess(900000, 880000, {8000, 20000, 200000}, 8000);
  ProcessSampler s(&proc, SamplerOptions{}, [&] { return proc.cpu_ns; });
  s.Track(100, "leader", -1);
  for (pid_t w = 101; w <= 104; ++w) s.Track(w, "worker", w - 101);
  uint64_t t = 1000 * kMs;
  v1::Sample out;
  s.Tick(t, &out);  // the first walks
  ASSERT_EQ(proc.walks[100], 1);
  for (int i = 1; i <= 5; ++i) {  // 1 s: each worker maps 1 MB more of the data set a tick
    for (pid_t w = 101; w <= 104; ++w) proc.procs[w].shared_kb += 1000;
    proc.procs[100].pss_kb -= 1000;  // the leader's share of those pages, gone to the workers
    proc.procs[100].pss_shmem_kb -= 1000;
    out.Clear();
    s.Tick(t += 200 * kMs, &out);
  }
  EXPECT_GE(proc.walks[100], 2) << "the leader waited for 2% of the arenas";
  for (pid_t w = 101; w <= 104; ++w) EXPECT_EQ(proc.walks[w], 1) << w;
  EXPECT_EQ(out.processes(0).pid(), 100);
  EXPECT_LE(out.processes(0).pss_bytes(), 58000ull * 1024);
}

// When every process's sharing changed, the one whose estimate can be most wrong is walked
// first: a forkserver holding 100 MB of shared PSS, not one of its sixteen idle children (5 MB
// each), whose PSS halves as the workers map the libraries it holds.
TEST(SamplerTest, TheLargestSharedPssIsWalkedFirst) {
  FakeProc proc;
  proc.walk_cost_ns = 12'000'000;
  FakeProc::P forkserver{190000, 105000, 5000};
  FakeProc::P child{83000, 6000, 500};
  proc.procs[10] = forkserver;
  for (pid_t p = 11; p < 27; ++p) proc.procs[p] = child;
  ProcessSampler s(&proc, SamplerOptions{}, [&] { return proc.cpu_ns; });
  for (pid_t p = 27 - 1; p >= 10; --p) s.Track(p, p == 10 ? "forkserver" : "pool", -1);
  uint64_t t = 1000 * kMs;
  v1::Sample out;
  s.Tick(t, &out);  // each one's first walk
  proc.procs[10].pss_kb = 53000;
  s.MarkAllDue();  // a worker started training
  auto walks = [&] {
    int n = 0;
    for (const auto& [pid, w] : proc.walks) n += w;
    return n;
  };
  const int first = walks();
  while (walks() == first && t < 600'000 * kMs) {
    t += 200 * kMs;
    out.Clear();
    s.Tick(t, &out);
  }
  EXPECT_EQ(proc.walks[10], 2) << "the forkserver first";
  EXPECT_EQ(walks(), first + 1);
  // Soon: the 17 first walks (204 ms of CPU) left no debt to repay at 2 ms a tick.
  EXPECT_LE(t, 2000 * kMs);
}

// A process that joins maps pages the others hold (a rank's libraries, a DataLoader's fork):
// their shares of them fall while no RSS moves, and walks dearer than the budget leave them
// unwalked for seconds. The tick that would set a new peak walks them first, so the peak is what
// the kernel says, not what the stale shares add up to; ticks below the peak walk nobody extra.
TEST(SamplerTest, ANewPeakIsConfirmedByWalkingThoseInDoubt) {
  FakeProc proc;
  proc.walk_cost_ns = 12'000'000;  // dearer than the whole bucket
  // 60 MB of libraries each, shared two ways: 40 MB private + 30 MB of shares.
  proc.procs[10] = FakeProc::P{100000, 70000, 40000};
  proc.procs[11] = FakeProc::P{100000, 70000, 40000};
  ProcessSampler s(&proc, SamplerOptions{}, [&] { return proc.cpu_ns; });
  s.Track(10, "worker", 0);
  s.Track(11, "worker", 1);
  uint64_t t = 1000 * kMs;
  v1::Sample out;
  s.Tick(t, &out);
  ASSERT_EQ(*s.peak_pss_sum(), 140000ull * 1024);
  for (auto& [pid, p] : proc.procs) p.pss_kb = 60000;  // three ways now
  proc.procs[12] = FakeProc::P{100000, 60000, 40000};
  s.Track(12, "worker", 2);
  out.Clear();
  s.Tick(t += 200 * kMs, &out);
  EXPECT_EQ(*s.peak_pss_sum(), 180000ull * 1024) << "not 200000: the two stale shares";
  EXPECT_EQ(out.total_pss_bytes(), 180000ull * 1024);
  EXPECT_EQ(proc.walks[10], 2);
  EXPECT_EQ(proc.walks[11], 2);
  // Below the peak: one process's private pages shrink; no walk outside the budget.
  proc.procs[10].rss_kb = 99000;
  proc.procs[10].uss_kb = 39000;
  proc.procs[10].pss_kb = 59000;
  const int before = proc.walks[10] + proc.walks[11] + proc.walks[12];
  s.MarkAllDue();
  out.Clear();
  s.Tick(t += 200 * kMs, &out);
  EXPECT_LE(proc.walks[10] + proc.walks[11] + proc.walks[12], before + 1) << "the budget's one";
}

// A peak that creeps up while the others map pages one process touched first alone: its RSS
// stands still while its PSS falls, and a new peak walks it once its walk is stale. 8 forked
// workers with turns read their peak PSS sum 1.116x an independent reader's once so: the worker
// that traced the step first, walked during it, went 2.2 s unwalked while its peers mapped the
// arena pages it had touched alone, the peak rising a few MiB a tick.
TEST(SamplerTest, ACreepingPeakWalksTheOneWhosePagesTheOthersMapped) {
  FakeProc proc;
  proc.walk_cost_ns = 12'000'000;  // dearer than the whole bucket: no rationed walk
  // The worker that traced the step: 40 MB of the shared step arena touched alone, and its peers.
  proc.procs[100] = SplitProcess(100000, 40000, {30000, 0, 40000}, 70000);
  proc.procs[101] = SplitProcess(60000, 20000, {30000, 0, 20000}, 50000);
  proc.procs[102] = proc.procs[101];
  ProcessSampler s(&proc, SamplerOptions{}, [&] { return proc.cpu_ns; });
  for (pid_t w = 100; w <= 102; ++w) s.Track(w, "worker", w - 100);
  uint64_t t = 1000 * kMs;
  v1::Sample out;
  s.Tick(t, &out);
  ASSERT_EQ(*s.peak_pss_sum(), 170000ull * 1024);
  for (int i = 0; i < 5; ++i) {  // a second of steps that touch nothing new
    out.Clear();
    s.Tick(t += 200 * kMs, &out);
  }
  // The peers map 0.8 MB more of its arena pages a tick each: the sum's true level would rise ~1%
  // a tick were the old shares kept, as the 8-forked-worker run's crept a few MiB a tick of ~410.
  constexpr uint64_t kTickKb = 800;
  for (uint64_t k = 1; k <= 10; ++k) {
    for (pid_t w : {101, 102}) {
      proc.procs[w].rss_kb += kTickKb;
      proc.procs[w].shared_kb += kTickKb;
      proc.procs[w].pss_shmem_kb = 20000 + kTickKb * k / 3;
      proc.procs[w].pss_kb = 30000 + proc.procs[w].pss_shmem_kb;
    }
    proc.procs[100].pss_shmem_kb = 40000 - kTickKb * k + kTickKb * k / 3;  // three ways now
    proc.procs[100].pss_kb = 30000 + proc.procs[100].pss_shmem_kb;
    out.Clear();
    s.Tick(t += 200 * kMs, &out);
  }
  EXPECT_GE(proc.walks[100], 2) << "its estimate kept the arena at its first share";
  // The processes held 170000 kB throughout: read 175276 (1.031x) with the doubt, 183333
  // (1.078x) without. Not closer: a tick within kStaleForDoubtNs of the walks counts the peers'
  // newest pages at their walks' shares, and a worker's risk is doubted only once it alone is 1%
  // of the peak (1.7 MB here, reached a tick or two after each walk). In the 8-forked-worker
  // run this mimics, 0.996-1.001x of an independent reader's (1.041x without).
  EXPECT_LE(*s.peak_pss_sum(), 170000ull * 1024 * 104 / 100) << *s.peak_pss_sum() / 1024;
}

// Workers mapping a shared step arena's pages after their walks: each new page is shared by the
// two of them, but their estimates count it at their walks' average share (LibTorch's pages,
// shared 28 ways), and a sum too low is no new peak to confirm. 16 forkserver workers read their
// peak PSS sum 0.916-0.994x an independent reader's so. Such a sum, with what may be missing,
// walks the workers, one each 500 ms.
TEST(SamplerTest, WorkersWhoseNewPagesMayHideAPeakAreWalked) {
  FakeProc proc;
  proc.walk_cost_ns = 100'000'000;  // the bucket stays in debt: no rationed walk
  for (pid_t w : {100, 101}) proc.procs[w] = SplitProcess(300000, 280000, {20000, 10000, 0}, 20000);
  ProcessSampler s(&proc, SamplerOptions{}, [&] { return proc.cpu_ns; });
  for (pid_t w : {100, 101}) s.Track(w, "worker", w - 100);
  uint64_t t = 1000 * kMs;
  v1::Sample out;
  s.Tick(t, &out);
  ASSERT_EQ(*s.peak_pss_sum(), 60000ull * 1024);
  for (int k = 0; k < 10; ++k) {  // 2 MB more of the arena a tick each, shared by the two
    for (pid_t w : {100, 101}) {
      FakeProc::P& p = proc.procs[w];
      p.rss_kb += 2000;
      p.shared_kb += 2000;
      p.pss_shmem_kb += 1000;
      p.pss_kb += 1000;
    }
    out.Clear();
    s.Tick(t += 200 * kMs, &out);
  }
  for (int k = 0; k < 25; ++k) {  // still: the arena mapped
    out.Clear();
    s.Tick(t += 200 * kMs, &out);
  }
  EXPECT_GE(proc.walks[100] + proc.walks[101], 4);
  // They held 80000 kB at the end; without these walks the peak read 62416 (0.780x).
  EXPECT_GE(*s.peak_pss_sum(), 80000ull * 1024 * 98 / 100) << *s.peak_pss_sum() / 1024;
}

// A spawned worker faulting in more of the library pages its leader holds: each new page is the
// two's, but the worker's estimate counts it at its walk's share of its older ones (more than
// half), and the leader's PSS falls with no RSS moved. A 1-worker spawn run's peak crept up a few
// MiB a tick so, the leader 1.9 s and the worker 1.7 s unwalked: 559.0 MiB where an independent
// reader read 544.1 (1.027x; leader 53 to its 44, worker 506 to its 499).
TEST(SamplerTest, ACreepingPeakWalksTheLeaderWhosePagesTheWorkerMapped) {
  FakeProc proc;
  proc.walk_cost_ns = 100'000'000;  // the bucket stays in debt: no rationed walk
  // The leader: 30 MB of its library pages the worker's too, 20 MB its own.
  proc.procs[100] = SplitProcess(57000, 50000, {7000, 35000, 0}, 27000);
  // The worker: 449 MB anonymous, its 40 MB of library pages 30 the leader's.
  proc.procs[101] = SplitProcess(489000, 40000, {449000, 25000, 0}, 459000);
  ProcessSampler s(&proc, SamplerOptions{}, [&] { return proc.cpu_ns; });
  s.Track(100, "leader", -1);
  s.Track(101, "worker", 0);
  uint64_t t = 1000 * kMs;
  v1::Sample out;
  s.Tick(t, &out);
  ASSERT_EQ(*s.peak_pss_sum(), 516000ull * 1024);
  for (int i = 0; i < 5; ++i) {  // a second of steps that touch nothing new
    out.Clear();
    s.Tick(t += 200 * kMs, &out);
  }
  uint64_t truth = 516000;
  for (uint64_t k = 1; k <= 10; ++k) {  // 2 MB more of the leader's pages a tick, 0.5 MB anon
    FakeProc::P& w = proc.procs[101];
    w.rss_kb += 2500;
    w.shared_kb += 2000;
    w.pss_anon_kb += 500;
    w.pss_file_kb += 1000;
    w.pss_kb += 1500;
    w.uss_kb += 500;
    FakeProc::P& l = proc.procs[100];
    l.pss_file_kb -= 1000;
    l.pss_kb -= 1000;
    l.uss_kb -= 2000;
    truth += 500;
    out.Clear();
    s.Tick(t += 200 * kMs, &out);
  }
  EXPECT_GE(proc.walks[100], 2) << "its estimate kept the pages the worker mapped its own";
  // The processes held 521000 kB at the end: read 528500 (1.014x) with the leader's doubt,
  // 532500 (1.022x) without. Not closer: what is left in doubt at a peak may be kPeakDoubt of it,
  // and the worker's own risk (0.125 of what it mapped) is below half that throughout.
  EXPECT_LE(*s.peak_pss_sum(), truth * 1024 * 1015 / 1000) << *s.peak_pss_sum() / 1024;
  EXPECT_GE(*s.peak_pss_sum(), truth * 1024) << *s.peak_pss_sum() / 1024;
}

// A worker that begins to exit while a tick walks it and its leader: the leader's walk counts the
// pages the two shared at its larger share, the worker's walk at its own. A 2-worker model file
// run's peak PSS sum read 1.079x an independent reader's so; the one leaving leaves the sums.
TEST(SamplerTest, AProcessThatBeganToExitDuringTheWalksLeavesTheTicksSums) {
  FakeProc proc;
  proc.procs[100] = SplitProcess(200000, 40000, {160000, 20000, 0}, 160000);  // the worker
  proc.procs[101] = SplitProcess(60000, 40000, {20000, 20000, 0}, 20000);     // its leader
  proc.before_walk = [&](FakeProc::P& p) {
    if (&p != &proc.procs[101]) return;
    proc.procs[100].flags = 0x4;  // PF_EXITING: its pages are the leader's alone
    p.pss_file_kb = 40000;
    p.pss_kb = 60000;
    p.uss_kb = 60000;
  };
  ProcessSampler s(&proc, SamplerOptions{}, [&] { return proc.cpu_ns; });
  s.Track(100, "worker", 0);
  s.Track(101, "leader", -1);
  v1::Sample out;
  s.Tick(1000 * kMs, &out);
  EXPECT_EQ(proc.walks[100] + proc.walks[101], 2);
  // They held 220000 kB before the exit began and 60000 after: 240000 read without this.
  EXPECT_LE(*s.peak_pss_sum(), 220000ull * 1024) << *s.peak_pss_sum() / 1024;
  EXPECT_EQ(out.processes_size(), 1);
}

// A walk that counted a step's buffers twice (freed in one mapping, faulted in in another while
// it read them) reads an Rss statm never read, before or after it: not taken. A 1-worker fork
// run's read 559 MiB where statm read 489 on both sides, and its peak PSS sum 1.116x.
TEST(SamplerTest, AWalkWhoseRssStatmNeverReadIsNotTaken) {
  FakeProc proc;
  proc.procs[100] = SplitProcess(489000, 20000, {460000, 0, 5000}, 465000);
  ProcessSampler s(&proc, SamplerOptions{}, [&] { return proc.cpu_ns; });
  s.Track(100, "worker", 0);
  uint64_t t = 1000 * kMs;
  v1::Sample out;
  s.Tick(t, &out);
  ASSERT_EQ(*s.peak_pss_sum(), 465000ull * 1024);
  proc.before_walk = [](FakeProc::P& p) {  // 70 MB counted twice by the walk alone
    if (p.rss_kb < 400000) return;         // the new one's walk is whole
    p.rss_kb += 70000;
    p.pss_kb += 70000;
    p.pss_anon_kb += 70000;
    p.uss_kb += 70000;
  };
  proc.after_walk = [](FakeProc::P& p) {
    if (p.rss_kb < 400000) return;
    p.rss_kb -= 70000;
    p.pss_kb -= 70000;
    p.pss_anon_kb -= 70000;
    p.uss_kb -= 70000;
  };
  s.Track(101, "worker", 1);  // a new process: every walk is due again
  proc.procs[101] = SplitProcess(20000, 10000, {10000, 0, 5000}, 10000);
  out.Clear();
  s.Tick(t += 200 * kMs, &out);
  EXPECT_GE(proc.walks[100], 2) << "walked again, its sharing changed";
  const uint64_t torn = s.torn_walks();  // its due walk, and the new peak's confirming one
  EXPECT_GE(torn, 1u);
  const int walks = proc.walks[100];
  EXPECT_EQ(*s.peak_rss_sum(), (489000ull + 20000) * 1024);
  EXPECT_LE(*s.peak_pss_sum(), (465000ull + 15000) * 1024) << "the torn walk's 70 MB are not in it";
  proc.before_walk = nullptr;
  proc.after_walk = nullptr;
  for (int i = 0; i < 30; ++i) {  // walked again as its tier says, and taken
    out.Clear();
    s.Tick(t += 200 * kMs, &out);
  }
  EXPECT_EQ(s.torn_walks(), torn);
  EXPECT_GT(proc.walks[100], walks);
  EXPECT_EQ(out.processes(0).pss_bytes(), 465000ull * 1024);
}

// A tick's walks take milliseconds, in which a process may exit and leave its pages to those it
// shared them with: read as it was before the walks, it counts beside a walk that already holds
// them (a command run's DataLoader workers exiting read 3% high as the run's peak).
TEST(SamplerTest, AProcessThatExitsDuringTheWalksIsNotCountedTwice) {
  FakeProc proc;
  proc.procs[10] = FakeProc::P{100000, 60000, 40000};  // a rank
  proc.procs[11] = FakeProc::P{100000, 60000, 40000};  // its loader, sharing 40 MB of it
  ProcessSampler s(&proc, SamplerOptions{}, [&] { return proc.cpu_ns; });
  s.Track(10, "worker", 0);
  s.Track(11, "child", 0);
  uint64_t t = 1000 * kMs;
  v1::Sample out;
  s.Tick(t, &out);
  ASSERT_EQ(*s.peak_pss_sum(), 120000ull * 1024);
  proc.before_walk = [&](FakeProc::P& p) {
    if (&p != &proc.procs[10]) return;
    proc.procs.erase(11);  // the loader exits while the rank is walked
    p.pss_kb = 100000;
    p.uss_kb = 100000;
  };
  s.MarkAllDue();
  out.Clear();
  s.Tick(t += 200 * kMs, &out);
  ASSERT_EQ(proc.walks[10], 2);
  EXPECT_EQ(out.processes_size(), 1);
  EXPECT_EQ(out.total_pss_bytes(), 100000ull * 1024);
  EXPECT_EQ(*s.peak_pss_sum(), 120000ull * 1024) << "not 160000: the loader's 60000 twice";
}

// A fork leader walked before its workers were forked held its pages alone (PSS = USS: no
// shared PSS at all), and they are now shared with every worker: of the processes whose sharing
// changed it is the one read most wrong, too high. Ranked by shared PSS it came last, behind
// workers walked a moment before, and a 4-worker fork run's peak PSS sum read 3% high.
TEST(SamplerTest, AForkLeaderWhosePagesBecameSharedIsWalkedFirst) {
  FakeProc proc;
  proc.walk_cost_ns = 12'000'000;
  proc.procs[100] = FakeProc::P{300000, 300000, 300000};  // the leader, pages its own
  ProcessSampler s(&proc, SamplerOptions{}, [&] { return proc.cpu_ns; });
  s.Track(100, "leader", -1);
  uint64_t t = 1000 * kMs;
  v1::Sample out;
  s.Tick(t, &out);  // the leader's first walk, before any fork
  for (pid_t p = 101; p < 105; ++p) {
    proc.procs[p] = FakeProc::P{300000, 70000, 10000};  // forked: 60 MB each of shared PSS
    s.Track(p, "worker", p - 101);
    out.Clear();
    s.Tick(t += 200 * kMs, &out);  // each worker's first walk as it comes
  }
  // Each arrival raised the sums to a new peak, which walked everyone in doubt (ConfirmPeak);
  // a worker starting to train is what leaves them all due with no peak to confirm.
  proc.procs[100].pss_kb = 70000;  // shared five ways now
  proc.procs[100].uss_kb = 10000;
  s.MarkAllDue();
  const int leader_walks = proc.walks[100];
  int others = 0;
  for (pid_t p = 101; p < 105; ++p) others += proc.walks[p];
  while (proc.walks[100] == leader_walks && t < 600'000 * kMs) {
    out.Clear();
    s.Tick(t += 200 * kMs, &out);
  }
  int others_after = 0;
  for (pid_t p = 101; p < 105; ++p) others_after += proc.walks[p];
  EXPECT_EQ(others_after, others) << "the leader before any worker walked again";
  EXPECT_EQ(out.processes(0).pss_bytes(), 70000ull * 1024);
}

TEST(SamplerTest, AnExitingProcessIsSkippedNotCountedAsZero) {
  FakeProc proc;
  proc.procs[10] = {};
  proc.procs[11] = {};
  ProcessSampler s(&proc, SamplerOptions{}, [&] { return proc.cpu_ns; });
  s.Track(10, "worker", 0);
  s.Track(11, "worker", 1);
  v1::Sample out;
  s.Tick(1000 * kMs, &out);
  proc.procs[11].rss_kb = 0;  // its mm is torn down: statm reads 0
  out.Clear();
  s.Tick(1200 * kMs, &out);
  ASSERT_EQ(out.processes_size(), 1);
  EXPECT_EQ(out.processes(0).pid(), 10);
}

// A forkserver that forks a new process: its private pages become shared with the child, so it
// is walked right after the child's first walk, ahead of larger processes merely due.
TEST(SamplerTest, TheParentOfANewProcessIsWalkedNext) {
  FakeProc proc;
  proc.procs[5] = {};  // the forkserver
  proc.procs[5].pss_kb = 20000;
  proc.procs[5].uss_kb = 15000;
  proc.procs[10] = {};  // a big worker: due too, and by PSS ahead of the forkserver
  proc.procs[10].pss_kb = 500000;
  proc.procs[10].rss_kb = 600000;
  ProcessSampler s(&proc, SamplerOptions{}, [&] { return proc.cpu_ns; });
  s.Track(5, "forkserver", -1);
  s.Track(10, "worker", 0);
  v1::Sample out;
  s.Tick(1000 * kMs, &out);  // first walks of both
  proc.walks.clear();
  proc.procs[20] = {};  // the forkserver forks a child; its own pages are now shared
  proc.procs[20].ppid = 5;
  proc.procs[5].uss_kb = 1000;
  s.Track(20, "pool", -1);
  proc.walk_cost_ns = 6'000'000;  // more than the 5 ms burst: one rationed walk a tick
  out.Clear();
  s.Tick(2000 * kMs, &out);  // the child's first walk and its parent's are free; then one more
  EXPECT_EQ(proc.walks[20], 1);
  EXPECT_EQ(proc.walks[5], 1) << "the parent goes before the larger process merely due";
  EXPECT_EQ(proc.walks[10], 1);
  for (const auto& p : out.processes()) {
    if (p.pid() == 5) {
      EXPECT_EQ(p.uss_bytes(), 1000u * 1024);
    }
  }
}

// Makes `pid` move and ticks with walks ten times dearer than the 5 ms burst: `pid` is walked,
// rationed, and the bucket is left in debt, so that any rationed walk after it must wait.
void LeaveTheBucketInDebt(FakeProc& proc, ProcessSampler& s, pid_t pid, uint64_t now_ns) {
  proc.walk_cost_ns = 50'000'000;
  proc.procs[pid].rss_kb = 200000;
  const int walks = proc.walks[pid];
  v1::Sample out;
  s.Tick(now_ns, &out);
  ASSERT_EQ(proc.walks[pid], walks + 1);
}

// A fork with the bucket in debt: the parent's walk is not rationed either, or its pre-fork
// private pages count again in every child for ticks (a multi_model leader read 80 MiB for
// three ticks that a walk found to be 42, and the run's peak PSS sum 30% high).
TEST(SamplerTest, TheParentOfANewProcessIsWalkedAtOnceEvenInDebt) {
  FakeProc proc;
  proc.procs[5] = {};  // the leader
  proc.procs[5].pss_kb = 80000;
  proc.procs[5].uss_kb = 80000;
  ProcessSampler s(&proc, SamplerOptions{}, [&] { return proc.cpu_ns; });
  s.Track(5, "leader", -1);
  v1::Sample out;
  s.Tick(1000 * kMs, &out);  // its first walk
  LeaveTheBucketInDebt(proc, s, 5, 1200 * kMs);
  proc.procs[20] = {};  // it forks a worker: its pages are now the worker's too
  proc.procs[20].ppid = 5;
  proc.procs[5].pss_kb = 42000;
  proc.procs[5].uss_kb = 4000;
  s.Track(20, "worker", 0);
  out.Clear();
  s.Tick(1400 * kMs, &out);
  EXPECT_EQ(proc.walks[20], 1);
  EXPECT_EQ(proc.walks[5], 3) << "the parent waited for the bucket";
  for (const auto& p : out.processes()) {
    if (p.pid() == 5) {
      EXPECT_EQ(p.pss_bytes(), 42000u * 1024);
    }
  }
}

// And when a child leaves: the pages it shared with its parent are the parent's alone again.
TEST(SamplerTest, TheParentOfAProcessThatLeftIsWalkedAtOnceEvenInDebt) {
  FakeProc proc;
  proc.procs[5] = {};  // the leader, its pages shared with its worker
  proc.procs[5].uss_kb = 4000;
  proc.procs[20] = {};
  proc.procs[20].ppid = 5;
  ProcessSampler s(&proc, SamplerOptions{}, [&] { return proc.cpu_ns; });
  s.Track(5, "leader", -1);
  s.Track(20, "worker", 0);
  v1::Sample out;
  s.Tick(1000 * kMs, &out);  // first walks of both
  LeaveTheBucketInDebt(proc, s, 20, 1200 * kMs);
  proc.procs.erase(20);  // it exits
  s.Untrack(20);
  proc.procs[5].uss_kb = 40000;
  out.Clear();
  s.Tick(1400 * kMs, &out);
  EXPECT_EQ(proc.walks[5], 2) << "the parent waited for the bucket";
  ASSERT_EQ(out.processes_size(), 1);
  EXPECT_EQ(out.processes(0).uss_bytes(), 40000u * 1024);
}

TEST(SamplerTest, SumOfPeaksAddsEachProcessAtItsOwnPeak) {
  FakeProc proc;
  proc.procs[10] = {};
  proc.procs[11] = {};
  ProcessSampler s(&proc, SamplerOptions{}, [&] { return proc.cpu_ns; });
  s.Track(10, "worker", 0);
  s.Track(11, "worker", 1);
  v1::Sample out;
  proc.procs[10].pss_kb = 90000;  // 10 peaks first, 11 later: never both at once
  s.Tick(1000 * kMs, &out);
  proc.procs[10].pss_kb = 30000;
  proc.procs[10].rss_kb = 50000;
  proc.procs[11].pss_kb = 80000;
  proc.procs[11].rss_kb = 150000;
  out.Clear();
  s.Tick(7000 * kMs, &out);  // both moved: walked again
  EXPECT_EQ(s.peak_pss_sum(), (90000ull + 60000) * 1024);
  EXPECT_EQ(s.sum_of_peak_pss(), (90000ull + 80000) * 1024);
}

}  // namespace
}  // namespace shoal
