#include "server/store.h"

#include <google/protobuf/unknown_field_set.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cstring>

#include "server/coordinator.h"
#include "server/experiment_queue.h"
#include "server/paging.h"
#include "server/recovery.h"
#include "server/sweep_tracker.h"
#include "shared/os/shm.h"
#include "tests/fakes.h"
#include "tests/testutil.h"

namespace shoal {
namespace {

TEST(StoreTest, SurvivesReopen) {
  testing::TempDir d;
  {
    auto s = Store::Open(d / "db");
    ASSERT_TRUE(s.ok());
    for (int i = 0; i < 3; ++i) {
      v1::Experiment e;
      e.set_id("e" + std::to_string(i));
      e.set_submitted_unix_ms(100 - i);  // listed by submission time
      e.set_state(v1::SUCCEEDED);
      e.mutable_result()->set_peak_pss_sum_bytes(1000 + i);
      ASSERT_TRUE((*s)->Put(e).ok());
    }
    v1::Sample smp;
    smp.set_t_ms(5);
    smp.set_total_pss_bytes(77);
    ASSERT_TRUE((*s)->AddSample("e1", smp).ok());
    v1::Event ev;
    ev.set_text("hello");
    ASSERT_TRUE((*s)->AddEvent("e1", ev).ok());
  }
  auto s = Store::Open(d / "db");
  ASSERT_TRUE(s.ok());
  auto all = (*s)->List();
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 3u);
  EXPECT_EQ((*all)[0].id(), "e2");
  auto e1 = (*s)->Get("e1");
  ASSERT_TRUE(e1.ok());
  EXPECT_EQ(e1->result().peak_pss_sum_bytes(), 1001u);
  EXPECT_EQ((*s)->Samples("e1")->at(0).total_pss_bytes(), 77u);
  EXPECT_EQ((*s)->Events("e1")->at(0).text(), "hello");
  EXPECT_EQ((*s)->Get("nope").status().code(), Code::kNotFound);
}

// /metrics counts by state in SQLite: a record rewritten in a new state moves between counts.
TEST(StoreTest, CountsByStateFollowTheRecords) {
  testing::TempDir d;
  auto s = Store::Open(d / "db");
  ASSERT_TRUE(s.ok());
  v1::Experiment e;
  for (int i = 0; i < 3; ++i) {
    e.set_id("x" + std::to_string(i));
    e.set_state(i == 0 ? v1::RUNNING : v1::SUCCEEDED);
    ASSERT_TRUE((*s)->Put(e).ok());
  }
  e.set_id("x0");
  e.set_state(v1::FAILED);
  ASSERT_TRUE((*s)->Put(e).ok());
  auto counts = (*s)->CountByState();
  ASSERT_TRUE(counts.ok());
  EXPECT_EQ(*counts,
            (std::map<v1::ExperimentState, uint64_t>{{v1::SUCCEEDED, 2}, {v1::FAILED, 1}}));
}

TEST(StoreTest, UnwritablePathIsAnError) {
  auto s = Store::Open("/nonexistent/dir/db");
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("/nonexistent/dir/db"), std::string::npos);
}

}  // namespace
}  // namespace shoal

