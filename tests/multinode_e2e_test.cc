// data_parallel across two "nodes": two network namespaces made by the test (a veth pair, a private
// /24, a host name each resolving to its veth address), a real shoald in each listening on TCP
// with TLS (a certificate made here) and tokens. Daemon 0 federates (node_daemons), or each
// daemon is given its part by hand. All traffic stays on the veth pair; the namespaces, the link
// and /etc/netns entries are removed afterwards. The test fails, never skips, when it cannot make
// them (it needs root, ip, unshare and openssl: deploy/install-deps.sh installs them).
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "shared/os/shm.h"
#include "tests/testutil.h"

namespace shoal {
namespace {

using nlohmann::json;
using testing::CommandResult;
using testing::Daemon;
using testing::TempDir;
using testing::WaitFor;

using testing::Parse;
const char* kIp = "/bin/ip";
const char* kPeerToken = "peer-0123456789abcdef";
const char* kDaemons = "shoalnode0:7443,shoalnode1:7443";

// Runs argv; "" when it exited 0, else what it printed.
std::string RunOk(std::vector<std::string> argv) {
  CommandResult r = testing::RunCommand(argv);
  if (r.exit_code == 0) return "";
  std::string cmd;
  for (const auto& a : argv) cmd += a + " ";
  return cmd + "-> " + std::to_string(r.exit_code) + ": " + r.err + r.out;
}

class TwoNodes : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string tag = std::to_string(::getpid() % 100000);
    ns_[0] = "shoal" + tag + "a";
    ns_[1] = "shoal" + tag + "b";
    const std::string veth[2] = {"sv" + tag + "a", "sv" + tag + "b"};
    net_ = "10.213." + std::to_string(::getpid() % 250) + ".";
    MakeCredentials();
    for (const auto& ns : ns_) ASSERT_EQ(RunOk({kIp, "netns", "add", ns}), "");
    made_ = true;
    ASSERT_EQ(RunOk({kIp, "link", "add", veth[0], "type", "veth", "peer", "name", veth[1]}), "");
    for (int i = 0; i < 2; ++i) {
      ASSERT_EQ(RunOk({kIp, "link", "set", veth[i], "netns", ns_[i]}), "");
      ASSERT_EQ(RunOk({kIp, "-n", ns_[i], "addr", "add", Address(i) + "/24", "dev", veth[i]}), "");
      ASSERT_EQ(RunOk({kIp, "-n", ns_[i], "link", "set", veth[i], "up"}), "");
      ASSERT_EQ(RunOk({kIp, "-n", ns_[i], "link", "set", "lo", "up"}), "");
      // `ip netns exec` mounts /etc/netns/NS/hosts over /etc/hosts: both names, each node's own.
      std::filesystem::create_directories("/etc/netns/" + ns_[i]);
      std::ofstream("/etc/netns/" + ns_[i] + "/hosts") << "127.0.0.1 localhost\n"
                                                       << Address(0) << " shoalnode0\n"
                                                       << Address(1) << " shoalnode1\n";
      daemons_[i] = std::make_unique<Daemon>(dir_ / ("state" + std::to_string(i)),
                                             dir_ / ("s" + std::to_string(i) + ".sock"));
      // Its own host name (else Gloo resolves the shared one, binds loopback and peers hang).
      daemons_[i]->WrapWith({kIp, "netns", "exec", ns_[i], "/usr/bin/unshare", "--uts", "/bin/sh",
                             "-c", "hostname shoalnode" + std::to_string(i) + " && exec \"$@\"",
                             "sh"});
      ASSERT_TRUE(daemons_[i]->Start(
          {"--grace-ms", "1000", "--listen", Address(i) + ":7443", "--tls-cert", dir_ / "cert.pem",
           "--tls-key", dir_ / "key.pem", "--token-file", dir_ / "tokens", "--peer-token-file",
           dir_ / "peer.tok", "--peer-tls-ca", dir_ / "cert.pem", "--peer-timeout-ms", "3000"}))
          << "shoald in " << ns_[i];
    }
  }
  void TearDown() override {
    for (auto& d : daemons_)
      if (d) d->Stop(SIGKILL);
    if (!made_) return;
    for (const auto& ns : ns_) {
      RunOk({kIp, "netns", "del", ns});  // takes its end of the veth pair, and so the pair
      std::filesystem::remove_all("/etc/netns/" + ns);
    }
  }
  std::string Address(int node) const { return net_ + std::to_string(node + 1); }

