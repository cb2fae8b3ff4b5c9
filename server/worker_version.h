// What shoal-worker says of itself (`shoal-worker --version`, asked once when shoald starts):
// LibTorch lives there, not in shoald, so whether experiments can run on CUDA is its answer.
#pragma once

#include <cstdint>
#include <string>

namespace shoal {

// Its answer. A binary that does not answer within timeout_ms is killed and reported as unknown.
struct WorkerInfo {
  std::string torch_version = "unknown";
  int cuda_devices = -1;  // -1: it cannot train on CUDA, cuda_why says why
  std::string cuda_why;
};
WorkerInfo QueryWorker(const std::string& worker_bin, uint64_t timeout_ms = 60'000);
// Parses the worker's two lines ("libtorch V", "cuda N" | "cuda none: why").
WorkerInfo ParseWorkerVersion(const std::string& text);

}  // namespace shoal