namespace shoal {
namespace {

std::string Hex(const std::string& bytes) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (unsigned char c : bytes) {
    out += kDigits[c >> 4];
    out += kDigits[c & 15];
  }
  return out;
}

TEST(StoreTest, SamplesAreThinnedEvenlyAndPrunedToTheNewestExperiments) {
  testing::TempDir d;
  auto s = Store::Open(d / "db");
  ASSERT_TRUE(s.ok());
  for (int i = 0; i < 3; ++i) {
    v1::Experiment e;
    e.set_id("e" + std::to_string(i));
    e.set_submitted_unix_ms(1000 + i);
    ASSERT_TRUE((*s)->Put(e).ok());
    for (int t = 0; t < 6; ++t) {
      v1::Sample smp;
      smp.set_t_ms(t);
      ASSERT_TRUE((*s)->AddSample(e.id(), smp).ok());
    }
  }
  ASSERT_TRUE((*s)->ThinSamples("e2").ok());
  std::vector<double> t;
  auto e2 = (*s)->Samples("e2");
  ASSERT_TRUE(e2.ok());
  for (const auto& smp : *e2) t.push_back(smp.t_ms());
  EXPECT_EQ(t, (std::vector<double>{0, 2, 4}));  // every other one, from the first
  EXPECT_EQ((*s)->Samples("e1")->size(), 6u);    // others untouched
  for (int i = 3; i < 6; ++i) {  // newer, queued: no samples yet, so they keep none from pruning
    v1::Experiment q;
    q.set_id("e" + std::to_string(i));
    q.set_submitted_unix_ms(1000 + i);
    ASSERT_TRUE((*s)->Put(q).ok());
  }
  ASSERT_TRUE((*s)->PruneSamples(2).ok());
  EXPECT_TRUE((*s)->Samples("e0")->empty());  // the oldest experiment's samples are gone
  EXPECT_EQ((*s)->Samples("e1")->size(), 6u);
  EXPECT_EQ((*s)->Samples("e2")->size(), 3u);
  EXPECT_TRUE((*s)->Get("e0").ok());  // its record stays
}

TEST(StoreTest, ARunAcrossNodesHasItsSamplesThinnedNodeByNode) {
  testing::TempDir d;
  auto s = Store::Open(d / "db");
  ASSERT_TRUE(s.ok());
  for (int t = 0; t < 4; ++t) {
    for (uint32_t node = 0; node < 2; ++node) {  // interleaved, as the parts' ticks arrive
      v1::Sample smp;
      smp.set_t_ms(t);
      smp.set_node(node);
      ASSERT_TRUE((*s)->AddSample("x1", smp).ok());
    }
  }
  ASSERT_TRUE((*s)->ThinSamples("x1", 1).ok());
  std::vector<std::pair<uint32_t, double>> kept;
  auto samples = (*s)->Samples("x1");
  ASSERT_TRUE(samples.ok());
  for (const auto& smp : *samples) kept.emplace_back(smp.node(), smp.t_ms());
  EXPECT_EQ(kept, (std::vector<std::pair<uint32_t, double>>{
                      {0, 0}, {1, 0}, {0, 1}, {0, 2}, {1, 2}, {0, 3}}));
  ASSERT_TRUE((*s)->ThinSamples("x1").ok());  // no node: touches none of the nodes' samples
  EXPECT_EQ((*s)->Samples("x1")->size(), 6u);
}

TEST(StoreTest, AStoreMadeBeforeNodesGainsTheColumnAndKeepsItsSamples) {
  testing::TempDir d;
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open((d / "db").c_str(), &db), SQLITE_OK);
    v1::Sample old;
    old.set_t_ms(5);
    const std::string body = old.SerializeAsString();
    const std::string sql =
        "CREATE TABLE samples (id TEXT, t_ms REAL, body BLOB); INSERT INTO samples VALUES "
        "('e1', 5, x'" +
        Hex(body) + "');";
    ASSERT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(db);
  }
  auto s = Store::Open(d / "db");
  ASSERT_TRUE(s.ok()) << s.status().message();
  v1::Sample smp;
  smp.set_t_ms(6);
  ASSERT_TRUE((*s)->AddSample("e1", smp).ok());
  auto samples = (*s)->Samples("e1");
  ASSERT_TRUE(samples.ok());
  ASSERT_EQ(samples->size(), 2u);
  EXPECT_EQ((*samples)[0].t_ms(), 5);
}

}  // namespace
}  // namespace shoal

namespace shoal {
namespace {

// Another connection hides a table: every write to it fails at once, as a full disk or a lock
// held past the busy timeout would make it fail, until the table is back.
class Sabotage {
 public:
  explicit Sabotage(const std::string& path) { sqlite3_open(path.c_str(), &db_); }
  ~Sabotage() { sqlite3_close(db_); }
  void Hide(const std::string& table = "experiments") {
    table_ = table;
    Run("ALTER TABLE " + table_ + " RENAME TO hidden");
  }
  void Restore() { Run("ALTER TABLE hidden RENAME TO " + table_); }
  // Reads still work; every new row (a record's update too: INSERT OR REPLACE) fails.
  void RefuseWrites(const std::string& table = "experiments") {
    Run("CREATE TRIGGER refuse BEFORE INSERT ON " + table +
        " BEGIN SELECT RAISE(ABORT, 'disk I/O error'); END");
  }

