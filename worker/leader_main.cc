// shoal-leader: the leader of an experiment whose leader needs no LibTorch (shared/spec
// ChooseLeader), started by shoald in place of `shoal-worker --role leader`. It links no LibTorch,
// so it never pays LibTorch's initialisation (~60 MiB of PSS, most of a spawn leader's memory).
#include <CLI/CLI.hpp>
#include <cstdio>

#include "worker/kinds/leader_kinds.h"
#include "worker/leader_options.h"

int main(int argc, char** argv) {
  CLI::App app{"shoal-leader: the LibTorch-free leader of a Shoal experiment"};
  std::string role = "leader";
  shoal::LeaderOptions o;
  bool version = false;
  app.add_flag("--version", version, "print what this leader is and exit");
  app.add_option("--role", role, "leader (shoal-worker's argument, accepted)")
      ->check(CLI::IsMember({"leader"}));
  shoal::AddLeaderOptions(app, &o);
  CLI11_PARSE(app, argc, argv);
  if (version) {
    std::printf("shoal-leader: no LibTorch\n");
    return 0;
  }
  auto a = shoal::ToLeaderArgs(o);
  if (a.ok() && a->worker_bin.empty())
    a = shoal::InvalidArgument("--worker-bin is required (shoal-leader has no workers of its own)");
  if (!a.ok()) {
    std::fprintf(stderr, "shoal-leader: %s\n", a.status().message().c_str());
    return 2;
  }
  const auto* handed_off = a->handed_off ? &*a->handed_off : nullptr;
  return shoal::RunLeader(*a, [handed_off](const shoal::v1::ExperimentSpec& spec) {
    return shoal::MakeLibTorchFreeLeaderKind(spec, handed_off);
  });
}
