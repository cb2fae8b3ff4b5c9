#include "server/slurm_sweeps.h"

#include <google/protobuf/util/json_util.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "server/run_record.h"
#include "shared/os/process.h"
#include "shared/spec/spec.h"
#include "shared/spec/sweep.h"
#include "spdlog/spdlog.h"

namespace shoal {
namespace {

namespace fs = std::filesystem;

// Single quotes for sh: the path as one word whatever it holds.
std::string ShellQuoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

Status WriteFile(const std::string& path, const std::string& text, fs::perms mode) {
  {
    std::ofstream out(path, std::ios::trunc);
    if (!out || !(out << text) || !out.flush()) return Internal("cannot write " + path);
  }
  std::error_code ec;
  fs::permissions(path, mode, ec);
  return ec ? Internal("cannot set the mode of " + path + ": " + ec.message()) : Status::Ok();
}

// What a point's task is told to run, and what its record must name: the point's place and spec.
v1::PointOrder OrderOf(const v1::Experiment& e) {
  v1::PointOrder order;
  order.set_sweep_id(e.sweep_id());
  order.set_index(e.sweep_index());
  order.set_experiment_id(e.id());
  *order.mutable_spec() = e.spec();
  return order;
}

Status WriteOrder(const v1::Experiment& e, const std::string& path) {
  const v1::PointOrder order = OrderOf(e);
  std::string json;
  if (!google::protobuf::util::MessageToJsonString(order, &json).ok())
    return Internal("cannot write the order of point " + std::to_string(e.sweep_index()));
  return WriteFile(path, json + "\n", fs::perms::owner_read | fs::perms::owner_write);
}

ArrayJob JobOf(const v1::Sweep& sw, const std::string& dir, uint32_t tasks) {
  const v1::SlurmPlacement& s = sw.spec().slurm();
  ArrayJob job;
  job.name = "shoal-" + sw.id();
  job.script = dir + "/task.sh";
  job.output = dir + "/task-%a.out";
  job.tasks = tasks;
  job.max_parallel = s.has_max_parallel() ? s.max_parallel() : 0;
  job.partition = s.partition();
  job.time_limit = s.time_limit();
  job.exclusive = !s.has_exclusive() || s.exclusive();
  return job;
}

std::string TaskName(const std::string& job_id, uint32_t task) {
  return job_id + "_" + std::to_string(task);
}

// Tasks as one scancel word: "4242_3", or "4242_[0-3,5,9-12]".
std::string TaskSet(const std::string& job_id, const std::vector<uint32_t>& tasks) {
  if (tasks.size() == 1) return TaskName(job_id, tasks[0]);
  std::string out = job_id + "_[";
  for (size_t i = 0; i < tasks.size();) {
    size_t j = i;
    while (j + 1 < tasks.size() && tasks[j + 1] == tasks[j] + 1) ++j;
    out += (i ? "," : "") + std::to_string(tasks[i]) +
           (j > i ? "-" + std::to_string(tasks[j]) : std::string());
    i = j + 1;
  }
  return out + "]";
}

bool Runs(const std::string& state) {
  return state == "RUNNING" || state == "COMPLETING" || state == "CONFIGURING" ||
         state == "STAGE_OUT";
}

// Why a task that left no record ended, in Slurm's words; an out-of-memory end says so in the
// words a sweep's skip-after-OOM rule knows.
std::string NoRecordError(const std::string& job_id, uint32_t task, const SlurmTask* t,
                          const std::string& output) {
  std::string why = "Slurm task " + TaskName(job_id, task);
  if (t == nullptr) {
    why += " is no longer known to Slurm";
  } else {
    why +=
        t->state == "OUT_OF_MEMORY" ? " ran out of memory (OUT_OF_MEMORY)" : " ended " + t->state;
    if (!t->reason.empty()) why += " (" + t->reason + ")";
    if (!t->node.empty()) why += " on " + t->node;
    if (!t->exit_code.empty()) why += ", exit code " + t->exit_code;
  }
  return why + ", and wrote no record; its output: " + output;
}

}  // namespace

std::string OrderPath(const std::string& dir, uint32_t task) {
  return dir + "/order-" + std::to_string(task) + ".json";
}
std::string RecordPath(const std::string& dir, uint32_t task) {
  return dir + "/record-" + std::to_string(task) + ".pb";
}
std::string NodeRecordPath(const std::string& dir, uint32_t task, uint32_t node) {
  return dir + "/record-" + std::to_string(task) + ".node-" + std::to_string(node) + ".pb";
}
std::string LimitPath(const std::string& dir, uint32_t task) {
  return dir + "/limit-" + std::to_string(task);
}
std::string TaskOutputPath(const std::string& dir, uint32_t task) {
  return dir + "/task-" + std::to_string(task) + ".out";
}
std::string ProfilesPath(const std::string& dir, uint32_t task) {
  return dir + "/profiles-" + std::to_string(task);
}

namespace {

// The task's daemon's throwaway state folder, with the uploaded files the sweep shares (its
// folder's blobs/) linked where that daemon looks. Needs $blobs; no single quote (the nodes'
// script runs it inside one).
constexpr const char* kTaskState =
    "state=$(mktemp -d \"${TMPDIR:-/tmp}/shoal-point.XXXXXX\") || exit 1\n"
    "mkdir -p \"$state/blobs\"\n"
    "for f in \"$blobs\"/*; do [ -e \"$f\" ] && ln -s \"$f\" \"$state/blobs/\"; done\n";

// Both scripts' first lines: what wrote it, the array's folder, the sweep's shared files and the
// task.
std::string ScriptHead(const std::string& what, const std::string& dir, const std::string& blobs) {
  return "#!/bin/sh\n# Written by shoald: array task $SLURM_ARRAY_TASK_ID runs " + what +
         ".\ndir=" + ShellQuoted(dir) + "\nblobs=" + ShellQuoted(blobs) +
         "\ntask=\"$SLURM_ARRAY_TASK_ID\"\n";
}

// One run-point on each node of the task's allocation (srun, one task a node); a cancel reaches
// each node's run through a stop file (below).
std::string NodesScript(const std::string& shoald, const std::string& dir, uint32_t nodes,
                        const std::string& blobs) {
  return ScriptHead("one point of a sweep across " + std::to_string(nodes) + " nodes", dir, blobs) +
         "# Node 0 of the allocation hosts the c10d store, on a port from the job id.\n"
         "head=$(scontrol show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1)\n"
         "addr=$(scontrol -o show node \"$head\" | sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p')\n"
         "master=\"${addr:-$head}:$((20000 + ${SLURM_JOB_ID:-0} % 20000))\"\n"
         "# scancel's SIGTERM (to this shell) becomes a stop file each node's task watches: it\n"
         "# passes SIGTERM to its run alone, which ends cancelled and still writes its record.\n"
         "# (srun would SIGKILL its tasks, and a signal to the step reaches every process in it.)\n"
         "stop=\"$dir/stop-$task\"\n"
         "rm -f \"$stop\" \"$dir/limit-$task\"\n"
         "pid=\n"
         "trap '[ -n \"$pid\" ] && touch \"$stop\"' TERM INT\n"
         "# SIGUSR1 (sbatch --signal, before the time limit): the same stop, marked as the "
         "limit's.\n"
         "trap '[ -n \"$pid\" ] && touch \"$dir/limit-$task\" \"$stop\"' USR1\n"
         "srun --ntasks=\"${SLURM_JOB_NUM_NODES:-" +
         std::to_string(nodes) +
         "}\" --ntasks-per-node=1 sh -c '\n"
         "  dir=\"$2\" blobs=\"$5\"\n" +
         kTaskState +
         "  \"$1\" --run-point \"$2/order-$3.json\" \\\n"
         "    --record-out \"$2/record-$3.node-$SLURM_NODEID.pb\" --node-rank \"$SLURM_NODEID\" "
         "\\\n"
         "    --profiles-out \"$2/profiles-$3/node-$SLURM_NODEID\" \\\n"
         "    --master \"$4\" --state-dir \"$state\" --log-level info &\n"
         "  p=$!\n"
         "  trap \"kill -TERM $p 2>/dev/null\" TERM INT\n"
         "  (while kill -0 $p 2>/dev/null; do\n"
         "     if [ -e \"$2/stop-$3\" ]; then kill -TERM $p; break; fi; sleep 1; done) &\n"
         "  wait $p; code=$?\n"
         "  while kill -0 $p 2>/dev/null; do wait $p; code=$?; done\n"
         "  rm -rf \"$state\"\n"
         "  exit $code' sh " +
         ShellQuoted(shoald) +
         " \"$dir\" \"$task\" \"$master\" \"$blobs\" &\n"
         "pid=$!\n"
         "wait $pid\n"
         "code=$?\n"
         "while kill -0 $pid 2>/dev/null; do wait $pid; code=$?; done\n"
         "rm -f \"$stop\"\n"
         "exit $code\n";
}

}  // namespace

std::string ArrayScript(const std::string& shoald, const std::string& dir, uint32_t nodes,
                        const std::string& blobs_dir) {
  const std::string blobs = blobs_dir.empty() ? dir + "/blobs" : blobs_dir;
  if (nodes > 1) return NodesScript(shoald, dir, nodes, blobs);
  return ScriptHead("one point of a sweep", dir, blobs) + kTaskState +
         "# scancel's SIGTERM to the run: it ends cancelled and still writes its record. SIGUSR1\n"
         "# (sbatch --signal, before the time limit) too, marked as the limit's.\n"
         "pid=\n"
         "rm -f \"$dir/limit-$task\"\n"
         "trap '[ -n \"$pid\" ] && kill -TERM $pid 2>/dev/null' TERM INT\n"
         "trap '[ -n \"$pid\" ] && touch \"$dir/limit-$task\" && kill -TERM $pid 2>/dev/null' "
         "USR1\n" +
         ShellQuoted(shoald) +
         " --run-point \"$dir/order-$task.json\" --record-out \"$dir/record-$task.pb\" \\\n"
         "  --profiles-out \"$dir/profiles-$task\" \\\n"
         "  --state-dir \"$state\" --log-level info &\n"
         "pid=$!\n"
         "wait $pid\n"
         "code=$?\n"
         "while kill -0 $pid 2>/dev/null; do wait $pid; code=$?; done\n"
         "rm -rf \"$state\"\n"
         "exit $code\n";
}

SlurmSweeps::SlurmSweeps(Slurm* slurm, ExperimentQueue* queue, Store* store, SlurmSweepOptions opts,
                         HoldSaves hold)
    : slurm_(slurm), queue_(queue), store_(store), opts_(std::move(opts)), hold_(std::move(hold)) {
  if (!hold_) hold_ = [](const std::string&, const std::function<void()>& fn) { fn(); };
}

std::string SlurmSweeps::SweepDir(const std::string& sweep_id) const {
  return opts_.dir + "/" + sweep_id;
}

namespace {

uint32_t NodesOf(const v1::ExperimentSpec& spec) {
  return std::max<uint32_t>(1, spec.nodes());  // data_parallel's and command's; unset elsewhere
}

// A sweep's arrays: its points grouped by the nodes a task asks for (one array asks one size of
// allocation for all its tasks), each group cut into arrays of at most `max_tasks` (the cluster's
// MaxArraySize: an array's task indices must be below it).
struct ArrayPlan {
  uint32_t nodes = 1;
  std::vector<size_t> points;  // indices into the placed points; task j runs points[j]
};
std::vector<ArrayPlan> PlanArrays(const std::vector<v1::Experiment>& exps, uint32_t max_tasks) {
  std::vector<ArrayPlan> groups;
  for (size_t i = 0; i < exps.size(); ++i) {
    const uint32_t n = NodesOf(exps[i].spec());
    auto g =
        std::find_if(groups.begin(), groups.end(), [&](const auto& p) { return p.nodes == n; });
    if (g == groups.end()) g = groups.insert(groups.end(), ArrayPlan{n, {}});
    g->points.push_back(i);
  }
  std::vector<ArrayPlan> arrays;
  const size_t most = std::max<uint32_t>(1, max_tasks);
  for (const ArrayPlan& g : groups)
    for (size_t at = 0; at < g.points.size(); at += most)
      arrays.push_back(
          {g.nodes,
           {g.points.begin() + at, g.points.begin() + std::min(g.points.size(), at + most)}});
  return arrays;
}

// Array k's folder under its sweep's: its script, orders, records and tasks' output.
std::string ArrayDir(const std::string& sweep_dir, size_t k) {
  return sweep_dir + "/array-" + std::to_string(k);
}

// The sweep's folder of an array's: its parent, or itself for an array placed before a sweep
// could have several (its files straight in the sweep's folder).
std::string SweepDirOf(const std::string& array_dir) {
  const fs::path p(array_dir);
  return p.filename().string().rfind("array-", 0) == 0 ? p.parent_path().string() : array_dir;
}

std::string Joined(const std::vector<std::string>& ids) {
  std::string out;
  for (const auto& id : ids) out += (out.empty() ? "" : ", ") + id;
  return out;
}

// The uploaded files the points name (model_file, a tensor data set: sha256:HEX) into dir/blobs/,
// hard-linked from the daemon's store where one file system holds both, else copied.
Status ShareFiles(const std::string& blobs_dir, const std::vector<v1::Experiment>& exps,
                  const std::string& dir) {
  std::set<std::string> hexes;
  for (const auto& e : exps)
    for (const std::string* f : {&e.spec().model_file(), &e.spec().dataset()})
      if (IsSha256Ref(*f)) hexes.insert(f->substr(7));
  if (hexes.empty()) return Status::Ok();
  std::error_code ec;
  fs::create_directories(dir + "/blobs", ec);
  if (ec) return Internal("cannot make " + dir + "/blobs: " + ec.message());
  for (const std::string& hex : hexes) {
    const std::string from = blobs_dir + "/" + hex, to = dir + "/blobs/" + hex;
    fs::create_hard_link(from, to, ec);
    if (ec) fs::copy_file(from, to, fs::copy_options::overwrite_existing, ec);
    if (ec) return Internal("cannot share " + from + " with the nodes: " + ec.message());
  }
  return Status::Ok();
}

// Whether the task's run left its record: every node's, across nodes (node 0 may end first).
bool HasRecords(const std::string& dir, uint32_t task, uint32_t nodes) {
  std::error_code ec;
  if (nodes <= 1) return fs::exists(RecordPath(dir, task), ec);
  for (uint32_t k = 0; k < nodes; ++k)
    if (!fs::exists(NodeRecordPath(dir, task, k), ec)) return false;
  return true;
}

// A task's record: its one node's, or its nodes' merged (MergeNodeRecords), each sealed under
// `key` where the sweep has one.
StatusOr<v1::RunRecord> ReadTaskRecord(const std::string& dir, uint32_t task, uint32_t nodes,
                                       const std::string& key) {
  if (nodes <= 1) return ReadRunRecord(RecordPath(dir, task), key);
  std::vector<StatusOr<v1::RunRecord>> parts;
  for (uint32_t k = 0; k < nodes; ++k)
    parts.push_back(ReadRunRecord(NodeRecordPath(dir, task, k), key));
  return MergeNodeRecords(parts);
}

// NOT_FOUND only when there is no key file (a sweep placed before records were sealed); a file
// that cannot be read now is UNAVAILABLE, never taken for none.
StatusOr<std::string> ReadKey(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec) && !ec) return NotFound(path + ": no key");
  std::ifstream in(path);
  std::string hex;
  if (!(in >> hex)) return Unavailable(path + ": cannot read the sweep's record key");
  return KeyFromHex(hex);
}

}  // namespace

