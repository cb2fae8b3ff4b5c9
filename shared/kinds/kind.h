// The daemon's half of an experiment kind: what shoald and the CLI (which never load LibTorch) must
// know of it to validate, admit, summarise and print it. The worker's half (prepare, run a
// worker) is worker/kind.h. The generic layers (spec, admission, run summary, report, `get`)
// never name a kind: they call these hooks, each optional, as Triton's server calls a backend's.
// The studies the kinds reproduce ("seed 000" to "seed 004" in comments and reports) are
// defined once, in docs/studies.md.
// Adding a kind: its folders shared/kinds/<kind>/ and worker/kinds/<kind>/, and one line in each
// registry (shared/kinds/registry.cc, worker/kinds/registry.cc).
#pragma once

#include <sys/types.h>

#include <deque>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "shared/os/process.h"
#include "shared/report/table.h"
#include "shared/spec/admission.h"
#include "shared/spec/spec.h"
#include "shared/spec/spec_fields.h"
#include "shared/status.h"
#include "shoal/ipc/v1/ipc.pb.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal {

struct WorkerSlot;  // shared/ipc/layout.h

// What a finished (or cut) run left, for the kind's part of its result.
struct KindRunFacts {
  const v1::ExperimentSpec& spec;
  // The workers' reports: the final ones, else the latest progress.
  const google::protobuf::RepeatedPtrField<ipc::v1::WorkerReading>& workers;
  const std::map<pid_t, uint64_t>& peak_pss;      // per process, as the sampler read it
  const std::map<pid_t, uint64_t>& peak_gpu;      // per process seen on a GPU (NVML)
  const ipc::v1::LeaderResult* leader = nullptr;  // the leader's result; nullptr: none came
};

// A sweep's points, for the kind's own report tables (after the common ones).
struct KindTablesInput {
  const std::vector<PointView>& points;    // every point, of every kind
  const ReportLayout& layout;              // the grid tables' columns and row fields
  const std::vector<std::string>& fields;  // every varying axis, for one-row-per-point tables
};

struct KindRules {
  std::string name;
  std::string summary;              // one line for the reference's Kinds table (shoal reference)
  std::vector<std::string> models;  // the models it can train
  // Checks beyond the common fields (the spec has its defaults); nullptr: none.
  Status (*validate)(const v1::ExperimentSpec&, const SpecLimits&) = nullptr;
  // What the experiment will put in /dev/shm and memory, for admission.
  StatusOr<ExperimentEstimate> (*estimate)(const v1::ExperimentSpec&) = nullptr;
  // The kind's own defaults, applied before the common ones, and those that depend on the
  // common ones (hogwild's turns on the allocator and threads), after; nullptr: none.
  void (*defaults)(v1::ExperimentSpec*, const SpecLimits&) = nullptr;
  void (*late_defaults)(v1::ExperimentSpec*, const SpecLimits&) = nullptr;
  // Its own fields: flat names for the CLI, sweeps and reports ("loaders"), their paths in its
  // message of ExperimentSpec.settings ("data_loading.loaders"). Another kind's are refused by
  // the schema: they live in another message.
  std::vector<SpecField> fields;
  // Each of its fields' reference text (docs/cli-reference.md's field table), longer than help.
  std::map<std::string, std::string> references;
  // The common fields (CommonSpecFields) it does not read: refused when given, never defaulted.
  std::vector<std::string> ignores;
  // What a common field means for it, where that differs ("batch_size": "per worker with scaling
  // weak, per step with strong"), appended to the field's --help line as "(<kind>: <words>)".
  std::map<std::string, std::string> help_words;
  // Its default of a common field in words, where its defaults derive it from other fields
  // ("workers": "loaders + 1"); a default that is a value is found by applying its defaults
  // (SpecFieldDefault), never written here.
  std::map<std::string, std::string> default_words;
  // The devices its worker half can train on.
  std::vector<std::string> devices = {"cpu"};
  // Whether its trainer marks each step for --allocator planned (worker/planned_allocator.h).
  bool marks_steps = false;
  // Whether its trainer can step the optimiser inside the backward pass (optimizer_in_backward,
  // on the CPU): hogwild's; data_parallel reduces the gradients after it.
  bool steps_in_backward = false;
  // With device cuda and no cuda_devices: worker i on device i mod the devices there are (a
  // pipeline's stages, as torchgpipe places partitions), rather than all on device 0.
  bool spreads_over_devices = false;
  // Its workers run a program the user named (kind command): shoald admits it only with
  // --allow-commands and from a caller trusted to run code as shoald's user.
  bool runs_user_code = false;
  // Its leader needs no LibTorch for a built-in model started by spawn or the forkserver (worker
  // 0 writes the initial weights) or at all (kind command): shoald runs shoal-leader for it.
  bool leader_without_libtorch = false;
  // Without one: why its leader is shoal-worker, for the result's leader_why ("": "<kind>
  // builds its model in the leader").
  std::string leader_why;

