#include "shared/os/procfs.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "shared/os/process.h"
#include "tests/testutil.h"

namespace shoal {
namespace {

constexpr const char* kRollup =
    "55d0c0a00000-7ffd3b1f4000 ---p 00000000 00:00 0                          [rollup]\n"
    "Rss:              696164 kB\n"
    "Pss:              623402 kB\n"
    "Pss_Anon:         585220 kB\n"
    "Pss_File:          38182 kB\n"
    "Pss_Shmem:             0 kB\n"
    "Shared_Clean:      80704 kB\n"
    "Shared_Dirty:       3476 kB\n"
    "Private_Clean:      1204 kB\n"
    "Private_Dirty:    610780 kB\n"
    "Referenced:       696164 kB\n"
    "Anonymous:        610656 kB\n"
    "AnonHugePages:      2048 kB\n"
    "Swap:                  0 kB\n";

TEST(ProcfsTest, ParsesSmapsRollup) {
  auto r = ParseSmapsRollup(kRollup);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->rss, 696164ull * 1024);
  EXPECT_EQ(r->pss, 623402ull * 1024);  // not Pss_Anon
  EXPECT_EQ(r->uss(), (1204ull + 610780) * 1024);
  EXPECT_LE(r->pss, r->rss);
  ASSERT_TRUE(r->has_split);
  EXPECT_EQ(r->pss_anon + r->pss_file + r->pss_shmem, r->pss);
  EXPECT_EQ(r->anonymous, 610656ull * 1024);  // not AnonHugePages
}

// The split is used only whole: without Anonymous the walk's resident pages cannot be divided.
TEST(ProcfsTest, ASplitWithoutAnonymousIsNoSplit) {
  std::string text = kRollup;
  text.erase(text.find("Anonymous:"), std::string("Anonymous:        610656 kB\n").size());
  auto r = ParseSmapsRollup(text);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(r->has_split);
}

TEST(ProcfsTest, RejectsTruncatedRollup) {
  EXPECT_FALSE(ParseSmapsRollup("Rss: 12 kB\n").ok());
  EXPECT_FALSE(ParseSmapsRollup("Rss: x kB\nPss: 1 kB\n").ok());
}

TEST(ProcfsTest, ParsesStatmAndStat) {
  auto m = ParseStatm("1000 250 30 1 0 100 0\n", 4096);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->resident_bytes, 250ull * 4096);
  // A command name with spaces and a ')' must not shift the fields.
  auto s =
      ParseProcStat("123 (a b) c) R 1 123 123 0 -1 4194304 100 0 0 0 77 23 0 0 20 0 1 0 5 0 0");
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->state, 'R');
  EXPECT_EQ(s->ppid, 1);
  EXPECT_EQ(s->utime_ticks, 77u);
  EXPECT_EQ(s->stime_ticks, 23u);
  EXPECT_EQ(s->minflt, 100u);
  EXPECT_EQ(s->start_ticks, 5u);  // field 22: which process holds the pid
  EXPECT_EQ(s->flags, 4194304u);  // field 9
  EXPECT_FALSE(s->exiting());
  EXPECT_TRUE(ParseProcStat("1 (w) R 0 1 1 0 -1 4194308 3 0 0 0 5 6 0 0")->exiting());
  // A line that stops before it (an old or a fake one) has none.
  EXPECT_EQ(ParseProcStat("1 (w) S 0 1 1 0 -1 0 3 0 0 0 5 6 0 0")->start_ticks, std::nullopt);
  EXPECT_FALSE(ParseProcStat("garbage").ok());
}

TEST(ProcfsTest, ParsesStatusFields) {
  const char* status =
      "Name:\tshoal-worker\nVmPeak:\t  900 kB\nVmHWM:\t  812 kB\nVmRSS:\t 700 kB\n";
  auto v = ParseStatusKb(status, "VmHWM");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 812u * 1024);
  EXPECT_FALSE(ParseStatusKb(status, "VmSwap").ok());
}

TEST(ProcfsTest, ParsesTheKernelsOomKillCount) {
  auto n = ParseVmstatOomKills("pgfault 77\noom_kill_x 5\noom_kill 12\nnuma_hit 1\n");
  ASSERT_TRUE(n.ok()) << n.status().message();
  EXPECT_EQ(*n, 12u);  // the exact key, not one it prefixes
  EXPECT_EQ(ParseVmstatOomKills("pgfault 77\n").status().code(), Code::kNotFound);
  EXPECT_FALSE(ParseVmstatOomKills("oom_kill x\n").ok());
  EXPECT_TRUE(ReadOomKills().has_value());  // this kernel (>= 4.13) counts them
}

