// hogwild's figures: its turns at the steps, as `get` and the report show them.
#include "shared/kinds/hogwild/figures.h"

#include <set>
#include <utility>

namespace shoal::hogwild {

// Fewer of its workers stepped at once than it has: they took turns and shared step arenas.
bool TookTurns(const v1::ExperimentSpec& s) {
  return s.hogwild().has_concurrent_steps() && s.hogwild().concurrent_steps() < s.workers();
}

// How many workers stepped at once, given or shoald's default (and why); nothing when the
// default let every worker step at once.
std::string SettingLines(const v1::ExperimentSpec& s) {
  if (!s.hogwild().has_concurrent_steps()) return "";
  if (!s.hogwild().concurrent_steps_why().empty() && s.hogwild().concurrent_steps() >= s.workers())
    return "";
  return "  steps       " + std::to_string(s.hogwild().concurrent_steps()) + " of " +
         std::to_string(s.workers()) + " workers at once" +
         (s.hogwild().concurrent_steps_why().empty()
              ? " (given)"
              : " (" + s.hogwild().concurrent_steps_why() + ")") +
         "\n";
}

// Where workers took turns at their steps (hogwild's default where the cores hold fewer steps
// than the workers): those points' memory is the shared step arenas', so the report says which.
std::string ReportNote(const std::vector<PointView>& points) {
  std::set<std::pair<uint32_t, uint32_t>> turns;  // (workers, steps at once)
  std::set<std::string> whys;
  for (const auto& v : points) {
    if (v.experiment == nullptr || !TookTurns(v.experiment->spec())) continue;
    const v1::ExperimentSpec& s = v.experiment->spec();
    turns.insert({s.workers(), s.hogwild().concurrent_steps()});
    whys.insert(s.hogwild().concurrent_steps_why().empty() ? "given"
                                                           : s.hogwild().concurrent_steps_why());
  }
  if (turns.empty()) return "";
  std::string list, why;
  for (const auto& [workers, at_once] : turns)
    list += (list.empty() ? "" : ", ") + std::to_string(at_once) + " of " +
            std::to_string(workers) + " workers";
  for (const auto& w : whys) why += (why.empty() ? "" : "; ") + w;
  return "Turns: " + list + " stepped at once (" + why +
         "), sharing that many step arenas (docs/allocators.md).";
}

}  // namespace shoal::hogwild
