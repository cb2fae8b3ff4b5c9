// A run's whole record moving between daemons (server/run_record.h): written whole or not at all,
// read back, and stored only under the place its order gave it.
#include "server/run_record.h"

#include <gtest/gtest.h>

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
  std::ofstream(d / "bad.json") << "{\"sweep_id\": \"s1\", \"workers\": 2}";
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
}

}  // namespace
}  // namespace shoal
