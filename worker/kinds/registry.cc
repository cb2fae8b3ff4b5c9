#include "worker/kind.h"
#include "worker/kinds/data_loading/data_loading.h"
#include "worker/kinds/hogwild/hogwild.h"
#include "worker/kinds/multi_model/multi_model.h"
#include "worker/kinds/pipeline/pipeline.h"
#ifdef SHOAL_WITH_GLOO
#include "worker/kinds/data_parallel/data_parallel.h"
#endif

namespace shoal {

std::unique_ptr<WorkerKind> MakeWorkerKind(const std::string& name) {
  if (name == "hogwild") return std::make_unique<HogwildKind>();
  if (name == "multi_model") return std::make_unique<MultiModelKind>();
  if (name == "data_loading") return std::make_unique<DataLoadingKind>();
  if (name == "pipeline") return std::make_unique<PipelineKind>();
#ifdef SHOAL_WITH_GLOO
  if (name == "data_parallel") return std::make_unique<DataParallelKind>();
#endif
  return nullptr;
}

}  // namespace shoal
