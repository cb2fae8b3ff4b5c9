#include "worker/kinds/leader_kinds.h"

#include <functional>
#include <map>

#include "shared/spec/spec.h"
#include "worker/kinds/command/command.h"
#include "worker/kinds/data_parallel/data_parallel_leader.h"
#include "worker/kinds/hogwild/hogwild_leader.h"

namespace shoal {
namespace {

using Handed = const ipc::v1::LeaderHandOff*;
using LeaderFactory = std::function<std::unique_ptr<WorkerKind>(Handed)>;

// shoal-leader's registry: one line per kind whose leader needs no LibTorch
// (KindRules::leader_without_libtorch; tests/kinds_agree_test.cc checks the two agree).
const std::map<std::string, LeaderFactory>& Leaders() {
  static const std::map<std::string, LeaderFactory> leaders = {
      {"hogwild", [](Handed h) { return std::make_unique<HogwildLeaderKind>(h); }},
      {"data_parallel", [](Handed h) { return std::make_unique<DataParallelLeaderKind>(h); }},
      {"command", [](Handed) { return std::make_unique<CommandKind>(); }},
  };
  return leaders;
}

}  // namespace

std::vector<std::string> LibTorchFreeLeaderKinds() {
  std::vector<std::string> names;
  for (const auto& [name, make] : Leaders()) names.push_back(name);
  return names;
}

StatusOr<std::unique_ptr<WorkerKind>> MakeLibTorchFreeLeaderKind(
    const v1::ExperimentSpec& spec, const ipc::v1::LeaderHandOff* handed_off) {
  const LeaderChoice choice = ChooseLeader(spec);
  if (choice.libtorch && !(choice.hands_off && handed_off != nullptr))
    return FailedPrecondition("shoal-leader cannot lead this experiment (" + choice.why +
                              "): shoal-worker --role leader does");
  auto it = Leaders().find(spec.kind());
  if (it == Leaders().end())
    return FailedPrecondition("shoal-leader has no leader for kind '" + spec.kind() + "'");
  return it->second(handed_off);
}

}  // namespace shoal