TEST(ProcfsTest, ReadsOwnProcFiles) {
  RealProcReader r;
  auto text = r.Read(getpid(), "smaps_rollup");
  ASSERT_TRUE(text.ok());
  auto roll = ParseSmapsRollup(*text);
  ASSERT_TRUE(roll.ok());
  EXPECT_GT(roll->rss, 0u);
  EXPECT_LE(roll->pss, roll->rss);
}

uint64_t OwnPssNow() {
  RealProcReader r;
  auto text = r.Read(getpid(), "smaps_rollup");
  auto roll = text.ok() ? ParseSmapsRollup(*text) : StatusOr<SmapsRollup>(text.status());
  return roll.ok() ? roll->pss : 0;
}

// A burst that rises and falls while the watch runs, between its first read and its last, is
// its peak: the watch's thread read it (NoteOwnPss at the watch's ends alone would not). The
// burst is sized to end above any peak this process noted before, so only the watch can pass.
TEST(OwnPssWatchTest, CatchesABurstBetweenItsEnds) {
  const uint64_t base = OwnPssNow();
  ASSERT_GT(base, 0u);
  const uint64_t before = OwnPssPeak().value_or(0);
  const size_t burst =
      std::max<uint64_t>(96ull << 20, before - std::min(before, base) + (64ull << 20));
  {
    OwnPssWatch watch(std::chrono::milliseconds(5));
    void* p = ::mmap(nullptr, burst, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    std::memset(p, 1, burst);
    std::this_thread::sleep_for(std::chrono::milliseconds(60));
    ::munmap(p, burst);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_LT(OwnPssNow(), base + burst / 2);  // gone by the watch's last read
  ASSERT_TRUE(OwnPssPeak().has_value());
  EXPECT_GE(*OwnPssPeak(), base + burst * 9 / 10);
  ASSERT_TRUE(OwnUssPeak().has_value());  // the burst was private: USS rose as much
  EXPECT_GE(*OwnUssPeak(), burst * 9 / 10);
}

// The resident kB of this process's mapping that starts at `at`, from /proc/self/smaps.
uint64_t MappingRssKb(const void* at) {
  std::ifstream smaps("/proc/self/smaps");
  char start[32];
  std::snprintf(start, sizeof start, "%lx-", reinterpret_cast<unsigned long>(at));
  bool in_it = false;
  for (std::string line; std::getline(smaps, line);) {
    if (line.rfind(start, 0) == 0) in_it = true;
    if (in_it && line.rfind("Rss:", 0) == 0) return std::strtoull(line.c_str() + 4, nullptr, 10);
  }
  return ~0ull;
}

uint64_t SumOfBytes(const unsigned char* p, size_t n) {
  uint64_t sum = 0;
  for (size_t i = 0; i < n; i += 512) sum += p[i];
  return sum;
}

// A leader drops the clean pages of the files it maps: a read-only private mapping of a file,
// every page resident, has none resident after, and the process runs on as before: the file's
// bytes read back the same, and code and relocated data (calls through the PLT, vtables,
// strings) fault back or were never dropped. The test maps a file of its own rather than
// counting the libraries' pages: how many of those fault straight back (fault-around, the
// reads of /proc themselves) is the kernel's, and once made this test red in CI. In a child, so
// the test process keeps its own pages; each way to fail exits with a code of its own.
TEST(ProcessTest, DroppingCleanFilePagesKeepsTheProcessWhole) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/pages";
  const size_t size = 4 << 20;
  {
    std::ofstream f(path, std::ios::binary);
    for (size_t i = 0; i < size; ++i) f.put(static_cast<char>(i * 7 + i / 4096));
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  void* at = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  ASSERT_NE(at, MAP_FAILED);
  const auto* bytes = static_cast<const unsigned char*>(at);
  const uint64_t sum = SumOfBytes(bytes, size);
  ASSERT_EQ(MappingRssKb(at), size / 1024) << "every page of the file read in";
  const pid_t child = ::fork();
  if (child == 0) {
    const uint64_t advised = DropCleanFilePages();
    const uint64_t after_kb = MappingRssKb(at);
    std::vector<std::string> v = {"c", "a", "b"};
    std::sort(v.begin(), v.end());
    const std::string joined = v[0] + v[1] + v[2] + std::to_string(42);
    if (advised < size) ::_exit(2);
    if (after_kb != 0) ::_exit(3);
    if (SumOfBytes(bytes, size) != sum) ::_exit(4);
    if (joined != "abc42" || DescribeWaitStatus(0) != "exited with code 0") ::_exit(5);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ::munmap(at, size);
  // 2: nothing advised; 3: the file's pages stayed resident; 4: they read back otherwise;
  // 5: the process's own code or data did not survive.
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << DescribeWaitStatus(status);
}

}  // namespace
}  // namespace shoal
