// Past one node (issue 56): the pieces a Slurm array task runs, with the real binaries.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <thread>

#include "shoal/v1/shoal.pb.h"
#include "tests/testutil.h"

namespace shoal {
namespace {

using nlohmann::json;
using testing::CommandResult;
using testing::Daemon;
using testing::Parse;
using testing::TempDir;
using testing::WaitFor;

// A point run on a daemon of its own, as an array task runs it: no socket, the run to its end,
// its whole record (experiment, samples, events, log) written under the order's names, and
// nothing of it left running.
TEST(RunPointE2E, AThrowawayDaemonRunsOnePointAndWritesItsWholeRecord) {
  TempDir d;
  std::ofstream(d / "order.json")
      << R"({"sweep_id": "s00000000a1", "index": 3, "experiment_id": "x00000000b2",
             "spec": {"workers": 2, "batches": 3, "batch_size": 16, "dataset": "synthetic",
                      "eval_samples": 0, "start": "fork"}})";
  const std::string shoald = testing::BinDir() + "/shoald";
  const CommandResult r = testing::RunCommand({shoald, "--state-dir", d / "state", "--socket",
                                               d / "s.sock", "--log-level", "info", "--run-point",
                                               d / "order.json", "--record-out", d / "record.pb"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  // Its log (a Slurm task's output) ties its own id to the point's and tells the run as it goes.
  const std::regex tie(R"((x[0-9a-f]{10}): point 3 of sweep s00000000a1, experiment x00000000b2)");
  const std::string log = r.out + r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(log, m, tie)) << log;
  for (const std::string w : {"worker 0", "worker 1"}) {
    const std::regex stepped(m[1].str() + ": " + w +
                             " finished its first (step in [0-9]+ ms|[0-9]+ steps)");
    EXPECT_TRUE(std::regex_search(log, stepped)) << log;
  }
  EXPECT_FALSE(std::filesystem::exists(d / "s.sock"));  // it served no one
  v1::RunRecord rec;
  std::ifstream in(d / "record.pb", std::ios::binary);
  ASSERT_TRUE(rec.ParseFromIstream(&in));
  const v1::Experiment& e = rec.experiment();
  EXPECT_EQ(e.state(), v1::SUCCEEDED) << e.error();
  EXPECT_EQ(e.id(), "x00000000b2");
  EXPECT_EQ(e.sweep_id(), "s00000000a1");
  EXPECT_EQ(e.sweep_index(), 3u);
  EXPECT_EQ(e.result().steps(), 6u);  // 2 workers x 3 batches
  int workers = 0;
  for (const auto& p : e.processes()) workers += p.role() == "worker";
  EXPECT_EQ(workers, 2);
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  EXPECT_EQ(e.host().hostname(), host);
  EXPECT_GT(rec.samples_size(), 0);
  EXPECT_GT(rec.events_size(), 0);
  // Nothing of the throwaway daemon runs on (its forkserver, its run's processes).
  const CommandResult left = testing::RunCommand({"/usr/bin/pgrep", "-f", d / "state"});
  EXPECT_NE(left.exit_code, 0) << left.out;
}

// scancel sends the task SIGTERM: the run is cancelled, its record still written, nothing left.
TEST(RunPointE2E, SigtermCancelsTheRunAndItsRecordIsStillWritten) {
  TempDir d;
  std::ofstream(d / "order.json")
      << R"({"sweep_id": "s00000000a1", "index": 0, "experiment_id": "x00000000b3",
             "spec": {"workers": 1, "batches": 100000, "batch_size": 16, "dataset": "synthetic",
                      "eval_samples": 0}})";
  const CommandResult r = testing::RunCommand(
      {"/usr/bin/timeout", "-s", "TERM", "6", testing::BinDir() + "/shoald", "--state-dir",
       d / "state", "--socket", d / "s.sock", "--log-level", "warn", "--run-point",
       d / "order.json", "--record-out", d / "record.pb"});
  EXPECT_EQ(r.exit_code, 124) << r.out << r.err;  // timeout's: it sent the signal
  v1::RunRecord rec;
  std::ifstream in(d / "record.pb", std::ios::binary);
  ASSERT_TRUE(rec.ParseFromIstream(&in)) << r.out << r.err;
  EXPECT_EQ(rec.experiment().state(), v1::CANCELLED) << rec.experiment().error();
  EXPECT_EQ(rec.experiment().id(), "x00000000b3");
  const CommandResult left = testing::RunCommand({"/usr/bin/pgrep", "-f", d / "state"});
  EXPECT_NE(left.exit_code, 0) << left.out;
}

