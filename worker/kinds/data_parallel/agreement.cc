#include "worker/kinds/data_parallel/agreement.h"

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "shared/kinds/data_parallel/data_parallel.h"
#include "shared/spec/spec_fields.h"

namespace shoal {
namespace {

std::vector<uint8_t> Bytes(const std::string& s) { return {s.begin(), s.end()}; }

// "0.3 s", "300 s", "1800 s": never in exponent notation.
std::string Seconds(std::chrono::milliseconds t) {
  char buf[32];
  const double s = double(t.count()) / 1000;
  std::snprintf(buf, sizeof buf, s >= 10 ? "%.0f s" : "%.3g s", s);
  return buf;
}

// The first line of what c10d said (its messages carry a C++ backtrace after it).
std::string FirstLine(const std::string& what) { return what.substr(0, what.find('\n')); }

// Rank r's answer, waited for up to `wait` (what is left of the run's `timeout`), or why there is
// none: its node named.
StatusOr<std::string> Verdict(c10d::Store& store, const v1::ExperimentSpec& spec, uint32_t r,
                              std::chrono::milliseconds wait, std::chrono::milliseconds timeout) {
  const std::string key = "verdict/" + std::to_string(r);
  try {
    store.wait({key}, wait);
    const auto v = store.get(key);
    return std::string(v.begin(), v.end());
  } catch (const std::exception& e) {
    const uint32_t node = r / std::max<uint32_t>(1, spec.workers());
    return Unavailable("node " + std::to_string(node) + " (rank " + std::to_string(r) +
                       ") did not join the run within " + Seconds(timeout) +
                       ": its part never started, or cannot reach node 0 at " + spec.master() +
                       " (c10d: " + FirstLine(e.what()) + ")");
  }
}

}  // namespace

v1::ExperimentSpec Contract(v1::ExperimentSpec s) {
  s.clear_node_rank();
  s.clear_name();
  s.clear_force();
  s.clear_start();
  s.clear_threads();
  s.clear_allocator();
  s.clear_activations();  // how much memory, not what is computed
  s.clear_dataset();      // a path on each node
  s.clear_sample_interval_ms();
  s.clear_stall_timeout_ms();
  s.clear_eval_samples();
  return s;
}

Status AgreeAcrossNodes(c10d::Store& store, const v1::ExperimentSpec& spec, uint32_t rank,
                        std::chrono::milliseconds timeout) {
  const v1::ExperimentSpec mine = Contract(spec);
  if (rank == 0) {
    store.set("spec", Bytes(mine.SerializeAsString()));
    // One deadline for all: a run does not wait `timeout` once per missing rank.
    const auto end = std::chrono::steady_clock::now() + timeout;
    for (uint32_t r = 1; r < WorldSize(spec); ++r) {
      const auto left = std::max(std::chrono::milliseconds(1),
                                 std::chrono::duration_cast<std::chrono::milliseconds>(
                                     end - std::chrono::steady_clock::now()));
      ASSIGN_OR_RETURN(const std::string v, Verdict(store, spec, r, left, timeout));
      if (v != "ok") return FailedPrecondition("rank " + std::to_string(r) + ": " + v);
    }
    return Status::Ok();
  }
  const auto v = store.get("spec");
  v1::ExperimentSpec theirs;
  theirs.ParseFromArray(v.data(), int(v.size()));
  std::string why;
  for (const auto& f : SpecFields()) {
    const std::string a = SpecFieldText(theirs, f), b = SpecFieldText(mine, f);
    if (a != b && why.empty())
      why = "nodes disagree: " + f.name + " is '" + a + "' on node 0 and '" + b + "' on node " +
            std::to_string(spec.node_rank());
  }
  store.set("verdict/" + std::to_string(rank), Bytes(why.empty() ? "ok" : why));
  return why.empty() ? Status::Ok() : FailedPrecondition(why);
}

Status NodeZeroUnreachable(const v1::ExperimentSpec& spec, std::chrono::milliseconds timeout,
                           const std::exception& c10d_error) {
  return Unavailable("cannot reach node 0's c10d store at " + spec.master() + " within " +
                     Seconds(timeout) +
                     ": node 0's part never started, or this node cannot reach it (c10d: " +
                     FirstLine(c10d_error.what()) + ")");
}

}  // namespace shoal
