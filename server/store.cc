#include "server/store.h"

#include "server/store_migration.h"

namespace shoal {
namespace {

// Finalises a statement on every path.
struct Stmt {
  sqlite3_stmt* s = nullptr;
  ~Stmt() { sqlite3_finalize(s); }
};

template <typename Msg>
Status Append(sqlite3* db, const char* sql, const std::string& id, double t, const Msg& m) {
  Stmt st;
  if (sqlite3_prepare_v2(db, sql, -1, &st.s, nullptr) != SQLITE_OK)
    return Internal(sqlite3_errmsg(db));
  std::string body = m.SerializeAsString();
  sqlite3_bind_text(st.s, 1, id.data(), int(id.size()), SQLITE_TRANSIENT);
  sqlite3_bind_double(st.s, 2, t);
  sqlite3_bind_blob(st.s, 3, body.data(), static_cast<int>(body.size()), SQLITE_TRANSIENT);
  if (sqlite3_step(st.s) != SQLITE_DONE)
    return Internal(std::string("store: ") + sqlite3_errmsg(db));
  return Status::Ok();
}

// Every row's message; `id` (when given) is bound to the query's one parameter.
template <typename Msg>
StatusOr<std::vector<Msg>> ReadAll(sqlite3* db, const char* sql, const std::string* id) {
  Stmt st;
  if (sqlite3_prepare_v2(db, sql, -1, &st.s, nullptr) != SQLITE_OK)
    return Internal(sqlite3_errmsg(db));
  if (id != nullptr) sqlite3_bind_text(st.s, 1, id->data(), int(id->size()), SQLITE_TRANSIENT);
  std::vector<Msg> out;
  while (sqlite3_step(st.s) == SQLITE_ROW) {
    Msg m;
    if (m.ParseFromArray(sqlite3_column_blob(st.s, 0), sqlite3_column_bytes(st.s, 0))) {
      MigrateRecord(&m);
      out.push_back(std::move(m));
    }
  }
  return out;
}

// Binds a sample's node, or NULL for a sample of a single-node run.
void BindNode(sqlite3_stmt* st, int i, std::optional<uint32_t> node) {
  node ? sqlite3_bind_int64(st, i, *node) : sqlite3_bind_null(st, i);
}

// A listed row (id, submitted, state, body), keyed by its columns whatever its body says (the
// listing seeks by them): a body that does not parse is still listed, by its key, saying so
// (skipping it would end the listing's chunk early and hide the record).
v1::Experiment ListedRow(sqlite3_stmt* st) {
  const auto* id = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
  v1::Experiment e;
  if (!e.ParseFromArray(sqlite3_column_blob(st, 3), sqlite3_column_bytes(st, 3))) {
    e.Clear();
    const int state = sqlite3_column_int(st, 2);
    if (v1::ExperimentState_IsValid(state)) e.set_state(v1::ExperimentState(state));
    e.set_error("store: this record is corrupt (its body does not parse)");
  }
  MigrateRecord(&e);
  e.set_id(id != nullptr ? id : "");
  e.set_submitted_unix_ms(sqlite3_column_int64(st, 1));
  return e;
}

}  // namespace

StatusOr<std::unique_ptr<Store>> Store::Open(const std::string& path) {
  sqlite3* db = nullptr;
  int rc =
      sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return Unavailable("cannot open store " + path + ": " + msg);
  }
  std::unique_ptr<Store> store(new Store(db));
  sqlite3_busy_timeout(db, 5000);
  RETURN_IF_ERROR(store->Exec("PRAGMA journal_mode=WAL"));
  RETURN_IF_ERROR(store->Exec("PRAGMA synchronous=NORMAL"));
  RETURN_IF_ERROR(store->Exec(
      "CREATE TABLE IF NOT EXISTS experiments (id TEXT PRIMARY KEY, submitted INTEGER, state "
      "INTEGER, body BLOB);"
      "CREATE TABLE IF NOT EXISTS events (id TEXT, t_ms REAL, body BLOB);"
      "CREATE INDEX IF NOT EXISTS events_id ON events(id);"
      "CREATE TABLE IF NOT EXISTS samples (id TEXT, t_ms REAL, body BLOB, node INTEGER);"
      "CREATE INDEX IF NOT EXISTS samples_id ON samples(id);"
      "CREATE INDEX IF NOT EXISTS experiments_key ON experiments(submitted, id);"
      "CREATE TABLE IF NOT EXISTS sweeps (id TEXT PRIMARY KEY, submitted INTEGER, body BLOB);"));
  RETURN_IF_ERROR(store->AddNodeColumn());
  return store;
}