std::string SlurmSweeps::KeyPath(const std::string& sweep_id) const {
  return opts_.keys_dir + "/" + sweep_id + ".key";
}

StatusOr<std::string> SlurmSweeps::NewKey(const std::string& sweep_id) {
  if (opts_.keys_dir.empty()) return Internal("slurm: no folder for the sweeps' record keys");
  std::error_code ec;
  fs::create_directories(opts_.keys_dir, ec);
  fs::permissions(opts_.keys_dir, fs::perms::owner_all, ec);
  if (ec) return Internal("cannot make " + opts_.keys_dir + " private: " + ec.message());
  const std::string key = NewRecordKey();
  RETURN_IF_ERROR(WriteFile(KeyPath(sweep_id), KeyToHex(key) + "\n",
                            fs::perms::owner_read | fs::perms::owner_write));
  return key;
}

Status SlurmSweeps::Place(v1::Sweep* sw, std::vector<v1::Experiment>* exps) {
  const std::string dir = SweepDir(sw->id());
  // What the user typed is checked before Slurm is asked anything.
  RETURN_IF_ERROR(CheckArrayJob(JobOf(*sw, ArrayDir(dir, 0), uint32_t(exps->size()))));
  ASSIGN_OR_RETURN(const uint32_t max_tasks, slurm_->MaxArraySize());
  const std::vector<ArrayPlan> plans = PlanArrays(*exps, max_tasks);
  std::vector<ArrayJob> jobs;
  for (size_t k = 0; k < plans.size(); ++k) {
    jobs.push_back(JobOf(*sw, ArrayDir(dir, k), uint32_t(plans[k].points.size())));
    jobs.back().nodes = plans[k].nodes;
    RETURN_IF_ERROR(CheckArrayJob(jobs.back()));
  }
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Internal("cannot make " + dir + ": " + ec.message());
  // Only this daemon's user may write what the tasks run (shoald --run-point trusts its order).
  fs::permissions(dir, fs::perms::owner_all, ec);
  if (ec) return Internal("cannot make " + dir + " private: " + ec.message());
  std::vector<std::string> ids;
  const Status placed = [&]() -> Status {
    ASSIGN_OR_RETURN(const std::string key, NewKey(sw->id()));
    RETURN_IF_ERROR(ShareFiles(opts_.blobs_dir, *exps, dir));
    for (size_t k = 0; k < plans.size(); ++k) {
      const std::string adir = ArrayDir(dir, k);
      fs::create_directory(adir, ec);
      if (ec) return Internal("cannot make " + adir + ": " + ec.message());
      for (uint32_t j = 0; j < plans[k].points.size(); ++j)
        RETURN_IF_ERROR(WriteOrder((*exps)[plans[k].points[j]], OrderPath(adir, j)));
      ArrayJob& job = jobs[k];
      RETURN_IF_ERROR(WriteFile(job.script,
                                ArrayScript(opts_.shoald, adir, job.nodes, dir + "/blobs"),
                                fs::perms::owner_all));
      job.env = {std::string(kRecordKeyEnv) + "=" + KeyToHex(key)};
      // %K bounds one array's tasks: the next array waits for this one, so it holds for the sweep.
      if (job.max_parallel > 0 && !ids.empty()) job.after = ids.back();
      auto id = slurm_->SubmitArray(job);
      if (!id.ok() && k > 0)
        return Status(id.status().code(), "slurm: array " + std::to_string(k + 1) + " of " +
                                              std::to_string(plans.size()) + ": " +
                                              id.status().message());
      RETURN_IF_ERROR(id.status());
      ids.push_back(*id);
    }
    return Status::Ok();
  }();
  if (!placed.ok()) {
    if (!ids.empty())  // nothing may run unrecorded
      if (Status st = slurm_->Cancel(ids); !st.ok())
        spdlog::error("sweep {}: arrays {} could not be cancelled: {}", sw->id(), Joined(ids),
                      st.message());
    fs::remove_all(dir, ec);
    fs::remove(KeyPath(sw->id()), ec);
    return placed;
  }
  sw->set_slurm_job_id(ids.front());
  for (const auto& id : ids) sw->add_slurm_job_ids(id);
  for (size_t k = 0; k < plans.size(); ++k)
    for (uint32_t j = 0; j < plans[k].points.size(); ++j) {
      v1::SlurmTaskInfo* t = (*exps)[plans[k].points[j]].mutable_slurm();
      t->set_job_id(ids[k]);
      t->set_task(j);
      t->set_state("PENDING");
      t->set_output(TaskOutputPath(ArrayDir(dir, k), j));
    }
  spdlog::info("sweep {}: {} points submitted to Slurm as job array{} {}", sw->id(), exps->size(),
               ids.size() > 1 ? "s" : "", Joined(ids));
  return Status::Ok();
}

