// data_parallel across two "nodes": two network namespaces made by the test (a veth pair, a private
// /24, a host name each resolving to its veth address), a real shoald in each, one part of the
// experiment submitted to each daemon. All traffic stays on the veth pair; the namespaces, the
// link and /etc/netns entries are removed afterwards. The test fails, never skips, when it cannot
// make them (it needs root, ip and unshare: deploy/install-deps.sh installs them).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "shared/shm.h"
#include "tests/testutil.h"

namespace shoal {
namespace {

using nlohmann::json;
using testing::CommandResult;
using testing::Daemon;
using testing::TempDir;
using testing::WaitFor;

constexpr auto Parse = testing::ParseJson;
const char* kIp = "/bin/ip";

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
      ASSERT_TRUE(daemons_[i]->Start({"--grace-ms", "1000"})) << "shoald in " << ns_[i];
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

  // Submits node `node`'s part; returns the experiment's id on that daemon.
  std::string SubmitPart(int node, const std::string& batches) {
    return SubmitPart(node, batches, "shoalnode0:29517");
  }
  std::string SubmitPart(int node, const std::string& batches, const std::string& master) {
    CommandResult r = daemons_[node]->Cli({"submit",
                                           "--kind",
                                           "data_parallel",
                                           "--nodes",
                                           "2",
                                           "--node-rank",
                                           std::to_string(node),
                                           "--master",
                                           master,
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
                                           "--json"});
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return Parse(r).value("id", "");
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
  static std::string Checksum(const json& e) {
    for (const auto& p : e["processes"])
      if (p["role"] == "worker") return p["weights_checksum"];
    return "";
  }

  TempDir dir_;
  std::string ns_[2], net_;
  bool made_ = false;
  std::unique_ptr<Daemon> daemons_[2];
};

TEST_F(TwoNodes, ReplicasOnTwoDaemonsTrainTheSameWeights) {
  const std::string id0 = SubmitPart(0, "8"), id1 = SubmitPart(1, "8");
  const json e0 = WaitEnded(0, id0), e1 = WaitEnded(1, id1);
  ASSERT_EQ(e0["state"], "SUCCEEDED") << e0["error"];
  ASSERT_EQ(e1["state"], "SUCCEEDED") << e1["error"];
  EXPECT_FALSE(Checksum(e0).empty());
  EXPECT_EQ(Checksum(e0), Checksum(e1));  // one model, averaged across the link
  for (const json* e : {&e0, &e1}) {
    const json& d = (*e)["result"]["data_parallel"];
    EXPECT_EQ(d["world_size"], 2u);
    EXPECT_EQ(d["batch_total"], 32u);
    EXPECT_GT(d["bus_bandwidth_gbps"].get<double>(), 0);
    EXPECT_GT(d["comm_ms"].get<double>(), 0);
    EXPECT_LT((*e)["result"]["last_loss"].get<double>(),
              (*e)["result"]["first_loss"].get<double>());
  }
}

TEST_F(TwoNodes, AWorkerKilledOnOneNodeEndsTheExperimentOnBoth) {
  const std::string id0 = SubmitPart(0, "100000"), id1 = SubmitPart(1, "100000");
  pid_t victim = -1;
  std::vector<pid_t> pids;
  ASSERT_TRUE(WaitFor(
      [&] {
        pids.clear();
        victim = -1;
        int training = 0;  // workers past their second step, on both nodes
        for (int n = 0; n < 2; ++n) {
          const json e = Get(n, n == 0 ? id0 : id1);
          if (e.value("state", "") != "RUNNING") return false;
          for (const auto& p : e["processes"]) {
            pids.push_back(p["pid"].get<int>());
            if (p["role"] != "worker") continue;
            if (p.value("steps", 0) >= 2) ++training;
            if (n == 1) victim = p["pid"].get<int>();
          }
        }
        return training == 2 && victim > 0;
      },
      90));
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_GT(victim, 0);  // never kill(-1)
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  const json e1 = WaitEnded(1, id1), e0 = WaitEnded(0, id0);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(e1["state"], "FAILED");
  EXPECT_NE(e1["error"].get<std::string>().find("worker 0 killed by signal 9"), std::string::npos)
      << e1["error"];
  EXPECT_EQ(e0["state"], "FAILED");  // its peer is gone: its own replica's all-reduce says so
  EXPECT_NE(e0["error"].get<std::string>().find("worker 0 exited with code"), std::string::npos)
      << e0["error"];
  EXPECT_LT(took, 30.0);
  EXPECT_TRUE(WaitFor(
      [&] {
        for (pid_t p : pids)
          if (testing::ProcessAlive(p)) return false;
        return ListSegments(SegmentPrefix(id0)).empty() && ListSegments(SegmentPrefix(id1)).empty();
      },
      10));
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

}  // namespace
}  // namespace shoal
