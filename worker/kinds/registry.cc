#include "worker/kind.h"
#include "worker/kinds/hogwild.h"

namespace shoal {

std::unique_ptr<WorkerKind> MakeWorkerKind(const std::string& name) {
  if (name == "hogwild") return std::make_unique<HogwildKind>();
  return nullptr;
}

}  // namespace shoal
