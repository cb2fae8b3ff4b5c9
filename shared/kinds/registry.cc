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

namespace {

// A deque: FindKind's pointers stay valid when a kind is registered after.
std::deque<KindRules>& Kinds() {
  static std::deque<KindRules> kinds = {
      HogwildRules(),      MultiModelRules(), DataLoadingRules(),
      DataParallelRules(), PipelineRules(),   CommandRules(),
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

std::vector<std::string> KindNames() {
  std::vector<std::string> names;
  for (const auto& k : AllKinds()) names.push_back(k.name);
  return names;
}

}  // namespace shoal
