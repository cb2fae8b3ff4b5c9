#include "worker/kinds/data_parallel.h"

#include <cstdlib>
#include <cstring>
#include <thread>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "shared/data_parallel.h"
#include "shared/process.h"
#include "worker/training.h"

namespace shoal {
namespace {

// One node: every replica on loopback, the store on a port the kernel picks.
constexpr const char* kLoopback = "127.0.0.1";

// Gloo's transport: the interface GLOO_SOCKET_IFNAME names (PyTorch's Python layer reads it; the
// C++ API does not, so we do — shoald passes it from its own environment); else loopback on one
// node, and across nodes the address this host's name resolves to (make it resolve to the
// interface the nodes share, not 127.0.x.x, or peers are told an address they cannot reach).
std::shared_ptr<::gloo::transport::Device> GlooDevice(const v1::ExperimentSpec& spec) {
  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  if (ifname != nullptr && *ifname != '\0')
    return c10d::ProcessGroupGloo::createDeviceForInterface(ifname);
  if (spec.nodes() > 1) return c10d::ProcessGroupGloo::createDefaultDevice();
  return c10d::ProcessGroupGloo::createDeviceForHostname(kLoopback);
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
  c10d::TCPStoreOptions o;
  o.timeout = timeout;
  o.waitWorkers = false;
  if (env.spec.nodes() > 1) {  // global rank 0 hosts it on the master's port; all others dial it
    ASSIGN_OR_RETURN(auto master, ParseMaster(env.spec.master()));
    o.port = master.second;
    o.isServer = GlobalRank(env.spec, env.index) == 0;
    store_ = c10::make_intrusive<c10d::TCPStore>(master.first, o);
    return Status::Ok();
  }
  ASSIGN_OR_RETURN(ShmSegment seg,
                   ShmSegment::Open(SegmentName(env.experiment_id, "rendezvous"), true));
  auto* h = static_cast<RendezvousHeader*>(seg.data());
  if (seg.size() < sizeof *h || h->magic != kRendezvousMagic || h->version != kLayoutVersion)
    return DataLoss("rendezvous segment: bad header");
  if (env.index == 0) {
    o.isServer = true;
    o.port = 0;  // the kernel picks a free one
    store_ = c10::make_intrusive<c10d::TCPStore>(kLoopback, o);
    h->port.store(static_cast<c10d::TCPStore&>(*store_).getPort());
    return Status::Ok();
  }
  while ((o.port = uint16_t(h->port.load())) == 0) {
    if (LeaderGone(env.lifetime_fd)) return Unavailable("the leader is gone");
    env.slot->heartbeat_ns.store(MonotonicNs(), std::memory_order_relaxed);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  store_ = c10::make_intrusive<c10d::TCPStore>(kLoopback, o);
  return Status::Ok();
}

Status DataParallelKind::BeforeTraining(WorkerEnv& env, Model& model, StepSync* sync) {
  const auto timeout = CollectiveTimeout(env.spec);
  try {
    RETURN_IF_ERROR(JoinStore(env, timeout));
    // Each daemon names the experiment its own way: across nodes the keys hang off the master.
    const std::string scope = env.spec.nodes() > 1 ? env.spec.master() : env.experiment_id;
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>("shoal/" + scope + "/", store_);
    auto opts = c10d::ProcessGroupGloo::Options::create(timeout);
    opts->devices.push_back(GlooDevice(env.spec));
    group_ = c10::make_intrusive<c10d::ProcessGroupGloo>(
        prefixed, int(GlobalRank(env.spec, env.index)), int(WorldSize(env.spec)), opts);
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