  // One model trained by ranks over several processes or nodes (data_parallel): how many ranks,
  // a worker's rank among them (its shard of the data, its seed), and each worker's batch;
  // nullptr: the workers, its index, batch_size.
  uint32_t (*world_size)(const v1::ExperimentSpec&) = nullptr;
  uint32_t (*global_rank)(const v1::ExperimentSpec&, uint32_t index) = nullptr;
  uint32_t (*worker_batch)(const v1::ExperimentSpec&) = nullptr;

  // Its area of a worker's scoreboard slot (shared/kinds/<kind>/board.h) into the worker's
  // report (WorkerReading.kind_reading); nullptr: it keeps none.
  void (*read_board)(const WorkerSlot&, ipc::v1::WorkerReading*) = nullptr;
  // Its part of the result (v1::Result's message of the kind), from the run's facts.
  void (*summarize)(const KindRunFacts&, v1::Result*) = nullptr;
  // Its tables in a sweep's report; called when any point is of this kind, returns none when
  // there is nothing to show.
  std::vector<Table> (*report_tables)(const KindTablesInput&) = nullptr;
  // Its note above a report's tables about its points (hogwild: where workers took turns), ""
  // for none; and whether a point's host memory does not grow with its workers (hogwild's shared
  // step arenas under turns), so the per-worker memory table leaves that worker count out.
  std::string (*report_note)(const std::vector<PointView>&) = nullptr;
  bool (*memory_shared_by_workers)(const v1::ExperimentSpec&) = nullptr;
  // `shoal get`: its spec line(s), instead of the common ones; its lines after the common
  // figures; its block after the epochs; the name of a worker's role ("trainer"); its column of
  // the epochs table (header, then the epoch's cell; "" when it has none for that epoch).
  std::string (*spec_lines)(const v1::ExperimentSpec&) = nullptr;
  // Its lines after the common spec lines (hogwild's turns at the steps); nullptr: none.
  std::string (*setting_lines)(const v1::ExperimentSpec&) = nullptr;
  std::string (*result_lines)(const v1::Result&) = nullptr;
  std::string (*detail_lines)(const v1::Result&) = nullptr;
  std::string (*role_name)(const v1::ProcessInfo&) = nullptr;
  std::string epoch_column_header;
  std::string (*epoch_cell)(const v1::Result&, uint32_t epoch) = nullptr;
};

// For a kind that reads few of the common fields (command, baseline): every common field but
// `reads`, its KindRules::ignores.
std::vector<std::string> CommonFieldsBut(const std::set<std::string>& reads);

// The spec's kind's world_size, global_rank and worker_batch, or what they are without one
// (the workers, the index, batch_size): what the generic trainer and epoch arithmetic use.
uint32_t Ranks(const v1::ExperimentSpec& spec);
uint32_t RankOf(const v1::ExperimentSpec& spec, uint32_t index);
uint32_t BatchOf(const v1::ExperimentSpec& spec);

// A table made from the registry by Make (the spec fields, their reference texts), made again when
// a kind registers after it was first read (a test's kind). Older tables are kept, never freed,
// so a pointer into one stays valid; kinds register before any thread reads.
template <typename T, T (*Make)()>
const T& MadeFromRegistry();

// Every registered kind, in registration order.
const std::deque<KindRules>& AllKinds();
// Adds a kind after the registry's (a test's toy kind), before any thread reads the registry;
// false when the name is taken.
bool RegisterKind(KindRules kind);
const KindRules* FindKind(const std::string& name);
std::vector<std::string> KindNames();

template <typename T, T (*Make)()>
const T& MadeFromRegistry() {
  static const T* made = nullptr;
  static size_t kinds = 0;
  if (made == nullptr || kinds != AllKinds().size()) {
    kinds = AllKinds().size();
    made = new T(Make());
  }
  return *made;
}

}  // namespace shoal