 private:
  void Run(const std::string& sql) {
    ASSERT_EQ(sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
  }
  sqlite3* db_ = nullptr;
  std::string table_;
};

v1::Experiment Record(const std::string& id, const std::string& sweep = "") {
  v1::Experiment e;
  e.set_id(id);
  e.set_state(v1::QUEUED);
  e.set_sweep_id(sweep);
  return e;
}

// A sweep's points go on record with their sweep or not at all.
TEST(StoreTest, ABatchIsStoredWhollyOrNotAtAll) {
  testing::TempDir d;
  auto s = Store::Open(d / "db");
  ASSERT_TRUE(s.ok());
  v1::Sweep sw;
  sw.set_id("s1");
  Sabotage sabotage(d / "db");
  sabotage.Hide("sweeps");  // the records are written, then their sweep fails
  EXPECT_FALSE((*s)->PutBatch({Record("x1", "s1"), Record("x2", "s1")}, &sw).ok());
  sabotage.Restore();
  EXPECT_EQ((*s)->List()->size(), 0u);  // rolled back with it
  EXPECT_FALSE((*s)->GetSweep("s1").ok());
  ASSERT_TRUE((*s)->PutBatch({Record("x1", "s1"), Record("x2", "s1")}, &sw).ok());
  EXPECT_EQ((*s)->List()->size(), 2u);
  EXPECT_TRUE((*s)->GetSweep("s1").ok());
}

// A store and its queue, x1 taken off the queue as the scheduler takes a run to start it.
v1::Experiment StartOne(ExperimentQueue& q) {
  EXPECT_TRUE(q.Enqueue({Record("x1")}).ok());
  return q.Next(std::chrono::milliseconds(0)).value();
}
struct OneStarted {
  testing::TempDir d;
  std::unique_ptr<Store> store = Store::Open(d / "db").value();
  ExperimentQueue q{store.get()};
  v1::Experiment e = StartOne(q);
};

// A final state the store refused is kept (get, list and cancel see it) and stored once it can.
TEST(StoreTest, AFinalStateTheStoreRefusedIsKeptAndStoredLater) {
  OneStarted t;
  t.e.set_state(v1::RUNNING);
  t.q.Update(t.e);
  Sabotage sabotage(t.d / "db");
  sabotage.Hide();
  t.e.set_state(v1::SUCCEEDED);
  t.q.Update(t.e);
  t.q.Done("x1");
  EXPECT_TRUE(t.q.IsUnsaved("x1"));
  EXPECT_EQ(t.q.Get("x1")->state(), v1::SUCCEEDED);
  EXPECT_EQ(t.q.Cancel("x1")->state(), v1::SUCCEEDED);  // ended: nothing to cancel
  t.q.RetryUnsaved();                                   // still refused
  sabotage.Restore();
  EXPECT_EQ(t.q.List()->at(0).state(), v1::SUCCEEDED);
  EXPECT_EQ(t.store->Get("x1")->state(), v1::RUNNING);  // what the store still says
  t.q.RetryUnsaved();
  EXPECT_FALSE(t.q.IsUnsaved("x1"));
  EXPECT_EQ(t.store->Get("x1")->state(), v1::SUCCEEDED);
}

// A listing follows its pages by key: each page seeks to its token, so following every page
// reads each record about once, whatever the filter refuses, in (submitted, id) order.
TEST(StoreTest, AListingsPagesReadEachRecordAboutOnce) {
  testing::TempDir d;
  auto s = Store::Open(d / "db");
  ASSERT_TRUE(s.ok());
  std::vector<v1::Experiment> put;
  for (int i = 0; i < 700; ++i) {
    v1::Experiment e = Record("x" + std::to_string((i * 7919) % 1000));
    e.set_submitted_unix_ms(i / 3);  // ties: ordered by id within a millisecond
    if (i % 50 == 0) e.set_state(v1::FAILED);
    put.push_back(e);
  }
  ASSERT_TRUE((*s)->PutBatch(put, nullptr).ok());
  size_t read = 0;
  auto fetch = [&](const std::optional<RecordKey>& after, size_t n) {
    auto got = (*s)->ListAfter(after, n);
    read += got.ok() ? got->size() : 0;
    return got;
  };
  auto follow = [&](uint32_t size, auto keep) {
    std::vector<RecordKey> keys;
    PageRequest req{size, ""};
    do {
      auto page = CollectPage<v1::Experiment>(req, fetch, keep);
      EXPECT_TRUE(page.ok());
      if (!page.ok()) break;
      EXPECT_LE(page->items.size(), size);
      for (const auto& e : page->items) keys.push_back(KeyOf(e));
      req.token = page->next;
    } while (!req.token.empty());
    return keys;
  };
  std::vector<RecordKey> all = follow(7, [](const v1::Experiment&) { return true; });
  ASSERT_EQ(all.size(), 700u);
  EXPECT_TRUE(std::is_sorted(all.begin(), all.end()));
  EXPECT_LE(read, 700u + 100u);  // one record past each page's end is read twice
  read = 0;
  std::vector<RecordKey> failed =
      follow(3, [](const v1::Experiment& e) { return e.state() == v1::FAILED; });
  EXPECT_EQ(failed.size(), 14u);
  EXPECT_TRUE(std::is_sorted(failed.begin(), failed.end()));
  EXPECT_LE(read, 2 * 700u);  // the refused are read past, not read again from the start
}

// A record whose body no longer parses is still listed, by its key, saying so.
TEST(StoreTest, ACorruptRecordIsListedNotSkipped) {
  testing::TempDir d;
  auto s = Store::Open(d / "db");
  ASSERT_TRUE(s.ok());
  v1::Experiment a = Record("xa"), c = Record("xc");
  c.set_submitted_unix_ms(9);
  ASSERT_TRUE((*s)->PutBatch({a, c}, nullptr).ok());
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((d / "db").c_str(), &db), SQLITE_OK);
  // One that does not parse; one empty, which parses as a record of no id: both keyed by their
  // columns (a key from the body would send the next page back to the first).
  EXPECT_EQ(sqlite3_exec(db,
                         "INSERT INTO experiments VALUES ('xb', 5, 4, x'ffffffff');"
                         "INSERT INTO experiments VALUES ('xbb', 5, 4, x'')",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  sqlite3_close(db);
  auto got = (*s)->ListAfter(RecordKey{0, "xa"}, 10);
  ASSERT_TRUE(got.ok());
  ASSERT_EQ(got->size(), 3u);
  EXPECT_EQ((*got)[0].id(), "xb");
  EXPECT_EQ((*got)[0].submitted_unix_ms(), 5);
  EXPECT_NE((*got)[0].error().find("corrupt"), std::string::npos);
  EXPECT_EQ((*got)[1].id(), "xbb");
  EXPECT_EQ((*got)[1].submitted_unix_ms(), 5);
  EXPECT_EQ((*got)[2].id(), "xc");
}

// A new record never replaces one on record: ids are drawn again until free, and a clash that
// reaches the store is refused with the old record kept.
TEST(StoreTest, ANewRecordNeverTakesAnOldOnesId) {
  testing::TempDir d;
  auto s = Store::Open(d / "db");
  ASSERT_TRUE(s.ok());
  v1::Experiment old = Record("xold");
  old.set_state(v1::SUCCEEDED);
  v1::Sweep sw;
  sw.set_id("sold");
  ASSERT_TRUE((*s)->PutBatch({old}, &sw).ok());
  EXPECT_TRUE((*s)->Taken("xold").value());
  EXPECT_TRUE((*s)->Taken("sold").value());
  EXPECT_FALSE((*s)->Taken("xnew").value());
  Status clash = (*s)->PutBatch({Record("xnew"), Record("xold")}, nullptr);
  EXPECT_NE(clash.message().find("already on record"), std::string::npos) << clash.message();
  EXPECT_EQ((*s)->Get("xold")->state(), v1::SUCCEEDED);
  EXPECT_FALSE((*s)->Get("xnew").ok());  // the batch went whole or not at all
  std::vector<std::string> drawn = {"xold", "sold", "xold", "xnew"};
  size_t next = 0;
  IdSource ids = FreshIds(s->get(), [&](const char*) { return drawn.at(next++); });
  EXPECT_EQ(ids("x"), "xnew");
  EXPECT_EQ(next, 4u);
  // Handed out but not yet on record (a sweep's next point, drawn before the batch is stored).
  drawn = {"xnew", "xother"};
  next = 0;
  EXPECT_EQ(ids("x"), "xother");
}

// Beyond --max-queued a submission is refused whole, naming the cap; a running one makes room.
TEST(StoreTest, TheQueueHoldsAtMostItsCap) {
  testing::TempDir d;
  auto s = Store::Open(d / "db");
  ASSERT_TRUE(s.ok());
  ExperimentQueue q(s->get(), 3);
  ASSERT_TRUE(q.Enqueue({Record("x1"), Record("x2")}).ok());
  Status full = q.Enqueue({Record("x3"), Record("x4")});
  EXPECT_EQ(full.code(), Code::kResourceExhausted);
  EXPECT_NE(full.message().find("2 experiments are waiting and this adds 2, over shoald's "
                                "--max-queued 3"),
            std::string::npos)
      << full.message();
  EXPECT_FALSE((*s)->Get("x3").ok());  // nothing of it stored
  ASSERT_TRUE(q.Enqueue({Record("x3")}).ok());
  EXPECT_FALSE(q.Enqueue({Record("x4")}).ok());
  ASSERT_TRUE(q.Next(std::chrono::milliseconds(0)).has_value());  // x1 runs: no longer waiting
  EXPECT_TRUE(q.Enqueue({Record("x4")}).ok());
  EXPECT_EQ(q.Cancel("x2")->state(), v1::CANCELLED);
  EXPECT_TRUE(q.Enqueue({Record("x5")}).ok());
}

// A restarted shoald given a lower cap keeps every queued run it restores (each was accepted);
// new ones wait until the queue has drained under the cap.
TEST(StoreTest, ARestoredQueueOverTheCapIsKeptWholeAndNewOnesWait) {
  testing::TempDir d;
  auto s = Store::Open(d / "db");
  ASSERT_TRUE(s.ok());
  ExperimentQueue q(s->get(), 2);
  q.Restore({Record("x1"), Record("x2"), Record("x3")});
  EXPECT_EQ(q.Waiting(), 3u);
  EXPECT_EQ(q.Enqueue({Record("x4")}).code(), Code::kResourceExhausted);
  ASSERT_TRUE(q.Next(std::chrono::milliseconds(0)).has_value());          // x1 runs
  EXPECT_EQ(q.Enqueue({Record("x4")}).code(), Code::kResourceExhausted);  // 2 wait: at the cap
  EXPECT_EQ(q.Cancel("x3")->state(), v1::CANCELLED);
  EXPECT_TRUE(q.Enqueue({Record("x4")}).ok());
}

// Cancelling a sweep stores the sweep twice (the request, then its points' ends together), not
// once per point: a trigger of another connection counts the writes.
TEST(StoreTest, CancellingASweepStoresItOnceForAllItsPoints) {
  testing::TempDir d;
  auto s = Store::Open(d / "db");
  ASSERT_TRUE(s.ok());
  ExperimentQueue q(s->get());
  int next = 0;
  SweepTracker sweeps(s->get(), &q,
                      [&](const char* prefix) { return prefix + std::to_string(next++); });
  q.Listen([&](const v1::Experiment& e) { sweeps.OnExperiment(e); });
  v1::SweepSpec spec;
  spec.mutable_base()->set_dataset("synthetic");
  v1::Axis* seeds = spec.add_axes();
  seeds->set_field("seed");
  for (int i = 1; i <= 50; ++i) seeds->add_values(std::to_string(i));
  auto id = sweeps.Submit(spec, "uid 0", SpecLimits{},
                          [](const v1::ExperimentSpec&) { return Status::Ok(); });
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open((d / "db").c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db,
                         "CREATE TABLE writes (n INTEGER); INSERT INTO writes VALUES (0);"
                         "CREATE TRIGGER counted AFTER INSERT ON sweeps BEGIN "
                         "UPDATE writes SET n = n + 1; END;",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  auto cancelled = sweeps.Cancel(*id);
  ASSERT_TRUE(cancelled.ok());
  EXPECT_EQ(cancelled->state(), v1::CANCELLED);
  int writes = -1;
  sqlite3_exec(
      db, "SELECT n FROM writes",
      [](void* out, int, char** v, char**) {
        *static_cast<int*>(out) = std::atoi(v[0]);
        return 0;
      },
      &writes, nullptr);
  sqlite3_close(db);
  EXPECT_EQ(writes, 2);
  auto stored = (*s)->GetSweep(*id);
  ASSERT_TRUE(stored.ok());
  EXPECT_EQ(stored->state(), v1::CANCELLED);
  for (const auto& p : stored->points()) EXPECT_EQ(p.state(), v1::CANCELLED);
}

// A sweep over workers 1, 2, 4 for two starts: when fork/2 runs out of memory, fork/4 is skipped
// (its experiment cancelled, the point noted) and spawn's row runs on; with skip_after_oom false,
// nothing is skipped. Admission's refusal at submit skips the refused point and the bigger ones.
struct OomSweep {
  testing::TempDir d;
  std::unique_ptr<Store> store;
  std::unique_ptr<ExperimentQueue> q;
  std::unique_ptr<SweepTracker> sweeps;
  int next = 0;
  OomSweep() {
    store = std::move(Store::Open(d / "db")).value();
    q = std::make_unique<ExperimentQueue>(store.get());
    sweeps = std::make_unique<SweepTracker>(store.get(), q.get(), [this](const char* prefix) {
      return prefix + std::to_string(next++);
    });
    q->Listen([this](const v1::Experiment& e) { sweeps->OnExperiment(e); });
  }
  StatusOr<std::string> Submit(std::optional<bool> skip, const SweepTracker::Admit& admit) {
    v1::SweepSpec spec;
    spec.mutable_base()->set_dataset("synthetic");
    for (auto [field, values] : std::vector<std::pair<std::string, std::vector<std::string>>>{
             {"start", {"fork", "spawn"}}, {"workers", {"1", "2", "4"}}}) {
      v1::Axis* a = spec.add_axes();
      a->set_field(field);
      for (const auto& v : values) a->add_values(v);
    }
    if (skip) spec.set_skip_after_oom(*skip);
    return sweeps->Submit(spec, "uid 0", SpecLimits{}, admit);
  }
  // Runs the queue's next experiment to `state`.
  void RunNext(v1::ExperimentState state, const std::string& error = "", uint64_t oom_kills = 0) {
    auto e = q->Next(std::chrono::milliseconds(0));
    ASSERT_TRUE(e.has_value());
    e->set_state(state);
    e->set_error(error);
    if (oom_kills > 0) e->mutable_result()->set_oom_kills(oom_kills);
    q->Update(*e);
    q->Done(e->id());
  }
  std::vector<std::string> Notes(const std::string& id) {
    std::vector<std::string> out;
    const v1::SweepReport r = sweeps->Get(id).value();
    for (const auto& p : r.sweep().points()) out.push_back(p.note());
    return out;
  }
};

Status Fits(const v1::ExperimentSpec&) { return Status::Ok(); }

TEST(StoreTest, AnOutOfMemoryPointSkipsTheBiggerPointsOfItsRow) {
  OomSweep s;
  auto id = s.Submit(std::nullopt, Fits);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  s.RunNext(v1::SUCCEEDED);
  s.RunNext(v1::FAILED, "worker 1: CUDA out of memory. Tried to allocate 2.00 GiB");
  const auto notes = s.Notes(*id);
  EXPECT_EQ(notes[2],
            "skipped: out of memory at point 1 (start fork, workers 2), which needs less");
  for (int i : {0, 1, 3, 4, 5}) EXPECT_EQ(notes[size_t(i)], "") << i;
  EXPECT_EQ(s.q->Get(s.sweeps->Get(*id)->sweep().points(2).experiment_id())->state(),
            v1::CANCELLED);
  EXPECT_EQ(s.q->Waiting(), 3u);  // spawn's row
  for (int i = 0; i < 3; ++i) s.RunNext(v1::SUCCEEDED);
  EXPECT_EQ(s.sweeps->Get(*id)->sweep().state(), v1::FAILED);  // fork/2 failed; nothing hangs
}

// The run's cgroup counted an OOM kill: out of memory, whatever the error's words (a program the
// kernel killed says only that it was killed).
TEST(StoreTest, AnOomKillTheKernelCountedSkipsTheBiggerPointsWhateverTheErrorSays) {
  OomSweep s;
  auto id = s.Submit(std::nullopt, Fits);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  s.RunNext(v1::SUCCEEDED);
  s.RunNext(v1::FAILED, "rank 0 killed by signal 9", /*oom_kills=*/1);
  EXPECT_EQ(s.Notes(*id)[2],
            "skipped: out of memory at point 1 (start fork, workers 2), which needs less");
  EXPECT_EQ(s.q->Waiting(), 3u);  // spawn's row
  // Killed, and no OOM kill counted: no skip.
  OomSweep t;
  ASSERT_TRUE(t.Submit(std::nullopt, Fits).ok());
  t.RunNext(v1::SUCCEEDED);
  t.RunNext(v1::FAILED, "rank 0 killed by signal 9");
  EXPECT_EQ(t.q->Waiting(), 4u);
}

TEST(StoreTest, NoSkipAfterOomRunsTheBiggerPointsAnyway) {
  OomSweep s;
  auto id = s.Submit(false, Fits);
  ASSERT_TRUE(id.ok());
  s.RunNext(v1::SUCCEEDED);
  s.RunNext(v1::FAILED, "worker 1: DefaultCPUAllocator: can't allocate memory");
  for (const auto& n : s.Notes(*id)) EXPECT_EQ(n, "");
  EXPECT_EQ(s.q->Waiting(), 4u);
  // A failure that is not for want of memory skips nothing either.
  OomSweep t;
  ASSERT_TRUE(t.Submit(std::nullopt, Fits).ok());
  t.RunNext(v1::FAILED, "diverged");
  EXPECT_EQ(t.q->Waiting(), 5u);
}

TEST(StoreTest, AdmissionsRefusalSkipsThePointAndTheBiggerOnesOrRefusesTheSweep) {
  auto refuse_4 = [](const v1::ExperimentSpec& spec) {
    return spec.workers() >= 4 && spec.start() == "fork"
               ? ResourceExhausted("does not fit: needs ~9 GiB of memory")
               : Status::Ok();
  };
  OomSweep s;
  auto id = s.Submit(std::nullopt, refuse_4);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(s.Notes(*id)[2],
            "skipped: sweep point 2 (start fork, workers 4): does not fit: needs ~9 GiB of memory");
  EXPECT_EQ(s.q->Waiting(), 5u);
  // Without skipping, or when nothing would be left to run, the sweep is refused.
  OomSweep t;
  auto refused = t.Submit(false, refuse_4);
  EXPECT_EQ(refused.status().message(),
            "sweep point 2 (start fork, workers 4): does not fit: needs ~9 GiB of memory");
  OomSweep u;
  auto none = u.Submit(std::nullopt, [](const v1::ExperimentSpec&) {
    return ResourceExhausted("does not fit: needs ~9 GiB of memory");
  });
  EXPECT_EQ(none.status().message(),
            "sweep point 0 (start fork, workers 1): does not fit: needs ~9 GiB of memory");
}

// An ended experiment stays live until its runner is Done (last event written, watchers closed):
// `rm` in between would leave that event's row behind.
TEST(StoreTest, AnEndedRunStaysLiveUntilItsRunnerIsDone) {
  OneStarted t;
  t.e.set_state(v1::SUCCEEDED);
  t.q.Update(t.e);
  EXPECT_EQ(t.q.Get("x1")->state(), v1::SUCCEEDED);
  EXPECT_TRUE(t.q.IsLive("x1"));
  t.q.Done("x1");
  EXPECT_FALSE(t.q.IsLive("x1"));
  v1::Experiment adopted = Record("x2");
  adopted.set_state(v1::RUNNING);
  ASSERT_TRUE(t.q.Adopt({adopted}).ok());
  adopted.set_state(v1::FAILED);
  t.q.Update(adopted);
  EXPECT_TRUE(t.q.IsLive("x2"));
  t.q.Done("x2");
  EXPECT_FALSE(t.q.IsLive("x2"));
}

// What the previous shoald left: x1 was running (two processes alive on record, two segments in
// /dev/shm), x2 queued, x3 done.
struct LeftBehind {
  testing::TempDir d;
  std::unique_ptr<Store> store = Store::Open(d / "db").value();
  testing::FakeSegmentJanitor segments;
  int ids = 0;
  std::function<std::string(const char*)> new_id = [this](const char* p) {
    return std::string(p) + "-new" + std::to_string(++ids);
  };
  LeftBehind() {
    v1::Experiment x1 = Record("x1");
    x1.set_state(v1::RUNNING);
    x1.add_processes()->set_alive(true);
    x1.add_processes()->set_alive(true);
    v1::Experiment x2 = Record("x2");
    x2.set_submitted_unix_ms(2);
    v1::Experiment x3 = Record("x3");
    x3.set_state(v1::SUCCEEDED);
    for (const auto& e : {x1, x2, x3}) EXPECT_TRUE(store->Put(e).ok());
    segments.left[SegmentPrefix("x1")] = 2;
  }
  // Makes experiment `id` the one point of a sweep s1, returned to be stored.
  v1::Sweep PointOf(const std::string& id) {
    v1::Experiment e = store->Get(id).value();
    e.set_sweep_id("s1");
    EXPECT_TRUE(store->Put(e).ok());
    v1::Sweep sw;
    sw.set_id("s1");
    sw.add_points()->set_experiment_id(id);
    return sw;
  }
};

TEST(RecoveryTest, ARunningRecordIsInterruptedAndNoSegmentIsLeft) {
  LeftBehind t;
  auto r = Recover(t.store.get(), &t.segments, t.new_id);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->interrupted.size(), 1u);
  const v1::Experiment x1 = t.store->Get("x1").value();
  EXPECT_EQ(x1.state(), v1::INTERRUPTED);
  EXPECT_EQ(x1.error(), "shoald stopped while this experiment ran");
  EXPECT_GT(x1.finished_unix_ms(), 0);
  for (const auto& p : x1.processes()) EXPECT_FALSE(p.alive());
  ASSERT_EQ(r->queue.size(), 1u);
  EXPECT_EQ(r->queue[0].id(), "x2");
  EXPECT_EQ(t.store->Get("x3")->state(), v1::SUCCEEDED);
  EXPECT_EQ(t.segments.Count(SegmentPrefix("x1")), 0u);
  // Every recorded experiment's prefix is swept, not only the running one's.
  EXPECT_EQ(t.segments.removed.size(), 3u);
}

// A write that fails ends shoald's start-up, and then nothing would remove the segments: they
// go first.
TEST(RecoveryTest, SegmentsAreRemovedEvenWhenTheStoreCannotBeWritten) {
  LeftBehind t;
  Sabotage sabotage(t.d / "db");
  sabotage.RefuseWrites();
  auto r = Recover(t.store.get(), &t.segments, t.new_id);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("disk I/O error"), std::string::npos)
      << r.status().ToString();
  EXPECT_EQ(t.segments.Count(SegmentPrefix("x1")), 0u);
  EXPECT_EQ(t.store->Get("x1")->state(), v1::RUNNING);  // nothing half-written
}

TEST(RecoveryTest, AnInterruptedSweepPointRunsAgainAsANewAttempt) {
  LeftBehind t;
  v1::Sweep sw = t.PointOf("x1");
  sw.set_state(v1::RUNNING);
  sw.mutable_points(0)->set_state(v1::RUNNING);
  sw.mutable_points(0)->set_attempts(1);
  ASSERT_TRUE(t.store->PutSweep(sw).ok());
  auto r = Recover(t.store.get(), &t.segments, t.new_id);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const v1::SweepPoint point = t.store->GetSweep("s1")->points(0);
  EXPECT_EQ(point.experiment_id(), "x-new1");
  EXPECT_EQ(point.state(), v1::QUEUED);
  EXPECT_EQ(point.attempts(), 2u);
  ASSERT_EQ(r->queue.size(), 2u);
  EXPECT_EQ(r->queue[0].id(), "x-new1");  // submitted with its sweep, before x2
  EXPECT_EQ(t.store->Get("x-new1")->sweep_id(), "s1");
  EXPECT_EQ(t.store->Get("x1")->state(), v1::INTERRUPTED);  // the old attempt stays on record
}

// A sweep cancelled whose queued point the dead daemon had not reached yet.
TEST(RecoveryTest, AQueuedPointOfACancelledSweepIsCancelled) {
  LeftBehind t;
  v1::Sweep sw = t.PointOf("x2");
  sw.set_error("cancelled by uid 0");
  ASSERT_TRUE(t.store->PutSweep(sw).ok());
  auto r = Recover(t.store.get(), &t.segments, t.new_id);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_TRUE(r->queue.empty());
  EXPECT_EQ(t.store->Get("x2")->state(), v1::CANCELLED);
  EXPECT_EQ(t.store->GetSweep("s1")->points(0).state(), v1::CANCELLED);
}

}  // namespace
}  // namespace shoal

namespace shoal {
namespace {

using google::protobuf::UnknownFieldSet;

UnknownFieldSet* Unknown(google::protobuf::Message* m) {
  return m->GetReflection()->MutableUnknownFields(m);
}

// multi_model: models 4 (field 21), iterations 50 (22), its variants (Result 34).
v1::Experiment OldMultiModel() {
  v1::Experiment e;
  e.set_id("old-mm");
  e.mutable_spec()->set_kind("multi_model");
  Unknown(e.mutable_spec())->AddVarint(21, 4);
  Unknown(e.mutable_spec())->AddVarint(22, 50);
  v1::VariantResult v;
  v.set_variant("mlinear");
  v.set_final_loss(0.5);
  Unknown(e.mutable_result())->AddLengthDelimited(34, v.SerializeAsString());
  return e;
}

// command: its argv (45), env (46), cwd (47); report lines ignored (Result 44).
v1::Experiment OldCommand() {
  v1::Experiment e;
  e.set_id("old-cmd");
  e.mutable_spec()->set_kind("command");
  UnknownFieldSet* u = Unknown(e.mutable_spec());
  u->AddLengthDelimited(45, "python3");
  u->AddLengthDelimited(45, "train.py");
  u->AddLengthDelimited(46, "A=1");
  u->AddLengthDelimited(47, "/work");
  Unknown(e.mutable_result())->AddVarint(44, 3);
  return e;
}

// data_loading: loaders 2 (23); an epoch's load CPU (EpochResult 8, a double).
v1::Experiment OldDataLoading() {
  v1::Experiment e;
  e.set_id("old-dl");
  e.mutable_spec()->set_kind("data_loading");
  Unknown(e.mutable_spec())->AddVarint(23, 2);
  auto* epoch = e.mutable_result()->add_epochs();
  epoch->set_epoch(1);
  const double ms = 1234.5;
  uint64_t bits;
  std::memcpy(&bits, &ms, sizeof bits);
  Unknown(epoch)->AddFixed64(8, bits);
  return e;
}

// A hogwild sweep's base: concurrent_steps 1 (50).
v1::Sweep OldSweep() {
  v1::Sweep sw;
  sw.set_id("old-sweep");
  sw.mutable_spec()->mutable_base()->set_kind("hogwild");
  Unknown(sw.mutable_spec()->mutable_base())->AddVarint(50, 1);
  return sw;
}

// data_parallel's node fields, as two eras stored them: top-level 27-29 (before issue 55), and
// DataParallelSpec 2-4 with node_daemons 5 (before they became the spec's own, issue 56). Both
// read as the spec's nodes, node_rank and master; node_daemons is dropped.
TEST(StoreTest, NodeFieldsOfEitherEraReadAsTheSpecsOwn) {
  testing::TempDir d;
  auto s = Store::Open(d / "db");
  ASSERT_TRUE(s.ok());
  v1::Experiment oldest;
  oldest.set_id("old-dp1");
  oldest.mutable_spec()->set_kind("data_parallel");
  Unknown(oldest.mutable_spec())->AddVarint(27, 2);
  Unknown(oldest.mutable_spec())->AddVarint(28, 1);
  Unknown(oldest.mutable_spec())->AddLengthDelimited(29, "node0:29500");
  v1::Experiment old;
  old.set_id("old-dp2");
  old.mutable_spec()->set_kind("data_parallel");
  v1::DataParallelSpec* dp = old.mutable_spec()->mutable_data_parallel();
  dp->set_scaling("strong");
  Unknown(dp)->AddVarint(2, 3);
  Unknown(dp)->AddVarint(3, 2);
  Unknown(dp)->AddLengthDelimited(4, "[fd00::1]:29500");
  Unknown(dp)->AddLengthDelimited(5, "a:1,b:1,c:1");
  for (const auto& e : {oldest, old}) ASSERT_TRUE((*s)->Put(e).ok());
  auto a = (*s)->Get("old-dp1");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->spec().nodes(), 2u);
  EXPECT_EQ(a->spec().node_rank(), 1u);
  EXPECT_EQ(a->spec().master(), "node0:29500");
  auto b = (*s)->Get("old-dp2");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->spec().nodes(), 3u);
  EXPECT_EQ(b->spec().node_rank(), 2u);
  EXPECT_EQ(b->spec().master(), "[fd00::1]:29500");
  EXPECT_EQ(b->spec().data_parallel().scaling(), "strong");
  EXPECT_TRUE(b->spec()
                  .data_parallel()
                  .GetReflection()
                  ->GetUnknownFields(b->spec().data_parallel())
                  .empty());
}

// A record written before issue 55 moved each kind's fields into its own message: its old field
// numbers are unknown fields now, and every read (Get, List, GetSweep) moves them where they
// live, so that an old state directory reads as it did.
TEST(StoreTest, RecordsWrittenBeforeTheKindsOwnedTheirFieldsReadAsTheyDid) {
  testing::TempDir d;
  auto s = Store::Open(d / "db");
  ASSERT_TRUE(s.ok());
  for (const v1::Experiment& e : {OldMultiModel(), OldCommand(), OldDataLoading()})
    ASSERT_TRUE((*s)->Put(e).ok());
  ASSERT_TRUE((*s)->PutSweep(OldSweep()).ok());

  auto m = (*s)->Get("old-mm");
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->spec().multi_model().models(), 4u);
  EXPECT_EQ(m->spec().multi_model().iterations(), 50u);
  ASSERT_EQ(m->result().multi_model().variants_size(), 1);
  EXPECT_EQ(m->result().multi_model().variants(0).variant(), "mlinear");
  EXPECT_TRUE(m->spec().GetReflection()->GetUnknownFields(m->spec()).empty());
  auto c = (*s)->Get("old-cmd");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(std::vector<std::string>(c->spec().command().argv().begin(),
                                     c->spec().command().argv().end()),
            (std::vector<std::string>{"python3", "train.py"}));
  EXPECT_EQ(c->spec().command().env(0), "A=1");
  EXPECT_EQ(c->spec().command().cwd(), "/work");
  EXPECT_EQ(c->result().command().report_lines_ignored(), 3u);
  auto listed = (*s)->List();
  ASSERT_TRUE(listed.ok());
  bool seen = false;
  for (const auto& e : *listed) {
    if (e.id() != "old-dl") continue;
    seen = true;
    EXPECT_EQ(e.spec().data_loading().loaders(), 2u);
    ASSERT_EQ(e.result().data_loading().epochs_size(), 1);
    EXPECT_EQ(e.result().data_loading().epochs(0).epoch(), 1u);
    EXPECT_DOUBLE_EQ(e.result().data_loading().epochs(0).load_cpu_ms(), 1234.5);
  }
  EXPECT_TRUE(seen);
  auto got = (*s)->GetSweep("old-sweep");
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(got->spec().base().hogwild().concurrent_steps(), 1u);
}

}  // namespace
}  // namespace shoal
