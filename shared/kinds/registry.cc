// The daemon's and the CLI's registry of kinds: one line per kind. Its twin for shoal-worker is
// worker/kinds/registry.cc.
#include <algorithm>

#include "shared/kinds/kind.h"

namespace shoal {

// Each kind's rules, from shared/kinds/<kind>/rules.cc.
KindRules HogwildRules();
KindRules MultiModelRules();
KindRules DataLoadingRules();
KindRules DataParallelRules();
KindRules PipelineRules();
KindRules CommandRules();
KindRules BaselineRules();

namespace {

// A deque: FindKind's pointers stay valid when a kind is registered after.
std::deque<KindRules>& Kinds() {
  static std::deque<KindRules> kinds = {
      HogwildRules(),  MultiModelRules(), DataLoadingRules(), DataParallelRules(),
      PipelineRules(), CommandRules(),    BaselineRules(),
  };
  return kinds;
}

}  // namespace

const std::deque<KindRules>& AllKinds() { return Kinds(); }

bool RegisterKind(KindRules kind) {
  if (FindKind(kind.name) != nullptr) return false;
  Kinds().push_back(std::move(kind));
  return true;
}

const KindRules* FindKind(const std::string& name) {
  const auto& all = AllKinds();
  auto it =
      std::find_if(all.begin(), all.end(), [&](const KindRules& k) { return k.name == name; });
  return it == all.end() ? nullptr : &*it;
}

std::vector<std::string> CommonFieldsBut(const std::set<std::string>& reads) {
  std::vector<std::string> out;
  for (const SpecField& f : CommonSpecFields())
    if (!reads.count(f.name)) out.push_back(f.name);
  return out;
}

uint32_t Ranks(const v1::ExperimentSpec& spec) {
  const KindRules* k = FindKind(spec.kind());
  return k != nullptr && k->world_size ? k->world_size(spec)
                                       : std::max<uint32_t>(1, spec.workers());
}

uint32_t RankOf(const v1::ExperimentSpec& spec, uint32_t index) {
  const KindRules* k = FindKind(spec.kind());
  return k != nullptr && k->global_rank ? k->global_rank(spec, index) : index;
}

uint32_t BatchOf(const v1::ExperimentSpec& spec) {
  const KindRules* k = FindKind(spec.kind());
  return k != nullptr && k->worker_batch ? k->worker_batch(spec) : spec.batch_size();
}

std::vector<std::string> KindNames() {
  std::vector<std::string> names;
  for (const auto& k : AllKinds()) names.push_back(k.name);
  return names;
}

}  // namespace shoal
