// Defaults and validation of an experiment spec. Defaults live here and nowhere else: the CLI
// sends only what the user gave, shoald fills the rest with ApplyDefaults, and docs/cli.md's field
// table quotes this file. A spec that passes ValidateSpec() can be started; anything else is
// refused before a process exists.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shared/spec/spec_fields.h"
#include "shared/status.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal {

struct SpecLimits {
  uint32_t cores = 1;  // threads default to floor(cores / workers), at least 1
  uint32_t max_workers = 64;
  uint32_t max_batches = 1000000;
  uint32_t max_epochs = 1000;
  uint32_t max_batch_size = 4096;
  uint32_t min_sample_interval_ms = 20;
  uint32_t max_sample_interval_ms = 60000;
  uint32_t max_threads = 256;
  uint32_t max_eval_samples = 10000;
  uint32_t min_stall_timeout_ms = 500;
  uint32_t max_stall_timeout_ms = 3600000;
  uint32_t max_step_timeout_ms = 86400000;  // a day: AmoebaNet at full size steps in minutes
  std::vector<std::string> data_roots;  // datasets must lie below one of these (empty: anywhere)
  // Why device cuda cannot run on this node ("" when it can): a cuda spec is then refused with
  // FAILED_PRECONDITION, and a cuda sweep point carries it as its note.
  std::string cuda_missing = "no GPU: this daemon has not probed for one";
  // The CUDA devices the worker's LibTorch sees (0: none, or not known): cuda_devices' range, and
  // what a pipeline's stages spread over by default.
  uint32_t cuda_devices = 0;
  // Why this node's CPU cannot run bfloat16 autocast at speed ("" when it has avx512_bf16 or
  // amx_bf16): autocast bfloat16 is then refused with FAILED_PRECONDITION.
  std::string bf16_missing = "this daemon has not read its CPU's flags";
  // The spec is a point placed on Slurm (shoal sweep --slurm): a run over nodes > 1 meets where
  // the allocation's first node is (master kSlurmMaster), known only when it starts.
  bool placed_on_slurm = false;
};

// A forked child cannot use a CUDA context its parent created: with shared weights the parent
// must create one before forking, so this combination is refused (INVALID_ARGUMENT).
bool ForkCudaShare(const v1::ExperimentSpec& s);
extern const char* const kForkCudaShareWhy;

// The fields only a CUDA spec may hold (cuda_devices, cuda_sync): foreign to a kind that cannot
// train on CUDA, and cleared from a point checked as the CPU point it would be.
const std::vector<std::string>& CudaOnlyFields();
// Whether the workers time each phase of a step apart (data, forward, backward, update): all but
// cuda_sync step, whose steps are timed whole (events and phases both split them).
bool TimesEachPhase(const v1::ExperimentSpec& s);

constexpr uint32_t kDefaultBatches = 20;
// 30 minutes: far past any step measured here (seed 004's stages step in seconds on 2 cores; its
// full-size stage ran 150 s without finishing one before memory ran out), so only a step that
// will not end reaches it. Larger work raises it.
constexpr uint32_t kDefaultStepTimeoutMs = 1800000;

// OK when `value` is one of `allowed`; else INVALID_ARGUMENT "<field>: '<value>' is not one of:
// a, b, c".
Status OneOf(const std::string& field, const std::string& value,
             const std::vector<std::string>& allowed);

// "a,,b" -> "a", "", "b": every piece, empty ones too (each list's parser says what it refuses).
std::vector<std::string> SplitCommas(const std::string& text);

// "3,1,2" as numbers of at most `max_digits` digits each; INVALID_ARGUMENT "<field>: '<text>' is
// not a comma-separated list of <what>" when it is anything else (an empty part included).
StatusOr<std::vector<uint32_t>> ParseCommaList(const std::string& field, const std::string& text,
                                               const std::string& what, size_t max_digits = 6);

// The CUDA ordinal worker (pipeline: stage) `index` trains on: the (index mod n)-th of the spec's
// cuda_devices, 0 when it has none. The spec is a validated one.
uint32_t CudaOrdinal(const v1::ExperimentSpec& spec, uint32_t index);
constexpr uint32_t kMaxCudaOrdinal = 63;

// "sha256:" and 64 lowercase hex digits: how an uploaded file (model_file) is named.
bool IsSha256Ref(const std::string& ref);
// A shell-style environment variable name: letters, digits and '_', not starting with a digit.
bool IsEnvironmentName(const std::string& name);

