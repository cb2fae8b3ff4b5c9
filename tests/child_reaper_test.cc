#include "server/child_reaper.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "server/fork_server_supervisor.h"
#include "shared/os/process.h"
#include "tests/fakes.h"

namespace shoal {
namespace {

using testing::FakeChildWaiter;
using testing::FakeClock;
using testing::FakeProcessControl;

TEST(ChildReaperTest, RoutesEachExitToItsWatcherOnceAndReapsTheRest) {
  FakeChildWaiter waiter;
  ChildReaper reaper(&waiter);
  std::vector<std::pair<pid_t, int>> a, b;
  reaper.Watch(10, [&](pid_t p, int s) { a.push_back({p, s}); });
  reaper.Watch(11, [&](pid_t p, int s) { b.push_back({p, s}); });
  waiter.ended = {{99, 0}, {11, 9}, {10, 256}};  // 99: an orphan nobody watches
  reaper.Poll();
  EXPECT_EQ(a, (std::vector<std::pair<pid_t, int>>{{10, 256}}));
  EXPECT_EQ(b, (std::vector<std::pair<pid_t, int>>{{11, 9}}));
  EXPECT_TRUE(waiter.ended.empty());
  waiter.ended = {{10, 0}};  // a recycled pid is nobody's now
  reaper.Poll();
  EXPECT_EQ(a.size(), 1u);
}

TEST(ChildReaperTest, ForgottenPidsAreReapedSilently) {
  FakeChildWaiter waiter;
  ChildReaper reaper(&waiter);
  int calls = 0;
  reaper.Watch(10, [&](pid_t, int) { ++calls; });
  reaper.Forget(10);
  waiter.ended = {{10, 0}};
  reaper.Poll();
  EXPECT_EQ(calls, 0);
}

TEST(ForkServerSupervisorTest, RestartsADeadForkServerAtMostOnceASecond) {
  FakeChildWaiter waiter;
  ChildReaper reaper(&waiter);
  FakeProcessControl proc;
  FakeClock clock;
  ForkServerSupervisor fs({"/bin/shoal-worker", "/tmp/z.sock", 4, 1}, &proc, &clock, &reaper);
  fs.EnsureRunning();
  ASSERT_EQ(proc.spawned.size(), 1u);
  EXPECT_EQ(proc.spawned[0][2], "forkserver");
  EXPECT_EQ(fs.pid(), 1000);
  fs.EnsureRunning();  // running: nothing to do
  EXPECT_EQ(proc.spawned.size(), 1u);

  waiter.ended = {{1000, SIGKILL}};
  reaper.Poll();
  EXPECT_EQ(fs.pid(), -1);
  EXPECT_EQ(fs.restarts(), 1);
  EXPECT_EQ(fs.TakeLastExit(), "killed by signal 9");
  clock.Advance(500'000'000);
  fs.EnsureRunning();  // too soon after the last start
  EXPECT_EQ(proc.spawned.size(), 1u);
  clock.Advance(600'000'000);
  fs.EnsureRunning();
  EXPECT_EQ(proc.spawned.size(), 2u);
  EXPECT_EQ(fs.pid(), 1001);

  proc.live_groups.erase(1001);
  fs.Stop();
  EXPECT_EQ(proc.signals.back(), (std::pair<pid_t, int>{1001, SIGKILL}));
  EXPECT_EQ(fs.pid(), -1);
}

// One that never listens is given up after the timeout, with how it last ended, or at once when
// the caller gives up.
TEST(ForkServerSupervisorTest, WaitReadyGivesUpAfterTheTimeoutOrWhenAsked) {
  FakeChildWaiter waiter;
  ChildReaper reaper(&waiter);
  FakeProcessControl proc;
  FakeClock clock;
  ForkServerSupervisor fs({"/bin/shoal-worker", "/nonexistent/z.sock", 4, 1}, &proc, &clock,
                          &reaper);
  int asked = 0;
  Status st = fs.WaitReady(3'000'000'000ull, [&] {
    if (++asked == 2) waiter.ended = {{1000, SIGKILL}};  // the first one dies while booting
    clock.Advance(1'100'000'000);
    return false;
  });
  EXPECT_EQ(st.code(), Code::kUnavailable);
  EXPECT_EQ(st.message(),
            "the forkserver did not come up within 3000 ms (stopped or still loading?) (its "
            "last end: killed by signal 9)");
  EXPECT_EQ(proc.spawned.size(), 2u);  // restarted once in between

  asked = 0;
  st = fs.WaitReady(60'000'000'000ull, [&] { return ++asked == 3; });
  EXPECT_EQ(st.code(), Code::kUnavailable);
  EXPECT_EQ(asked, 3);
}

// A spawned process holds the fds it was given and no other of ours, even one opened without
// O_CLOEXEC (as Asio's sockets and zlib's files are).
TEST(SpawnTest, OnlyTheGivenFdsCrossIntoTheChild) {
  const int stray = ::open("/dev/null", O_RDONLY);  // no O_CLOEXEC
  const int given = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(stray, 0);
  ASSERT_GE(given, 0);
  const std::string script = "test ! -e /proc/self/fd/" + std::to_string(stray) +
                             " && test -e /proc/self/fd/7 && test -e /proc/self/fd/2";
  auto pid = SpawnProcess({"/bin/sh", "-c", script}, {{{given, 7}}, false});
  ASSERT_TRUE(pid.ok()) << pid.status().message();
  int status = 0;
  ASSERT_EQ(::waitpid(*pid, &status, 0), *pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  ::close(stray);
  ::close(given);
}

}  // namespace
}  // namespace shoal
