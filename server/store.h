// Durable record of experiments, their events and samples: SQLite in WAL mode under the state
// directory, so a restarted daemon still lists everything.
#pragma once

#include <sqlite3.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "shared/status.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal {

// Where a record sits in a listing: its submission time, then its id.
struct RecordKey {
  int64_t ms = 0;
  std::string id;
  bool operator<(const RecordKey& o) const { return std::tie(ms, id) < std::tie(o.ms, o.id); }
};

class Store {
 public:
  static StatusOr<std::unique_ptr<Store>> Open(const std::string& path);
  ~Store();

  Status Put(const v1::Experiment& e);  // insert or replace
  StatusOr<v1::Experiment> Get(const std::string& id);
  StatusOr<std::vector<v1::Experiment>> List();  // in submission order
  // Up to `limit` records after `after` (none: from the first) in key order: a listing's page
  // reads only what it shows, through the index on the key.
  StatusOr<std::vector<v1::Experiment>> ListAfter(const std::optional<RecordKey>& after,
                                                  size_t limit);
  // How many records are in each state, counted by SQLite (no record is read): /metrics.
  StatusOr<std::map<v1::ExperimentState, uint64_t>> CountByState();
  Status AddEvent(const std::string& id, const v1::Event& ev);
  StatusOr<std::vector<v1::Event>> Events(const std::string& id);
  Status AddSample(const std::string& id, const v1::Sample& s);
  // A run's samples and events as a node handed them back, in one transaction: whatever was kept
  // for `id` before is replaced, so storing the same record twice (a daemon killed while storing
  // it, then restarted) keeps one copy; all or none.
  Status ReplaceTelemetry(const std::string& id, const std::vector<v1::Sample>& samples,
                          const std::vector<v1::Event>& events);
  StatusOr<std::vector<v1::Sample>> Samples(const std::string& id);
  // Deletes every other stored sample of `id` (the 2nd, 4th, ...): its series at half the rate.
  // `node`: only the samples of that node's part (a run across nodes), each node thinned
  // on its own; none: the samples that have no node.
  Status ThinSamples(const std::string& id, std::optional<uint32_t> node = std::nullopt);
  // Keeps the samples of the newest `keep_experiments` experiments only.
  Status PruneSamples(int keep_experiments);

  Status PutSweep(const v1::Sweep& s);
  // New records, and the sweep they are points of when given, in one transaction: all or none.
  // An id already on record is refused, never replaced.
  Status PutBatch(const std::vector<v1::Experiment>& es, const v1::Sweep* sweep);
  // Whether an experiment or a sweep has this id.
  StatusOr<bool> Taken(const std::string& id);
  // Deletes a record with everything kept of it (an experiment's events and samples too).
  Status DeleteExperiment(const std::string& id);
  Status DeleteSweep(const std::string& id);
  StatusOr<v1::Sweep> GetSweep(const std::string& id);
  StatusOr<std::vector<v1::Sweep>> ListSweeps();

 private:
  // `verb`: "INSERT" (new records) or "INSERT OR REPLACE" (updates).
  Status PutLocked(const v1::Experiment& e, const char* verb = "INSERT OR REPLACE");
  Status PutSweepLocked(const v1::Sweep& s, const char* verb = "INSERT OR REPLACE");
  explicit Store(sqlite3* db) : db_(db) {}
  Status Exec(const char* sql);
  Status AddNodeColumn();
  Status ExecWithId(const char* sql, const std::string& id);
  Status AddSampleLocked(const std::string& id, const v1::Sample& s);
  Status AddEventLocked(const std::string& id, const v1::Event& ev);
  Status Error(const std::string& what);
  Status Stepped(sqlite3_stmt* st, const std::string& what);

  std::mutex mu_;
  sqlite3* db_;
};

}  // namespace shoal