void SlurmSweeps::Follow(const v1::Sweep& sw, const std::vector<v1::Experiment>& pending) {
  // Each array's points not ended; a point placed before points named their array is its sweep's.
  std::map<std::string, std::vector<const v1::Experiment*>> by_job;
  for (const auto& e : pending)
    if (e.has_slurm() && !IsTerminal(e.state()))
      by_job[e.slurm().job_id().empty() ? sw.slurm_job_id() : e.slurm().job_id()].push_back(&e);
  std::lock_guard<std::mutex> l(mu_);
  const StatusOr<std::string> key = ReadKey(KeyPath(sw.id()));
  if (!key.ok() && key.status().code() == Code::kNotFound && !by_job.empty())
    spdlog::warn("sweep {}: {}; its records are read unsealed (placed before records were sealed)",
                 sw.id(), key.status().message());
  for (const auto& [job, exps] : by_job) {
    Array& a = arrays_[job];
    a.sweep_id = sw.id();
    a.job_id = job;
    // Where its tasks write: the folder it was placed in, whatever --slurm-dir says now.
    a.dir = SweepDir(sw.id());
    for (const v1::Experiment* e : exps)
      if (!e->slurm().output().empty())
        a.dir = fs::path(e->slurm().output()).parent_path().string();
    a.sweep_dir = SweepDirOf(a.dir);
    for (const v1::Experiment* e : exps) a.tasks[e->slurm().task()] = *e;
    a.unsealed = !key.ok() && key.status().code() == Code::kNotFound;
    if (key.ok()) a.key = key.value();
  }
  // Ended while no daemon followed it (a restart after its last record was stored).
  if (by_job.empty()) ForgetSweep(sw.id(), SweepDir(sw.id()));
}

