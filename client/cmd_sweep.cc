// sweep, sweeps, report (and get/cancel of a sweep id).
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <thread>

#include "client/commands.h"
#include "client/format.h"
#include "client/report/html.h"
#include "client/report/pbjson.h"
#include "client/report/report.h"
#include "client/spec_flags.h"
#include "client/uploads.h"
#include "shared/os/process.h"
#include "shared/spec/cli_checks.h"
#include "shared/spec/sweep.h"
#include "shared/spec/wire_check.h"

namespace shoal::cli {
namespace {

// The sweep and its experiments; `printable`: every string safe for a terminal (what is not
// JSON: JSON escapes control characters itself, and keeps the data as it was).
ReportInput FetchReport(ShoalClient& c, const std::string& id, bool printable = true) {
  v1::SweepReport r = OrDie(c.GetSweep(id));
  if (printable) MakePrintable(&r);
  return ReportInputOf(r);
}

std::string Clock(double seconds) {
  const int s = static_cast<int>(seconds + 0.5);
  char buf[32];
  std::snprintf(buf, sizeof buf, "%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60);
  return buf;
}

// "Slurm job 4242", or "Slurm jobs 4242, 4243" for a sweep placed as several arrays.
std::string SlurmJobs(const v1::Sweep& sw) {
  if (sw.slurm_job_ids_size() <= 1) return "Slurm job " + sw.slurm_job_id();
  std::string out = "Slurm jobs ";
  for (int i = 0; i < sw.slurm_job_ids_size(); ++i) out += (i ? ", " : "") + sw.slurm_job_ids(i);
  return out;
}

// Follows a sweep until it ends: a progress bar on a terminal, a line per finished point otherwise.
v1::ExperimentState WaitSweep(ShoalClient& c, const std::string& id, bool quiet) {
  const bool tty = ::isatty(STDERR_FILENO) != 0;
  const auto t0 = std::chrono::steady_clock::now();
  int last_done = -1;
  for (;;) {
    const v1::Sweep sw = OrDie(c.GetSweep(id)).sweep();
    int total = 0, done = 0, running = 0;
    std::string current;
    for (const auto& p : sw.points()) {
      if (!p.note().empty()) continue;
      ++total;
      if (IsTerminal(p.state())) ++done;
      if (p.state() == v1::RUNNING) current = DescribePoint(p), ++running;
    }
    // On Slurm many run at once: how many run and how many wait for a node.
    if (!sw.slurm_job_id().empty())
      current = SlurmJobs(sw) + ": " + std::to_string(running) + " running, " +
                std::to_string(total - done - running) + " pending";
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string left = done > 0 ? Clock(elapsed / done * (total - done)) : "?";
    if (!quiet && tty) {
      const int width = 30, filled = total ? width * done / total : width;
      std::fprintf(stderr, "\r\033[K[%s%s] %d/%d  %s  elapsed %s  left ~%s",
                   std::string(filled, '#').c_str(), std::string(width - filled, '.').c_str(), done,
                   total, current.c_str(), Clock(elapsed).c_str(), left.c_str());
    } else if (!quiet && done != last_done) {
      std::fprintf(stderr, "sweep %s: %d/%d done, elapsed %s, left ~%s%s%s\n", id.c_str(), done,
                   total, Clock(elapsed).c_str(), left.c_str(),
                   current.empty() ? "" : ", running: ", current.c_str());
    }
    last_done = done;
    if (IsTerminal(sw.state())) {
      if (!quiet && tty) std::fprintf(stderr, "\n");
      return sw.state();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
}

// The sweep's own options, beside the spec's fields: how often each point runs, and whether a
// row goes on past a point that ran out of memory.
struct SweepOptions {
  uint32_t repeats = 1;
  CLI::Option* repeats_opt = nullptr;
  bool no_skip_after_oom = false;
  // On Slurm: one array task per point.
  bool slurm = false;
  std::string partition, time_limit;
  uint32_t max_parallel = 0;
  CLI::Option* max_parallel_opt = nullptr;
  bool shared_nodes = false;
};

// --partition, --time, --max-parallel and --shared-nodes place a sweep on Slurm: each means
// nothing without --slurm, and is refused rather than ignored.
v1::SlurmPlacement SlurmOf(const SweepOptions& o, const CLI::App& sweep) {
  for (const char* flag : {"--partition", "--time", "--max-parallel", "--shared-nodes"})
    if (!o.slurm && sweep.count(flag) > 0) Die(std::string(flag) + ": only with --slurm");
  v1::SlurmPlacement p;
  p.set_partition(o.partition);
  p.set_time_limit(o.time_limit);
  if (o.max_parallel_opt->count() > 0) p.set_max_parallel(o.max_parallel);
  if (o.shared_nodes) p.set_exclusive(false);
  return p;
}

int SubmitSweep(ShoalClient& c, const SpecFlags& flags, const SweepOptions& o,
                const CLI::App& sweep, bool wait, bool json) {
  v1::SweepSpec spec = OrDie(flags.Sweep());
  if (o.repeats_opt->count() > 0) spec.set_repeats(o.repeats);  // typed: kept, checked by shoald
  if (o.no_skip_after_oom) spec.set_skip_after_oom(false);
  const v1::SlurmPlacement slurm = SlurmOf(o, sweep);
  if (o.slurm) *spec.mutable_slurm() = slurm;
  OrDie(UploadModelFiles(c, &spec));
  const std::string id = OrDie(c.SubmitSweep(spec));
  if (!wait) {
    std::cout << (json ? nlohmann::json{{"id", id}}.dump() : id) << "\n";
    return 0;
  }
  if (!json) std::fprintf(stderr, "submitted sweep %s\n", id.c_str());
  const v1::ExperimentState st = WaitSweep(c, id, json);
  const ReportInput in = FetchReport(c, id, !json);
  json ? (void)(std::cout << RenderJson(in).dump() << "\n")
       : (void)std::fputs(RenderMarkdown(in).c_str(), stdout);
  if (st == v1::SUCCEEDED) return 0;
  std::fprintf(stderr, "shoal: sweep %s %s\n", id.c_str(), StateName(st).c_str());
  return 1;
}

void WritePng(const std::string& svg, const std::string& output) {
  if (output.empty()) Die("--format png needs --output FILE");
  std::string conv;
  for (const char* dir : {"/usr/bin", "/usr/local/bin", "/bin"}) {
    const std::string p = std::string(dir) + "/rsvg-convert";
    if (::access(p.c_str(), X_OK) == 0) conv = p;
  }
  if (conv.empty())
    Die("--format png needs rsvg-convert (Debian package librsvg2-bin); --format svg works "
        "without it");
  const std::string tmp = output + ".svg";
  Emit(svg, tmp);
  auto pid = SpawnProcess({conv, "-o", output, tmp}, {});
  int st = 1;
  if (pid.ok()) ::waitpid(*pid, &st, 0);
  ::unlink(tmp.c_str());
  if (!pid.ok() || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
    Die("rsvg-convert failed to write " + output);
}

struct ReportArgs {
  std::vector<std::string> ids;
  std::string format = "md", output, plot;
  bool compare = false, from_json = false;
};

// A report saved as JSON (on a GPU node, say), read back without a daemon.
ReportInput LoadReport(const std::string& path, bool printable) {
  std::ifstream f(path);
  if (!f) Die(path + ": cannot read it");
  const nlohmann::json j = nlohmann::json::parse(f, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) Die(path + ": not JSON");
  StatusOr<v1::SweepReport> r = SweepReportFromJson(j);
  if (!r.ok()) Die(path + ": " + r.status().message());
  if (printable) MakePrintable(&*r);  // as a daemon's answer is
  return ReportInputOf(*r);
}

int Report(ShoalClient& c, const ReportArgs& a) {
  auto input = [&](const std::string& id, bool printable = true) {
    return a.from_json ? LoadReport(id, printable) : FetchReport(c, id, printable);
  };
  if (a.compare) {
    if (a.ids.size() != 2) Die("report --compare takes two sweep ids: SWEEP_A SWEEP_B");
    if (a.format != "md") Die("report --compare prints Markdown only (--format md)");
    if (!a.plot.empty()) Die("--plot chooses what svg and png draw; --compare prints Markdown");
    Emit(RenderCompareMarkdown(input(a.ids[0]), input(a.ids[1])), a.output);
    return 0;
  }
  if (a.ids.size() != 1) Die("report takes one sweep id (two only with --compare)");
  // Refused before anything is fetched: an option that cannot apply, whatever the sweep.
  if (!a.plot.empty() && a.format != "svg" && a.format != "png")
    Die("--plot chooses what svg and png draw; --format is " + a.format +
        (a.format == "html" ? " (which draws every picture)" : ""));
  const ReportInput in = input(a.ids[0], a.format != "json");
  // The node is the daemon's now: the one the sweep ran on, unless it was read from a file.
  std::optional<v1::NodeInfoResponse> node;
  if (a.format == "html" && !a.from_json) {
    node = OrDie(c.NodeInfo());
    MakePrintable(&*node);
  }
  const bool png = a.format == "png";
  const std::string text =
      OrDie(RenderReport(in, png ? "svg" : a.format, a.plot, node ? &*node : nullptr));
  png ? WritePng(text, a.output) : Emit(text, a.output);
  return 0;
}

}  // namespace

int ShowSweep(ShoalClient& c, const std::string& id, bool cancel, bool json) {
  if (cancel) OrDie(c.CancelSweep(id).status());
  const ReportInput in = FetchReport(c, id, !json);
  json ? (void)(std::cout << RenderJson(in).dump() << "\n")
       : (void)std::fputs(FormatSweepPoints(in.sweep).c_str(), stdout);
  return 0;
}

// --slurm and what places a sweep there (SlurmOf refuses them without it).
void AddSlurmOptions(CLI::App* sweep, SweepOptions* o) {
  sweep->add_flag("--slurm", o->slurm,
                  "run the points on Slurm's nodes as one job array (a task per point, a node "
                  "to each) instead of one by one on this daemon (docs/cluster.md)");
  sweep->add_option("--partition", o->partition, "with --slurm: sbatch's --partition");
  sweep->add_option("--time", o->time_limit,
                    "with --slurm: each task's time limit, in Slurm's format (30:00, 2:00:00, "
                    "1-00:00:00)");
  o->max_parallel_opt = sweep
                            ->add_option("--max-parallel", o->max_parallel,
                                         "with --slurm: at most K tasks at once (the array's %K)")
                            ->check(WholeNumber())
                            ->check(CLI::Range(1, 100000));
  sweep->add_flag("--shared-nodes", o->shared_nodes,
                  "with --slurm: let Slurm put tasks beside other jobs (default: a node to each "
                  "task alone, so its figures are its own)");
}

void AddSweepCommands(CLI::App& app, std::vector<Command>* out) {
  struct State {
    SpecFlags flags;
    SweepOptions options;
    bool wait = false, json = false;
    ReportArgs report;
  };
  auto s = std::make_shared<State>();
  auto* sweep = app.add_subcommand(
      "sweep", "run a grid of experiments: every field given as a comma-separated list is an axis");
  s->flags.Add(sweep, /*lists=*/true);
  s->options.repeats_opt = sweep->add_option(
      "--repeats", s->options.repeats,
      "run every point N times (1-" + std::to_string(kMaxRepeats) +
          "), interleaved: all points once, then all again, ...; the report shows each "
          "figure's median and spread");
  sweep->add_flag("--no-skip-after-oom", s->options.no_skip_after_oom,
                  "run a row's bigger points even after one ran out of memory (default: skip "
                  "them, noting why)");
  AddSlurmOptions(sweep, &s->options);
  sweep->add_flag("--wait", s->wait, "wait for the end, showing progress, then print the report");
  sweep->add_flag("--json", s->json, "print one JSON object");
  out->push_back({sweep, [s, sweep](ShoalClient& c) {
                    return SubmitSweep(c, s->flags, s->options, *sweep, s->wait, s->json);
                  }});

  auto* sweeps = app.add_subcommand("sweeps", "all sweeps");
  sweeps->add_flag("--json", s->json, "print one JSON object");
  out->push_back({sweeps, [s](ShoalClient& c) {
                    auto all = OrDie(c.ListSweeps());
                    if (!s->json) {
                      std::fputs(FormatSweeps(all).c_str(), stdout);
                      return 0;
                    }
                    v1::ListSweepsResponse r;
                    for (auto& sw : all) *r.add_sweeps() = sw;
                    PrintJson(r);
                    return 0;
                  }});

  auto* report =
      app.add_subcommand("report", "the tables of a sweep (or the ratio of two with --compare)");
  report->add_option("ids", s->report.ids, "SWEEP_ID, or SWEEP_A SWEEP_B with --compare")
      ->required()
      ->expected(1, 2);
  report
      ->add_option("--format", s->report.format,
                   "md | csv | json | svg | png | html (one self-contained page: tables, "
                   "pictures, fixed fields, node, environment)")
      ->capture_default_str()
      ->check(CLI::IsMember({"md", "csv", "json", "svg", "png", "html"}));
  report
      ->add_option("--plot", s->report.plot,
                   "what svg/png draw: memory | throughput | pareto (samples/s against peak "
                   "memory, the front joined) | gpu-memory | gpu-util | loss (default: loss when "
                   "the optimiser varies, else memory: the host's)")
      ->check(CLI::IsMember({"memory", "throughput", "pareto", "gpu-memory", "gpu-util", "loss"}));
  report
      ->add_option("--output,-o", s->report.output,
                   "write to this file instead of stdout (required for png)")
      ->check(NonEmpty("needs a file name"));
  report->add_flag("--compare", s->report.compare, "print B / A for every cell of two sweeps");
  report->add_flag("--from-json", s->report.from_json,
                   "the ids are files written by report --format json or sweep --wait --json: "
                   "read them instead of asking shoald");
  out->push_back({report, [s](ShoalClient& c) { return Report(c, s->report); },
                  [s] { return !s->report.from_json; }});
}

}  // namespace shoal::cli
