#include "client/report/trace.h"

#include <algorithm>
#include <map>
#include <regex>
#include <string>

#include "client/report/timeline.h"

namespace shoal {
namespace {

using nlohmann::json;

constexpr double kTraceMiB = 1024.0 * 1024.0;
// Track ids: the run's own, then each process's (node, pid) — pids repeat across nodes.
constexpr int kRunTrack = 1;
constexpr int64_t kPidSpan = 4194304;  // pid_max's ceiling on Linux

int64_t TrackOf(uint32_t node, int32_t pid) { return int64_t(node + 1) * kPidSpan + pid; }
double Us(double ms) { return ms * 1000.0; }

// What one process's track shows, gathered from the record, its samples and its events.
struct Track {
  std::string name;
  int sort = 0;                     // leader, workers in order, then the rest
  double first = -1, last = -1;     // first and last time a sample saw it (ms)
  double request = -1, ready = -1;  // a worker's: the leader's request, its first step
  double exit_at = -1;              // the event that said it ended
  std::string exit_text;            // "exited with code 0", "killed by signal 9"
  double offset = 0;  // its node's clock onto the run's (ms: NodePart.clock_offset_ms)
  const v1::ProcessInfo* info = nullptr;
};

std::string NamePrefix(const v1::Experiment& e, uint32_t node) {
  return e.parts_size() > 0 ? "node " + std::to_string(node) + " " : "";
}

std::string RoleName(const std::string& role, int32_t index) {
  return role == "worker" ? "worker " + std::to_string(index) : role;
}

int SortOf(const std::string& role, int32_t index) {
  if (role == "leader") return 0;
  if (role == "worker") return 1 + index;
  return 1 << 20;
}

// Every process of the record (its process table and the forkserver's), by track.
std::map<int64_t, Track> TracksOf(const v1::Experiment& e) {
  std::map<int64_t, Track> tracks;
  auto add = [&](const v1::ProcessInfo& p) {
    const uint32_t node = p.has_node() ? p.node() : 0;
    Track& t = tracks[TrackOf(node, p.pid())];
    t.name = NamePrefix(e, node) + RoleName(p.role(), p.index()) + " (pid " +
             std::to_string(p.pid()) + ")";
    t.sort = SortOf(p.role(), p.index());
    t.info = &p;
    // Across nodes a process's times count from its own node's start: moved onto the run's clock
    // as the record's samples and events are.
    for (const auto& part : e.parts())
      if (part.node_rank() == node) t.offset = part.clock_offset_ms();
    if (p.has_ready_ms()) t.ready = p.ready_ms() + t.offset;
    if (p.has_ready_ms() && p.has_start_ms()) t.request = t.ready - p.start_ms();
  };
  for (const auto& p : e.processes()) add(p);
  for (const auto& p : e.fork_server_processes()) add(p);
  return tracks;
}

// Samples to draw: all, or evenly thinned to `max` keeping the first, the last and the peak.
std::vector<const v1::Sample*> Thinned(const std::vector<v1::Sample>& samples, size_t max) {
  std::vector<const v1::Sample*> out;
  if (samples.empty()) return out;
  size_t peak = 0;
  for (size_t i = 0; i < samples.size(); ++i)
    if (!samples[i].sharing_moved() &&
        samples[i].total_pss_bytes() > samples[peak].total_pss_bytes())
      peak = i;
  const size_t stride = std::max<size_t>(1, (samples.size() + max - 1) / std::max<size_t>(1, max));
  for (size_t i = 0; i < samples.size(); ++i)
    if (i % stride == 0 || i == peak || i + 1 == samples.size()) out.push_back(&samples[i]);
  return out;
}

json Meta(const char* what, int64_t pid, const json& args) {
  return {{"ph", "M"}, {"name", what}, {"pid", pid}, {"tid", pid}, {"args", args}};
}

json Counter(const std::string& name, int64_t pid, double t_ms, const json& args) {
  return {{"ph", "C"},  {"name", name},   {"pid", pid},
          {"tid", pid}, {"ts", Us(t_ms)}, {"args", args}};
}

json Slice(const std::string& name, int64_t pid, double from_ms, double to_ms, json args = {}) {
  json s = {{"ph", "X"},
            {"name", name},
            {"cat", "life"},
            {"pid", pid},
            {"tid", pid},
            {"ts", Us(from_ms)},
            // The end's time less the start's, each as its own events give it: a slice that
            // ends where the next begins meets it exactly, with no rounding between them.
            {"dur", std::max(0.0, Us(to_ms) - Us(from_ms))}};
  if (!args.is_null()) s["args"] = std::move(args);
  return s;
}

// The sums' counters on the run's track, and each process's on its own.
void AddCounters(const v1::Experiment& e, const std::vector<const v1::Sample*>& samples,
                 std::map<int64_t, Track>* tracks, json* out) {
  for (const v1::Sample* s : samples) {
    const double t = s->t_ms();
    // A sum read while shared pages moved may count a page more than whole: left out, as the
    // record's peak leaves it out.
    if (!s->sharing_moved())
      out->push_back(Counter("memory sum (MiB)", kRunTrack, t,
                             {{"pss", s->total_pss_bytes() / kTraceMiB},
                              {"rss", s->total_rss_bytes() / kTraceMiB},
                              {"uss", s->total_uss_bytes() / kTraceMiB}}));
    out->push_back(Counter("steps", kRunTrack, t, {{"steps", s->steps()}}));
    if (s->has_samples_per_sec())
      out->push_back(Counter("samples/s", kRunTrack, t, {{"samples/s", s->samples_per_sec()}}));
    if (s->has_gpu_memory_bytes())
      out->push_back(Counter("GPU memory sum (MiB)", kRunTrack, t,
                             {{"gpu memory", s->gpu_memory_bytes() / kTraceMiB}}));
    for (const auto& g : s->gpus()) {
      const std::string dev = "GPU " + std::to_string(g.index());
      if (g.has_memory_used_bytes())
        out->push_back(Counter(dev + " memory (MiB)", kRunTrack, t,
                               {{"used", g.memory_used_bytes() / kTraceMiB}}));
      if (g.has_util_percent())
        out->push_back(
            Counter(dev + " utilisation (%)", kRunTrack, t, {{"util", g.util_percent()}}));
    }
    const uint32_t node = s->has_node() ? s->node() : 0;
    for (const auto& p : s->processes()) {
      const int64_t id = TrackOf(node, p.pid());
      Track& tr = (*tracks)[id];
      if (tr.name.empty()) {  // sampled, not in the process table (a command's child)
        tr.name =
            NamePrefix(e, node) + TimelineSeriesName(p) + " (pid " + std::to_string(p.pid()) + ")";
        tr.sort = SortOf(p.role(), p.index());
      }
      if (tr.first < 0) tr.first = t;
      tr.last = t;
      json mem = {{"pss", p.pss_bytes() / kTraceMiB},
                  {"rss", p.rss_bytes() / kTraceMiB},
                  {"uss", p.uss_bytes() / kTraceMiB}};
      out->push_back(Counter("memory (MiB)", id, t, mem));
      if (p.has_gpu_memory_bytes())
        out->push_back(
            Counter("GPU memory (MiB)", id, t, {{"gpu memory", p.gpu_memory_bytes() / kTraceMiB}}));
      if (p.has_cpu_percent())
        out->push_back(Counter("CPU (%)", id, t, {{"cpu", p.cpu_percent()}}));
    }
  }
}

// "worker 1 exited with code 0", "leader killed by signal 9": when a process of one node ended.
void AddExits(const v1::Experiment& e, const std::vector<v1::Event>& events,
              std::map<int64_t, Track>* tracks) {
  static const std::regex kExit(
      R"(^(worker (\d+)|leader) ((exited with code|killed by signal) -?\d+))");
  for (const auto& ev : events) {
    std::smatch m;
    if (!std::regex_search(ev.text(), m, kExit)) continue;
    const bool worker = m[2].matched;
    const int index = worker ? std::stoi(m[2].str()) : -1;
    for (auto& [id, t] : *tracks)
      if (t.info != nullptr && t.info->role() == (worker ? "worker" : "leader") &&
          t.info->index() == index && !t.info->has_node() && e.parts_size() == 0) {
        t.exit_at = ev.t_ms();
        t.exit_text = m[3].str();
      }
  }
}

// How a process ended, from its record: "exited with code 0", "killed by signal 9", or "".
std::string ExitOf(const Track& t) {
  if (!t.exit_text.empty()) return t.exit_text;
  if (t.info == nullptr || !t.info->exit_known() || t.info->alive()) return "";
  return t.info->signal() != 0 ? "killed by signal " + std::to_string(t.info->signal())
                               : "exited with code " + std::to_string(t.info->exit_code());
}

double StepMs(const v1::TimedStep& s) {
  return s.data_ms() + s.forward_ms() + s.backward_ms() + s.comm_ms() + s.optimizer_ms() +
         s.whole_ms();
}
double StepEnd(const v1::TimedStep& s, double offset) { return s.start_ms() + offset + StepMs(s); }

// A worker's timed steps (its first and latest) inside its training: a slice a step, its phases
// back to back inside it in the order they ran, each as long as it was timed.
void AddSteps(const v1::ProcessInfo& p, int64_t id, double ready, double offset, json* out) {
  for (const auto& s : p.timed_steps()) {
    // Its start is its end less its timed phases: never before training began.
    const double from = std::max(ready, s.start_ms() + offset), to = StepEnd(s, offset);
    out->push_back(Slice("step " + std::to_string(s.step()), id, from, to, {{"step", s.step()}}));
    double at = from;
    for (const auto& [name, ms] :
         {std::pair{"data", s.data_ms()}, std::pair{"forward", s.forward_ms()},
          std::pair{"backward", s.backward_ms()}, std::pair{"all-reduce wait", s.comm_ms()},
          std::pair{"optimizer", s.optimizer_ms()}}) {
      if (ms <= 0) continue;
      const double end = std::min(to, at + ms);
      out->push_back(Slice(name, id, at, end));
      at = end;
    }
  }
}

// Inside training: worker 0's evaluations (between epochs and after its last step), numbered,
// with how many it made when more than were recorded one by one.
void AddEvaluations(const v1::ProcessInfo& p, int64_t id, double offset, json* out) {
  for (int i = 0; i < p.evaluation_spans_size(); ++i) {
    json args = {{"evaluation", i + 1}};
    if (p.evaluations() > uint32_t(p.evaluation_spans_size()))
      args["evaluations"] = p.evaluations();
    const v1::Interval& span = p.evaluation_spans(i);
    out->push_back(
        Slice("evaluating", id, span.from_ms() + offset, span.to_ms() + offset, std::move(args)));
  }
}

// Each process's life (nested: its start and training inside it) and its end.
void AddLives(const std::map<int64_t, Track>& tracks, json* out) {
  for (const auto& [id, t] : tracks) {
    out->push_back(Meta("process_name", id, {{"name", t.name}}));
    out->push_back(Meta("process_sort_index", id, {{"sort_index", t.sort + 2}}));
    out->push_back(Meta("thread_name", id, {{"name", "process"}}));
    double from = t.first, to = std::max(t.last, t.exit_at);
    if (t.request >= 0) from = from < 0 ? t.request : std::min(from, t.request);
    if (t.ready >= 0) to = std::max(to, t.ready);
    if (t.info != nullptr) {
      for (const auto& ev : t.info->evaluation_spans()) to = std::max(to, ev.to_ms() + t.offset);
      for (const auto& st : t.info->timed_steps()) to = std::max(to, StepEnd(st, t.offset));
    }
    if (from < 0 || to < 0) continue;  // never seen, never timed
    json args = json::object();
    if (t.info != nullptr) {
      args["pid"] = t.info->pid();
      if (t.info->has_peak_pss_bytes()) args["peak_pss_mib"] = t.info->peak_pss_bytes() / kTraceMiB;
      if (t.info->steps() > 0) args["steps"] = t.info->steps();
    }
    const std::string end = ExitOf(t);
    if (!end.empty()) args["end"] = end;
    out->push_back(Slice("alive", id, from, to, args));
    if (t.request >= 0 && t.ready >= 0) out->push_back(Slice("starting", id, t.request, t.ready));
    if (t.ready >= 0 && to > t.ready) out->push_back(Slice("training", id, t.ready, to));
    if (t.info != nullptr && t.ready >= 0) AddSteps(*t.info, id, t.ready, t.offset, out);
    if (t.info != nullptr) AddEvaluations(*t.info, id, t.offset, out);
    if (!end.empty())
      out->push_back(
          {{"ph", "i"}, {"name", end}, {"pid", id}, {"tid", id}, {"ts", Us(to)}, {"s", "t"}});
  }
}

// The run's own track: the whole run with its figures, and its events as instants.
void AddRun(const v1::Experiment& e, const std::vector<v1::Sample>& samples,
            const std::vector<v1::Event>& events, json* out) {
  out->push_back(Meta("process_name", kRunTrack, {{"name", "experiment " + e.id()}}));
  out->push_back(Meta("process_sort_index", kRunTrack, {{"sort_index", 0}}));
  out->push_back(Meta("thread_name", kRunTrack, {{"name", "run"}}));
  double end = e.result().has_wall_ms() ? e.result().wall_ms() : 0;
  if (!samples.empty()) end = std::max(end, samples.back().t_ms());
  if (!events.empty()) end = std::max(end, events.back().t_ms());
  const v1::Result& r = e.result();
  json args = {{"state", v1::ExperimentState_Name(e.state())}, {"kind", e.spec().kind()}};
  if (!e.error().empty()) args["error"] = e.error();
  if (r.has_peak_pss_sum_bytes()) args["peak_pss_sum_mib"] = r.peak_pss_sum_bytes() / kTraceMiB;
  if (r.has_samples_per_sec()) args["samples_per_s"] = r.samples_per_sec();
  if (r.has_steps()) args["steps"] = r.steps();
  // Steps are counted, not timed one by one: the phase split, summed over workers, is the run's.
  for (const auto& [name, has, v] :
       {std::tuple{"data_ms", r.has_data_ms(), r.data_ms()},
        std::tuple{"forward_ms", r.has_forward_ms(), r.forward_ms()},
        std::tuple{"backward_ms", r.has_backward_ms(), r.backward_ms()},
        std::tuple{"optimizer_ms", r.has_optimizer_ms(), r.optimizer_ms()},
        std::tuple{"eval_ms", r.has_eval_ms(), r.eval_ms()}})
    if (has) args[name] = v;
  out->push_back(Slice("run", kRunTrack, 0, end, args));
  for (const auto& ev : events)
    out->push_back({{"ph", "i"},
                    {"name", ev.text()},
                    {"cat", "event"},
                    {"pid", kRunTrack},
                    {"tid", kRunTrack},
                    {"ts", Us(ev.t_ms())},
                    {"s", "g"}});
}

}  // namespace

json RenderTrace(const v1::Experiment& e, const std::vector<v1::Sample>& samples,
                 const std::vector<v1::Event>& events, size_t max_samples) {
  json out = json::array();
  std::map<int64_t, Track> tracks = TracksOf(e);
  const std::vector<const v1::Sample*> drawn = Thinned(samples, max_samples);
  AddRun(e, samples, events, &out);
  AddCounters(e, drawn, &tracks, &out);
  AddExits(e, events, &tracks);
  AddLives(tracks, &out);
  // Viewers want each track's events in time order; sorting once keeps them monotonic per track.
  std::stable_sort(out.begin(), out.end(), [](const json& a, const json& b) {
    return a.value("ts", -1.0) < b.value("ts", -1.0);
  });
  return {{"traceEvents", std::move(out)},
          {"displayTimeUnit", "ms"},
          {"otherData",
           {{"experiment", e.id()},
            {"clock", "microseconds since the experiment started (its samples' t_ms)"},
            {"samples_recorded", samples.size()},
            {"samples_drawn", drawn.size()}}}};
}

}  // namespace shoal