  // One certificate for both daemons' names; the token each daemon knows and presents to peers.
  void MakeCredentials() {
    const CommandResult r = testing::RunCommand(
        {"/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
         dir_ / "key.pem", "-out", dir_ / "cert.pem", "-days", "1", "-subj", "/CN=shoalnode0",
         "-addext", "subjectAltName=DNS:shoalnode0,DNS:shoalnode1"});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::ofstream(dir_ / "tokens") << "coordinator " << kPeerToken << "\n";
    std::ofstream(dir_ / "peer.tok") << kPeerToken << "\n";
    for (const char* f : {"tokens", "peer.tok"}) ::chmod((dir_ / f).c_str(), 0600);
  }

  // A data_parallel submit of one replica a node, `batches` of 16, and whatever `more` adds;
  // returns the experiment's id on the daemon of `node`.
  std::string SubmitDataParallel(int node, const std::string& batches,
                                 const std::vector<std::string>& more) {
    std::vector<std::string> args = {"submit",
                                     "--kind",
                                     "data_parallel",
                                     "--workers",
                                     "1",
                                     "--batch-size",
                                     "16",
                                     "--batches",
                                     batches,
                                     "--eval-samples",
                                     "0",
                                     "--start",
                                     "spawn",
                                     "--stall-timeout-ms",
                                     "20000",
                                     "--json"};
    args.insert(args.end(), more.begin(), more.end());
    CommandResult r = daemons_[node]->Cli(args);
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return Parse(r).value("id", "");
  }

  // Submits one experiment across both nodes through daemon 0; returns its id there. Samples
  // every 50 ms: the watch must see node 1's, and a short run gives the default 200 ms few.
  std::string SubmitFederated(const std::string& batches) {
    return SubmitDataParallel(0, batches,
                              {"--node-daemons", kDaemons, "--sample-interval-ms", "50"});
  }
  // The federated record's part on `node`, read from that node's own daemon.
  json Part(const json& e, int node) { return Get(node, e["parts"][node]["experiment_id"]); }
  // Every process of both parts, once both are training (past their second step).
  std::vector<pid_t> TrainingPids(const std::string& id) {
    std::vector<pid_t> pids;
    WaitFor(
        [&] {
          pids.clear();
          const json e = Get(0, id);
          if (e["parts"].size() != 2 || e["parts"][1].value("experiment_id", "").empty())
            return false;
          int training = 0;
          for (int n = 0; n < 2; ++n) {
            const json p = Part(e, n);
            for (const auto& proc : p["processes"]) {
              pids.push_back(proc["pid"].get<int>());
              if (proc["role"] == "worker" && proc.value("steps", 0) >= 2) ++training;
            }
          }
          return training == 2;
        },
        90);
    return pids;
  }
  static pid_t WorkerPid(const json& part) {
    for (const auto& p : part["processes"])
      if (p["role"] == "worker") return p["pid"].get<int>();
    return -1;
  }
  bool AllGone(const std::vector<pid_t>& pids, const std::vector<std::string>& ids) {
    return WaitFor(
        [&] {
          for (pid_t p : pids)
            if (testing::ProcessAlive(p)) return false;
          for (const auto& id : ids)
            if (!ListSegments(SegmentPrefix(id)).empty()) return false;
          return true;
        },
        10);
  }

