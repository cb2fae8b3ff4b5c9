// CUDA IPC weight sharing without a GPU: the export's place in the weights header, the owner and
// its consumers against a fake driver (every allocation freed and every mapping closed on every
// path, failures included), and the refusals.
#include "shared/cuda_weights.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstring>
#include <map>
#include <set>
#include <vector>

#include "shared/layout.h"

namespace shoal {
namespace {

// Device memory is host memory here; handles name allocations by their address.
class FakeDriver : public CudaDriver {
 public:
  Status Init(int) override { return Status::Ok(); }
  StatusOr<DevicePtr> Alloc(uint64_t bytes) override {
    if (fail == "alloc") return ResourceExhausted("CUDA out of memory (cuMemAlloc)");
    auto& buf = memory[next++];  // a map's nodes stay put: the address is stable
    buf.resize(bytes);
    return DevicePtr(reinterpret_cast<uintptr_t>(buf.data()));
  }
  Status Free(DevicePtr p) override {
    freed.insert(p);
    return Status::Ok();
  }
  Status CopyToDevice(DevicePtr dst, const void* src, uint64_t bytes) override {
    if (fail == "copy") return Internal("cuMemcpyHtoD: CUDA error 700");
    std::memcpy(reinterpret_cast<void*>(dst), src, bytes);
    return Status::Ok();
  }
  Status CopyToHost(void* dst, DevicePtr src, uint64_t bytes) override {
    std::memcpy(dst, reinterpret_cast<const void*>(src), bytes);
    return Status::Ok();
  }
  StatusOr<IpcHandle> Export(DevicePtr p) override {
    if (fail == "export") return Internal("cuIpcGetMemHandle: CUDA error 1");
    IpcHandle h{};
    std::memcpy(h.bytes, &p, sizeof p);
    return h;
  }
  StatusOr<DevicePtr> Open(const IpcHandle& h) override {
    DevicePtr p;
    std::memcpy(&p, h.bytes, sizeof p);
    opened.insert(p);
    return p;
  }
  Status Close(DevicePtr p) override {
    closed.insert(p);
    return Status::Ok();
  }
  Status Synchronize() override {
    ++syncs;
    return Status::Ok();
  }

  std::map<int, std::vector<char>> memory;
  int next = 1;
  std::string fail;
  std::set<DevicePtr> freed, opened, closed;
  int syncs = 0;
};

TEST(CudaWeightsTest, TheExportLivesInTheWeightsHeaderBeforeTheFirstTensor) {
  auto plan = PlanWeights({{"w", {4, 4}}, {"b", {4}}});
  ASSERT_TRUE(plan.ok());
  EXPECT_GE(plan->entries[0].offset, offsetof(WeightsHeader, cuda) + sizeof(CudaWeightsExport));
  EXPECT_EQ(sizeof(CudaWeightsExport), 88u);  // 24 bytes, then the 64-byte handle
  EXPECT_EQ(plan->cuda.exported, 0u);         // nothing exported until a leader does
}

TEST(CudaWeightsTest, WorkersTrainTheOwnersBufferAndEverythingIsReleased) {
  FakeDriver cuda;
  std::vector<float> host = {1, 2, 3, 4};
  CudaWeightsExport x{};
  const uint64_t bytes = host.size() * sizeof(float);
  {
    auto owner = DeviceWeightsOwner::Create(&cuda, 0, host.data(), bytes, 100, &x);
    ASSERT_TRUE(owner.ok()) << owner.status().message();
    EXPECT_EQ(x.exported, 1u);
    EXPECT_EQ(x.owner_pid, 100);
    EXPECT_EQ(x.bytes, bytes);
    {
      auto view = DeviceWeightsView::Open(&cuda, x, bytes, 101);
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

TEST(CudaWeightsTest, AFailedExportLeavesNothingAllocated) {
  for (const std::string step : {"copy", "export"}) {
    FakeDriver cuda;
    cuda.fail = step;
    float w = 1;
    CudaWeightsExport x{};
    auto owner = DeviceWeightsOwner::Create(&cuda, 0, &w, sizeof w, 100, &x);
    EXPECT_FALSE(owner.ok()) << step;
    EXPECT_EQ(cuda.freed.size(), 1u) << step;
    EXPECT_EQ(x.exported, 0u) << step;
  }
  FakeDriver oom;
  oom.fail = "alloc";
  float w = 1;
  CudaWeightsExport x{};
  auto owner = DeviceWeightsOwner::Create(&oom, 0, &w, sizeof w, 100, &x);
  EXPECT_EQ(owner.status().code(), Code::kResourceExhausted);
  EXPECT_EQ(owner.status().message(), "CUDA out of memory (cuMemAlloc)");
}

TEST(CudaWeightsTest, AWorkerRefusesAnExportItMustNotOpen) {
  FakeDriver cuda;
  CudaWeightsExport x{};
  x.owner_pid = 100;
  x.bytes = 64;
  EXPECT_EQ(ExportProblem(x, 64, 101), "the leader has not exported the weights' device buffer");
  x.exported = 1;
  EXPECT_EQ(ExportProblem(x, 128, 101),
            "the exported device buffer holds 64 bytes, the weights segment 128");
  EXPECT_EQ(ExportProblem(x, 64, 100),
            "a process cannot open its own CUDA IPC export (the leader must not train)");
  EXPECT_EQ(ExportProblem(x, 64, 101), "");
  auto view = DeviceWeightsView::Open(&cuda, x, 128, 101);
  EXPECT_EQ(view.status().code(), Code::kFailedPrecondition);
  EXPECT_TRUE(cuda.opened.empty());
}

TEST(CudaWeightsTest, WithoutADriverEveryCallSaysWhy) {
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