void SlurmSweeps::Abandon(const v1::Sweep& sw) {
  std::vector<std::string> ids(sw.slurm_job_ids().begin(), sw.slurm_job_ids().end());
  if (ids.empty()) ids.push_back(sw.slurm_job_id());
  if (Status st = slurm_->Cancel(ids); !st.ok())
    spdlog::error("sweep {}: its arrays {} could not be cancelled: {}", sw.id(), Joined(ids),
                  st.message());
  std::error_code ec;
  fs::remove_all(SweepDir(sw.id()), ec);
  fs::remove(KeyPath(sw.id()), ec);
}

// An array with no task left. Once its sweep has none, the files it shared with the nodes go
// (no task reads them again), and its key.
void SlurmSweeps::Forget(std::map<std::string, Array>::iterator it) {
  const std::string sweep_id = it->second.sweep_id, sweep_dir = it->second.sweep_dir;
  arrays_.erase(it);
  ForgetSweep(sweep_id, sweep_dir);
}

void SlurmSweeps::ForgetSweep(const std::string& sweep_id, const std::string& sweep_dir) {
  for (const auto& [job, a] : arrays_)
    if (a.sweep_id == sweep_id) return;  // another of its arrays runs on
  std::error_code ec;
  fs::remove_all(sweep_dir + "/blobs", ec);
  fs::remove(KeyPath(sweep_id), ec);
}