Store::~Store() { sqlite3_close(db_); }

// A store made before runs across nodes kept their parts' samples has no node column.
Status Store::AddNodeColumn() {
  Stmt st;
  if (sqlite3_prepare_v2(db_, "SELECT node FROM samples LIMIT 0", -1, &st.s, nullptr) == SQLITE_OK)
    return Status::Ok();
  return Exec("ALTER TABLE samples ADD COLUMN node INTEGER");
}

Status Store::Error(const std::string& what) {
  return Internal("store: " + what + ": " + sqlite3_errmsg(db_));
}

// Runs a write; an id already taken says so (a new record drew an old one's id).
Status Store::Stepped(sqlite3_stmt* st, const std::string& what) {
  const int rc = sqlite3_step(st);
  if (rc == SQLITE_DONE) return Status::Ok();
  if (sqlite3_extended_errcode(db_) == SQLITE_CONSTRAINT_PRIMARYKEY)
    return Internal("store: " + what + ": the id is already on record");
  return Error(what);
}

StatusOr<bool> Store::Taken(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt st;
  if (sqlite3_prepare_v2(db_,
                         "SELECT 1 FROM experiments WHERE id=?1 UNION ALL "
                         "SELECT 1 FROM sweeps WHERE id=?1",
                         -1, &st.s, nullptr) != SQLITE_OK) {
    return Error("prepare taken");
  }
  sqlite3_bind_text(st.s, 1, id.data(), int(id.size()), SQLITE_TRANSIENT);
  const int rc = sqlite3_step(st.s);
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return Error("taken " + id);
  return rc == SQLITE_ROW;
}

Status Store::Exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string m = err ? err : "?";
    sqlite3_free(err);
    return Internal(std::string("store: ") + m);
  }
  return Status::Ok();
}

Status Store::Put(const v1::Experiment& e) {
  std::lock_guard<std::mutex> l(mu_);
  return PutLocked(e);
}

Status Store::PutLocked(const v1::Experiment& e, const char* verb) {
  Stmt st;
  const std::string sql = std::string(verb) + " INTO experiments VALUES (?,?,?,?)";
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &st.s, nullptr) != SQLITE_OK)
    return Error("prepare put");
  std::string body = e.SerializeAsString();
  sqlite3_bind_text(st.s, 1, e.id().data(), int(e.id().size()), SQLITE_TRANSIENT);
  sqlite3_bind_int64(st.s, 2, e.submitted_unix_ms());
  sqlite3_bind_int(st.s, 3, e.state());
  sqlite3_bind_blob(st.s, 4, body.data(), static_cast<int>(body.size()), SQLITE_TRANSIENT);
  return Stepped(st.s, "put " + e.id());
}

Status Store::DeleteExperiment(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  for (const char* sql : {"DELETE FROM samples WHERE id=?", "DELETE FROM events WHERE id=?",
                          "DELETE FROM experiments WHERE id=?"}) {
    RETURN_IF_ERROR(ExecWithId(sql, id));
  }
  return Status::Ok();
}

Status Store::DeleteSweep(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  return ExecWithId("DELETE FROM sweeps WHERE id=?", id);
}

StatusOr<v1::Experiment> Store::Get(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt st;
  if (sqlite3_prepare_v2(db_, "SELECT body FROM experiments WHERE id=?", -1, &st.s, nullptr) !=
      SQLITE_OK) {
    return Error("prepare get");
  }
  sqlite3_bind_text(st.s, 1, id.data(), int(id.size()), SQLITE_TRANSIENT);
  if (sqlite3_step(st.s) != SQLITE_ROW) return NotFound("no experiment with id '" + id + "'");
  v1::Experiment e;
  if (!e.ParseFromArray(sqlite3_column_blob(st.s, 0), sqlite3_column_bytes(st.s, 0))) {
    return DataLoss("store: experiment " + id + " is corrupt");
  }
  MigrateRecord(&e);
  return e;
}

