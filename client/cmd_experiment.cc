// submit, watch, list, get, cancel.
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <thread>

#include "client/commands.h"
#include "client/format.h"
#include "client/report/pbjson.h"
#include "client/report/timeline.h"
#include "client/spec_flags.h"
#include "client/uploads.h"
#include "shared/spec/cli_checks.h"
#include "shared/spec/wire_check.h"

namespace shoal::cli {

// The sweep commands' own `get`/`cancel` of a sweep id (cmd_sweep.cc).
int ShowSweep(ShoalClient& c, const std::string& id, bool cancel, bool json);

namespace {

// Streams an experiment until it ends; returns its final state.
v1::ExperimentState Watch(ShoalClient& c, const std::string& id, bool json, bool quiet) {
  v1::ExperimentState state = v1::STATE_UNSPECIFIED;
  const bool tty = ::isatty(STDOUT_FILENO) != 0;
  OrDie(c.Watch(id, [&](const v1::WatchEvent& ev) {
    if (ev.has_state()) state = ev.state();
    if (quiet) return;
    if (json) {
      std::cout << ToJson(ev).dump() << std::endl;
    } else if (ev.has_sample() && ev.has_node()) {  // a node's sample (old daemons): one line each
      std::printf("node %u %s", ev.node(), FormatSampleLine(ev.sample()).c_str());
      std::fflush(stdout);
    } else if (ev.has_sample()) {
      std::fputs(tty ? ("\033[H\033[J" + FormatSampleTable(ev.sample(), ev.dropped())).c_str()
                     : FormatSampleLine(ev.sample()).c_str(),
                 stdout);
      std::fflush(stdout);
    } else if (ev.has_event() && !tty) {
      std::printf("t=%.1fs event: %s\n", ev.event().t_ms() / 1000,
                  PrintableText(ev.event().text()).c_str());
    } else if (ev.has_state() && !tty) {
      std::printf("state: %s\n", StateName(ev.state()).c_str());
    }
  }));
  return state;
}

// `submit --slurm`: one experiment on Slurm's nodes, placed as a sweep of one point (one array
// task; with data_parallel --nodes N, an allocation of N nodes). Its experiment's id.
struct SlurmSubmit {
  bool slurm = false;
  std::string partition, time_limit;
};

std::string SubmitToSlurm(ShoalClient& c, const v1::ExperimentSpec& spec, const SlurmSubmit& o) {
  v1::SweepSpec sweep;
  *sweep.mutable_base() = spec;
  sweep.mutable_slurm()->set_partition(o.partition);
  sweep.mutable_slurm()->set_time_limit(o.time_limit);
  const std::string sweep_id = OrDie(c.SubmitSweep(sweep));
  const v1::SweepReport r = OrDie(c.GetSweep(sweep_id));
  if (r.sweep().points_size() != 1 || r.sweep().points(0).experiment_id().empty())
    Die("slurm: sweep " + sweep_id + " has no experiment to follow: " + r.sweep().error());
  return r.sweep().points(0).experiment_id();
}

// "queued (Slurm PENDING: Priority)", "running (Slurm RUNNING on node7)": where a point placed
// on Slurm stands, as this daemon last heard from Slurm.
std::string SlurmStanding(const v1::Experiment& e) {
  std::string out = StateName(e.state());
  if (!e.has_slurm()) return out;
  const v1::SlurmTaskInfo& t = e.slurm();
  out += " (Slurm " + t.state();
  if (!t.reason().empty()) out += ": " + t.reason();
  if (!t.node().empty()) out += " on " + t.node();
  return out + ")";
}

// Until an experiment placed on Slurm ends (this daemon follows its task by polling Slurm, and its
// samples come back with its record): a line each time where it stands changes, to `out`.
void WaitPolling(ShoalClient& c, const std::string& id, bool quiet, bool json = false,
                 FILE* out = stderr) {
  std::string last;
  for (;;) {
    const v1::Experiment e = OrDie(c.Get(id));
    const std::string now = SlurmStanding(e);
    if (!quiet && now != last) {
      if (json)
        std::fprintf(out, "%s\n", ToJson(e).dump().c_str());
      else
        std::fprintf(out, "%s: %s\n", id.c_str(), PrintableText(now).c_str());
      std::fflush(out);
    }
    last = now;
    if (IsTerminal(e.state())) return;
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

// `watch`: live samples; a point placed on Slurm has none until its record comes back, so where
// its task stands (pending and why, running and where) instead.
int WatchCommand(ShoalClient& c, const std::string& id, bool json) {
  if (OrDie(c.Get(id)).has_slurm()) {
    WaitPolling(c, id, false, json, stdout);
    return 0;
  }
  Watch(c, id, json, false);
  return 0;
}

int Submit(ShoalClient& c, const SpecFlags& flags, const SlurmSubmit& slurm, bool wait, bool json) {
  v1::ExperimentSpec spec = OrDie(flags.Spec());
  OrDie(UploadModelFiles(c, &spec));
  const std::string id = slurm.slurm ? SubmitToSlurm(c, spec, slurm) : OrDie(c.Submit(spec));
  if (!wait) {
    std::cout << (json ? nlohmann::json{{"id", id}}.dump() : id) << "\n";
    return 0;
  }
  if (!json) std::fprintf(stderr, "submitted %s\n", id.c_str());
  if (slurm.slurm)
    WaitPolling(c, id, json);
  else
    Watch(c, id, false, /*quiet=*/json);
  const v1::Experiment e = OrDie(c.Get(id));
  json ? PrintJson(e) : (void)std::fputs(FormatExperiment(e).c_str(), stdout);
  if (e.state() == v1::SUCCEEDED) return 0;
  std::fprintf(stderr, "shoal: experiment %s %s%s%s\n", id.c_str(), StateName(e.state()).c_str(),
               e.error().empty() ? "" : ": ", PrintableText(e.error()).c_str());
  return 1;
}

// `get ID --samples`: the kept samples as a table, CSV, JSON or an SVG of memory against time.
int PrintSamples(ShoalClient& c, const std::string& id, const std::string& format,
                 const std::string& output) {
  const std::vector<v1::Sample> samples = OrDie(c.Samples(id));
  if (format == "json") {
    v1::SamplesResponse r;
    for (const auto& s : samples) *r.add_samples() = s;
    Emit(ToJson(r).dump() + "\n", output);
  } else if (format == "svg") {
    Emit(RenderTimelineSvg("Experiment " + id + ": PSS of each process", samples), output);
  } else {
    Emit(FormatTimeline(samples, format), output);
  }
  return 0;
}

// A log's bytes for a terminal: each line escaped (no control sequence reaches it), the line
// breaks kept.
std::string TerminalSafe(const std::string& data) {
  std::string out;
  size_t from = 0;
  for (size_t nl; (nl = data.find('\n', from)) != std::string::npos; from = nl + 1)
    out += PrintableText(std::string_view(data).substr(from, nl - from)) + "\n";
  return out + PrintableText(std::string_view(data).substr(from));
}

// `logs ID [--follow] [--worker N]`: the run's captured stdout and stderr, raw off a terminal;
// what there is now, or with --follow everything until the run has ended; with --worker, only
// that rank's lines of a command (their "[rank N] " taken off).
int PrintLogs(ShoalClient& c, const std::string& id, bool follow, std::optional<uint32_t> worker) {
  const bool tty = ::isatty(STDOUT_FILENO) != 0;
  std::optional<RankLines> rank;
  if (worker) rank.emplace(*worker);
  for (uint64_t offset = 0;;) {
    const v1::LogsResponse r = OrDie(c.Logs(id, offset));
    const bool end = r.complete() || (r.data().empty() && !follow);
    const std::string data = rank ? rank->Take(r.data(), end) : r.data();
    const std::string out = tty ? TerminalSafe(data) : data;
    std::fwrite(out.data(), 1, out.size(), stdout);
    std::fflush(stdout);
    offset = r.next_offset();
    if (r.complete() || (r.data().empty() && !follow)) return 0;
    if (r.data().empty()) std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

int GetOrCancel(ShoalClient& c, const std::string& id, bool cancel, bool json) {
  if (!id.empty() && id[0] == 's') return ShowSweep(c, id, cancel, json);
  const v1::Experiment e = OrDie(cancel ? c.Cancel(id) : c.Get(id));
  if (json) {
    PrintJson(e);
    return 0;
  }
  std::string out = FormatExperiment(e);
  // A point of a sweep: where it stands in it, and its cell's other runs. The sweep may have been
  // deleted since: then the record says only its id.
  if (!e.sweep_id().empty()) {
    if (auto r = c.GetSweep(e.sweep_id()); r.ok()) out += FormatSweepRuns(e, *r);
  }
  std::fputs(out.c_str(), stdout);
  return 0;
}

template <typename State>
void AddSampleOptions(CLI::App* get, const std::shared_ptr<State>& s) {
  get->add_flag("--samples", s->samples,
                "the experiment's memory over time (the kept samples) instead of its record");
  s->sample_options = {
      get->add_option("--format", s->format, "with --samples: md | csv | json | svg")
          ->check(CLI::IsMember({"md", "csv", "json", "svg"})),
      get->add_option("-o,--output", s->output, "with --samples: write to this file, not stdout")
          ->check(NonEmpty("needs a file name"))};
}

// Only what was typed becomes a filter, as typed ("" too: the daemon refuses it, naming it); a
// state is one of the names `list` prints.
v1::ListRequest ListFilter(const std::optional<std::string>& state,
                           const std::optional<std::string>& kind,
                           const std::optional<std::string>& submitter, bool mine) {
  v1::ListRequest r;
  if (state) {
    std::string upper = *state;
    for (auto& ch : upper) ch = char(std::toupper(static_cast<unsigned char>(ch)));
    v1::ExperimentState st;
    if (!v1::ExperimentState_Parse(upper, &st) || st == v1::STATE_UNSPECIFIED)
      Die("--state: '" + *state +
          "' is not one of queued, running, succeeded, failed, cancelled, interrupted");
    r.set_state(st);
  }
  if (kind) r.set_kind(*kind);
  if (submitter) r.set_submitter(*submitter);
  if (mine) r.set_mine(true);
  return r;
}

// submit's --slurm and the placement flags that need it.
void AddSlurmSubmitOptions(CLI::App* submit, SlurmSubmit* o) {
  auto* slurm = submit->add_flag(
      "--slurm", o->slurm,
      "run it on Slurm's nodes (a sweep of one point, one array task; data_parallel with --nodes "
      "N: one allocation of N nodes, srun placing a part on each; docs/cluster.md)");
  submit->add_option("--partition", o->partition, "with --slurm: sbatch's --partition")
      ->needs(slurm);
  submit
      ->add_option("--time", o->time_limit,
                   "with --slurm: the time limit, in Slurm's format (30:00, 2:00:00, 1-00:00:00)")
      ->needs(slurm);
}

}  // namespace

void AddExperimentCommands(CLI::App& app, std::vector<Command>* out) {
  struct State {
    SpecFlags flags;
    bool wait = false, json = false;
    std::string id, format = "md", output;
    bool samples = false, follow = false;
    std::optional<uint32_t> worker;            // logs --worker
    std::vector<CLI::Option*> sample_options;  // --format, --output: only with --samples
    uint32_t page_size = 0;
    std::optional<std::string> state, kind, submitter;  // list's filters
    bool mine = false;
    SlurmSubmit slurm;
  };
  auto s = std::make_shared<State>();
  auto* submit = app.add_subcommand("submit", "submit an experiment");
  s->flags.Add(submit, /*lists=*/false);
  submit->add_flag("--wait", s->wait, "wait for the end, showing progress, then print the result");
  submit->add_flag("--json", s->json, "print one JSON object");
  AddSlurmSubmitOptions(submit, &s->slurm);
  out->push_back(
      {submit, [s](ShoalClient& c) { return Submit(c, s->flags, s->slurm, s->wait, s->json); }});

  auto* watch = app.add_subcommand("watch",
                                   "live samples of an experiment until it ends (on Slurm: where "
                                   "its task stands, until it ends)");
  watch->add_option("id", s->id, "experiment id")->required();
  watch->add_flag("--json", s->json, "one JSON object per line");
  out->push_back({watch, [s](ShoalClient& c) { return WatchCommand(c, s->id, s->json); }});

  auto* logs = app.add_subcommand("logs", "what an experiment's processes wrote to stdout/stderr");
  logs->add_option("id", s->id, "experiment id")->required();
  logs->add_flag("--follow", s->follow, "keep printing until the experiment has ended");
  logs->add_option("--worker", s->worker,
                   "kind command: only this rank's lines (the log prefixes each \"[rank N] \")")
      ->check(WholeNumber());
  out->push_back({logs, [s](ShoalClient& c) { return PrintLogs(c, s->id, s->follow, s->worker); }});

  auto* list = app.add_subcommand("list", "all experiments");
  list->add_flag("--json", s->json, "print one JSON object");
  list->add_option("--page-size", s->page_size, "records per call (the CLI follows every page)")
      ->check(WholeNumber())
      ->check(CLI::Range(1, 1000));
  list->add_option("--state", s->state, "only experiments in this state (queued, running, ...)");
  list->add_option("--kind", s->kind, "only experiments of this kind");
  list->add_option("--submitter", s->submitter, "only those this caller submitted ('uid 1000')");
  list->add_flag("--mine", s->mine, "only those you submitted");
  out->push_back({list, [s](ShoalClient& c) {
                    auto all = OrDie(
                        c.List(s->page_size, ListFilter(s->state, s->kind, s->submitter, s->mine)));
                    if (!s->json) {
                      std::fputs(FormatList(all).c_str(), stdout);
                      return 0;
                    }
                    v1::ListResponse r;
                    for (auto& e : all) *r.add_experiments() = e;
                    PrintJson(r);
                    return 0;
                  }});

  for (const bool cancel : {false, true}) {
    auto* cmd = cancel ? app.add_subcommand("cancel", "stop an experiment or a sweep (idempotent)")
                       : app.add_subcommand("get", "one experiment (or sweep), with its result");
    cmd->add_option("id", s->id, "experiment or sweep id")->required();
    cmd->add_flag("--json", s->json, "print one JSON object");
    if (!cancel) AddSampleOptions(cmd, s);
    out->push_back({cmd, [s, cancel](ShoalClient& c) {
                      if (s->samples) {
                        if (s->json) Die("--json with --samples: use --format json");
                        return PrintSamples(c, s->id, s->format, s->output);
                      }
                      for (const CLI::Option* o : s->sample_options)
                        if (o->count() > 0) Die(o->get_name() + " goes with --samples");
                      return GetOrCancel(c, s->id, cancel, s->json);
                    }});
  }
}

}  // namespace shoal::cli