// Slurm is asked with no lock held (scontrol and scancel may take seconds, and a submit's Follow
// waits for the lock): what to ask is read under it, the answers applied under it again.
size_t SlurmSweeps::Poll() {
  struct Ask {
    std::string job_id;
    std::vector<CancelWord> cancels;
  };
  std::vector<Ask> asks;
  {
    std::lock_guard<std::mutex> l(mu_);
    for (auto& [job, a] : arrays_) asks.push_back({job, CancelsToSend(a)});
  }
  for (Ask& ask : asks) {
    for (CancelWord& c : ask.cancels) c.sent = slurm_->Cancel({c.target}, c.gently);
    auto known = slurm_->Tasks(ask.job_id);
    std::lock_guard<std::mutex> l(mu_);
    auto it = arrays_.find(ask.job_id);
    if (it == arrays_.end()) continue;
    Array& a = it->second;
    RecordCancels(a, ask.cancels);
    if (!known.ok()) {
      spdlog::warn("sweep {}: scontrol show job {}: {}", a.sweep_id, a.job_id,
                   known.status().message());
      continue;
    }
    std::map<uint32_t, const SlurmTask*> by_task;
    for (const auto& t : *known) by_task[t.index] = &t;
    hold_(a.sweep_id, [&] { Apply(a, by_task); });
    if (a.tasks.empty()) Forget(it);
  }
  std::lock_guard<std::mutex> l(mu_);
  return arrays_.size();
}

