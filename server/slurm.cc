#include "server/slurm.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <regex>
#include <sstream>

#include "shared/os/process.h"

namespace shoal {
namespace {

// What sbatch would take as a name or partition: no spaces, quotes or shell-looking text, so a
// value reaches Slurm as typed and an error names it.
bool PlainWord(const std::string& s) {
  if (s.empty() || s.size() > 128) return false;
  for (unsigned char c : s)
    if (!std::isalnum(c) && c != '_' && c != '-' && c != '.') return false;
  return true;
}

// Slurm's time formats: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS.
bool SlurmTime(const std::string& t) {
  static const std::regex kTime(
      // Bounded digits: every value parses without overflow (SlurmTimeSeconds).
      R"(^(\d{1,8}|\d{1,8}:\d{1,2}|\d{1,8}:\d{1,2}:\d{1,2}|\d{1,5}-\d{1,2}(:\d{1,2}){0,2})$)");
  return std::regex_match(t, kTime);
}

}  // namespace

uint64_t SlurmTimeSeconds(const std::string& t) {
  if (!SlurmTime(t)) return 0;
  std::vector<uint64_t> parts;
  uint64_t days = 0;
  std::string rest = t;
  if (const size_t dash = t.find('-'); dash != std::string::npos) {
    days = std::stoull(t.substr(0, dash));
    rest = t.substr(dash + 1);
  }
  std::stringstream in(rest);
  for (std::string p; std::getline(in, p, ':');) parts.push_back(std::stoull(p));
  uint64_t s = 0;
  if (t.find('-') != std::string::npos) {  // days-hours[:minutes[:seconds]]
    const uint64_t unit[] = {3600, 60, 1};
    for (size_t i = 0; i < parts.size(); ++i) s += parts[i] * unit[i];
  } else if (parts.size() == 3) {  // hours:minutes:seconds
    s = parts[0] * 3600 + parts[1] * 60 + parts[2];
  } else {  // minutes[:seconds]
    s = parts[0] * 60 + (parts.size() == 2 ? parts[1] : 0);
  }
  return days * 86400 + s;
}

uint64_t TimeLimitLeadSeconds(const std::string& time_limit) {
  const uint64_t limit = SlurmTimeSeconds(time_limit);
  if (limit == 0) return 0;
  return std::clamp<uint64_t>(limit / 10, 10, 120);
}

namespace {

// "3-9%2", "3,5,7-9", "4": the indices a line of scontrol's output stands for.
std::vector<uint32_t> ExpandTaskIds(std::string ids) {
  std::vector<uint32_t> out;
  if (const size_t pct = ids.find('%'); pct != std::string::npos) ids.resize(pct);
  std::stringstream parts(ids);
  for (std::string part; std::getline(parts, part, ',');) {
    unsigned long a = 0, b = 0, step = 1;
    const int n = std::sscanf(part.c_str(), "%lu-%lu:%lu", &a, &b, &step);
    if (n <= 0) continue;
    if (n == 1) b = a;
    if (step == 0 || b < a || b - a > 1'000'000) continue;
    for (unsigned long i = a; i <= b; i += step) out.push_back(uint32_t(i));
  }
  return out;
}

std::string FieldOf(const std::string& line, const std::string& key) {
  std::istringstream words(line);
  for (std::string w; words >> w;)
    if (w.rfind(key + "=", 0) == 0) return w.substr(key.size() + 1);
  return "";
}

// What a command printed, as one line ("sbatch: error: ...; sbatch: fatal: ...").
std::string OneLine(std::string said) {
  while (!said.empty() && std::isspace(static_cast<unsigned char>(said.back()))) said.pop_back();
  for (size_t at = said.find('\n'); at != std::string::npos; at = said.find('\n', at))
    said.replace(at, 1, "; ");
  return said;
}

// This process's environment with `extra` ("NAME=value") added, replacing a variable of its name.
std::vector<std::string> WithVariables(const std::vector<std::string>& extra) {
  std::vector<std::string> out;
  auto named = [](const std::string& a, const std::string& b) {
    return a.compare(0, a.find('=') + 1, b, 0, b.find('=') + 1) == 0;
  };
  for (char** e = environ; e != nullptr && *e != nullptr; ++e)
    if (std::none_of(extra.begin(), extra.end(), [&](const auto& x) { return named(*e, x); }))
      out.emplace_back(*e);
  out.insert(out.end(), extra.begin(), extra.end());
  return out;
}

class CommandSlurm : public Slurm {
 public:
  explicit CommandSlurm(CommandRunner run) : run_(std::move(run)) {}

