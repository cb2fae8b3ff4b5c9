// shoal-worker: started by shoald as an experiment's leader, or by a leader as a spawned worker.
// Not meant to be run by hand, but --version works for anyone.
#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <torch/cuda.h>
#include <torch/version.h>

#include <CLI/CLI.hpp>
#include <cstdio>

#include "shared/os/process.h"
#include "worker/attached_worker.h"
#include "worker/fork_server.h"
#include "worker/leader_options.h"

namespace {

// Two lines shoald reads at start: LibTorch's version, and whether it can train on CUDA here
// ("cuda N" devices, or "cuda none: why").
void PrintVersion() {
  std::printf("libtorch %s\n", TORCH_VERSION);
  if (!at::hasCUDA()) {
    std::printf("cuda none: LibTorch %s in shoal-worker was built without CUDA\n", TORCH_VERSION);
    return;
  }
  const size_t n = torch::cuda::device_count();
  if (n == 0)
    std::printf(
        "cuda none: LibTorch has CUDA but sees no device (driver, CUDA_VISIBLE_DEVICES?)\n");
  else
    std::printf("cuda %zu\n", n);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"shoal-worker: the training process of a Shoal experiment"};
  std::string role, socket;
  shoal::LeaderOptions o;
  int lifetime_fd = -1;
  uint32_t index = 0;
  bool version = false;
  app.add_flag("--version", version, "print the LibTorch version and exit");
  app.add_option("--role", role, "leader | worker | forkserver")
      ->check(CLI::IsMember({"leader", "worker", "forkserver"}));
  shoal::AddLeaderOptions(app, &o);  // a worker reads --experiment, --spec-json and --parent too
  app.add_option("--index", index, "worker: index");
  app.add_option("--lifetime-fd", lifetime_fd, "worker: read end of the leader's lifetime pipe");
  app.add_option("--socket", socket, "forkserver: socket to listen on");
  size_t pool = 16;
  app.add_option("--pool", pool, "forkserver: idle children kept forked ahead of demand");
  CLI11_PARSE(app, argc, argv);
  if (version) {
    PrintVersion();
    return 0;
  }
  if (role == "forkserver") {
    if (socket.empty()) {
      std::fprintf(stderr, "shoal-worker: --socket is required for the forkserver\n");
      return 2;
    }
    return shoal::RunForkServer({socket, o.parent, pool});
  }
  if (role.empty()) {
    std::fprintf(stderr, "shoal-worker: --role is required\n");
    return 2;
  }
  auto a = shoal::ToLeaderArgs(o);
  if (!a.ok()) {
    std::fprintf(stderr, "shoal-worker: %s\n", a.status().message().c_str());
    return 2;
  }
  if (role == "leader") {
    if (a->worker_bin.empty()) a->worker_bin = "/proc/self/exe";
    // The leader must never start an intra-op pool: forked children would inherit a dead one.
    at::set_num_threads(1);
    return shoal::RunLeader(*a, shoal::MakeWorkerKindFor);
  }
  shoal::DieWithParent(o.parent);
  return shoal::RunAttachedWorker({a->spec, o.experiment, index, lifetime_fd, nullptr});
}
