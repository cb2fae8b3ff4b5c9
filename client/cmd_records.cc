// rm and prune: deleting ended records, so the store and its listings stay small.
#include <cstdio>
#include <memory>
#include <optional>

#include "client/commands.h"
#include "client/format.h"
#include "shared/spec/cli_checks.h"

namespace shoal::cli {
namespace {

int Remove(ShoalClient& c, const std::vector<std::string>& ids) {
  // Checked before anything is deleted: a repeat would delete, then fail on the second.
  for (size_t i = 0; i < ids.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      if (ids[i] == ids[j]) Die("rm: " + ids[i] + " given twice");
  for (const auto& id : ids) {
    const v1::DeleteResponse r = OrDie(c.Delete(id));
    std::printf("deleted %s (%u experiment%s)\n", id.c_str(), r.experiments(),
                r.experiments() == 1 ? "" : "s");
  }
  return 0;
}

int Prune(ShoalClient& c, const std::string& older_than, const std::optional<uint32_t>& keep) {
  v1::PruneRequest req;
  if (!older_than.empty()) {
    auto ms = ParseDurationMs(older_than);
    if (!ms.ok()) Die(ms.status().message());
    req.set_older_than_ms(*ms);
  }
  if (keep) req.set_keep(*keep);
  if (!req.has_older_than_ms() && !req.has_keep()) Die("prune: give --older-than and/or --keep");
  const v1::DeleteResponse r = OrDie(c.Prune(req));
  std::printf("deleted %u experiments (those of %u sweeps included)\n", r.experiments(),
              r.sweeps());
  return 0;
}

}  // namespace

void AddRecordCommands(CLI::App& app, std::vector<Command>* out) {
  struct State {
    std::vector<std::string> ids;
    std::string older_than;
    std::optional<uint32_t> keep;
  };
  auto s = std::make_shared<State>();
  auto* rm =
      app.add_subcommand("rm", "delete ended experiments or sweeps (a sweep with its points)");
  rm->add_option("ids", s->ids, "experiment or sweep ids")->required();
  out->push_back({rm, [s](ShoalClient& c) { return Remove(c, s->ids); }});

  auto* prune = app.add_subcommand("prune", "delete ended records by age and/or count");
  prune
      ->add_option("--older-than", s->older_than,
                   "those that ended longer ago than this: 30d, 12h, 90m, 45s, 500ms")
      ->check(NonEmpty("empty: give an age such as 30d"));
  prune->add_option("--keep", s->keep, "all but the newest N experiments and the newest N sweeps")
      ->check(WholeNumber());
  out->push_back({prune, [s](ShoalClient& c) { return Prune(c, s->older_than, s->keep); }});
}

}  // namespace shoal::cli
