#include "shared/spec/admission.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "shared/ipc/layout.h"
#include "shared/ipc/packet.h"
#include "shared/kinds/kind.h"
#include "shared/spec/spec.h"
#include "tests/testutil.h"

namespace shoal {
namespace {

TEST(AdmissionTest, EstimateGrowsWithWorkersAndBatch) {
  v1::ExperimentSpec s;
  ApplyDefaults(&s, SpecLimits{});
  s.set_dataset("/usr/share/datasets/fashion-mnist");
  auto one = EstimateExperiment(s);
  ASSERT_TRUE(one.ok()) << one.status().message();
  EXPECT_GT(one->shm_bytes, 70000ull * 784);  // train + test images, read from the IDX headers
  EXPECT_LT(one->shm_bytes, 70000ull * 784 + (8ull << 20));
  s.set_workers(4);
  auto four = EstimateExperiment(s);
  EXPECT_EQ(
      four->memory_bytes - one->memory_bytes,
      3 * (kWorkerBaseBytes + 64 * kWorkerBytesPerSample) + (four->shm_bytes - one->shm_bytes));
}

TEST(AdmissionTest, CudaWorkersKeepTheirBatchOnTheDevice) {
  v1::ExperimentSpec s;
  ApplyDefaults(&s, SpecLimits{});
  s.set_device("cuda");
  s.set_workers(64);
  s.set_batch_size(4096);  // on the CPU: ~1.8 TiB of host memory; on CUDA the batch is the GPU's
  auto e = EstimateExperiment(s);
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_EQ(e->memory_bytes, e->shm_bytes + kLeaderBytes + 64 * kCudaWorkerBytes);
  s.set_device("cpu");
  EXPECT_GT(EstimateExperiment(s)->memory_bytes, 1000ull << 30);
}

TEST(AdmissionTest, CudaPipelineStagesKeepModelActivationsAndSlotsOnTheDevice) {
  v1::ExperimentSpec s;
  s.set_kind("pipeline");
  s.set_dataset("synthetic");
  s.mutable_pipeline()->set_layers(18);
  s.mutable_pipeline()->set_filters(208);
  s.set_batch_size(128);  // the seed's baseline: ~45 GiB of host memory on the CPU
  s.mutable_pipeline()->set_stages(2);
  ApplyDefaults(&s, SpecLimits{});
  const auto estimate = FindKind("pipeline")->estimate;
  auto cpu = estimate(s);
  ASSERT_TRUE(cpu.ok()) << cpu.status().message();
  EXPECT_GT(cpu->memory_bytes, 40ull << 30);
  s.set_device("cuda");
  auto cuda = estimate(s);
  ASSERT_TRUE(cuda.ok()) << cuda.status().message();
  // The rings' slots hold only headers here (their data is in device buffers): a few pages.
  EXPECT_LT(cuda->shm_bytes, cpu->shm_bytes);
  EXPECT_LT(cuda->shm_bytes, BoardBytes(2) + (64ull << 10));
  EXPECT_EQ(cuda->memory_bytes, cuda->shm_bytes + kLeaderBytes + 2 * kCudaWorkerBytes);
}

TEST(AdmissionTest, RefusalNamesBothFigures) {
  ExperimentEstimate need{1ull << 30, 10ull << 30};
  EXPECT_TRUE(Admit(need, {2ull << 30, 20ull << 30}).ok());
  Status st = Admit(need, {2ull << 30, 5ull << 30});
  EXPECT_EQ(st.code(), Code::kResourceExhausted);
  EXPECT_NE(st.message().find("needs ~10.00 GiB of memory, MemAvailable is 5.00 GiB"),
            std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("--force"), std::string::npos);
  st = Admit(need, {512ull << 20, 20ull << 30});
  EXPECT_NE(st.message().find("needs ~1.00 GiB of /dev/shm, 0.50 GiB is free"), std::string::npos)
      << st.message();
  EXPECT_TRUE(ReadNodeCapacity().ok());
}

// Queued behind a running experiment, a run counts what that one will give back as it ends.
TEST(AdmissionTest, WhatTheRunningExperimentHoldsCountsForOneQueuedBehindIt) {
  ExperimentEstimate need{1ull << 30, 10ull << 30};
  EXPECT_TRUE(Admit(need, {2ull << 30, 5ull << 30, 6ull << 30, 0}).ok());
  Status st = Admit(need, {2ull << 30, 5ull << 30, 4ull << 30, 0});
  EXPECT_NE(st.message().find("MemAvailable is 5.00 GiB and the running experiment, which ends "
                              "first, holds 4.00 GiB"),
            std::string::npos)
      << st.message();
  EXPECT_TRUE(Admit(need, {512ull << 20, 20ull << 30, 0, 512ull << 20}).ok());
}

TEST(DataRootsTest, OnlyBelowARoot) {
  testing::TempDir root, other;
  std::filesystem::create_directories(root / "a");
  std::filesystem::create_directory_symlink(other.path(), root / "escape");
  const std::vector<std::string> roots = {root.path()};
  // Inside (no IDX files there: the next check speaks).
  EXPECT_NE(CheckDataset(root / "a", roots).message().find("has no train-images"),
            std::string::npos);
  EXPECT_NE(CheckDataset(other.path(), roots)
                .message()
                .find("is outside the data roots (" + root.path() + ")"),
            std::string::npos);
  // A link inside a root that points outside is outside.
  EXPECT_NE(CheckDataset(root / "escape", roots).message().find("outside the data roots"),
            std::string::npos);
  EXPECT_NE(
      CheckDataset(root / "../" + std::filesystem::path(other.path()).filename().string(), roots)
          .message()
          .find("outside"),
      std::string::npos);
  EXPECT_TRUE(CheckDataset("synthetic", roots).ok());
}

TEST(PacketTest, CarriesMessagesAndFileDescriptors) {
  testing::TempDir d;
  auto lfd = ListenPacket(d / "p.sock");
  ASSERT_TRUE(lfd.ok()) << lfd.status().message();
  auto cfd = ConnectPacket(d / "p.sock");
  ASSERT_TRUE(cfd.ok());
  int sfd = ::accept(*lfd, nullptr, nullptr);
  ASSERT_GE(sfd, 0);
  int pipefd[2];
  ASSERT_EQ(::pipe(pipefd), 0);
  ASSERT_TRUE(SendPacket(*cfd, "hello", {pipefd[0]}).ok());
  ASSERT_TRUE(SendPacket(*cfd, "second").ok());
  std::string msg;
  std::vector<int> fds;
  ASSERT_TRUE(RecvPacket(sfd, &msg, &fds).ok());
  EXPECT_EQ(msg, "hello");  // message boundaries hold
  ASSERT_EQ(fds.size(), 1u);
  ASSERT_EQ(::write(pipefd[1], "x", 1), 1);
  char c = 0;
  EXPECT_EQ(::read(fds[0], &c, 1), 1);  // the passed fd is the same pipe
  EXPECT_EQ(c, 'x');
  ASSERT_TRUE(RecvPacket(sfd, &msg).ok());
  EXPECT_EQ(msg, "second");
  ::close(*cfd);
  EXPECT_EQ(RecvPacket(sfd, &msg).code(), Code::kUnavailable);
  EXPECT_FALSE(ConnectPacket(d / "none.sock").ok());
  for (int f : {sfd, *lfd, pipefd[0], pipefd[1], fds[0]}) ::close(f);
}

// A listener that stopped accepting (a wedged forkserver) fills its backlog; a probe that does
// not wait is refused then, where a blocking connect would hang its thread for good.
TEST(PacketTest, AProbeOfAListenerThatNeverAcceptsFailsAtOnce) {
  testing::TempDir d;
  auto lfd = ListenPacket(d / "p.sock");
  ASSERT_TRUE(lfd.ok()) << lfd.status().message();
  std::vector<int> held;
  Status refused = Status::Ok();
  for (int i = 0; i < 1000 && refused.ok(); ++i) {
    auto fd = ConnectPacket(d / "p.sock", /*wait=*/false);
    if (fd.ok())
      held.push_back(*fd);
    else
      refused = fd.status();
  }
  EXPECT_EQ(refused.code(), Code::kUnavailable) << held.size() << " connected";
  EXPECT_GE(held.size(), 1u);
  for (int f : held) ::close(f);
  ::close(*lfd);
}

}  // namespace
}  // namespace shoal