// Points whose cancel was asked (`shoal cancel`, a sweep's skip after an OOM): a pending task is
// cancelled by Slurm (the whole array in one word when no task of it has started); a running one
// is asked to stop, its run ending cancelled with its record written, and cancelled by Slurm
// outright if it runs on past gentle_cancel_ms. One scancel word for each kind.
std::vector<SlurmSweeps::CancelWord> SlurmSweeps::CancelsToSend(const Array& a) const {
  const int64_t now = RealtimeMs();
  std::vector<uint32_t> hard, gentle;
  bool any_started = false;
  for (const auto& [task, e] : a.tasks) {
    // As Slurm last said: a task it requeued or suspended is not running.
    const bool running = Runs(e.slurm().state());
    any_started = any_started || running;
    auto sent = a.cancels.find(task);
    if (sent == a.cancels.end()) {
      if (WillNeverStart(a, task) && e.slurm().state() == "PENDING") {
        hard.push_back(task);  // pending for good, as Slurm last said: nothing of it runs
        continue;
      }
      if (queue_->StopRequest(e.id()) != ExperimentQueue::kCancel) continue;
      (running ? gentle : hard).push_back(task);
    } else if (!sent->second.hard && now - sent->second.at_ms > opts_.gentle_cancel_ms) {
      hard.push_back(task);
    }
  }
  const bool whole = !any_started && !hard.empty() && hard.size() == a.tasks.size();
  std::vector<CancelWord> words;
  for (const auto& [tasks, gently] : {std::pair{hard, false}, std::pair{gentle, true}}) {
    if (tasks.empty()) continue;
    // One word however many tasks ("4242_[0-9,12]"): 10,000 names would pass the argument limit.
    words.push_back({whole && !gently ? a.job_id : TaskSet(a.job_id, tasks), gently, tasks, {}});
  }
  return words;
}

// What reached Slurm is remembered (a gentle cancel's time, for its grace); what did not is asked
// again at the next poll.
void SlurmSweeps::RecordCancels(Array& a, const std::vector<CancelWord>& words) {
  const int64_t now = RealtimeMs();
  for (const CancelWord& c : words) {
    if (!c.sent.ok()) {
      spdlog::warn("sweep {}: {}", a.sweep_id, c.sent.message());
      continue;
    }
    for (uint32_t task : c.tasks) {
      auto [it, fresh] = a.cancels.try_emplace(task, Array::Cancel{now, !c.gently});
      if (!fresh) it->second.hard = !c.gently;
    }
  }
}

// The tasks' states into their points: started, waiting, or ended (records stored).
void SlurmSweeps::Apply(Array& a, const std::map<uint32_t, const SlurmTask*>& by_task) {
  std::vector<uint32_t> ended;
  for (auto& [task, e] : a.tasks) {
    auto it = by_task.find(task);
    if (it == by_task.end()) {
      // Absent: ended long ago (Slurm forgets), or only left out of this answer. Its record
      // says it ended; without one, three absences in a row do.
      if (HasRecords(a.dir, task, NodesOf(e.spec())) || ++a.absent[task] >= 3)
        ended.push_back(task);
      continue;
    }
    a.absent.erase(task);
    if (SlurmTaskEnded(it->second->state)) {
      ended.push_back(task);
    } else if (Runs(it->second->state)) {
      Started(e, *it->second);
      CountNeverStarts(a, task, *it->second);  // it started after all: no longer
    } else {
      Waiting(e, *it->second);
      CountNeverStarts(a, task, *it->second);
    }
  }
  for (uint32_t task : ended) {
    auto it = by_task.find(task);
    if (!Ended(a, task, it == by_task.end() ? nullptr : it->second)) continue;
    a.tasks.erase(task);
    a.absent.erase(task);
    a.never.erase(task);
  }
}

