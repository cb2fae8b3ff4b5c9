// CUDA IPC buffer sharing without a GPU: the export's place in the weights header, the owner and
// its consumers against a fake driver (every allocation freed and every mapping closed on every
// path, failures included), and the refusals.
#include "shared/gpu/cuda_ipc.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <cstring>
#include <map>
#include <set>
#include <thread>
#include <vector>

#include "shared/ipc/layout.h"
#include "tests/fake_cuda_driver.h"

namespace shoal {
namespace {

TEST(CudaIpcTest, TheExportLivesInTheWeightsHeaderBeforeTheFirstTensor) {
  auto plan = PlanWeights({{"w", {4, 4}}, {"b", {4}}});
  ASSERT_TRUE(plan.ok());
  EXPECT_GE(plan->tensors[0].offset, offsetof(WeightsHeader, cuda) + sizeof(CudaExport));
  EXPECT_EQ(sizeof(CudaExport), 88u);  // 24 bytes, then the 64-byte handle
  std::vector<char> seg(plan->total_bytes, 'x');
  WriteWeightsTable(*plan, seg.data());
  // Nothing exported until a leader does.
  EXPECT_EQ(reinterpret_cast<const WeightsHeader*>(seg.data())->cuda.exported, 0u);
}

TEST(CudaIpcTest, WorkersTrainTheOwnersBufferAndEverythingIsReleased) {
  FakeDriver cuda;
  std::vector<float> host = {1, 2, 3, 4};
  CudaExport x{};
  const uint64_t bytes = host.size() * sizeof(float);
  {
    auto owner = DeviceBufferOwner::Create(&cuda, 0, host.data(), bytes, 100, &x);
    ASSERT_TRUE(owner.ok()) << owner.status().message();
    EXPECT_EQ(x.exported, 1u);
    EXPECT_EQ(x.owner_pid, 100);
    EXPECT_EQ(x.bytes, bytes);
    {
      auto view = DeviceBufferView::Open(&cuda, x, bytes, 101, "shared CUDA weights");
      ASSERT_TRUE(view.ok()) << view.status().message();
      EXPECT_EQ((*view)->base(), (*owner)->base());       // one buffer
      reinterpret_cast<float*>((*view)->base())[2] = 30;  // a worker's update
    }
    EXPECT_EQ(cuda.closed, cuda.opened);  // the worker's mapping closed when it ended
    std::vector<float> after(4);
    ASSERT_TRUE((*owner)->Download(after.data()).ok());
    EXPECT_EQ(after, (std::vector<float>{1, 2, 30, 4}));
    EXPECT_EQ(cuda.syncs, 1);  // the download waits for the device
    EXPECT_TRUE(cuda.freed.empty());
  }
  EXPECT_EQ(cuda.freed.size(), 1u);  // the owner freed its buffer last
}

TEST(CudaIpcTest, AFailedExportLeavesNothingAllocated) {
  for (const std::string step : {"copy", "export"}) {
    FakeDriver cuda;
    cuda.fail = step;
    float w = 1;
    CudaExport x{};
    auto owner = DeviceBufferOwner::Create(&cuda, 0, &w, sizeof w, 100, &x);
    EXPECT_FALSE(owner.ok()) << step;
    EXPECT_EQ(cuda.freed.size(), 1u) << step;
    EXPECT_EQ(x.exported, 0u) << step;
  }
  FakeDriver oom;
  oom.fail = "alloc";
  float w = 1;
  CudaExport x{};
  auto owner = DeviceBufferOwner::Create(&oom, 0, &w, sizeof w, 100, &x);
  EXPECT_EQ(owner.status().code(), Code::kResourceExhausted);
  EXPECT_EQ(owner.status().message(), "CUDA out of memory (cuMemAlloc)");
}

TEST(CudaIpcTest, AWorkerRefusesAnExportItMustNotOpen) {
  FakeDriver cuda;
  CudaExport x{};
  x.owner_pid = 100;
  x.bytes = 64;
  EXPECT_EQ(ExportProblem(x, 64, 101), "its owner has not exported the device buffer");
  x.exported = 1;
  EXPECT_EQ(ExportProblem(x, 128, 101), "the exported device buffer holds 64 bytes, 128 expected");
  EXPECT_EQ(ExportProblem(x, 64, 100), "a process cannot open its own CUDA IPC export");
  EXPECT_EQ(ExportProblem(x, 64, 101), "");
  auto view = DeviceBufferView::Open(&cuda, x, 128, 101, "shared CUDA weights");
  EXPECT_EQ(view.status().code(), Code::kFailedPrecondition);
  EXPECT_EQ(view.status().message(),
            "shared CUDA weights: the exported device buffer holds 64 bytes, 128 expected");
  EXPECT_TRUE(cuda.opened.empty());
}

// The real driver binding loaded over the stand-in libcuda (tests/fake_cuda), which logs each
// call with the device whose context is current.
class RealDriverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    setenv("SHOAL_CUDA_LIBRARY", SHOAL_FAKE_CUDA, 1);
    cuda_ = LoadCudaDriver();
    unsetenv("SHOAL_CUDA_LIBRARY");
    lib_ = dlopen(SHOAL_FAKE_CUDA, RTLD_NOW | RTLD_NOLOAD);  // the copy the driver loaded
    ASSERT_NE(lib_, nullptr);
    log_ = reinterpret_cast<const char* (*)()>(dlsym(lib_, "shoal_fake_cuda_log"));
    ASSERT_NE(log_, nullptr);
    from_ = std::strlen(log_());  // the library lives on between tests: only this test's calls
  }
  void TearDown() override {
    cuda_.reset();
    if (lib_ != nullptr) dlclose(lib_);
    unsetenv("SHOAL_FAKE_CUDA_FAIL");
  }
  std::string Log() const { return std::string(log_()).substr(from_); }

