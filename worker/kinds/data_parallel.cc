#include "worker/kinds/data_parallel.h"

#include <cstdlib>
#include <cstring>
#include <thread>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "shared/process.h"
#include "worker/training.h"

namespace shoal {
namespace {

// One node: every replica on loopback. (Several nodes need each host's own address.)
constexpr const char* kStoreHost = "127.0.0.1";

// Gloo's transport: the interface GLOO_SOCKET_IFNAME names (PyTorch's Python layer reads it; the
// C++ API does not, so we do), else loopback.
std::shared_ptr<::gloo::transport::Device> GlooDevice() {
  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  if (ifname != nullptr && *ifname != '\0')
    return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  return c10d::ProcessGroupGloo::createDeviceForHostname(kStoreHost);
}

std::chrono::milliseconds CollectiveTimeout(const v1::ExperimentSpec& spec) {
  return std::chrono::milliseconds(spec.stall_timeout_ms() != 0 ? spec.stall_timeout_ms() : 300000);
}

}  // namespace

Status DataParallelKind::Prepare(LeaderEnv& env) {
  RETURN_IF_ERROR(HogwildKind::Prepare(env));
  ASSIGN_OR_RETURN(rendezvous_, ShmSegment::Create(SegmentName(env.experiment_id, "rendezvous"),
                                                   sizeof(RendezvousHeader)));
  auto* h = static_cast<RendezvousHeader*>(rendezvous_.data());
  h->magic = kRendezvousMagic;
  h->version = kLayoutVersion;
  h->port.store(0);
  env.segment_created("rendezvous", rendezvous_.size());
  return Status::Ok();
}

Status DataParallelKind::JoinStore(WorkerEnv& env, std::chrono::milliseconds timeout) {
  ASSIGN_OR_RETURN(ShmSegment seg,
                   ShmSegment::Open(SegmentName(env.experiment_id, "rendezvous"), true));
  auto* h = static_cast<RendezvousHeader*>(seg.data());
  if (seg.size() < sizeof *h || h->magic != kRendezvousMagic || h->version != kLayoutVersion)
    return DataLoss("rendezvous segment: bad header");
  c10d::TCPStoreOptions o;
  o.timeout = timeout;
  o.waitWorkers = false;
  if (env.index == 0) {
    o.isServer = true;
    o.port = 0;  // the kernel picks a free one
    store_ = c10::make_intrusive<c10d::TCPStore>(kStoreHost, o);
    h->port.store(static_cast<c10d::TCPStore&>(*store_).getPort());
    return Status::Ok();
  }
  while ((o.port = uint16_t(h->port.load())) == 0) {
    if (LeaderGone(env.lifetime_fd)) return Unavailable("the leader is gone");
    env.slot->heartbeat_ns.store(MonotonicNs(), std::memory_order_relaxed);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  store_ = c10::make_intrusive<c10d::TCPStore>(kStoreHost, o);
  return Status::Ok();
}

Status DataParallelKind::BeforeTraining(WorkerEnv& env, Model& model, StepSync* sync) {
  const auto timeout = CollectiveTimeout(env.spec);
  try {
    RETURN_IF_ERROR(JoinStore(env, timeout));
    auto prefixed =
        c10::make_intrusive<c10d::PrefixStore>("shoal/" + env.experiment_id + "/", store_);
    auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
    opts->devices.push_back(GlooDevice());
    group_ = c10::make_intrusive<c10d::ProcessGroupGloo>(prefixed, int(env.index),
                                                         int(env.spec.workers()), opts);
    averager_ = std::make_unique<GradAverager>(group_, model, env.slot);
    averager_->BroadcastParameters();
  } catch (const std::exception& e) {
    return Unavailable(std::string("c10d: ") + e.what());
  }
  sync->before_forward = [this] { return averager_->BroadcastBuffers(); };
  sync->after_backward = [this] { return averager_->AfterBackward(); };
  return Status::Ok();
}

// The weights segment holds the initial weights only (each replica trained its own copy): the
// replicas' fingerprints are in their reports.
void DataParallelKind::Finish(ipc::v1::LeaderResult* result) {
  HogwildKind::Finish(result);
  result->clear_final_checksum();
}

}  // namespace shoal