  // Submits node `node`'s part; returns the experiment's id on that daemon.
  std::string SubmitPart(int node, const std::string& batches, const std::string& master) {
    return SubmitDataParallel(
        node, batches, {"--nodes", "2", "--node-rank", std::to_string(node), "--master", master});
  }
  json Get(int node, const std::string& id) {
    return Parse(daemons_[node]->Cli({"get", id, "--json"}));
  }
  json WaitEnded(int node, const std::string& id) {
    json e;
    WaitFor(
        [&] {
          e = Get(node, id);
          const std::string s = e.value("state", "");
          return s != "RUNNING" && s != "QUEUED" && !s.empty();
        },
        90);
    return e;
  }
  static std::string Checksum(const json& e) {  // its worker's weights
    for (const auto& p : e["processes"])
      if (p["role"] == "worker") return p["weights_checksum"];
    return "";
  }

  TempDir dir_;
  std::string ns_[2], net_;
  bool made_ = false;
  std::unique_ptr<Daemon> daemons_[2];
};

TEST_F(TwoNodes, OneDaemonFederatesAndBothTrainOneModel) {
  const std::string id = SubmitFederated("8");
  ASSERT_FALSE(id.empty());
  const CommandResult watch = daemons_[0]->Cli({"watch", id});  // to the end, node by node
  EXPECT_EQ(watch.exit_code, 0) << watch.err;
  EXPECT_NE(watch.out.find("node 0 t="), std::string::npos) << watch.out;
  EXPECT_NE(watch.out.find("node 1 t="), std::string::npos) << watch.out;
  const json e = Get(0, id);
  ASSERT_EQ(e["state"], "SUCCEEDED") << e["error"];
  ASSERT_EQ(e["parts"].size(), 2u);
  const json p0 = Part(e, 0), p1 = Part(e, 1);
  for (const json* p : {&p0, &p1}) {
    ASSERT_EQ((*p)["state"], "SUCCEEDED") << (*p)["error"];
    const json& d = (*p)["result"]["data_parallel"];
    EXPECT_EQ(d["world_size"], 2u);
    EXPECT_EQ(d["batch_total"], 32u);
    EXPECT_GT(d["bus_bandwidth_gbps"].get<double>(), 0);
    EXPECT_GT(d["comm_ms"].get<double>(), 0);
    EXPECT_LT((*p)["result"]["last_loss"].get<double>(),
              (*p)["result"]["first_loss"].get<double>());
  }
  EXPECT_EQ(p1["spec"]["data_parallel"]["node_rank"], 1u);
  EXPECT_EQ(p1["spec"]["data_parallel"]["master"], "shoalnode0:29500");
  EXPECT_EQ(p1["submitter"], "token coordinator");
  EXPECT_FALSE(Checksum(p0).empty());
  EXPECT_EQ(Checksum(p0), Checksum(p1));  // one model, averaged across the link
  EXPECT_EQ(e["result"]["data_parallel"], p0["result"]["data_parallel"]);  // node 0's figures
  std::set<int> nodes;
  for (const auto& p : e["processes"]) nodes.insert(p.value("node", -1));
  EXPECT_EQ(nodes, (std::set<int>{0, 1}));
  // Each node's rows of the table add up to its part's sum of peak PSS.
  for (int node : {0, 1}) {
    uint64_t rows = 0;
    for (const char* table : {"processes", "fork_server_processes"})
      for (const auto& p : e.value(table, json::array()))
        if (p.value("node", -1) == node) rows += p["peak_pss_bytes"].get<uint64_t>();
    EXPECT_EQ(rows, e["parts"][node]["sum_of_peak_pss_bytes"].get<uint64_t>()) << node;
  }
  // The federating daemon keeps each part's samples under the record, with their node.
  const CommandResult samples = daemons_[0]->Cli({"get", id, "--samples", "--format", "json"});
  ASSERT_EQ(samples.exit_code, 0) << samples.err;
  std::map<int, int> per_node;
  const json kept = json::parse(samples.out);
  for (const auto& smp : kept["samples"]) {
    ++per_node[smp.value("node", -1)];
    EXPECT_GT(smp["total_pss_bytes"].get<uint64_t>(), 0u);
  }
  EXPECT_GT(per_node[0], 0);
  EXPECT_GT(per_node[1], 0);
  EXPECT_EQ(per_node.count(-1), 0u) << samples.out;
}

