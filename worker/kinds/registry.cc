// The worker's registry of kinds: one line per kind. Its twin for shoald and the CLI is
// shared/kinds/registry.cc.
#include <algorithm>
#include <deque>

#include "worker/kind.h"
#include "worker/kinds/baseline/baseline.h"
#include "worker/kinds/command/command.h"
#include "worker/kinds/data_loading/data_loading.h"
#include "worker/kinds/hogwild/hogwild.h"
#include "worker/kinds/multi_model/multi_model.h"
#include "worker/kinds/pipeline/pipeline.h"
#include "worker/launchers.h"
#ifdef SHOAL_WITH_GLOO
#include "worker/kinds/data_parallel/data_parallel.h"
#endif

namespace shoal {
namespace {

struct Entry {
  std::string name;
  WorkerKindFactory make;
};

template <typename K>
Entry Kind(const char* name) {
  return {name, [] { return std::unique_ptr<WorkerKind>(std::make_unique<K>()); }};
}

std::deque<Entry>& Entries() {
  static std::deque<Entry> entries = {
      Kind<HogwildKind>("hogwild"),
      Kind<MultiModelKind>("multi_model"),
      Kind<DataLoadingKind>("data_loading"),
      Kind<PipelineKind>("pipeline"),
      Kind<CommandKind>("command"),
      Kind<BaselineKind>("baseline"),
#ifdef SHOAL_WITH_GLOO
      Kind<DataParallelKind>("data_parallel"),
#endif
  };
  return entries;
}

const Entry* Find(const std::string& name) {
  const auto& all = Entries();
  auto it = std::find_if(all.begin(), all.end(), [&](const Entry& e) { return e.name == name; });
  return it == all.end() ? nullptr : &*it;
}

}  // namespace

std::unique_ptr<WorkerKind> MakeWorkerKind(const std::string& name) {
  const Entry* e = Find(name);
  return e == nullptr ? nullptr : e->make();
}

StatusOr<std::unique_ptr<WorkerKind>> MakeWorkerKindFor(const v1::ExperimentSpec& spec) {
  std::unique_ptr<WorkerKind> kind = MakeWorkerKind(spec.kind());
  if (kind == nullptr) return NotFound("kind '" + spec.kind() + "' is not in shoal-worker");
  return kind;
}

std::vector<std::string> WorkerKindNames() {
  std::vector<std::string> names;
  for (const Entry& e : Entries()) names.push_back(e.name);
  return names;
}

bool RegisterWorkerKind(const std::string& name, WorkerKindFactory make) {
  if (Find(name) != nullptr) return false;
  Entries().push_back({name, std::move(make)});
  return true;
}

}  // namespace shoal