StatusOr<std::map<v1::ExperimentState, uint64_t>> Store::CountByState() {
  std::lock_guard<std::mutex> l(mu_);
  Stmt st;
  if (sqlite3_prepare_v2(db_, "SELECT state, COUNT(*) FROM experiments GROUP BY state", -1, &st.s,
                         nullptr) != SQLITE_OK) {
    return Error("prepare count");
  }
  std::map<v1::ExperimentState, uint64_t> out;
  int rc;
  while ((rc = sqlite3_step(st.s)) == SQLITE_ROW) {
    const int state = sqlite3_column_int(st.s, 0);
    if (v1::ExperimentState_IsValid(state))
      out[v1::ExperimentState(state)] = uint64_t(sqlite3_column_int64(st.s, 1));
  }
  if (rc != SQLITE_DONE) return Error("count");
  return out;
}

StatusOr<std::vector<v1::Experiment>> Store::List() {
  std::lock_guard<std::mutex> l(mu_);
  return ReadAll<v1::Experiment>(db_, "SELECT body FROM experiments ORDER BY submitted, rowid",
                                 nullptr);
}

StatusOr<std::vector<v1::Experiment>> Store::ListAfter(const std::optional<RecordKey>& after,
                                                       size_t limit) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt st;
  const char* sql = after ? "SELECT id, submitted, state, body FROM experiments "
                            "WHERE (submitted, id) > (?, ?) ORDER BY submitted, id LIMIT ?"
                          : "SELECT id, submitted, state, body FROM experiments "
                            "ORDER BY submitted, id LIMIT ?";
  if (sqlite3_prepare_v2(db_, sql, -1, &st.s, nullptr) != SQLITE_OK) return Error("prepare list");
  int i = 1;
  if (after) {
    sqlite3_bind_int64(st.s, i++, after->ms);
    sqlite3_bind_text(st.s, i++, after->id.data(), int(after->id.size()), SQLITE_TRANSIENT);
  }
  sqlite3_bind_int64(st.s, i, int64_t(std::min<size_t>(limit, INT64_MAX)));
  std::vector<v1::Experiment> out;
  int rc;
  while ((rc = sqlite3_step(st.s)) == SQLITE_ROW) out.push_back(ListedRow(st.s));
  if (rc != SQLITE_DONE) return Error("list");
  return out;
}

Status Store::AddEvent(const std::string& id, const v1::Event& ev) {
  std::lock_guard<std::mutex> l(mu_);
  return AddEventLocked(id, ev);
}

Status Store::AddEventLocked(const std::string& id, const v1::Event& ev) {
  return Append(db_, "INSERT INTO events VALUES (?,?,?)", id, ev.t_ms(), ev);
}

StatusOr<std::vector<v1::Event>> Store::Events(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  return ReadAll<v1::Event>(db_, "SELECT body FROM events WHERE id=? ORDER BY rowid", &id);
}

Status Store::AddSample(const std::string& id, const v1::Sample& s) {
  std::lock_guard<std::mutex> l(mu_);
  return AddSampleLocked(id, s);
}

Status Store::ReplaceTelemetry(const std::string& id, const std::vector<v1::Sample>& samples,
                               const std::vector<v1::Event>& events) {
  std::lock_guard<std::mutex> l(mu_);
  RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  Status st = ExecWithId("DELETE FROM samples WHERE id=?", id);
  if (st.ok()) st = ExecWithId("DELETE FROM events WHERE id=?", id);
  for (size_t i = 0; st.ok() && i < samples.size(); ++i) st = AddSampleLocked(id, samples[i]);
  for (size_t i = 0; st.ok() && i < events.size(); ++i) st = AddEventLocked(id, events[i]);
  if (st.ok()) st = Exec("COMMIT");
  if (!st.ok()) (void)Exec("ROLLBACK");
  return st;
}

Status Store::AddSampleLocked(const std::string& id, const v1::Sample& s) {
  Stmt st;
  if (sqlite3_prepare_v2(db_, "INSERT INTO samples (id, t_ms, body, node) VALUES (?,?,?,?)", -1,
                         &st.s, nullptr) != SQLITE_OK) {
    return Error("prepare sample");
  }
  const std::string body = s.SerializeAsString();
  sqlite3_bind_text(st.s, 1, id.data(), int(id.size()), SQLITE_TRANSIENT);
  sqlite3_bind_double(st.s, 2, s.t_ms());
  sqlite3_bind_blob(st.s, 3, body.data(), static_cast<int>(body.size()), SQLITE_TRANSIENT);
  BindNode(st.s, 4, s.has_node() ? std::optional<uint32_t>(s.node()) : std::nullopt);
  if (sqlite3_step(st.s) != SQLITE_DONE) return Error("sample of " + id);
  return Status::Ok();
}

