#include "worker/kinds/leader_kinds.h"

#include "shared/spec/spec.h"
#include "worker/kinds/command/command.h"
#include "worker/kinds/hogwild/hogwild_leader.h"

namespace shoal {

StatusOr<std::unique_ptr<WorkerKind>> MakeLibTorchFreeLeaderKind(
    const v1::ExperimentSpec& spec, const ipc::v1::LeaderHandOff* handed_off) {
  const LeaderChoice choice = ChooseLeader(spec);
  if (choice.libtorch && !(choice.hands_off && handed_off != nullptr))
    return FailedPrecondition("shoal-leader cannot lead this experiment (" + choice.why +
                              "): shoal-worker --role leader does");
  if (spec.kind() == "command") return std::unique_ptr<WorkerKind>(new CommandKind());
  if (spec.kind() == "hogwild" || spec.kind() == "data_parallel")
    return std::unique_ptr<WorkerKind>(
        new ImageLeaderKind(spec.kind() == "data_parallel", handed_off));
  return FailedPrecondition("shoal-leader has no leader for kind '" + spec.kind() + "'");
}

}  // namespace shoal