// A pending task whose reason Slurm never gets past, in kNeverPolls answers in a row, is marked
// to be cancelled (CancelsToSend); one that started, or whose reason changed, is not.
void SlurmSweeps::CountNeverStarts(Array& a, uint32_t task, const SlurmTask& t) {
  if (t.state == "PENDING" && !NeverStartsBecause(t.reason).empty())
    ++a.never[task];
  else
    a.never.erase(task);
}

bool SlurmSweeps::WillNeverStart(const Array& a, uint32_t task) {
  auto it = a.never.find(task);
  return it != a.never.end() && it->second >= kNeverPolls;
}

void SlurmSweeps::Started(v1::Experiment& e, const SlurmTask& t) {
  if (e.state() == v1::RUNNING && e.slurm().state() == t.state) return;
  if (e.state() != v1::RUNNING) e.set_started_unix_ms(RealtimeMs());
  e.set_state(v1::RUNNING);
  e.mutable_slurm()->set_state(t.state);
  e.mutable_slurm()->set_reason(t.reason);
  e.mutable_slurm()->set_node(t.node);
  queue_->Update(e);  // stored: the sweep's point runs
}

void SlurmSweeps::Waiting(v1::Experiment& e, const SlurmTask& t) {
  if (e.slurm().state() == t.state && e.slurm().reason() == t.reason) return;
  e.mutable_slurm()->set_state(t.state);
  e.mutable_slurm()->set_reason(t.reason);
  queue_->SetLive(e);  // why it waits: shown by get and list, not worth a write per change
}

namespace {

// Slurm's own ends of a task that it stopped, not the user: a run they stopped is no cancel.
bool SlurmStopped(const std::string& state) {
  return state == "TIMEOUT" || state == "PREEMPTED" || state == "NODE_FAIL" ||
         state == "DEADLINE" || state == "OUT_OF_MEMORY";
}

// A run that did not succeed because Slurm stopped it: its script stopped it as the time limit
// neared (sbatch --signal; the run reads it as a cancel), or Slurm signalled every process of it
// (the limit itself, a preemption, a node failure: the run fails of the signals, or reads a
// cancel). Failed, saying so, with the record until then.
void StoppedBySlurm(const std::string& name, const v1::SlurmTaskInfo& slurm, const std::string& dir,
                    uint32_t task, v1::Experiment* ran) {
  std::error_code ec;
  const bool near_limit = fs::exists(LimitPath(dir, task), ec);
  if (ran->state() == v1::SUCCEEDED || (!near_limit && !SlurmStopped(slurm.state()))) return;
  const std::string then = ran->state() == v1::FAILED && !ran->error().empty()
                               ? " (the run then: " + ran->error() + ")"
                               : "";
  ran->set_state(v1::FAILED);
  if (near_limit) {
    ran->set_error("task " + name +
                   " stopped its run as its Slurm time limit neared (sbatch --signal)" + then +
                   "; the record of the run until then is kept");
  } else {
    // Out of memory in the words a sweep's skip-after-OOM rule reads (as NoRecordError's).
    const std::string state =
        slurm.state() == "OUT_OF_MEMORY" ? "ran out of memory (OUT_OF_MEMORY)" : slurm.state();
    ran->set_error("Slurm stopped task " + name + ": " + state +
                   (slurm.reason().empty() ? "" : " (" + slurm.reason() + ")") + then +
                   "; the record of the run until then is kept");
  }
}

// An ended task's files in its array's folder: its order, record(s), limit mark and the profiler
// traces it shipped that were not adopted.
void RemoveTaskFiles(const std::string& dir, uint32_t task, uint32_t nodes) {
  std::error_code ec;
  fs::remove(RecordPath(dir, task), ec);
  for (uint32_t k = 0; nodes > 1 && k < nodes; ++k) fs::remove(NodeRecordPath(dir, task, k), ec);
  fs::remove(OrderPath(dir, task), ec);
  fs::remove(LimitPath(dir, task), ec);
  fs::remove_all(ProfilesPath(dir, task), ec);
}

}  // namespace

