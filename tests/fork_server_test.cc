// The forkserver's protocol on fakes: its forks and its reaping go through ProcessControl and
// ChildWaiter, so no worker runs and no child ends but when the test says; a real socket carries
// a leader's requests, with the two descriptors each one passes, as a leader sends them.
#include "worker/fork_server.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <deque>
#include <filesystem>
#include <mutex>
#include <thread>

#include "shared/ipc/ipc_codec.h"
#include "shared/ipc/packet.h"
#include "shoal/ipc/v1/ipc.pb.h"
#include "tests/testutil.h"

namespace shoal {
namespace {

using ipc::v1::ForkRequest;
using ipc::v1::ForkServerReply;

// Forks nothing: each "child" gets the next pid. Called from the forkserver's thread.
class CountingForks : public ProcessControl {
 public:
  StatusOr<pid_t> Spawn(const std::vector<std::string>&, const SpawnOptions&) override {
    return Internal("the forkserver spawns nothing");
  }
  StatusOr<pid_t> Fork(const std::function<int()>&) override {
    ++forks;
    return next_pid++;
  }
  void Signal(pid_t, int) override {}
  void SignalGroup(pid_t, int) override {}
  bool GroupExists(pid_t) override { return false; }
  std::atomic<int> forks{0};
  std::atomic<pid_t> next_pid{5000};
};

// Children end when the test says (End), as the kernel would report them.
class ScriptedReaper : public ChildWaiter {
 public:
  bool ReapOne(pid_t* pid, int* status) override {
    std::lock_guard<std::mutex> l(mu_);
    if (ended_.empty()) return false;
    std::tie(*pid, *status) = ended_.front();
    ended_.pop_front();
    return true;
  }
  void End(pid_t pid, int status) {
    std::lock_guard<std::mutex> l(mu_);
    ended_.push_back({pid, status});
  }

 private:
  std::mutex mu_;
  std::deque<std::pair<pid_t, int>> ended_;
};

class ForkServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::pipe(stop_), 0);
    args_.socket = dir_ / "fs.sock";
    args_.pool = 2;
    args_.processes = &forks_;
    args_.children = &reaper_;
    args_.stop_fd = stop_[0];
    server_ = std::thread([this] { rc_ = RunForkServer(args_); });
    // It warms every kind (LibTorch, a training step) before it listens.
    ASSERT_TRUE(testing::WaitFor([&] { return std::filesystem::exists(args_.socket); }, 60));
    auto c = ConnectPacket(args_.socket);
    ASSERT_TRUE(c.ok()) << c.status().message();
    leader_ = *c;
    ASSERT_TRUE(testing::WaitFor([&] { return forks_.forks >= 2; }, 10));  // the pool, ahead
  }
  void TearDown() override {
    ASSERT_EQ(::write(stop_[1], "x", 1), 1);
    server_.join();
    EXPECT_EQ(rc_, 0);
    ::close(leader_);
    ::close(stop_[0]);
    ::close(stop_[1]);
  }
  // A leader's request for worker `index`, with its lifetime pipe and output attached.
  void Ask(uint32_t index) {
    ForkRequest req;
    req.set_experiment_id("x0123456789");
    req.set_index(index);
    req.mutable_spec()->set_kind("hogwild");
    int p[2];
    ASSERT_EQ(::pipe(p), 0);
    ASSERT_TRUE(SendPacket(leader_, EncodePacket(req), {p[0], p[1]}).ok());
    ::close(p[0]);
    ::close(p[1]);
  }
  ForkServerReply Next() {
    pollfd p{leader_, POLLIN, 0};
    EXPECT_EQ(::poll(&p, 1, 10000), 1) << "no reply in 10 s";
    std::string msg;
    ForkServerReply r;
    EXPECT_TRUE(RecvPacket(leader_, &msg).ok());
    EXPECT_TRUE(DecodePacket(msg, &r).ok());
    return r;
  }
  // SIGCHLD to the forkserver's thread, as a child's end raises it there.
  void ChildEnded(pid_t pid, int status) {
    reaper_.End(pid, status);
    ASSERT_EQ(::pthread_kill(server_.native_handle(), SIGCHLD), 0);
  }

  testing::TempDir dir_;
  CountingForks forks_;
  ScriptedReaper reaper_;
  ForkServerArgs args_;
  int stop_[2] = {-1, -1};
  int leader_ = -1;
  int rc_ = -1;
  std::thread server_;
};

// The pool's two children were forked ahead with no process behind them (their ends of the
// socketpairs closed): each fails the hand-over, as a dead idle child does, and a fork made now
// serves the request. Its end then goes to the leader that asked for it.
TEST_F(ForkServerTest, ARequestSkipsDeadIdleChildrenAndItsWorkersEndGoesToItsLeader) {
  Ask(3);
  ForkServerReply r = Next();
  ASSERT_TRUE(r.has_forked()) << r.DebugString();
  EXPECT_EQ(r.forked().index(), 3u);
  EXPECT_EQ(r.forked().pid(), 5002);  // 5000 and 5001 could not take it
  EXPECT_TRUE(testing::WaitFor([&] { return forks_.forks >= 5; }, 10));  // the pool refilled
  ChildEnded(5002, 9);  // killed by SIGKILL, as waitpid says it
  r = Next();
  ASSERT_TRUE(r.has_exited()) << r.DebugString();
  EXPECT_EQ(r.exited().pid(), 5002);
  EXPECT_EQ(r.exited().wait_status(), 9);
}

// An idle child that ends is replaced, and no leader hears of it.
TEST_F(ForkServerTest, AnIdleChildThatEndsIsReplacedAndReportedToNoOne) {
  ChildEnded(5000, 0);
  EXPECT_TRUE(testing::WaitFor([&] { return forks_.forks >= 3; }, 10));
  pollfd p{leader_, POLLIN, 0};
  EXPECT_EQ(::poll(&p, 1, 300), 0);  // nothing for the leader
}

TEST_F(ForkServerTest, AMalformedRequestIsAnsweredWithAnError) {
  int p[2];
  ASSERT_EQ(::pipe(p), 0);
  ASSERT_TRUE(SendPacket(leader_, "not a request", {p[0], p[1]}).ok());
  ForkServerReply r = Next();
  ASSERT_TRUE(r.has_error()) << r.DebugString();
  EXPECT_EQ(r.error().message(), "malformed request");
  ForkRequest req;  // well formed, but without its two descriptors
  req.set_index(1);
  ASSERT_TRUE(SendPacket(leader_, EncodePacket(req)).ok());
  r = Next();
  ASSERT_TRUE(r.has_error()) << r.DebugString();
  EXPECT_EQ(forks_.forks.load(), 2);  // nothing was forked for either
  ::close(p[0]);
  ::close(p[1]);
}

}  // namespace
}  // namespace shoal