TEST(RunPointE2E, AnOrderThatIsNotOneFailsNamingItAndWritesNothing) {
  TempDir d;
  std::ofstream(d / "order.json") << R"({"sweep_id": "s1", "spec": {"workers": 2}})";
  const CommandResult r = testing::RunCommand({testing::BinDir() + "/shoald", "--state-dir",
                                               d / "state", "--socket", d / "s.sock", "--run-point",
                                               d / "order.json", "--record-out", d / "record.pb"});
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE((r.out + r.err)
                .find("run-point: " + (d / "order.json") + " names no sweep_id or experiment_id"),
            std::string::npos)
      << r.out << r.err;
  EXPECT_FALSE(std::filesystem::exists(d / "record.pb"));
  const CommandResult alone = testing::RunCommand(
      {testing::BinDir() + "/shoald", "--state-dir", d / "state", "--run-point", d / "order.json"});
  EXPECT_NE(alone.exit_code, 0);
  EXPECT_NE((alone.out + alone.err).find("--record-out"), std::string::npos) << alone.err;
}

// A placement flag without --slurm is refused, not ignored; a time Slurm cannot take is refused
// before sbatch runs; a Slurm that cannot be reached fails the submit in sbatch's words, within
// the client's deadline, and nothing is kept.
TEST(SlurmSweepRefusals, BadPlacementsAreRefusedNamingWhyAndNothingIsKept) {
  TempDir d;
  Daemon daemon(d / "state", d / "s.sock");
  ASSERT_TRUE(daemon.Start({}, {"SLURM_CONF=" + (d / "no-such-slurm.conf")}));
  const CommandResult alone = daemon.Cli({"sweep", "--partition", "gpu", "--workers", "1"});
  EXPECT_NE(alone.exit_code, 0);
  EXPECT_NE(alone.err.find("--partition: only with --slurm"), std::string::npos) << alone.err;
  const CommandResult time = daemon.Cli(
      {"sweep", "--slurm", "--time", "half an hour", "--workers", "1", "--dataset", "synthetic"});
  EXPECT_NE(time.err.find("time: 'half an hour' is not one of Slurm's formats"), std::string::npos)
      << time.err;
  const CommandResult r =
      daemon.Cli({"sweep", "--slurm", "--workers", "1,2", "--dataset", "synthetic"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("scontrol did not finish in 15000 ms: scontrol: error: s_p_parse_file: "
                       "cannot "
                       "stat file " +
                       (d / "no-such-slurm.conf")),
            std::string::npos)
      << r.err;
  EXPECT_TRUE(Parse(daemon.Cli({"sweeps", "--json"})).value("sweeps", json::array()).empty());
  EXPECT_TRUE(!std::filesystem::exists(d / "state/slurm") ||
              std::filesystem::is_empty(d / "state/slurm"));
}

// A real Slurm (deploy/slurm/cluster.sh: slurmctld, two slurmd and munge, each node a network
// namespace with its own host name) and shoald on its first node, placing sweeps on it.
class SlurmSweepE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    const CommandResult up = testing::RunCommand({script_, "up", cluster_});
    ASSERT_EQ(up.exit_code, 0) << up.out << up.err;
    StartDaemon();
  }
  void TearDown() override {
    if (daemon_) daemon_->Stop(SIGTERM);
    testing::RunCommand({script_, "down", cluster_});  // whatever `up` got to
  }
  void StartDaemon() {
    daemon_ = std::make_unique<Daemon>(dir_ / "state", dir_ / "s.sock");
    daemon_->WrapWith({script_, "on", cluster_, "0"});
    ASSERT_TRUE(daemon_->Start({"--slurm-poll-ms", "300", "--allow-commands"}));
  }
  CommandResult OnNode0(std::vector<std::string> cmd) const {
    cmd.insert(cmd.begin(), {script_, "on", cluster_, "0"});
    return testing::RunCommand(cmd);
  }
  json Get(const std::string& id) const { return Parse(daemon_->Cli({"get", id, "--json"})); }
  // Nothing of the array is left: no job in Slurm's queue, no task's daemon, no task's state.
  void ExpectNothingLeft() {
    EXPECT_TRUE(WaitFor(
        [&] {
          return OnNode0({"squeue", "-h"}).out.empty();
        },
        30))
        << OnNode0({"squeue", "-h"}).out;
    EXPECT_NE(
        testing::RunCommand({"/usr/bin/pgrep", "-f", "--", "--run-point " + dir_.path()}).exit_code,
        0);
  }
  TempDir dir_;
  const std::string cluster_ = dir_ / "cluster";
  const std::string script_ = std::string(SHOAL_SOURCE_DIR) + "/deploy/slurm/cluster.sh";
  std::unique_ptr<Daemon> daemon_;
};

