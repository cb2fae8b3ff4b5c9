#include <algorithm>

#include "shared/kinds/kinds.h"

namespace shoal {

const std::vector<KindRules>& AllKinds() {
  static const std::vector<KindRules> kinds = {
      HogwildRules(), MultiModelRules(), DataLoadingRules(), DataParallelRules(), PipelineRules(),
  };
  return kinds;
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
