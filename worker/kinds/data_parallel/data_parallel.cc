#include "worker/kinds/data_parallel/data_parallel.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <thread>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "shared/kinds/data_parallel/board.h"
#include "shared/kinds/data_parallel/data_parallel.h"
#include "shared/os/process.h"
#include "worker/kinds/data_parallel/agreement.h"
#include "worker/kinds/data_parallel/data_parallel_leader.h"
#include "worker/scoreboard.h"

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
  if (spec.nodes() > 1) return c10d::ProcessGroupGloo::createDefaultDevice();  // CheckHostAddress
  return c10d::ProcessGroupGloo::createDeviceForHostname(kLoopback);
}

// Across nodes Gloo advertises the address this host's name resolves to: refuse loopback (Debian
// maps the host name to 127.0.1.1), which peers would be told and could never reach.
Status CheckHostAddress() {
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* res = nullptr;
  const std::string fix =
      "; set GLOO_SOCKET_IFNAME in shoald's environment, or make the host name resolve to the "
      "network the nodes share";
  if (::getaddrinfo(name, nullptr, &hints, &res) != 0 || res == nullptr)
    return FailedPrecondition("host name '" + std::string(name) + "' does not resolve" + fix);
  const auto* in = reinterpret_cast<const sockaddr_in*>(res->ai_addr);
  char text[INET_ADDRSTRLEN] = {};
  ::inet_ntop(AF_INET, &in->sin_addr, text, sizeof text);
  const bool loopback = (ntohl(in->sin_addr.s_addr) >> 24) == 127;
  ::freeaddrinfo(res);
  if (loopback) {
    return FailedPrecondition("host name '" + std::string(name) + "' resolves to loopback " + text +
                              ", which peers on other nodes cannot reach" + fix);
  }
  return Status::Ok();
}

std::chrono::milliseconds CollectiveTimeout(const v1::ExperimentSpec& spec) {
  return std::chrono::milliseconds(spec.stall_timeout_ms() != 0 ? spec.stall_timeout_ms() : 300000);
}

}  // namespace

Status DataParallelKind::Prepare(LeaderEnv& env) {
  RETURN_IF_ERROR(ImageKind::Prepare(env));
  return PrepareRendezvous(env, &rendezvous_);
}

Status DataParallelKind::JoinStore(WorkerEnv& env, std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions o;
  o.timeout = timeout;
  o.waitWorkers = false;
  if (env.spec.nodes() > 1) {  // global rank 0 hosts it on the master's port; all others dial it
    ASSIGN_OR_RETURN(auto master, ParseMaster(env.spec.master()));
    o.port = master.second;
    o.isServer = GlobalRank(env.spec, env.index) == 0;
    try {
      store_ = c10::make_intrusive<c10d::TCPStore>(master.first, o);
    } catch (const std::exception& e) {
      if (o.isServer) throw;
      return NodeZeroUnreachable(env.spec, timeout, e);  // said so, not in c10d's socket words
    }
    return Status::Ok();
  }
  ASSIGN_OR_RETURN(ShmSegment seg,
                   ShmSegment::Open(SegmentName(env.experiment_id, "rendezvous"), true));
  auto* h = static_cast<data_parallel::RendezvousHeader*>(seg.data());
  if (seg.size() < sizeof *h || h->magic != data_parallel::kRendezvousMagic ||
      h->version != kLayoutVersion)
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
    const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
    if (env.spec.nodes() > 1 && (ifname == nullptr || *ifname == '\0'))
      RETURN_IF_ERROR(CheckHostAddress());
    RETURN_IF_ERROR(JoinStore(env, timeout));
    // Each daemon names the experiment its own way: across nodes one fixed scope (the store is
    // the run's own, gone with it).
    const std::string scope = env.spec.nodes() > 1 ? "nodes" : env.experiment_id;
    auto prefixed = c10::make_intrusive<c10d::PrefixStore>("shoal/" + scope + "/", store_);
    if (env.spec.nodes() > 1)
      RETURN_IF_ERROR(
          AgreeAcrossNodes(*prefixed, env.spec, GlobalRank(env.spec, env.index), timeout));
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
  ImageKind::Finish(result);
  result->clear_final_checksum();
}

}  // namespace shoal
