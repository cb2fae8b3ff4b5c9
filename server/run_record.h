// A run's whole record in one message (v1::RunRecord), for a sweep's point that runs on another
// node (a Slurm array task, issue 56): `shoald --run-point ORDER --record-out FILE` runs the
// point on a throwaway daemon and writes it; the daemon that placed the point stores it as its own.
#pragma once

#include <atomic>
#include <functional>
#include <string>
#include <vector>

#include "server/experiment_service.h"
#include "server/store.h"
#include "shared/status.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal {

// Reads a PointOrder (JSON); INVALID_ARGUMENT naming what is wrong with it.
StatusOr<v1::PointOrder> ReadPointOrder(const std::string& path);

// Whether `path` and its folder belong to this process's user and no one else may write either:
// an order found so was written by the daemon that placed it (its kind command then runs).
bool WrittenOnlyByMe(const std::string& path);

// Submits the order's spec to `service`, waits for the run to end and its log to be complete,
// and gathers its record, named as the order names it (its sweep, point and id). Once `stop` is
// set the run is cancelled (and its record still gathered).
StatusOr<v1::RunRecord> RunPoint(ExperimentService* service, Store* store,
                                 const v1::PointOrder& order, const std::atomic<bool>* stop);

// What a task sends back is authenticated: the placing daemon draws a key per sweep (kept in its
// own state, never on the shared file system the records cross, where a client machine's word for
// who writes is all there is) and hands it to the array through Slurm's job environment; each
// task seals its record under it (a SealedRecord: HMAC-SHA256), and the daemon stores only records
// that check. The key names one sweep: a task cannot write another sweep's records.
inline constexpr const char* kRecordKeyEnv = "SHOAL_RECORD_KEY";
std::string NewRecordKey();  // 32 bytes from OpenSSL's generator
std::string KeyToHex(const std::string& key);
// The key from its hex; INVALID_ARGUMENT when it is not 64 hex digits.
StatusOr<std::string> KeyFromHex(const std::string& hex);

// Writes `r` to `path` whole or not at all (a temporary file renamed into place), sealed under
// `key` when one is given.
Status WriteRunRecord(const v1::RunRecord& r, const std::string& path, const std::string& key = "");
// NOT_FOUND when there is no file; UNAVAILABLE when it cannot be read now; INVALID_ARGUMENT when
// it is not a record or, with a key, not one sealed under it.
StatusOr<v1::RunRecord> ReadRunRecord(const std::string& path, const std::string& key = "");

// A run-point's run's profiler traces (kind command, SHOAL_PROFILE_DIR) copied out of its
// throwaway state into `out` (a folder the placing daemon reads: the sweep's), the record's
// profile_dir set to it. A trace that cannot be copied is dropped from the list, saying why in
// the log; the record is written either way.
void ShipProfileTraces(v1::RunRecord* r, const std::string& out);

// The records of one run's parts on several nodes (records[k]: node k's, or why there is none)
// as one record: the first node's experiment with every node's processes and samples (each with
// its node), their events and logs, each node's own state and figures in `parts`, samples/s,
// samples and steps summed over the nodes; FAILED, naming the node, when a part failed or wrote no
// record. NOT_FOUND when no node wrote one; UNAVAILABLE (read again later) or INVALID_ARGUMENT as a
// part's.
StatusOr<v1::RunRecord> MergeNodeRecords(const std::vector<StatusOr<v1::RunRecord>>& records);

// Stores a record a node handed back for `order`: its samples, events and log (under logs_dir),
// then its experiment through `put` (store->Put when none: a daemon that adopted the record puts
// it through its queue, whose listeners learn of the end). INVALID_ARGUMENT, storing nothing, when
// the record is not of an ended run or names another sweep, point or id than the order (a task's
// record claiming another's place).
using PutRecord = std::function<Status(const v1::Experiment&)>;
Status StoreRunRecord(Store* store, const std::string& logs_dir, const v1::PointOrder& order,
                      const v1::RunRecord& r, const PutRecord& put = nullptr);

}  // namespace shoal