// Clears what only shoald sets (allocator_why, concurrent_steps_why, step_timeout_why): a spec a
// client sends (one copied from a record, say) says what the user gave, never why a default was
// chosen; a step_timeout_ms it carries is a given one.
void ClearDaemonSetFields(v1::ExperimentSpec* spec);
// Fills every absent field with its default; never touches a present one. Idempotent.
void ApplyDefaults(v1::ExperimentSpec* spec, const SpecLimits& limits);
// A field's default in words for --help and the reference: a common field's own words
// (SpecField::fallback, hogwild's) then each kind whose default differs, as its defaults compute
// it or its KindRules::default_words say: "64 (data_parallel, multi_model: 32; pipeline: 8)".
std::string SpecFieldDefault(const SpecField& f);
// The allocator a spec that names none trains with, and why: `planned` where the kind's trainer
// marks its steps on the CPU (hogwild and data_parallel, a model file's included), else `cache`.
std::string DefaultAllocator(const v1::ExperimentSpec& spec, std::string* why);
// How many of a hogwild spec's workers step at once when it names no concurrent_steps, and why:
// all of them (turns are opt-in); the reason names the cores' worth where fewer would do.
uint32_t DefaultConcurrentSteps(const v1::ExperimentSpec& spec, const SpecLimits& limits,
                                std::string* why);

// Which program leads an experiment. shoal-leader loads no LibTorch: it serves the kinds whose
// leader only loads data and supervises (KindRules::leader_without_libtorch), unless the leader
// must hold a model (start fork: the workers inherit it; shared CUDA weights: it owns the device
// buffer; a model file: it loads and probes it). shoal-worker leads the rest. Where no worker
// inherits the model a model file's leader loaded (start spawn, the forkserver), it hands off:
// once the file is checked, probed and in the segments it execs shoal-leader (worker/leader.h),
// keeping none of LibTorch for the run.
struct LeaderChoice {
  bool libtorch = true;    // true: shoal-worker --role leader; false: shoal-leader
  std::string why;         // for `get`: "start spawn: worker 0 writes the initial weights"
  bool hands_off = false;  // shoal-worker, then shoal-leader (libtorch true)
};
LeaderChoice ChooseLeader(const v1::ExperimentSpec& spec);

// The leader's command line (worker/leader_options.h parses it), as shoald starts a leader and as
// a model file's shoal-worker leader execs shoal-leader when it hands off.
struct LeaderCommand {
  std::string program, experiment_id;
  int status_fd = 3;
  int parent = 0;  // shoald's pid
  std::string worker_bin, fork_server_socket;
};
std::vector<std::string> LeaderArgv(const LeaderCommand& c, const v1::ExperimentSpec& spec);

// Checks every field; the message names the field and the allowed values or range.
// Does not look at the file system (see CheckDataset).
Status ValidateSpec(const v1::ExperimentSpec& spec, const SpecLimits& limits);

// The optimiser options (field names of the table, "momentum", "rho", ...) that apply to the
// named optimiser, with their defaults as text; empty for an unknown name.
const std::vector<std::pair<std::string, std::string>>& OptimizerDefaults(const std::string& name);
const std::vector<std::string>& OptimizerNamesAllowed();

// The dataset field names an existing MNIST-format directory below one of the data roots, or is
// "synthetic", or an uploaded tensor file ("sha256:<hex>", which the daemon's store checks).
Status CheckDataset(const std::string& dataset, const std::vector<std::string>& data_roots = {});

// The spec as one line of proto3 JSON, and back: how it travels on a worker's argv.
std::string SpecToJson(const v1::ExperimentSpec& spec);
StatusOr<v1::ExperimentSpec> SpecFromJson(const std::string& json);

// What a leader checks once it knows the training set's size: images to train on, and an epoch
// (`epoch_samples`) no larger than the set and leaving every worker a batch.
Status CheckTrainingSet(const v1::ExperimentSpec& spec, uint64_t n_train);

// Steps each worker takes in all (batches, or epochs x batches per epoch for n_train images).
uint64_t StepsPerWorker(const v1::ExperimentSpec& spec, uint64_t n_train);
// Batches one worker takes in one epoch: its shard of the epoch's samples, the last batch short.
uint64_t BatchesPerEpoch(const v1::ExperimentSpec& spec, uint64_t n_train);

}  // namespace shoal