  std::unique_ptr<CudaDriver> cuda_;
  void* lib_ = nullptr;
  const char* (*log_)() = nullptr;
  size_t from_ = 0;
};

// Allocations, copies and synchronises run in Init's device's context; a buffer of another device
// is mapped and unmapped under that device's context, pushed for the call and popped after (as
// PyTorch opens an IPC handle under the storage's device), with lazy peer access asked for.
TEST_F(RealDriverTest, AMappingOfAnotherDevicesBufferIsMadeUnderThatDevice) {
  ASSERT_TRUE(cuda_->Init(1).ok());
  auto p = cuda_->Alloc(64);
  ASSERT_TRUE(p.ok()) << p.status().message();
  auto h = cuda_->Export(*p);
  ASSERT_TRUE(h.ok());
  auto mine = cuda_->Open(*h, 1);
  auto theirs = cuda_->Open(*h, 0);
  ASSERT_TRUE(mine.ok() && theirs.ok());
  EXPECT_EQ(*theirs, *p);  // the fake's mapping is the buffer itself
  EXPECT_TRUE(cuda_->Close(*theirs, 0).ok());
  EXPECT_TRUE(cuda_->Close(*mine, 1).ok());
  EXPECT_TRUE(cuda_->Synchronize().ok());
  EXPECT_TRUE(cuda_->Free(*p).ok());
  EXPECT_EQ(Log(),
            "init;retain 1;set 1;alloc@1;export@1;open lazy@1;"
            "retain 0;push 0;open lazy@0;pop 0;retain 0;push 0;close@0;pop 0;"
            "close@1;sync@1;free@1;");
}

TEST_F(RealDriverTest, OutOfMemoryIsSaidPlainlyAndOtherErrorsNameTheCall) {
  ASSERT_TRUE(cuda_->Init(0).ok());
  setenv("SHOAL_FAKE_CUDA_FAIL", "cuMemAlloc", 1);
  const auto oom = cuda_->Alloc(64);
  EXPECT_EQ(oom.status().code(), Code::kResourceExhausted);
  EXPECT_EQ(oom.status().message(), "CUDA out of memory (cuMemAlloc)");
  IpcHandle h{};
  const auto far = cuda_->Open(h, 7);  // the fake has 2 devices
  EXPECT_EQ(far.status().code(), Code::kInternal);
  EXPECT_EQ(far.status().message(), "cuDeviceGet: CUDA error 101: invalid device ordinal");
  setenv("SHOAL_FAKE_CUDA_FAIL", "cuIpcOpenMemHandle", 1);
  const auto failed = cuda_->Open(h, 1);  // fails inside the pushed context: popped all the same
  EXPECT_EQ(failed.status().message(), "cuIpcOpenMemHandle: CUDA error 999: unknown error");
  EXPECT_TRUE(cuda_->Synchronize().ok());
  EXPECT_EQ(Log(), "init;retain 0;set 0;alloc@0;retain 1;push 1;open lazy@1;pop 1;sync@0;");
}

// A step's phase events: created, recorded on the default stream, waited for and read in Init's
// device's context, destroyed with their owner; a failure names the call.
TEST_F(RealDriverTest, PhaseEventsAreRecordedAndReadInTheDevicesContext) {
  ASSERT_TRUE(cuda_->Init(1).ok());
  auto a = cuda_->CreateEvent();
  auto b = cuda_->CreateEvent();
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().message();
  ASSERT_TRUE(cuda_->RecordEvent(*a).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_TRUE(cuda_->RecordEvent(*b).ok());
  auto ms = cuda_->ElapsedMs(*a, *b);
  ASSERT_TRUE(ms.ok()) << ms.status().message();
  EXPECT_GE(*ms, 19.0f);  // the fake's event is the time it was recorded
  EXPECT_LT(*ms, 2000.0f);
  EXPECT_TRUE(cuda_->DestroyEvent(*a).ok());
  setenv("SHOAL_FAKE_CUDA_FAIL", "cuEventRecord", 1);
  EXPECT_EQ(cuda_->RecordEvent(*b).message(), "cuEventRecord: CUDA error 999: unknown error");
  EXPECT_TRUE(cuda_->DestroyEvent(*b).ok());
  EXPECT_EQ(Log(),
            "init;retain 1;set 1;event@1;event@1;record@1;record@1;wait@1;elapsed@1;destroy@1;"
            "record@1;destroy@1;");
}

TEST(CudaIpcTest, WithoutADriverEveryCallSaysWhy) {
  setenv("SHOAL_CUDA_LIBRARY", "/nonexistent/libcuda.so.1", 1);
  auto cuda = LoadCudaDriver();
  unsetenv("SHOAL_CUDA_LIBRARY");
  const Status st = cuda->Init(0);
  EXPECT_EQ(st.code(), Code::kFailedPrecondition);
  EXPECT_EQ(st.message(), "no CUDA driver: /nonexistent/libcuda.so.1 not found");
  EXPECT_EQ(cuda->Alloc(64).status().message(), st.message());
}

}  // namespace
}  // namespace shoal

namespace shoal {
namespace {

TEST(CudaIpcTest, AnOwnerWithoutContentsUploadsNothing) {
  FakeDriver cuda;
  cuda.fail = "copy";  // any upload would fail
  CudaExport x{};
  auto owner = DeviceBufferOwner::Create(&cuda, 0, nullptr, 256, 100, &x);
  ASSERT_TRUE(owner.ok()) << owner.status().message();
  EXPECT_EQ(x.exported, 1u);
  EXPECT_EQ(x.bytes, 256u);
}

}  // namespace
}  // namespace shoal
