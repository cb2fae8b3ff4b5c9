// CUDA IPC buffer sharing without a GPU: the export's place in the weights header, the owner and
// its consumers against a fake driver (every allocation freed and every mapping closed on every
// path, failures included), and the refusals.
#include "shared/cuda_ipc.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <map>
#include <set>
#include <vector>

#include "shared/layout.h"
#include "tests/fake_cuda_driver.h"

namespace shoal {
namespace {

TEST(CudaIpcTest, TheExportLivesInTheWeightsHeaderBeforeTheFirstTensor) {
  auto plan = PlanWeights({{"w", {4, 4}}, {"b", {4}}});
  ASSERT_TRUE(plan.ok());
  EXPECT_GE(plan->entries[0].offset, offsetof(WeightsHeader, cuda) + sizeof(CudaExport));
  EXPECT_EQ(sizeof(CudaExport), 88u);  // 24 bytes, then the 64-byte handle
  EXPECT_EQ(plan->cuda.exported, 0u);  // nothing exported until a leader does
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