  StatusOr<std::string> SubmitArray(const ArrayJob& job) override {
    RETURN_IF_ERROR(CheckArrayJob(job));
    ASSIGN_OR_RETURN(CommandOutput r, run_(SbatchArgv(job), job.env));
    if (r.exit_code != 0) return Failed("sbatch", r);
    return ParseSbatchJobId(r.out);
  }

  StatusOr<uint32_t> MaxArraySize() override {
    ASSIGN_OR_RETURN(CommandOutput r, run_({"scontrol", "show", "config"}, {}));
    if (r.exit_code != 0) return Failed("scontrol show config", r);
    return ParseMaxArraySize(r.out);
  }

  StatusOr<std::vector<SlurmTask>> Tasks(const std::string& job_id) override {
    ASSIGN_OR_RETURN(CommandOutput r, run_({"scontrol", "-o", "show", "job", job_id}, {}));
    // A job Slurm has forgotten (every task ended more than MinJobAge ago): no tasks.
    if (r.exit_code != 0 && r.err.find("Invalid job id") != std::string::npos)
      return std::vector<SlurmTask>{};
    if (r.exit_code != 0) return Failed("scontrol show job " + job_id, r);
    return ParseScontrolJobs(r.out);
  }

  Status Cancel(const std::vector<std::string>& targets, bool gently) override {
    std::vector<std::string> argv = {"scancel"};
    if (gently) argv.insert(argv.end(), {"--batch", "--signal=TERM"});
    argv.insert(argv.end(), targets.begin(), targets.end());
    ASSIGN_OR_RETURN(CommandOutput r, run_(argv, {}));
    if (r.exit_code != 0) {
      std::string what;
      for (size_t i = 0; i < argv.size(); ++i) what += (i ? " " : "") + argv[i];
      return Failed(what, r);
    }
    return {};
  }

 private:
  static Status Failed(const std::string& what, const CommandOutput& r) {
    const std::string said = OneLine(r.err.empty() ? r.out : r.err);
    if (r.exit_code == 127)
      return Unavailable(what + ": not found (are Slurm's client tools installed here?)");
    return Internal(what + " exited with code " + std::to_string(r.exit_code) +
                    (said.empty() ? "" : ": " + said));
  }

