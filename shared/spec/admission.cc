#include "shared/spec/admission.h"

#include <cstdio>

#include "shared/idx.h"
#include "shared/ipc/layout.h"
#include "shared/os/procfs.h"
#include "shared/os/shm.h"
#include "shared/spec/input_spec.h"

namespace shoal {
namespace {

// Element count of an IDX file's first dimension and the product of the rest.
StatusOr<std::pair<uint64_t, uint64_t>> IdxShape(const std::string& path) {
  ASSIGN_OR_RETURN(IdxArray head, ReadIdxFile(path, "", /*body=*/false));
  uint64_t rest = 1;
  for (size_t i = 1; i < head.dims.size(); ++i) rest *= head.dims[i];
  return std::make_pair(head.count(), rest);
}

std::string Gib(uint64_t b) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", double(b) / double(1ull << 30));
  return buf;
}

// A model file: its synthetic set and the scoreboard in /dev/shm; its weights and step are not
// known before the leader loads it, which measures one step and checks again (worker/leader).
StatusOr<ExperimentEstimate> EstimateModelFile(const v1::ExperimentSpec& spec) {
  ASSIGN_OR_RETURN(std::vector<InputSpec> inputs, ParseInputs(spec.input()));
  int64_t sample = 8;  // a class index
  for (const auto& in : inputs) sample += in.SampleBytes();
  ExperimentEstimate e;
  e.shm_bytes = uint64_t(SyntheticSamples(sample, spec.batch_size())) * uint64_t(sample) +
                BoardBytes(spec.workers());
  e.memory_bytes = e.shm_bytes + kLeaderBytes + uint64_t(spec.workers()) * kWorkerBaseBytes;
  return e;
}

}  // namespace

StatusOr<ExperimentEstimate> EstimateExperiment(const v1::ExperimentSpec& spec) {
  if (spec.model() == "torchscript") return EstimateModelFile(spec);
  uint64_t n_train = 6000, n_test = 1000, pixels = 784;  // the synthetic set
  if (spec.dataset() != "synthetic") {
    ASSIGN_OR_RETURN(MnistFiles files, FindMnistFiles(spec.dataset()));
    ASSIGN_OR_RETURN(auto train, IdxShape(files.train_images));
    n_train = train.first;
    pixels = train.second;
    n_test = 0;
    if (!files.test_images.empty()) {
      ASSIGN_OR_RETURN(auto test, IdxShape(files.test_images));
      n_test = test.first;
    }
  }
  const uint32_t side = 28;
  ExperimentEstimate e;
  DataHeader d = PlanData(n_train, n_test, side, side);
  e.shm_bytes = d.total_bytes + (pixels > 784 ? (n_train + n_test) * (pixels - 784) : 0) +
                (4ull << 20) /* weights */ + BoardBytes(spec.workers());
  const uint64_t per_worker = spec.device() == "cuda"
                                  ? kCudaWorkerBytes
                                  : kWorkerBaseBytes + kWorkerBytesPerSample * spec.batch_size();
  e.memory_bytes = e.shm_bytes + kLeaderBytes + uint64_t(spec.workers()) * per_worker;
  return e;
}

StatusOr<NodeCapacity> ReadNodeCapacity() {
  NodeCapacity c;
  const auto shm = ReadShmSpace();
  if (!shm) return Unavailable("cannot statvfs /dev/shm");
  c.shm_free_bytes = shm->free_bytes;
  ASSIGN_OR_RETURN(std::string mi, ReadSmallFile("/proc/meminfo"));
  ASSIGN_OR_RETURN(c.memory_available_bytes, ParseStatusKb(mi, "MemAvailable"));
  return c;
}

Status Admit(const ExperimentEstimate& need, const NodeCapacity& have) {
  auto plus_running = [](uint64_t bytes) {
    return bytes == 0 ? std::string()
                      : " and the running experiment, which ends first, holds " + Gib(bytes);
  };
  if (need.shm_bytes > have.shm_free_bytes + have.running_shm_bytes) {
    return ResourceExhausted("does not fit: needs ~" + Gib(need.shm_bytes) + " of /dev/shm, " +
                             Gib(have.shm_free_bytes) + " is free" +
                             plus_running(have.running_shm_bytes) +
                             " (use --force to start anyway)");
  }
  if (need.memory_bytes > have.memory_available_bytes + have.running_memory_bytes) {
    return ResourceExhausted("does not fit: needs ~" + Gib(need.memory_bytes) +
                             " of memory, MemAvailable is " + Gib(have.memory_available_bytes) +
                             plus_running(have.running_memory_bytes) +
                             " (use --force to start anyway)");
  }
  return Status::Ok();
}

}  // namespace shoal