TEST_F(TwoNodes, AWorkerKilledOnOneNodeEndsTheFederatedExperimentOnBoth) {
  const std::string id = SubmitFederated("100000");
  const std::vector<pid_t> pids = TrainingPids(id);
  json e = Get(0, id);
  const pid_t victim = WorkerPid(Part(e, 1));
  ASSERT_GT(victim, 0);  // never kill(-1)
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  e = WaitEnded(0, id);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(e["state"], "FAILED");
  EXPECT_NE(e["error"].get<std::string>().find(
                "node 1 (shoalnode1:7443): FAILED: worker 0 killed by signal 9"),
            std::string::npos)
      << e["error"];
  EXPECT_LT(took, 30.0);
  for (int n = 0; n < 2; ++n) EXPECT_NE(Part(e, n)["state"], "RUNNING");
  EXPECT_TRUE(AllGone(pids, {e["parts"][0]["experiment_id"], e["parts"][1]["experiment_id"]}));
}

TEST_F(TwoNodes, AKilledDaemonEndsTheFederatedExperimentAndTheNextOneCleansUp) {
  const std::string id = SubmitFederated("100000");
  const std::vector<pid_t> pids = TrainingPids(id);
  const json before = Get(0, id);
  const std::string part1 = before["parts"][1]["experiment_id"];
  const auto t0 = std::chrono::steady_clock::now();
  daemons_[1]->Stop(SIGKILL);
  const json e = WaitEnded(0, id);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(e["state"], "FAILED");
  EXPECT_EQ(e["error"].get<std::string>().rfind(
                "node 1 (shoalnode1:7443): lost: its shoald has not answered for 3 s", 0),
            0u)
      << e["error"];
  EXPECT_LT(took, 20.0);  // the 3 s timeout, then node 0's part stopping
  EXPECT_NE(Part(e, 0)["state"], "RUNNING");
  // Its workers went with it; the next daemon on its state directory removes their segments.
  ASSERT_TRUE(daemons_[1]->Start({"--grace-ms", "1000"}));
  EXPECT_EQ(Get(1, part1)["state"], "INTERRUPTED");
  EXPECT_TRUE(AllGone(pids, {e["parts"][0]["experiment_id"], part1}));
}

TEST_F(TwoNodes, PartsThatDisagreeFailAtOnceNamingTheField) {
  const std::string id0 = SubmitPart(0, "8", "shoalnode0:29518"),
                    id1 = SubmitPart(1, "9", "shoalnode0:29518");
  const json e1 = WaitEnded(1, id1), e0 = WaitEnded(0, id0);
  EXPECT_EQ(e1["state"], "FAILED");
  EXPECT_NE(e1["error"].get<std::string>().find(
                "nodes disagree: batches is '8' on node 0 and '9' on node 1"),
            std::string::npos)
      << e1["error"];
  EXPECT_EQ(e0["state"], "FAILED");
  EXPECT_NE(e0["error"].get<std::string>().find("rank 1: nodes disagree: batches"),
            std::string::npos)
      << e0["error"];
}

// deploy/slurm/data_parallel.sbatch under a real Slurm: deploy/slurm/try-in-namespaces.sh makes
// two namespaces, runs slurmctld and a slurmd in each, and submits the script with sbatch -N2 -W.
// One job: a shoald on each node, one federated experiment, nothing left when the job ends.
TEST(Slurm, OneSbatchTrainsOneModelAcrossTwoNodesAndLeavesNothing) {
  const CommandResult r = testing::RunCommand(
      {"/usr/bin/env", "SHOAL_BIN=" + testing::BinDir(),
       std::string(SHOAL_SOURCE_DIR) + "/deploy/slurm/try-in-namespaces.sh", "--workers", "1",
       "--batch-size", "16", "--batches", "4", "--threads", "1", "--eval-samples", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("slurm: shoalslurm0 idle shoalslurm1 idle"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("node 0 on shoalslurm0:7443: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("node 1 on shoalslurm1:7443: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("replicas identical: yes"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sbatch exit: 0"), std::string::npos) << r.out;
  EXPECT_EQ(r.err.find("outlived the job"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace shoal