  CommandRunner run_;
};

}  // namespace

Status CheckArrayJob(const ArrayJob& job) {
  if (job.tasks == 0) return InvalidArgument("slurm: a job array needs at least one task");
  if (!PlainWord(job.name))
    return InvalidArgument("slurm: job name '" + job.name + "' is not a plain word");
  if (!job.partition.empty() && !PlainWord(job.partition))
    return InvalidArgument("partition: '" + job.partition +
                           "' is not a partition name (letters, digits, '_', '-', '.')");
  if (!job.time_limit.empty() && !SlurmTime(job.time_limit))
    return InvalidArgument("time: '" + job.time_limit +
                           "' is not one of Slurm's formats (MM, MM:SS, HH:MM:SS, D-HH, "
                           "D-HH:MM, D-HH:MM:SS)");
  if (job.after.find_first_not_of("0123456789") != std::string::npos)
    return InvalidArgument("slurm: '" + job.after + "' is not a job id to start after");
  if (job.script.empty() || job.script[0] != '/')
    return InvalidArgument("slurm: the batch script must be an absolute path");
  return {};
}

std::vector<std::string> SbatchArgv(const ArrayJob& job) {
  std::string array = "--array=0-" + std::to_string(job.tasks - 1);
  if (job.max_parallel > 0) array += "%" + std::to_string(job.max_parallel);
  const std::string nodes = std::to_string(std::max<uint32_t>(1, job.nodes));
  std::vector<std::string> argv = {"sbatch",
                                   "--parsable",
                                   array,
                                   "--job-name=" + job.name,
                                   "--nodes=" + nodes,
                                   "--ntasks=" + nodes,
                                   "--ntasks-per-node=1"};
  if (job.exclusive) argv.push_back("--exclusive");
  // The job's environment is sbatch's (the record key travels in it), whatever SBATCH_EXPORT says.
  argv.push_back("--export=ALL");
  if (!job.output.empty()) argv.push_back("--output=" + job.output);
  if (!job.partition.empty()) argv.push_back("--partition=" + job.partition);
  if (!job.time_limit.empty()) argv.push_back("--time=" + job.time_limit);
  if (!job.after.empty()) argv.push_back("--dependency=afterany:" + job.after);
  // Before Slurm's SIGTERM reaches every process of the job at the limit (the runs' own, which
  // then fail of it), the batch shell alone is told to stop its run, which ends with its record.
  if (const uint64_t lead = TimeLimitLeadSeconds(job.time_limit); lead > 0)
    argv.push_back("--signal=B:USR1@" + std::to_string(lead));
  argv.push_back(job.script);
  return argv;
}

StatusOr<std::string> ParseSbatchJobId(const std::string& out) {
  std::string id = out.substr(0, out.find_first_of(";\n"));
  while (!id.empty() && std::isspace(static_cast<unsigned char>(id.back()))) id.pop_back();
  if (id.empty() || id.find_first_not_of("0123456789") != std::string::npos)
    return Internal("sbatch printed no job id: '" + out + "'");
  return id;
}

StatusOr<uint32_t> ParseMaxArraySize(const std::string& config) {
  std::istringstream lines(config);
  for (std::string line; std::getline(lines, line);) {
    unsigned long n = 0;
    char eq = 0;
    std::istringstream words(line);
    std::string key;
    if (words >> key && key == "MaxArraySize" && words >> eq && eq == '=' && words >> n && n > 0)
      return uint32_t(std::min<unsigned long>(n, UINT32_MAX));
  }
  return Internal("scontrol show config printed no MaxArraySize");
}

std::string NeverStartsBecause(const std::string& reason) {
  static const std::map<std::string, std::string> kNever = {
      {"PartitionTimeLimit", "its --time is over the partition's MaxTime"},
      {"InvalidAccount", "its account is not valid"},
      {"InvalidQOS", "its QOS is not valid"},
      {"AccountNotAllowed", "its account may not use the partition"},
      {"QOSNotAllowed", "its QOS may not use the partition"},
      {"QOSMaxWallDurationPerJobLimit", "its --time is over its QOS's limit"},
      {"AssocMaxWallDurationPerJobLimit", "its --time is over its association's limit"},
      {"QOSMaxNodePerJobLimit", "its node count is over its QOS's limit"},
      {"AssocMaxNodesPerJobLimit", "its node count is over its association's limit"},
      {"DependencyNeverSatisfied", "the job it waits for ended in a way it cannot follow"},
  };
  auto it = kNever.find(reason);
  return it == kNever.end() ? "" : it->second;
}

bool SlurmTaskEnded(const std::string& state) {
  return state != "PENDING" && state != "RUNNING" && state != "CONFIGURING" &&
         state != "COMPLETING" && state != "SUSPENDED" && state != "REQUEUED" &&
         state != "RESIZING" && state != "SIGNALING" && state != "STAGE_OUT" &&
         state != "REQUEUE_HOLD" && state != "REQUEUE_FED" && state != "RESV_DEL_HOLD" &&
         state != "STOPPED";
}

std::vector<SlurmTask> ParseScontrolJobs(const std::string& out) {
  std::vector<SlurmTask> tasks;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    const std::string ids = FieldOf(line, "ArrayTaskId");
    if (ids.empty()) continue;  // not a task of an array
    SlurmTask t;
    t.state = FieldOf(line, "JobState");
    t.reason = FieldOf(line, "Reason");
    if (t.reason == "None") t.reason.clear();
    t.node = FieldOf(line, "NodeList");
    if (t.node == "(null)") t.node.clear();
    t.exit_code = FieldOf(line, "ExitCode");
    for (uint32_t i : ExpandTaskIds(ids)) {
      t.index = i;
      tasks.push_back(t);
    }
  }
  return tasks;
}

