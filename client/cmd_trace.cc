// trace: one experiment's record as a Chrome trace-event file for Perfetto or chrome://tracing
// (docs/trace.md). The daemon renders it (client/report/trace.h); the Python package's
// Experiment.trace() writes the same bytes.
#include <memory>

#include "client/commands.h"
#include "shared/spec/cli_checks.h"

namespace shoal::cli {

void AddTraceCommands(CLI::App& app, std::vector<Command>* out) {
  struct State {
    std::string id, output;
  };
  auto s = std::make_shared<State>();
  auto* trace = app.add_subcommand(
      "trace", "an ended experiment as a trace for Perfetto or chrome://tracing (JSON)");
  trace->add_option("id", s->id, "experiment id")->required();
  trace->add_option("-o,--output", s->output, "write it to this file (default: stdout)")
      ->check(NonEmpty("empty: give a file name, or leave -o out for stdout"));
  out->push_back({trace, [s](ShoalClient& c) {
                    Emit(OrDie(c.Trace(s->id)), s->output);
                    return 0;
                  }});
}

}  // namespace shoal::cli
