// A run's whole record moving between daemons (server/run_record.h): written whole or not at all,
// read back, and stored only under the place its order gave it.
#include "server/run_record.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "server/log_capture.h"
#include "tests/testutil.h"

namespace shoal {
namespace {

v1::PointOrder Order() {
  v1::PointOrder o;
  o.set_sweep_id("s0123456789");
  o.set_index(4);
  o.set_experiment_id("x0123456789");
  o.mutable_spec()->set_workers(2);
  return o;
}

v1::RunRecord Record() {
  v1::RunRecord r;
  v1::Experiment& e = *r.mutable_experiment();
  e.set_id("x0123456789");
  e.set_sweep_id("s0123456789");
  e.set_sweep_index(4);
  e.set_state(v1::SUCCEEDED);
  e.mutable_host()->set_hostname("node7");
  for (int i = 0; i < 3; ++i) r.add_samples()->set_t_ms(100.0 * i);
  r.add_events()->set_text("leader started, pid 7");
  r.set_log("[worker 0] hello\n");
  return r;
}

TEST(RunRecordTest, ARecordIsWrittenWholeAndReadBack) {
  testing::TempDir d;
  const std::string path = d / "record.pb";
  ASSERT_TRUE(WriteRunRecord(Record(), path).ok());
  auto back = ReadRunRecord(path);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->SerializeAsString(), Record().SerializeAsString());
  EXPECT_EQ(ReadRunRecord(d / "none.pb").status().code(), Code::kNotFound);
  std::ofstream(d / "junk.pb") << "not a record \xff\xff\xff";
  EXPECT_EQ(ReadRunRecord(d / "junk.pb").status().code(), Code::kInvalidArgument);
}

// A task's record comes back sealed under its sweep's key: read with the key it was sealed with,
// refused with another, unsealed, or altered after sealing.
TEST(RunRecordTest, ASealedRecordIsReadOnlyWithItsKey) {
  testing::TempDir d;
  const std::string key = NewRecordKey(), other = NewRecordKey();
  EXPECT_EQ(key.size(), 32u);
  EXPECT_NE(key, other);
  EXPECT_EQ(KeyFromHex(KeyToHex(key)).value(), key);
  EXPECT_EQ(KeyFromHex("00ff").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(KeyFromHex(std::string(64, 'g')).status().code(), Code::kInvalidArgument);

  const std::string sealed = d / "sealed.pb", plain = d / "plain.pb";
  ASSERT_TRUE(WriteRunRecord(Record(), sealed, key).ok());
  ASSERT_TRUE(WriteRunRecord(Record(), plain).ok());
  auto back = ReadRunRecord(sealed, key);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->SerializeAsString(), Record().SerializeAsString());
  for (const auto& [path, with] : {std::pair{sealed, other}, std::pair{plain, key}}) {
    auto refused = ReadRunRecord(path, with);
    EXPECT_EQ(refused.status().code(), Code::kInvalidArgument) << path;
    EXPECT_NE(refused.status().message().find("not sealed with its sweep's key"),
              std::string::npos);
  }
  // One byte of the record changed after sealing (its host renamed).
  std::string bytes;
  {
    std::ifstream in(sealed, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  const size_t at = bytes.find("node7");
  ASSERT_NE(at, std::string::npos);
  bytes[at + 4] = '8';
  std::ofstream(sealed, std::ios::binary | std::ios::trunc) << bytes;
  EXPECT_EQ(ReadRunRecord(sealed, key).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(ReadRunRecord(d / "none.pb", key).status().code(), Code::kNotFound);
}

TEST(RunRecordTest, ARecordIsStoredUnderItsOrdersPlaceWithItsSamplesEventsAndLog) {
  testing::TempDir d;
  auto store = Store::Open(d / "db");
  ASSERT_TRUE(store.ok());
  ASSERT_TRUE(StoreRunRecord(store->get(), d.path(), Order(), Record()).ok());
  auto e = (*store)->Get("x0123456789");
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(e->state(), v1::SUCCEEDED);
  EXPECT_EQ(e->host().hostname(), "node7");
  EXPECT_EQ((*store)->Samples("x0123456789")->size(), 3u);
  ASSERT_EQ((*store)->Events("x0123456789")->size(), 1u);
  std::ifstream log(LogPath(d.path(), "x0123456789"));
  std::string line;
  std::getline(log, line);
  EXPECT_EQ(line, "[worker 0] hello");
  // Stored again (a daemon killed while storing it, then restarted): one copy, not two.
  ASSERT_TRUE(StoreRunRecord(store->get(), d.path(), Order(), Record()).ok());
  EXPECT_EQ((*store)->Samples("x0123456789")->size(), 3u);
  EXPECT_EQ((*store)->Events("x0123456789")->size(), 1u);
}

TEST(RunRecordTest, ARecordClaimingAnotherPlaceOrARunNotEndedIsRefusedAndNothingStored) {
  testing::TempDir d;
  auto store = Store::Open(d / "db");
  ASSERT_TRUE(store.ok());
  v1::RunRecord other = Record();
  other.mutable_experiment()->set_sweep_id("s9999999999");
  Status st = StoreRunRecord(store->get(), d.path(), Order(), other);
  EXPECT_EQ(st.message(),
            "point 4's record: it names s9999999999 point 4 (x0123456789), not s0123456789 point "
            "4 (x0123456789)");
  v1::RunRecord moved = Record();
  moved.mutable_experiment()->set_sweep_index(5);
  EXPECT_EQ(StoreRunRecord(store->get(), d.path(), Order(), moved).code(), Code::kInvalidArgument);
  v1::RunRecord running = Record();
  running.mutable_experiment()->set_state(v1::RUNNING);
  EXPECT_EQ(StoreRunRecord(store->get(), d.path(), Order(), running).message(),
            "point 4's record: its run has not ended (RUNNING)");
  EXPECT_FALSE((*store)->Get("x0123456789").ok());
  EXPECT_TRUE((*store)->Samples("x0123456789")->empty());
}

TEST(RunRecordTest, AnOrderThatIsNotOneIsRefusedNamingTheFile) {
  testing::TempDir d;
  std::ofstream(d / "bad.json") << "{\"sweep_id\": [\"s1\"], \"index\": 2}";
  auto bad = ReadPointOrder(d / "bad.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(
      bad.status().message().rfind("run-point: " + (d / "bad.json") + " is not a point order: ", 0),
      0u)
      << bad.status().message();
  std::ofstream(d / "empty.json") << "{\"index\": 2}";
  EXPECT_EQ(ReadPointOrder(d / "empty.json").status().message(),
            "run-point: " + (d / "empty.json") + " names no sweep_id or experiment_id");
  std::ofstream(d / "good.json")
      << "{\"sweep_id\": \"s1\", \"index\": 2, \"experiment_id\": \"x1\", "
         "\"spec\": {\"workers\": 2}}";
  auto good = ReadPointOrder(d / "good.json");
  ASSERT_TRUE(good.ok()) << good.status().message();
  EXPECT_EQ(good->spec().workers(), 2u);
  // Written by an older shoald (data_parallel's node fields where they were, at their defaults),
  // its task pending across the upgrade: read, those fields dropped.
  std::ofstream(d / "old.json")
      << "{\"sweep_id\": \"s1\", \"index\": 0, \"experiment_id\": \"x1\", \"spec\": "
         "{\"kind\": \"data_parallel\", \"dataParallel\": {\"scaling\": \"strong\", \"nodes\": 1, "
         "\"nodeRank\": 0}}}";
  auto old = ReadPointOrder(d / "old.json");
  ASSERT_TRUE(old.ok()) << old.status().message();
  EXPECT_EQ(old->spec().data_parallel().scaling(), "strong");
  EXPECT_FALSE(old->spec().has_nodes());
}

// One run over two nodes: node 0's experiment carrying both nodes' processes and samples (each
// labelled), each node's own figures in its part, samples/s summed; a node without a record fails
// the run naming it; none at all is no record; a record that cannot be read now is read later.
TEST(RunRecordTest, TheRecordsOfARunsNodesAreOneWithAPartEach) {
  auto node = [](uint32_t k, double rate) {
    v1::RunRecord r = Record();
    r.mutable_experiment()->mutable_host()->set_hostname("node" + std::to_string(k));
    r.mutable_experiment()->mutable_result()->set_samples_per_sec(rate);
    r.mutable_experiment()->mutable_result()->set_peak_pss_sum_bytes(100 + k);
    r.mutable_experiment()->mutable_result()->set_samples(128);
    r.mutable_experiment()->mutable_result()->set_steps(8);
    r.mutable_experiment()->add_processes()->set_pid(int32_t(10 + k));
    r.set_log("[worker 0] node " + std::to_string(k) + "\n");
    return r;
  };
  auto merged = MergeNodeRecords({node(0, 300), node(1, 200)});
  ASSERT_TRUE(merged.ok()) << merged.status().message();
  const v1::Experiment& e = merged->experiment();
  EXPECT_EQ(e.state(), v1::SUCCEEDED);
  EXPECT_DOUBLE_EQ(e.result().samples_per_sec(), 500);
  EXPECT_EQ(e.result().samples(), 256u);
  EXPECT_EQ(e.result().steps(), 16u);
  EXPECT_EQ(e.result().peak_pss_sum_bytes(), 100u);  // node 0's host's
  ASSERT_EQ(e.parts_size(), 2);
  EXPECT_EQ(e.parts(1).node_rank(), 1u);
  EXPECT_EQ(e.parts(1).daemon(), "node1");
  EXPECT_DOUBLE_EQ(e.parts(1).samples_per_sec(), 200);
  EXPECT_EQ(e.parts(1).peak_pss_sum_bytes(), 101u);
  ASSERT_EQ(e.processes_size(), 2);
  EXPECT_EQ(e.processes(1).pid(), 11);
  EXPECT_EQ(e.processes(1).node(), 1u);
  ASSERT_EQ(merged->samples_size(), 6);
  EXPECT_EQ(merged->samples(5).node(), 1u);
  EXPECT_EQ(merged->log(), "== node 0 ==\n[worker 0] node 0\n== node 1 ==\n[worker 0] node 1\n");

  auto lost = MergeNodeRecords({node(0, 300), NotFound("no record")});
  ASSERT_TRUE(lost.ok());
  EXPECT_EQ(lost->experiment().state(), v1::FAILED);
  EXPECT_EQ(lost->experiment().error(), "node 1 wrote no record");
  v1::RunRecord failed = node(1, 0);
  failed.mutable_experiment()->set_state(v1::FAILED);
  failed.mutable_experiment()->set_error("worker 0 exited with code 1");
  EXPECT_EQ(MergeNodeRecords({node(0, 1), failed})->experiment().error(),
            "node 1: worker 0 exited with code 1");
  EXPECT_EQ(MergeNodeRecords({NotFound("a"), NotFound("b")}).status().code(), Code::kNotFound);
  EXPECT_EQ(MergeNodeRecords({node(0, 1), Unavailable("nfs")}).status().code(), Code::kUnavailable);
}

// A run-point daemon runs a command's order only where no one but its user could have written it.
// Each node's times count from its own run's start: node 1 started 1.5 s after node 0, so its
// samples and events are moved 1.5 s onto node 0's clock, and its part says by how much. A node
// that started first is the run's start: the others are moved onto it, no time before 0.
TEST(RunRecordTest, ANodesTimesAreMovedOntoTheEarliestNodesClock) {
  v1::RunRecord n0 = Record(), n1 = Record();
  n0.mutable_experiment()->set_started_unix_ms(1'700'000'000'000);
  n1.mutable_experiment()->set_started_unix_ms(1'700'000'001'500);
  n1.mutable_events(0)->set_t_ms(40);
  auto merged = MergeNodeRecords({n0, n1});
  ASSERT_TRUE(merged.ok());
  const v1::Experiment& e = merged->experiment();
  EXPECT_DOUBLE_EQ(e.parts(0).clock_offset_ms(), 0);
  EXPECT_DOUBLE_EQ(e.parts(1).clock_offset_ms(), 1500);
  ASSERT_EQ(merged->samples_size(), 6);
  EXPECT_DOUBLE_EQ(merged->samples(1).t_ms(), 100);   // node 0's own
  EXPECT_DOUBLE_EQ(merged->samples(4).t_ms(), 1600);  // node 1's 100 ms
  EXPECT_DOUBLE_EQ(merged->events(1).t_ms(), 1540);
  EXPECT_EQ(e.started_unix_ms(), 1'700'000'000'000);
  n1.mutable_experiment()->set_started_unix_ms(1'699'999'999'980);  // 20 ms before node 0
  auto early = MergeNodeRecords({n0, n1});
  EXPECT_EQ(early->experiment().started_unix_ms(), 1'699'999'999'980);
  EXPECT_DOUBLE_EQ(early->experiment().parts(0).clock_offset_ms(), 20);
  EXPECT_DOUBLE_EQ(early->experiment().parts(1).clock_offset_ms(), 0);
  EXPECT_DOUBLE_EQ(early->samples(0).t_ms(), 20);  // node 0's first sample
  // A start unknown: its times stay its own, and its part has no offset.
  n1.mutable_experiment()->clear_started_unix_ms();
  auto unknown = MergeNodeRecords({n0, n1});
  EXPECT_FALSE(unknown->experiment().parts(1).has_clock_offset_ms());
  EXPECT_DOUBLE_EQ(unknown->samples(4).t_ms(), 100);
}

// A run-point's profiler traces leave its throwaway state for the folder it is told; across nodes
// each node's are listed under node-K/ of the task's.
TEST(RunRecordTest, ProfilerTracesAreShippedAndEveryNodesAreListed) {
  testing::TempDir d;
  std::filesystem::create_directories(d / "state");
  std::ofstream(d / "state/rank0.json") << "[1]";
  v1::RunRecord r = Record();
  r.mutable_experiment()->set_profile_dir(d / "state");
  for (const char* name : {"rank0.json", "gone.json"}) {
    auto* t = r.mutable_experiment()->add_profile_traces();
    t->set_name(name);
    t->set_size_bytes(3);
  }
  ShipProfileTraces(&r, d / "shared/node-1");
  EXPECT_EQ(r.experiment().profile_dir(), d / "shared/node-1");
  ASSERT_EQ(r.experiment().profile_traces_size(), 1);  // the one that was not there: dropped
  EXPECT_TRUE(std::filesystem::exists(d / "shared/node-1/rank0.json"));
  auto merged = MergeNodeRecords({Record(), r});
  ASSERT_EQ(merged->experiment().profile_traces_size(), 1);
  EXPECT_EQ(merged->experiment().profile_traces(0).name(), "node-1/rank0.json");
}

TEST(RunRecordTest, AnOrderIsTrustedOnlyWhereOnlyItsUserCouldHaveWrittenIt) {
  testing::TempDir d;
  const std::string dir = d / "sweep", order = dir + "/order-0.json";
  std::filesystem::create_directories(dir);
  std::ofstream(order) << "{}";
  ::chmod(dir.c_str(), 0700);
  ::chmod(order.c_str(), 0600);
  EXPECT_TRUE(WrittenOnlyByMe(order));
  ::chmod(order.c_str(), 0620);  // a group may write the order
  EXPECT_FALSE(WrittenOnlyByMe(order));
  ::chmod(order.c_str(), 0600);
  ::chmod(dir.c_str(), 0775);  // a group may put another order in its place
  EXPECT_FALSE(WrittenOnlyByMe(order));
  EXPECT_FALSE(WrittenOnlyByMe(dir + "/order-9.json"));  // none there
}

}  // namespace
}  // namespace shoal