std::unique_ptr<Slurm> MakeSlurm(CommandRunner run) {
  return std::make_unique<CommandSlurm>(std::move(run));
}

StatusOr<CommandOutput> RunCapturingOutput(ProcessControl* proc,
                                           const std::vector<std::string>& argv,
                                           std::chrono::milliseconds timeout,
                                           const std::vector<std::string>& env) {
  std::array<int[2], 3> pipes{};  // stdout, stderr, the exit code
  for (auto& p : pipes)
    if (::pipe2(p, O_CLOEXEC) != 0) return Internal(std::string("pipe: ") + std::strerror(errno));
  std::vector<std::string> shell = {"/bin/sh", "-c", "\"$@\"; echo $? >&3", "sh"};
  shell.insert(shell.end(), argv.begin(), argv.end());
  SpawnOptions o;
  o.dup_fds = {{pipes[0][1], 1}, {pipes[1][1], 2}, {pipes[2][1], 3}};
  o.new_process_group = true;  // a command that outstays its time goes with its children
  const std::vector<std::string> whole_env = WithVariables(env);
  if (!env.empty()) o.env = &whole_env;
  StatusOr<pid_t> pid = proc->Spawn(shell, o);
  for (auto& p : pipes) ::close(p[1]);
  if (!pid.ok()) {
    for (auto& p : pipes) ::close(p[0]);
    return pid.status();
  }
  std::array<std::string, 3> text;
  std::array<bool, 3> open = {true, true, true};
  const uint64_t deadline = MonotonicNs() + uint64_t(timeout.count()) * 1'000'000ull;
  while (open[0] || open[1] || open[2]) {
    std::array<pollfd, 3> fds{};
    for (int i = 0; i < 3; ++i) fds[i] = {open[i] ? pipes[i][0] : -1, POLLIN, 0};
    const int r = ::poll(fds.data(), 3, 100);
    if (r < 0 && errno != EINTR) break;
    if (MonotonicNs() > deadline) {
      proc->SignalGroup(*pid, SIGKILL);
      for (auto& p : pipes) ::close(p[0]);
      const std::string said = OneLine(text[1]);  // what it said meanwhile: why it waits
      return Unavailable(argv[0] + " did not finish in " + std::to_string(timeout.count()) + " ms" +
                         (said.empty() ? "" : ": " + said));
    }
    for (int i = 0; i < 3; ++i) {
      if (!open[i] || fds[i].revents == 0) continue;
      char buf[4096];
      const ssize_t n = ::read(pipes[i][0], buf, sizeof buf);
      if (n > 0)
        text[i].append(buf, size_t(n));
      else if (n == 0 || errno != EINTR)
        open[i] = false;
    }
  }
  for (auto& p : pipes) ::close(p[0]);
  CommandOutput out;
  out.out = std::move(text[0]);
  out.err = std::move(text[1]);
  if (!text[2].empty()) out.exit_code = std::atoi(text[2].c_str());
  return out;
}

}  // namespace shoal
