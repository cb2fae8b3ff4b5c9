// baseline's worker half (shared/kinds/baseline/rules.cc): no model, no data; each worker touches
// its memory a page at a time, timing it, holds it, and ends.
#pragma once

#include "worker/kind.h"

namespace shoal {

class BaselineKind : public WorkerKind {
 public:
  Status Prepare(LeaderEnv&) override { return Status::Ok(); }
  int RunWorker(WorkerEnv& env, bool forked_from_leader) override;
  std::vector<std::string> SegmentWhats() const override { return {}; }
};

}  // namespace shoal