bool SlurmSweeps::Ended(Array& a, uint32_t task, const SlurmTask* t) {
  v1::Experiment e = a.tasks[task];
  v1::SlurmTaskInfo slurm = e.slurm();
  if (t != nullptr) {
    slurm.set_state(t->state);
    slurm.set_reason(t->reason);
    if (!t->node.empty()) slurm.set_node(t->node);
    slurm.set_exit_code(t->exit_code);
  }
  // Asked to stop: whatever it ended of, it was cancelled (a run Slurm cancelled outright fails
  // of the signals; its own words are kept). Cancelled by shoald because Slurm would never start
  // it: failed, saying why.
  const bool never = WillNeverStart(a, task);
  const bool cancelled = !never && (a.cancels.count(task) > 0 ||
                                    queue_->StopRequest(e.id()) == ExperimentQueue::kCancel);
  const uint32_t nodes = NodesOf(e.spec());
  if (!KeyRead(a)) return false;
  auto record = ReadTaskRecord(a.dir, task, nodes, a.key);
  if (!record.ok() && record.status().code() == Code::kUnavailable) return false;  // retried
  Status stored = record.status();
  if (record.ok()) {
    const v1::PointOrder order = OrderOf(e);
    v1::Experiment& ran = *record->mutable_experiment();
    ran.set_submitter(e.submitter());
    ran.set_submitted_unix_ms(e.submitted_unix_ms());
    if (cancelled && ran.state() == v1::FAILED) ran.set_state(v1::CANCELLED);
    // Across nodes the stop reaches each node's run a moment apart: a part whose peers left
    // first fails of it (Gloo's "connection closed by peer"). Cancelled, as the whole run is;
    // its own words are kept.
    for (auto& part : *ran.mutable_parts())
      if (cancelled && part.state() == v1::FAILED) part.set_state(v1::CANCELLED);
    if (!cancelled) StoppedBySlurm(TaskName(a.job_id, task), slurm, a.dir, task, &ran);
    *ran.mutable_slurm() = slurm;
    AdoptProfiles(a, task, e.id(), &ran);  // the id of its order, not the record's word
    stored =
        StoreRunRecord(store_, opts_.logs_dir, order, *record, [this](const v1::Experiment& x) {
          queue_->Update(x);
          return Status::Ok();
        });
    // The store refused the write (locked, full): the record stays where it is, asked again.
    if (!stored.ok() && stored.code() != Code::kInvalidArgument) {
      spdlog::warn("sweep {}: point {}'s record not stored yet: {}", a.sweep_id, e.sweep_index(),
                   stored.message());
      return false;
    }
  }
  if (!stored.ok()) {
    if (!opts_.profiles_dir.empty()) {  // refused: nothing of it is kept
      std::error_code rm;
      fs::remove_all(fs::path(opts_.profiles_dir) / e.id(), rm);
    }
    *e.mutable_slurm() = slurm;
    e.set_state(cancelled ? v1::CANCELLED : v1::FAILED);
    if (record.ok() || record.status().code() != Code::kNotFound) {  // refused, or not one
      e.set_error("Slurm task " + TaskName(a.job_id, task) +
                  ": its record was refused: " + stored.message());
    } else if (never) {  // its reason as Slurm gave it while it pended
      const std::string& reason = e.slurm().reason();
      e.set_error("Slurm will not start task " + TaskName(a.job_id, task) + ": " + reason + " (" +
                  NeverStartsBecause(reason) +
                  "); shoald cancelled it rather than leave it pending");
    } else if (!cancelled) {
      e.set_error(NoRecordError(a.job_id, task, t, slurm.output()));
    }
    e.set_finished_unix_ms(RealtimeMs());
    queue_->Update(e);
  }
  queue_->Done(e.id());
  RemoveTaskFiles(a.dir, task, nodes);
  return true;
}

// The sweep's key, read once it can be: a key file unreadable so far is asked again at each poll.
bool SlurmSweeps::KeyRead(Array& a) {
  if (!a.key.empty() || a.unsealed) return true;
  auto key = ReadKey(KeyPath(a.sweep_id));
  if (!key.ok()) {
    spdlog::warn("sweep {}: {}", a.sweep_id, key.status().message());
    return false;
  }
  a.key = *key;
  return true;
}

void SlurmSweeps::AdoptProfiles(const Array& a, uint32_t task, const std::string& id,
                                v1::Experiment* ran) const {
  const std::vector<v1::ProfileTrace> listed(ran->profile_traces().begin(),
                                             ran->profile_traces().end());
  ran->clear_profile_dir();
  ran->clear_profile_traces();
  if (listed.empty() || opts_.profiles_dir.empty()) return;
  // Where this task was told to ship them, whatever the record says; and this daemon's folder.
  const fs::path from = ProfilesPath(a.dir, task), to = fs::path(opts_.profiles_dir) / id;
  std::error_code ec;
  fs::create_directories(opts_.profiles_dir, ec);
  fs::permissions(opts_.profiles_dir, fs::perms::owner_all, ec);
  fs::remove_all(to, ec);
  fs::rename(from, to, ec);
  if (ec) {  // another file system: copied
    ec.clear();
    fs::copy(from, to, fs::copy_options::recursive, ec);
  }
  if (ec) {
    spdlog::warn("sweep {}: point {}'s profiler traces not kept: {}", a.sweep_id,
                 ran->sweep_index(), ec.message());
    return;
  }
  for (const auto& t : listed) {
    const fs::path name = fs::path(t.name()).lexically_normal();
    const bool inside = !name.empty() && name.is_relative() && *name.begin() != "..";
    if (inside && fs::is_regular_file(to / name, ec)) *ran->add_profile_traces() = t;
  }
  if (ran->profile_traces_size() > 0)
    ran->set_profile_dir(to.string());
  else
    fs::remove_all(to, ec);
}

}  // namespace shoal
