// Slurm's commands as shoald runs them (server/slurm.h): the command lines, the parsers of their
// output, refusals before anything is run, and the runner that captures a command's output
// beside shoald's reaper.
#include "server/slurm.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "shared/os/os_seams.h"

namespace shoal {
namespace {

ArrayJob Job() {
  ArrayJob j;
  j.name = "shoal-s1a2b3c";
  j.script = "/home/u/.shoal/slurm/s1a2b3c/array.sh";
  j.output = "/home/u/.shoal/slurm/s1a2b3c/task-%a.out";
  j.tasks = 6;
  j.max_parallel = 2;
  j.partition = "gpu";
  j.time_limit = "30:00";
  return j;
}

TEST(SlurmTest, SbatchGetsOneExclusiveNodeATaskAndTheArraysLimit) {
  const std::vector<std::string> want = {"sbatch",
                                         "--parsable",
                                         "--array=0-5%2",
                                         "--job-name=shoal-s1a2b3c",
                                         "--nodes=1",
                                         "--ntasks=1",
                                         "--ntasks-per-node=1",
                                         "--exclusive",
                                         "--export=ALL",
                                         "--output=/home/u/.shoal/slurm/s1a2b3c/task-%a.out",
                                         "--partition=gpu",
                                         "--time=30:00",
                                         "--signal=B:USR1@120",
                                         "/home/u/.shoal/slurm/s1a2b3c/array.sh"};
  EXPECT_EQ(SbatchArgv(Job()), want);
  ArrayJob plain = Job();
  plain.max_parallel = 0;
  plain.partition.clear();
  plain.time_limit.clear();
  const auto argv = SbatchArgv(plain);
  EXPECT_EQ(argv[2], "--array=0-5");  // no %K: as many at once as Slurm gives
  for (const auto& a : argv) {
    EXPECT_EQ(a.rfind("--partition", 0), std::string::npos) << a;  // the cluster's default
    EXPECT_EQ(a.rfind("--time", 0), std::string::npos) << a;
  }
  ArrayJob wide = Job();  // a run across nodes: each task an allocation of that many, one a node
  wide.nodes = 3;
  const auto w = SbatchArgv(wide);
  EXPECT_EQ(w[4], "--nodes=3");
  EXPECT_EQ(w[5], "--ntasks=3");
  EXPECT_EQ(w[6], "--ntasks-per-node=1");
}

TEST(SlurmTest, WhatSlurmWouldNotTakeIsRefusedNamingIt) {
  EXPECT_TRUE(CheckArrayJob(Job()).ok());
  for (const std::string t : {"30", "30:00", "2:00:00", "1-00", "1-00:00", "1-00:00:00"}) {
    ArrayJob j = Job();
    j.time_limit = t;
    EXPECT_TRUE(CheckArrayJob(j).ok()) << t;
  }
  ArrayJob j = Job();
  j.time_limit = "half an hour";
  EXPECT_EQ(CheckArrayJob(j).message(),
            "time: 'half an hour' is not one of Slurm's formats (MM, MM:SS, HH:MM:SS, D-HH, "
            "D-HH:MM, D-HH:MM:SS)");
  j = Job();
  j.partition = "gpu; rm -rf ~";
  EXPECT_EQ(CheckArrayJob(j).message(),
            "partition: 'gpu; rm -rf ~' is not a partition name (letters, digits, '_', '-', '.')");
  j = Job();
  j.tasks = 0;
  EXPECT_EQ(CheckArrayJob(j).code(), Code::kInvalidArgument);
  j = Job();
  j.script = "array.sh";
  EXPECT_EQ(CheckArrayJob(j).code(), Code::kInvalidArgument);
}

TEST(SlurmTest, TheJobIdIsWhatSbatchParsablePrints) {
  EXPECT_EQ(ParseSbatchJobId("1234\n").value(), "1234");
  EXPECT_EQ(ParseSbatchJobId("1234;cluster2\n").value(), "1234");
  EXPECT_FALSE(ParseSbatchJobId("sbatch: error: Batch job submission failed\n").ok());
  EXPECT_FALSE(ParseSbatchJobId("").ok());
}

// scontrol -o show job: a line per task that started, and the array's pending remainder as one
// line with a range (and the array's limit after %).
TEST(SlurmTest, ScontrolsLinesGiveEveryTaskItKnows) {
  const std::string out =
      "JobId=101 ArrayJobId=100 ArrayTaskId=0 JobName=shoal-s1 UserId=u(1000) JobState=COMPLETED "
      "Reason=None Dependency=(null) ExitCode=0:0 RunTime=00:00:12 NodeList=node1 BatchHost=node1\n"
      "JobId=102 ArrayJobId=100 ArrayTaskId=1 JobName=shoal-s1 JobState=TIMEOUT Reason=TimeLimit "
      "ExitCode=0:15 NodeList=node2\n"
      "JobId=103 ArrayJobId=100 ArrayTaskId=2 JobName=shoal-s1 JobState=RUNNING Reason=None "
      "ExitCode=0:0 NodeList=node1\n"
      "JobId=100 ArrayJobId=100 ArrayTaskId=3-5%2 JobName=shoal-s1 JobState=PENDING "
      "Reason=JobArrayTaskLimit ExitCode=0:0 NodeList=(null)\n";
  const auto tasks = ParseScontrolJobs(out);
  ASSERT_EQ(tasks.size(), 6u);
  std::map<uint32_t, SlurmTask> by;
  for (const auto& t : tasks) by[t.index] = t;
  EXPECT_EQ(by[0].state, "COMPLETED");
  EXPECT_EQ(by[0].reason, "");
  EXPECT_EQ(by[0].node, "node1");
  EXPECT_EQ(by[1].state, "TIMEOUT");
  EXPECT_EQ(by[1].reason, "TimeLimit");
  EXPECT_EQ(by[1].exit_code, "0:15");
  EXPECT_EQ(by[2].state, "RUNNING");
  for (uint32_t i : {3u, 4u, 5u}) {
    EXPECT_EQ(by[i].state, "PENDING") << i;
    EXPECT_EQ(by[i].reason, "JobArrayTaskLimit") << i;
    EXPECT_EQ(by[i].node, "") << i;
  }
  EXPECT_TRUE(ParseScontrolJobs("JobId=7 JobName=not-an-array JobState=RUNNING\n").empty());
  EXPECT_TRUE(SlurmTaskEnded("COMPLETED"));
  EXPECT_TRUE(SlurmTaskEnded("OUT_OF_MEMORY"));
  EXPECT_TRUE(SlurmTaskEnded("NODE_FAIL"));
  EXPECT_FALSE(SlurmTaskEnded("PENDING"));
  EXPECT_FALSE(SlurmTaskEnded("COMPLETING"));
}

// Slurm's time formats in seconds, and how long before the limit the batch shell is told to stop
// its run (sbatch --signal=B:USR1@lead).
TEST(SlurmTest, ATimeLimitIsReadInEachOfSlurmsFormatsAndItsRunStoppedBeforeIt) {
  // Digits past any time Slurm takes ("9" x 20): refused, never parsed into an overflow.
  const std::string huge(20, '9');
  for (const auto& [text, seconds] :
       std::vector<std::pair<std::string, uint64_t>>{{"30", 1800},
                                                     {"30:15", 1815},
                                                     {"2:00:00", 7200},
                                                     {"1-2", 93600},
                                                     {"1-0:30", 88200},
                                                     {"1-0:0:5", 86405},
                                                     {"half an hour", 0},
                                                     {huge, 0}})
    EXPECT_EQ(SlurmTimeSeconds(text), seconds) << text;
  ArrayJob too_long = Job();
  too_long.time_limit = huge;
  EXPECT_EQ(CheckArrayJob(too_long).code(), Code::kInvalidArgument);
  for (const auto& [text, lead] : std::vector<std::pair<std::string, uint64_t>>{
           {huge, 0}, {"1", 10}, {"30", 120}, {"10:00", 60}, {"", 0}})
    EXPECT_EQ(TimeLimitLeadSeconds(text), lead) << text;
  ArrayJob job = Job();
  job.time_limit = "10:00";
  const auto argv = SbatchArgv(job);
  EXPECT_NE(std::find(argv.begin(), argv.end(), "--signal=B:USR1@60"), argv.end());
  job.time_limit.clear();
  for (const auto& arg : SbatchArgv(job)) EXPECT_EQ(arg.rfind("--signal", 0), std::string::npos);
}

// The commands on a runner that answers as Slurm's tools do.
TEST(SlurmTest, TheCommandsAndTheirFailuresReachTheCaller) {
  std::vector<std::vector<std::string>> ran;
  std::map<std::string, CommandOutput> answers;
  std::vector<std::vector<std::string>> envs;
  auto slurm = MakeSlurm([&](const std::vector<std::string>& argv,
                             const std::vector<std::string>& env) -> StatusOr<CommandOutput> {
    ran.push_back(argv);
    envs.push_back(env);
    return answers[argv[0]];
  });
  answers["sbatch"] = {0, "4242\n", ""};
  ArrayJob keyed = Job();
  keyed.env = {"SHOAL_RECORD_KEY=00ff"};
  EXPECT_EQ(slurm->SubmitArray(keyed).value(), "4242");
  EXPECT_EQ(envs.back(), keyed.env);  // to sbatch's environment, not its command line
  for (const auto& arg : ran.back()) EXPECT_EQ(arg.find("00ff"), std::string::npos) << arg;
  ArrayJob bad = Job();
  bad.partition = "a b";
  EXPECT_EQ(slurm->SubmitArray(bad).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(ran.size(), 1u);  // refused before sbatch ran

  answers["sbatch"] = {1, "", "sbatch: error: invalid partition specified: gpu\n"};
  EXPECT_EQ(slurm->SubmitArray(Job()).status().message(),
            "sbatch exited with code 1: sbatch: error: invalid partition specified: gpu");
  answers["sbatch"] = {127, "", "sh: 1: sbatch: not found\n"};
  EXPECT_EQ(slurm->SubmitArray(Job()).status().message(),
            "sbatch: not found (are Slurm's client tools installed here?)");

  answers["scontrol"] = {1, "", "slurm_load_jobs error: Invalid job id specified\n"};
  ASSERT_TRUE(slurm->Tasks("4242").ok());
  EXPECT_TRUE(slurm->Tasks("4242")->empty());  // forgotten: every task ended long ago
  EXPECT_EQ(ran.back(), (std::vector<std::string>{"scontrol", "-o", "show", "job", "4242"}));
  answers["scontrol"] = {1, "", "slurm_load_jobs error: Unable to contact slurm controller\n"};
  EXPECT_EQ(slurm->Tasks("4242").status().code(), Code::kInternal);

  // The cluster's MaxArraySize, as `scontrol show config` prints it among its settings.
  answers["scontrol"] = {0,
                         "Configuration data as of 2026-11-30T07:41:00\n"
                         "MaxArraySize            = 1001\n"
                         "MaxJobCount             = 10000\n",
                         ""};
  EXPECT_EQ(slurm->MaxArraySize().value(), 1001u);
  EXPECT_EQ(ran.back(), (std::vector<std::string>{"scontrol", "show", "config"}));
  answers["scontrol"] = {0, "MaxJobCount = 10000\n", ""};
  EXPECT_EQ(slurm->MaxArraySize().status().message(),
            "scontrol show config printed no MaxArraySize");
  answers["scontrol"] = {1, "", "scontrol: error: Unable to contact slurm controller\n"};
  EXPECT_EQ(slurm->MaxArraySize().status().message(),
            "scontrol show config exited with code 1: scontrol: error: Unable to contact slurm "
            "controller");

  answers["scancel"] = {0, "", ""};
  EXPECT_TRUE(slurm->Cancel({"4242"}).ok());
  EXPECT_EQ(ran.back(), (std::vector<std::string>{"scancel", "4242"}));
  EXPECT_TRUE(slurm->Cancel({"4242_0", "4242_3"}, /*gently=*/true).ok());
  EXPECT_EQ(ran.back(),
            (std::vector<std::string>{"scancel", "--batch", "--signal=TERM", "4242_0", "4242_3"}));
  answers["scancel"] = {1, "", "scancel: error: Kill job error on job id 4242_7: Invalid job id\n"};
  EXPECT_EQ(slurm->Cancel({"4242_7"}).message(),
            "scancel 4242_7 exited with code 1: scancel: error: Kill job error on job id 4242_7: "
            "Invalid job id");
}

// A real command: its output, its errors and its exit code, with no shell parsing its arguments.
TEST(SlurmTest, ACommandsOutputAndCodeAreCapturedAndItsArgumentsPassedAsTheyAre) {
  auto r = RunCapturingOutput(&RealProcesses(), {"sh", "-c", "echo out; echo err >&2; exit 3"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->out, "out\n");
  EXPECT_EQ(r->err, "err\n");
  EXPECT_EQ(r->exit_code, 3);
  auto quoted = RunCapturingOutput(&RealProcesses(), {"printf", "%s|", "a b", "$(id)", ";x"});
  ASSERT_TRUE(quoted.ok());
  EXPECT_EQ(quoted->out, "a b|$(id)|;x|");
  EXPECT_EQ(quoted->exit_code, 0);
  // Variables added to the command's environment (a sweep's record key for sbatch), ours kept.
  ::setenv("SHOAL_TEST_KEPT", "kept", 1);
  auto env = RunCapturingOutput(&RealProcesses(),
                                {"sh", "-c", "echo \"$SHOAL_TEST_ADDED $SHOAL_TEST_KEPT\""},
                                std::chrono::seconds(15), {"SHOAL_TEST_ADDED=added"});
  ASSERT_TRUE(env.ok());
  EXPECT_EQ(env->out, "added kept\n");
  auto replaced = RunCapturingOutput(&RealProcesses(), {"sh", "-c", "echo \"$SHOAL_TEST_KEPT\""},
                                     std::chrono::seconds(15), {"SHOAL_TEST_KEPT=new"});
  ASSERT_TRUE(replaced.ok());
  EXPECT_EQ(replaced->out, "new\n");
  auto missing = RunCapturingOutput(&RealProcesses(), {"no-such-command-here"});
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(missing->exit_code, 127);
}

// sbatch that cannot read its configuration or reach slurmctld retries for 60 s: a command that
// outstays its time is killed with its children, and the error says what it said meanwhile.
TEST(SlurmTest, ACommandThatOutstaysItsTimeIsKilledSayingWhatItSaid) {
  const auto t0 = std::chrono::steady_clock::now();
  auto r = RunCapturingOutput(
      &RealProcesses(),
      {"sh", "-c", "echo 'sbatch: error: cannot stat file /x, retrying' >&2; sleep 7.31"},
      std::chrono::milliseconds(300));
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
  EXPECT_EQ(r.status().code(), Code::kUnavailable);
  EXPECT_EQ(r.status().message(),
            "sh did not finish in 300 ms: sbatch: error: cannot stat file /x, retrying");
  const auto left = RunCapturingOutput(&RealProcesses(), {"pgrep", "-f", "[s]leep 7.31"});
  ASSERT_TRUE(left.ok());
  EXPECT_NE(left->exit_code, 0) << left->out;  // its child went with it
}

}  // namespace
}  // namespace shoal
