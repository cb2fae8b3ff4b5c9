// Slurm's own tools, as shoald uses them to place a sweep's points on a cluster (issue 56): sbatch
// submits a job array, scontrol says what each task is doing or how it ended, scancel cancels.
// Behind an interface, so what drives it is unit-tested on a fake that answers as they do; the
// parsers are pure functions of their output.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "shared/os/os_seams.h"
#include "shared/status.h"

namespace shoal {

// One job array: task i runs point i.
struct ArrayJob {
  std::string name;           // --job-name
  std::string script;         // the batch script (a file every node can read)
  std::string output;         // --output: each task's stdout and stderr (%A: the job, %a: the task)
  uint32_t tasks = 0;         // --array=0-(tasks-1)
  uint32_t max_parallel = 0;  // the array's %K: at most this many tasks at once; 0: no limit
  std::string partition;      // --partition; empty: the cluster's default
  std::string time_limit;     // --time ("30:00", "2:00:00", "1-00:00:00"); empty: the partition's
  bool exclusive = true;      // --exclusive: a point's node runs nothing else meanwhile
  uint32_t nodes = 1;         // --nodes per task, one Slurm task a node (a run across nodes)
  // "NAME=value"s added to sbatch's environment, which Slurm passes to the job (sbatch's default
  // --export=ALL) and no one else sees: never on a command line, which every user may read.
  std::vector<std::string> env;
  // sbatch --dependency=afterany:JOB: starts once that job has ended, however it ended (a sweep's
  // next array, where the sweep's --max-parallel must hold across its arrays); empty: none.
  std::string after;
};

// INVALID_ARGUMENT naming the field when a value could not be what Slurm takes (a partition with
// a space, a time that is not Slurm's format, no tasks): refused before sbatch is run.
Status CheckArrayJob(const ArrayJob& job);
// A time in one of Slurm's formats (MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS) in seconds;
// 0 when it is not one.
uint64_t SlurmTimeSeconds(const std::string& t);
// How long before a task's time limit its batch shell is sent SIGUSR1 (sbatch --signal), which
// the array's script turns into a stop of its run: a tenth of the limit, 10 s to 2 min (Slurm
// sends it up to a minute early, as its event loop turns); 0 without a limit.
uint64_t TimeLimitLeadSeconds(const std::string& time_limit);
// sbatch's command line for the job (--parsable: it prints the job id alone).
std::vector<std::string> SbatchArgv(const ArrayJob& job);
// The job id from sbatch --parsable's output ("1234" or "1234;cluster").
StatusOr<std::string> ParseSbatchJobId(const std::string& out);

// MaxArraySize from `scontrol show config` ("MaxArraySize            = 1001"): an array's task
// indices must be below it, so an array holds at most that many tasks. INTERNAL when absent.
StatusOr<uint32_t> ParseMaxArraySize(const std::string& config);

// One task of an array, as Slurm last said.
struct SlurmTask {
  uint32_t index = 0;
  // Slurm's job state: PENDING, RUNNING, COMPLETING, COMPLETED, FAILED, TIMEOUT, OUT_OF_MEMORY,
  // NODE_FAIL, CANCELLED, PREEMPTED, BOOT_FAIL, DEADLINE, ...
  std::string state;
  std::string reason;     // why it waits or ended (Priority, Resources, ...); "" for None
  std::string node;       // where it runs or ran; "" while pending
  std::string exit_code;  // "code:signal" once it ended
};
// What a pending task's reason means when Slurm will never start it as asked (with the default
// EnforcePartLimits=NO, sbatch takes a job over its partition's limits and leaves it pending
// for good): "its --time is over the partition's MaxTime" for PartitionTimeLimit; empty for the
// reasons a task waits through (Priority, Resources, a node down, a dependency, a hold), and for
// those Slurm also gives while nodes are down or drained (PartitionNodeLimit, BadConstraints).
std::string NeverStartsBecause(const std::string& reason);

// True for the states after which a task never runs again.
bool SlurmTaskEnded(const std::string& state);

// `scontrol -o show job JOB` (one line per task; a pending remainder of the array as one line
// with a range "3-9%2", expanded here): every task Slurm still knows. Tasks that ended more than
// MinJobAge ago are forgotten by Slurm and absent.
std::vector<SlurmTask> ParseScontrolJobs(const std::string& out);

class Slurm {
 public:
  virtual ~Slurm() = default;
  virtual StatusOr<std::string> SubmitArray(const ArrayJob& job) = 0;  // the job id
  // The most tasks one array may have here (the cluster's MaxArraySize): a bigger sweep is
  // placed as several arrays.
  virtual StatusOr<uint32_t> MaxArraySize() = 0;
  // The tasks Slurm still knows, by index; none when it knows nothing of the job any more.
  virtual StatusOr<std::vector<SlurmTask>> Tasks(const std::string& job_id) = 0;
  // scancel of jobs or tasks ("4242", "4242_3"), all in one call. `gently`: a running task's
  // batch shell alone gets SIGTERM (scancel --batch --signal=TERM), which the array's script
  // passes to its run, so the run ends cancelled and still writes its record; the task then ends
  // by itself. Otherwise Slurm cancels them (a pending task never starts; a running one's every
  // process gets SIGTERM, then SIGKILL).
  virtual Status Cancel(const std::vector<std::string>& targets, bool gently = false) = 0;
};

// What running a command gave: its exit code (-1: it did not exit by itself) and its output.
struct CommandOutput {
  int exit_code = -1;
  std::string out, err;
};
// Runs argv with "NAME=value"s added to (or replacing in) this process's environment.
using CommandRunner = std::function<StatusOr<CommandOutput>(const std::vector<std::string>& argv,
                                                            const std::vector<std::string>& env)>;

// Slurm through its commands, each run by `run`.
std::unique_ptr<Slurm> MakeSlurm(CommandRunner run);

// Runs a command with its output captured. In shoald one thread reaps every child
// (ChildReaper's waitpid(-1)), which may take the command's exit before this could, so the
// command runs under `sh -c '"$@"; echo $?'` with its arguments as sh's positional parameters
// (never parsed by the shell) and the code is read from its output. UNAVAILABLE when it cannot be
// started (no such command: Slurm's tools are not installed here), or when it has not finished
// within `timeout` (killed, with its process group; the message carries what it printed to
// stderr meanwhile). Slurm's commands retry for 60 s when they cannot reach slurmctld or read
// their configuration: a sweep's submit must fail with that, within its client's deadline.
StatusOr<CommandOutput> RunCapturingOutput(
    ProcessControl* proc, const std::vector<std::string>& argv,
    std::chrono::milliseconds timeout = std::chrono::seconds(15),
    const std::vector<std::string>& env = {});

}  // namespace shoal