// A 4-point sweep as one job array: a task per point, each alone on a node, both nodes used, and
// every point's whole record (figures, samples, output, host) back in this daemon's store.
TEST_F(SlurmSweepE2E, ASweepIsAJobArrayAcrossBothNodesAndEveryRecordComesBackWhole) {
  // A partition the cluster has not: sbatch's own words, nothing kept.
  const CommandResult nope = daemon_->Cli(
      {"sweep", "--slurm", "--partition", "nope", "--workers", "1,2", "--dataset", "synthetic"});
  EXPECT_NE(nope.err.find("sbatch exited with code 1: sbatch: error: invalid partition specified: "
                          "nope"),
            std::string::npos)
      << nope.err;
  EXPECT_TRUE(Parse(daemon_->Cli({"sweeps", "--json"})).value("sweeps", json::array()).empty());
  // A time over the partition's MaxTime (30 minutes): sbatch takes it and Slurm would leave it
  // pending for good (PartitionTimeLimit); shoald cancels it and the point fails saying why.
  const CommandResult over =
      daemon_->Cli({"sweep", "--slurm", "--partition", "try", "--time", "45:00", "--workers", "1",
                    "--dataset", "synthetic", "--wait", "--json"});
  const json over_sweep = Parse(over)["sweep"];
  EXPECT_EQ(over_sweep["state"], "FAILED") << over.out << over.err;
  EXPECT_NE(Get(over_sweep["points"][0]["experiment_id"])["error"].get<std::string>().find(
                "PartitionTimeLimit (its --time is over the partition's MaxTime); shoald "
                "cancelled it"),
            std::string::npos)
      << over.out;
  const CommandResult r =
      daemon_->Cli({"sweep",          "--slurm", "--partition",  "try",   "--time",    "5:00",
                    "--max-parallel", "2",       "--workers",    "1,2,3", "--start",   "fork,spawn",
                    "--batches",      "3",       "--batch-size", "16",    "--dataset", "synthetic",
                    "--eval-samples", "0",       "--wait",       "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const json sw = Parse(r)["sweep"];
  ASSERT_EQ(sw["state"], "SUCCEEDED") << r.out;
  // The cluster's MaxArraySize is 4: two arrays, the second started once the first ended
  // (--max-parallel holds for the sweep).
  const std::vector<std::string> jobs = sw["slurm_job_ids"];
  ASSERT_EQ(jobs.size(), 2u) << sw.dump();
  EXPECT_EQ(sw["slurm_job_id"], jobs[0]);
  std::set<std::string> hosts, tasks;
  std::map<std::string, std::pair<int64_t, int64_t>> spans;  // each array's first start, last end
  for (const auto& p : sw["points"]) {
    const json e = Get(p["experiment_id"]);
    EXPECT_EQ(e["state"], "SUCCEEDED") << e.dump();
    const std::string job = e["slurm"]["job_id"];
    EXPECT_TRUE(job == jobs[0] || job == jobs[1]) << job;
    EXPECT_EQ(e["slurm"]["state"], "COMPLETED");
    tasks.insert(job + "_" + std::to_string(e["slurm"].value("task", 0)));
    auto [it, fresh] = spans.try_emplace(job, std::pair<int64_t, int64_t>{INT64_MAX, 0});
    it->second.first = std::min<int64_t>(it->second.first, e["started_unix_ms"].get<int64_t>());
    it->second.second = std::max<int64_t>(it->second.second, e["finished_unix_ms"].get<int64_t>());
    hosts.insert(e["host"]["hostname"].get<std::string>());
    EXPECT_EQ(e["slurm"]["node"], e["host"]["hostname"]);
    EXPECT_EQ(e["result"]["steps"].get<int>(), 3 * p["workers"].get<int>());
    const json kept =
        Parse(daemon_->Cli({"get", p["experiment_id"], "--samples", "--format", "json"}));
    EXPECT_FALSE(kept.value("samples", json::array()).empty());
    int workers = 0;  // its processes as the node's sampler saw them
    for (const auto& proc : e["processes"]) workers += proc["role"] == "worker";
    EXPECT_EQ(workers, p["workers"].get<int>());
  }
  EXPECT_EQ(tasks.size(), 6u);  // a 6-point sweep, one array task a point
  // The second array started once the first had ended: its first run after the first's last.
  EXPECT_GE(spans[jobs[1]].first, spans[jobs[0]].second);
  EXPECT_EQ(hosts, (std::set<std::string>{"shoalslurm0", "shoalslurm1"}));
  const CommandResult report = daemon_->Cli({"report", sw["id"]});
  EXPECT_NE(report.out.find("Hosts: "), std::string::npos) << report.out;
  ExpectNothingLeft();
}

// shoald stopped while the array runs: the tasks run on, and the next shoald picks the array up
// from the job id it recorded; a cancel then reaches Slurm (scancel), and a task killed mid-run
// fails its point in Slurm's words.
// data_parallel over both nodes as one Slurm job: srun places a part on each node, they meet at
// the first node's address, and the point's record holds both nodes' processes and a part each.
TEST_F(SlurmSweepE2E, ARunAcrossBothNodesIsOneTaskAndOneRecordWithAPartANode) {
  const CommandResult r = daemon_->Cli({"sweep",     "--slurm",   "--partition",    "try",
                                        "--time",    "5:00",      "--kind",         "data_parallel",
                                        "--nodes",   "2",         "--workers",      "2",
                                        "--batches", "6",         "--batch-size",   "16",
                                        "--dataset", "synthetic", "--eval-samples", "0",
                                        "--wait",    "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const json sw = Parse(r)["sweep"];
  ASSERT_EQ(sw["points"].size(), 1u);
  const json e = Get(sw["points"][0]["experiment_id"]);
  ASSERT_EQ(e["state"], "SUCCEEDED") << e.dump(2);
  // Where the nodes met: the first node's address and the job's port, as its script filled in.
  const std::string master = e["spec"]["master"];
  EXPECT_EQ(master.rfind("10.", 0), 0u) << master;
  ASSERT_EQ(e["parts"].size(), 2u) << e.dump(2);
  std::set<std::string> hosts;
  double rate = 0;
  for (const auto& part : e["parts"]) {
    EXPECT_EQ(part["state"], "SUCCEEDED");
    hosts.insert(part["daemon"].get<std::string>());
    rate += part["samples_per_sec"].get<double>();
  }
  EXPECT_EQ(hosts, (std::set<std::string>{"shoalslurm0", "shoalslurm1"}));
  EXPECT_NEAR(e["result"]["samples_per_sec"].get<double>(), rate, 1e-6);
  std::map<int, int> workers;  // node -> its workers, as its own sampler saw them
  for (const auto& p : e["processes"])
    if (p["role"] == "worker") workers[p.value("node", -1)] += 1;
  EXPECT_EQ(workers, (std::map<int, int>{{0, 2}, {1, 2}})) << e["processes"].dump();
  ExpectNothingLeft();
  // The same run as one experiment: submit --slurm places it as a sweep of one point.
  const CommandResult one = daemon_->Cli(
      {"submit",       "--slurm", "--partition", "try",       "--kind",         "data_parallel",
       "--nodes",      "2",       "--workers",   "1",         "--batches",      "4",
       "--batch-size", "16",      "--dataset",   "synthetic", "--eval-samples", "0",
       "--wait",       "--json"});
  ASSERT_EQ(one.exit_code, 0) << one.out << one.err;
  const json x = Parse(one);
  EXPECT_EQ(x["state"], "SUCCEEDED");
  EXPECT_EQ(x["parts"].size(), 2u);
  EXPECT_FALSE(x["slurm"]["job_id"].get<std::string>().empty());
  ExpectNothingLeft();
}

// A run across both nodes cancelled mid-run: the batch shell's SIGTERM reaches each node's run
// through the step (not srun, which would kill them), so every node still hands its record back.
TEST_F(SlurmSweepE2E, ARunAcrossNodesCancelledMidRunStillHandsBackEveryNodesRecord) {
  const CommandResult r =
      daemon_->Cli({"submit", "--slurm", "--partition", "try", "--kind", "data_parallel", "--nodes",
                    "2", "--workers", "1", "--batches", "100000", "--batch-size", "16", "--dataset",
                    "synthetic", "--eval-samples", "0", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string id = Parse(r)["id"];
  ASSERT_TRUE(WaitFor(
      [&] {
        const json e = Get(id);
        return e["state"] == "RUNNING" && e["slurm"].value("state", "") == "RUNNING";
      },
      60));
  // Both nodes stepping: each node's run logs its worker's first finished step to the task's
  // output (the first step is traced and needs both replicas: seconds on a loaded machine, and a
  // cancel before it ends leaves 0 steps to count).
  const std::string output = Get(id)["slurm"].value("output", "");
  ASSERT_FALSE(output.empty()) << Get(id).dump(2);
  ASSERT_TRUE(WaitFor(
      [&] { return testing::CountLinesWith(output, ": worker 0 finished its first ") == 2; }, 120))
      << testing::ReadFile(output);
  ASSERT_EQ(daemon_->Cli({"cancel", id}).exit_code, 0);
  ASSERT_TRUE(WaitFor([&] { return Get(id)["state"] != "RUNNING"; }, 60));
  const json e = Get(id);
  EXPECT_EQ(e["state"], "CANCELLED") << e.dump(2);
  ASSERT_EQ(e["parts"].size(), 2u) << e.dump(2);
  for (const auto& part : e["parts"]) EXPECT_EQ(part["state"], "CANCELLED") << part.dump();
  EXPECT_GT(e["result"]["steps"].get<int>(), 0);
  ExpectNothingLeft();
}

// A program of the user's across both nodes (torchrun's variables): 2 ranks a node meet at the
// first node's address through c10d over Gloo, train DistributedDataParallel on data of their own
// and all-reduce their rank + 1 (1+2+3+4 = 10); each rank writes what it was told and its weights
// where the test reads them, and the four replicas must end equal.
TEST_F(SlurmSweepE2E, ACommandAcrossBothNodesGetsTorchrunsVariablesAndItsRanksMeet) {
  const std::string out = dir_ / "ranks";
  std::filesystem::create_directories(out);
  // One line: an argument holds no control character (the wire's check). DistributedDataParallel
  // over Gloo, each rank on its own data: its replicas end equal only if their gradients met.
  const std::string script =
      "import os, sys, torch, torch.distributed as dist; dist.init_process_group('gloo'); "
      "torch.manual_seed(0); m = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 2)); "
      "o = torch.optim.SGD(m.parameters(), lr=0.1); "
      "g = torch.Generator().manual_seed(dist.get_rank()); "
      "[(o.zero_grad(), m(torch.randn(8, 4, generator=g)).pow(2).sum().backward(), o.step()) "
      "for _ in range(5)]; "
      "t = torch.ones(1) * (dist.get_rank() + 1); dist.all_reduce(t); e = os.environ; "
      "w = ','.join('%.6f' % v for v in torch.cat([p.detach().flatten() for p in "
      "m.parameters()])); "
      "open(os.path.join(sys.argv[1], 'rank' + e['RANK']), 'w').write(' '.join([e['LOCAL_RANK'], "
      "e['NODE_RANK'], e['WORLD_SIZE'], e['LOCAL_WORLD_SIZE'], str('SHOAL_RECORD_KEY' in e), "
      "str(int(t.item())), w])); "
      "open(os.path.join(e['SHOAL_PROFILE_DIR'], 'rank' + e['RANK'] + '.json'), 'w').write('[]'); "
      "dist.destroy_process_group()";
  const CommandResult r = daemon_->Cli({"submit", "--slurm", "--partition", "try", "--kind",
                                        "command", "--nodes", "2", "--workers", "2", "--wait",
                                        "--json", "--", "/usr/bin/python3", "-c", script, out});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const json e = Parse(r);
  ASSERT_EQ(e["state"], "SUCCEEDED") << e.dump(2);
  EXPECT_EQ(e["parts"].size(), 2u);
  std::set<std::string> weights;
  for (int rank = 0; rank < 4; ++rank) {
    std::ifstream in(out + "/rank" + std::to_string(rank));
    std::string told((std::istreambuf_iterator<char>(in)), {});
    // LOCAL_RANK NODE_RANK WORLD_SIZE LOCAL_WORLD_SIZE, whether the sweep's record key reached
    // it (never: the task's daemon took it out of its environment), the all-reduced sum, then
    // the weights
    const std::string want =
        std::to_string(rank % 2) + " " + std::to_string(rank / 2) + " 4 2 False 10 ";
    EXPECT_EQ(told.substr(0, want.size()), want) << "rank " << rank;
    weights.insert(told.size() > want.size() ? told.substr(want.size()) : "");
  }
  EXPECT_EQ(weights.size(), 1u) << "the replicas ended unlike";
  std::map<int, int> ranks;  // node -> its ranks, as its own sampler saw them
  for (const auto& p : e["processes"])
    if (p["role"] == "worker") ranks[p.value("node", -1)] += 1;
  EXPECT_EQ(ranks, (std::map<int, int>{{0, 2}, {1, 2}})) << e["processes"].dump();
  // Each rank's profiler trace came back from its node with the record, kept by this daemon.
  std::set<std::string> traces;
  for (const auto& t : e.value("profile_traces", json::array())) {
    traces.insert(t["name"].get<std::string>());
    EXPECT_TRUE(std::filesystem::is_regular_file(e["profile_dir"].get<std::string>() + "/" +
                                                 t["name"].get<std::string>()));
  }
  EXPECT_EQ(traces, (std::set<std::string>{"node-0/rank0.json", "node-0/rank1.json",
                                           "node-1/rank2.json", "node-1/rank3.json"}))
      << e.dump();
  EXPECT_EQ(e["profile_dir"], dir_.path() + "/state/profiles/" + e["id"].get<std::string>());
  ExpectNothingLeft();
}

// A model file uploaded to this daemon reaches the nodes: the sweep shares it under its folder,
// each task's daemon trains it, and nothing of it stays there once the array has ended.
TEST_F(SlurmSweepE2E, AnUploadedModelFileTrainsOnTheNodes) {
  const std::string model = dir_ / "mlp.pt";
  ASSERT_EQ(testing::RunCommand({"/usr/bin/python3", "-c",
                                 "import sys, torch; torch.jit.script(torch.nn.Sequential("
                                 "torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, "
                                 "10))).save(sys.argv[1])",
                                 model})
                .exit_code,
            0);
  const CommandResult r =
      daemon_->Cli({"sweep",   "--slurm",       "--partition", "try", "--model-file", model,
                    "--input", "float32[B,64]", "--classes",   "10",  "--workers",    "1,2",
                    "--start", "spawn",         "--batches",   "4",   "--batch-size", "16",
                    "--wait",  "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const json sw = Parse(r)["sweep"];
  for (const auto& p : sw["points"]) {
    const json e = Get(p["experiment_id"]);
    EXPECT_EQ(e["state"], "SUCCEEDED") << e.dump();
    EXPECT_EQ(e["model_file"]["name"], "mlp.pt");
    EXPECT_EQ(e["result"]["steps"].get<int>(), 4 * p["workers"].get<int>());
  }
  EXPECT_FALSE(std::filesystem::exists(dir_.path() + "/state/slurm/" + sw["id"].get<std::string>() +
                                       "/blobs"));
  ExpectNothingLeft();
}

TEST_F(SlurmSweepE2E, ARestartPicksTheArrayUpAndCancelAndAKilledTaskEndTheirPoints) {
  const CommandResult r = daemon_->Cli({"sweep", "--slurm", "--max-parallel", "2", "--repeats", "3",
                                        "--batches", "100000", "--batch-size", "16", "--dataset",
                                        "synthetic", "--eval-samples", "0", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  const std::string id = Parse(r)["id"];
  auto points = [&] { return Get(id)["sweep"]["points"]; };
  auto state = [&](int i) { return Get(points()[i]["experiment_id"])["state"]; };
  ASSERT_TRUE(WaitFor([&] { return state(0) == "RUNNING" && state(1) == "RUNNING"; }, 60))
      << Get(points()[0]["experiment_id"]).dump();
  EXPECT_EQ(state(2), "QUEUED");  // %2: it waits for a task to end
  EXPECT_EQ(Get(points()[2]["experiment_id"])["slurm"]["state"], "PENDING");
  // `watch` of a point on Slurm says where its task stands: pending and why, or where it runs.
  const std::string watched = points()[2]["experiment_id"];
  const CommandResult w =
      testing::RunCommand({"/usr/bin/timeout", "3", testing::BinDir() + "/shoal", "--socket",
                           daemon_->socket(), "watch", watched});
  EXPECT_EQ(w.out.rfind(watched + ": queued (Slurm PENDING: JobArrayTaskLimit)\n", 0), 0u) << w.out;
  const CommandResult w0 =
      testing::RunCommand({"/usr/bin/timeout", "3", testing::BinDir() + "/shoal", "--socket",
                           daemon_->socket(), "watch", points()[0]["experiment_id"]});
  EXPECT_NE(w0.out.find(": running (Slurm RUNNING on shoalslurm"), std::string::npos) << w0.out;
  daemon_->Stop(SIGTERM);
  StartDaemon();
  EXPECT_EQ(state(0), "RUNNING");  // not interrupted: it runs on Slurm's node
  // Task 0's daemon killed: its point fails naming Slurm's state, and task 2 takes the node.
  const std::string order0 = dir_.path() + "/state/slurm/" + id + "/array-0/order-0.json";
  ASSERT_EQ(testing::RunCommand({"/usr/bin/pkill", "-KILL", "-f", "--", "--run-point " + order0})
                .exit_code,
            0);
  ASSERT_TRUE(WaitFor([&] { return state(0) == "FAILED" && state(2) == "RUNNING"; }, 60));
  const std::string error = Get(points()[0]["experiment_id"])["error"];
  EXPECT_NE(error.find("Slurm task " + Get(id)["sweep"]["slurm_job_id"].get<std::string>() +
                       "_0 ended FAILED"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("wrote no record; its output: "), std::string::npos) << error;
  ASSERT_EQ(daemon_->Cli({"cancel", id}).exit_code, 0);
  ASSERT_TRUE(WaitFor([&] { return state(1) == "CANCELLED" && state(2) == "CANCELLED"; }, 60));
  // Cancelled mid-run, each still handed back its record: its telemetry.
  const json kept =
      Parse(daemon_->Cli({"get", points()[1]["experiment_id"], "--samples", "--format", "json"}));
  EXPECT_FALSE(kept.value("samples", json::array()).empty()) << kept.dump();
  EXPECT_EQ(Get(id)["sweep"]["state"], "CANCELLED");
  ExpectNothingLeft();
}

}  // namespace
}  // namespace shoal
