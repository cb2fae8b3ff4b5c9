// Past one node (issue 56): the pieces a Slurm array task runs, with the real binaries.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "shoal/v1/shoal.pb.h"
#include "tests/testutil.h"

namespace shoal {
namespace {

using testing::CommandResult;
using testing::TempDir;

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
                                               d / "s.sock", "--log-level", "warn", "--run-point",
                                               d / "order.json", "--record-out", d / "record.pb"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
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

}  // namespace
}  // namespace shoal