// Runs `sql` with `id` bound to its one parameter.
Status Store::ExecWithId(const char* sql, const std::string& id) {
  Stmt st;
  if (sqlite3_prepare_v2(db_, sql, -1, &st.s, nullptr) != SQLITE_OK) return Error("prepare");
  sqlite3_bind_text(st.s, 1, id.data(), int(id.size()), SQLITE_TRANSIENT);
  if (sqlite3_step(st.s) != SQLITE_DONE) return Error("exec for " + id);
  return Status::Ok();
}

Status Store::ThinSamples(const std::string& id, std::optional<uint32_t> node) {
  std::lock_guard<std::mutex> l(mu_);
  Stmt st;
  if (sqlite3_prepare_v2(db_,
                         "DELETE FROM samples WHERE rowid IN (SELECT rowid FROM (SELECT rowid, "
                         "ROW_NUMBER() OVER (ORDER BY rowid) AS n FROM samples WHERE id=?1 AND "
                         "node IS ?2) WHERE n % 2 = 0)",
                         -1, &st.s, nullptr) != SQLITE_OK) {
    return Error("prepare thin");
  }
  sqlite3_bind_text(st.s, 1, id.data(), int(id.size()), SQLITE_TRANSIENT);
  BindNode(st.s, 2, node);
  if (sqlite3_step(st.s) != SQLITE_DONE) return Error("thin " + id);
  return Status::Ok();
}

Status Store::PruneSamples(int keep_experiments) {
  std::lock_guard<std::mutex> l(mu_);
  return ExecWithId(
      // Of the experiments that have samples: a sweep's queued points, newer but without any,
      // must not push out every earlier run's.
      "DELETE FROM samples WHERE id NOT IN (SELECT id FROM experiments WHERE id IN (SELECT "
      "DISTINCT id FROM samples) ORDER BY submitted DESC, rowid DESC LIMIT CAST(?1 AS INTEGER))",
      std::to_string(keep_experiments));
}

StatusOr<std::vector<v1::Sample>> Store::Samples(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  return ReadAll<v1::Sample>(db_, "SELECT body FROM samples WHERE id=? ORDER BY rowid", &id);
}

Status Store::PutSweep(const v1::Sweep& sw) {
  std::lock_guard<std::mutex> l(mu_);
  return PutSweepLocked(sw);
}

// All or nothing: a sweep whose submission failed half-way left 807 queued records pointing at
// a sweep that did not exist, which nothing ran, cancelled or deleted.
Status Store::PutBatch(const std::vector<v1::Experiment>& es, const v1::Sweep* sweep) {
  std::lock_guard<std::mutex> l(mu_);
  RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE"));
  Status st = Status::Ok();
  for (size_t i = 0; i < es.size() && st.ok(); ++i) st = PutLocked(es[i], "INSERT");
  if (st.ok() && sweep != nullptr) st = PutSweepLocked(*sweep, "INSERT");
  if (st.ok()) st = Exec("COMMIT");
  if (!st.ok()) (void)Exec("ROLLBACK");
  return st;
}

Status Store::PutSweepLocked(const v1::Sweep& sw, const char* verb) {
  Stmt st;
  const std::string sql = std::string(verb) + " INTO sweeps VALUES (?,?,?)";
  if (sqlite3_prepare_v2(db_, sql.c_str(), -1, &st.s, nullptr) != SQLITE_OK)
    return Error("prepare put sweep");
  std::string body = sw.SerializeAsString();
  sqlite3_bind_text(st.s, 1, sw.id().data(), int(sw.id().size()), SQLITE_TRANSIENT);
  sqlite3_bind_int64(st.s, 2, sw.submitted_unix_ms());
  sqlite3_bind_blob(st.s, 3, body.data(), static_cast<int>(body.size()), SQLITE_TRANSIENT);
  return Stepped(st.s, "put sweep " + sw.id());
}

StatusOr<v1::Sweep> Store::GetSweep(const std::string& id) {
  std::lock_guard<std::mutex> l(mu_);
  ASSIGN_OR_RETURN(auto all, ReadAll<v1::Sweep>(db_, "SELECT body FROM sweeps WHERE id=?", &id));
  if (all.empty()) return NotFound("no sweep with id '" + id + "'");
  return all[0];
}

StatusOr<std::vector<v1::Sweep>> Store::ListSweeps() {
  std::lock_guard<std::mutex> l(mu_);
  return ReadAll<v1::Sweep>(db_, "SELECT body FROM sweeps ORDER BY submitted, rowid", nullptr);
}

}  // namespace shoal
