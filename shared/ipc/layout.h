// Byte layouts of the shared segments of an experiment. Processes exchange offsets, never
// pointers: each maps the segment at its own address.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "shared/gpu/cuda_ipc.h"
#include "shared/status.h"

namespace shoal {

constexpr uint64_t kWeightsMagic = 0x53484f414c575432ull;  // "SHOALWT2"
constexpr uint64_t kDataMagic = 0x53484f414c444131ull;     // "SHOALDA1"
constexpr uint64_t kBoardMagic = 0x53484f414c534231ull;    // "SHOALSB1"
constexpr uint32_t kLayoutVersion = 17;
constexpr size_t kAlign = 64;
// ---- weights: a fixed header, a table that grows with the model (entries, their dims, their
// names), then each tensor's bytes, 64-byte aligned. Nothing caps the number of tensors, their
// rank or their names: what bounds them is the segment, sized from the model by its writer.
// Parameters first, then buffers (BatchNorm's statistics, integer counters), as PyTorch's
// share_memory() shares both.
enum class WeightDtype : uint32_t {
  kFloat32 = 0,
  kFloat16 = 1,
  kBFloat16 = 2,
  kFloat64 = 3,
  kInt64 = 4,
  kInt32 = 5,
  kInt16 = 6,
  kInt8 = 7,
  kUInt8 = 8,
  kBool = 9,
};
constexpr uint32_t kWeightDtypes = 10;
size_t DtypeBytes(WeightDtype d);
const char* DtypeName(WeightDtype d);

enum class WeightRole : uint32_t { kParameter = 0, kBuffer = 1 };

struct WeightsHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t count;
  uint64_t total_bytes;
  uint64_t initial_checksum;  // SegmentChecksum of the initial parameters, set by their writer
  uint64_t table_bytes;       // header and table: where the first tensor may start
  uint64_t dims_count;        // int64 dims after the entries
  uint64_t names_bytes;       // name bytes after the dims (not NUL-terminated)
  CudaExport cuda;            // device cuda with shared weights: the leader's device buffer
};

// One tensor of the table. Offsets of tensors are from the start of the segment; name_at and
// dims_at index the table's names and dims areas.
struct TensorEntry {
  uint64_t offset;
  uint64_t numel;
  uint64_t dims_at;
  uint64_t name_at;
  uint32_t ndim;
  uint32_t dtype;  // WeightDtype
  uint32_t role;   // WeightRole
  uint32_t name_len;
  uint32_t channels_last;  // 1: a rank-4 tensor's bytes in NHWC order (memory_format)
  uint32_t reserved;
};

// What a writer lays out: a tensor's name, shape, dtype and role.
struct TensorShape {
  std::string name;
  std::vector<int64_t> shape;
  WeightDtype dtype = WeightDtype::kFloat32;
  WeightRole role = WeightRole::kParameter;
  bool channels_last = false;  // rank 4 only: the bytes in NHWC order, as the tensor's strides say
};

// A tensor of a planned or read segment: its shape and where its bytes are.
struct WeightTensor {
  TensorShape t;
  uint64_t offset = 0;
  uint64_t numel = 0;
  uint64_t bytes() const { return numel * DtypeBytes(t.dtype); }
};

// A segment's layout in this process's memory (a mapped segment's table is read into one): the
// writer plans it, writes it with WriteWeightsTable, and every reader reads it with ReadWeights,
// which checks every bound against the segment's size.
struct WeightsPlan {
  std::vector<WeightTensor> tensors;
  uint64_t table_bytes = 0;  // header and table, aligned
  uint64_t total_bytes = 0;
  uint64_t initial_checksum = 0;
  size_t parameters() const;  // the leading tensors that are parameters
};

// Lays out these tensors; INVALID_ARGUMENT for a negative dimension or a size past 2^62 bytes.
StatusOr<WeightsPlan> PlanWeights(const std::vector<TensorShape>& tensors);
// Writes the header (magic, version, sizes, a zero CUDA export) and the table at `base`, which
// holds at least plan.total_bytes.
void WriteWeightsTable(const WeightsPlan& plan, void* base);
// The layout of a mapped segment, every offset checked against `segment_bytes` (DATA_LOSS).
StatusOr<WeightsPlan> ReadWeights(const void* base, size_t segment_bytes);

inline uint64_t AlignUp(uint64_t v) { return (v + kAlign - 1) / kAlign * kAlign; }

// ---- data set: uint8 pixels (channels x rows x cols per image) and labels, normalised per batch
// by the workers.
struct DataHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t rows, cols;
  uint32_t channels;  // 1 (MNIST), 3 (CIFAR-shaped)
  uint64_t n_train, n_test;
  uint64_t train_images, train_labels, test_images, test_labels;  // offsets
  uint64_t total_bytes;
};
DataHeader PlanData(uint64_t n_train, uint64_t n_test, uint32_t rows, uint32_t cols,
                    uint32_t channels = 1);
inline uint64_t ImageBytes(const DataHeader& h) { return uint64_t(h.channels) * h.rows * h.cols; }
Status ValidateData(const DataHeader& h, size_t segment_bytes);

// ---- scoreboard: one cache-line-separated slot per worker, lock-free (a crash holds no lock).
// Each slot is written by its worker only; the leader reads it.
// kEvaluating: trained and fingerprinted, evaluating its final weights (not training: GPU
// utilisation "while training" leaves it out; the step timeout still watches it).
enum class WorkerPhase : uint32_t {
  kStarting = 0,
  kTraining = 1,
  kFinished = 2,
  kFailed = 3,
  kEvaluating = 4
};

constexpr size_t kMaxEpochRecords = 64;  // epochs past this are trained but not itemised
constexpr size_t kCurvePoints = 128;     // loss curve points per worker
constexpr size_t kKindAreaBytes = 1024;  // a slot's area for its kind's own figures

struct EpochRecord {
  std::atomic<uint64_t> wall_ns;  // the epoch's steps, evaluation excluded
  std::atomic<uint64_t> data_ns;
  std::atomic<uint64_t> steps;
  std::atomic<uint64_t> samples;
  std::atomic<uint64_t> loss_sum_bits;  // double
  std::atomic<uint32_t> accuracy_bits;  // float, worker 0; NaN when not evaluated
};

struct CurveRecord {
  std::atomic<uint64_t> step;
  std::atomic<uint64_t> t_ns;  // training time since the first step
  std::atomic<uint32_t> loss_bits;
};

// An evaluation's CLOCK_REALTIME start and end (worker 0's test-set passes).
constexpr uint32_t kMaxEvalSpans = 16;
struct EvalSpan {
  std::atomic<uint64_t> start_ns;
  std::atomic<uint64_t> end_ns;
};

// One step's phases as its worker timed them, and when it ended (CLOCK_REALTIME). A worker keeps
// its first kFirstStepSpans steps and a ring of its latest kLastStepSpans (its traced first steps
// and its steady ones), read once it has finished (the trace's step slices).
constexpr uint32_t kFirstStepSpans = 16, kLastStepSpans = 16;
struct StepSpan {
  uint64_t step;  // 1-based
  uint64_t end_ns;
  uint64_t data_ns, forward_ns, backward_ns, comm_ns, optimizer_ns, unsplit_ns;
};

struct alignas(128) WorkerSlot {
  std::atomic<int32_t> pid;
  std::atomic<uint32_t> phase;
  std::atomic<uint64_t> steps;
  std::atomic<uint64_t> samples;
  std::atomic<uint64_t> heartbeat_ns;  // CLOCK_MONOTONIC
  // CLOCK_MONOTONIC: its latest step, loader batch or evaluation batch (the step timeout's mark).
  std::atomic<uint64_t> progress_ns;
  std::atomic<uint64_t> first_step_ns;  // CLOCK_REALTIME, start of the first step
  std::atomic<uint64_t> last_step_ns;   // CLOCK_REALTIME, end of the latest step
  std::atomic<uint64_t> requested_ns;   // CLOCK_REALTIME, when the leader asked for this worker
  // CLOCK_REALTIME: up and ready to train, where that is not its first step (a multi_model
  // worker, which then waits for the variants before it); 0: at its first step.
  std::atomic<uint64_t> ready_ns;
  std::atomic<uint64_t> data_ns, forward_ns, backward_ns, optimizer_ns;
  std::atomic<uint64_t> eval_ns;  // worker 0: test-set evaluation
  // Its model's parameters, and the counting allocator's peak where one counts (0: unknown).
  std::atomic<uint64_t> parameters, alloc_peak_bytes;
  // On CUDA: LibTorch's CUDA allocator's peaks (0: unknown).
  std::atomic<uint64_t> device_alloc_peak_bytes, device_reserved_peak_bytes;
  std::atomic<uint64_t> vmhwm_bytes;
  std::atomic<uint64_t> weights_checksum;
  // Blocked on other workers inside its steps (all-reduce waits, a pipeline neighbour).
  std::atomic<uint64_t> comm_ns;
  // --allocator planned (worker/planned_allocator.h): written after every step once planned.
  std::atomic<uint32_t> plan_made;
  std::atomic<uint64_t> plan_arena_bytes, plan_peak_live_bytes, plan_replayed_steps,
      plan_fallback_steps, plan_replay_minflt;
  std::atomic<uint32_t> plan_shared_arenas;  // the arenas its steps took turns in (0: its own)
  std::atomic<uint32_t> step_gated;          // 1: it took turns at its steps
  std::atomic<uint32_t> tracing_step;        // 1 while the step its plan is made from, or a
                                             // model file's warm-up, runs: reported finely
  std::atomic<uint64_t> step_wait_ns;        // waiting for its turn, summed
  std::atomic<uint32_t> last_loss_bits;      // float
  std::atomic<uint32_t> first_loss_bits;     // mean of the first few batches
  std::atomic<uint32_t> tail_loss_bits;      // mean of the last few batches
  std::atomic<uint32_t> accuracy_bits;       // float, worker 0 only; NaN when not evaluated
  std::atomic<uint32_t> eval_images;         // the test images that accuracy is over (0: none)
  std::atomic<uint32_t> epochs_done;
  std::atomic<uint32_t> curve_points;
  EpochRecord epochs[kMaxEpochRecords];
  CurveRecord curve[kCurvePoints];
  StepSpan step_spans[kFirstStepSpans + kLastStepSpans];  // step k: k-1, or first + k % last
  // Its evaluations: how many (published after the span it counts), the first kMaxEvalSpans.
  std::atomic<uint32_t> evaluations;
  EvalSpan eval_spans[kMaxEvalSpans];
  // Why the worker failed, in its own words (a CUDA out-of-memory, a bad segment), for the
  // experiment's error: written before it exits non-zero, error_len last.
  char error[256];
  std::atomic<uint32_t> error_len;
  // What only the worker's kind records, laid out by the kind (KindArea below): zero when the
  // slot is made, written by its worker, read into WorkerReading.kind_reading by the kind.
  alignas(64) unsigned char kind_area[kKindAreaBytes];
};

// The kind's view of a slot's kind_area: T is a struct of atomics the kind declares in
// shared/kinds/<kind>/board.h, read and written by its own code only.
template <typename T>
T* KindArea(WorkerSlot* slot) {
  static_assert(sizeof(T) <= kKindAreaBytes && alignof(T) <= 64, "a kind area is 1 KiB");
  static_assert(std::is_trivially_destructible_v<T>, "a kind area holds atomics and plain data");
  return reinterpret_cast<T*>(slot->kind_area);
}
template <typename T>
const T* KindArea(const WorkerSlot& slot) {
  return KindArea<T>(const_cast<WorkerSlot*>(&slot));
}

struct BoardHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t workers;
  std::atomic<uint32_t> finished;  // workers past their last step
  std::atomic<uint32_t> at_gate;   // workers set up and waiting to take their first step
  // Who writes the initial weights segment: the leader before any worker starts (0), or worker 0
  // (1: the LibTorch-free leader builds no model), which then raises weights_published to 1.
  uint32_t weights_by_worker0;
  std::atomic<uint32_t> weights_published;
  // Turns at a training step (worker/step_gate.h): at most step_slots workers inside one at
  // once (step_slots >= workers: no turns); tickets taken and steps left, FIFO.
  uint32_t step_slots;
  std::atomic<uint32_t> step_tickets, step_leaves;
  // The shared step arenas (worker/shared_arenas.h): bit j set while arena j is free; the
  // segment's state (ArenasState).
  std::atomic<uint32_t> arenas_free;
  std::atomic<uint32_t> arenas_state;
  // A model file's bound on each worker's warm-up, set by the leader before any worker starts
  // (0: none beyond the spec's): the spec's step timeout, or one derived from its probe.
  uint32_t warm_up_bound_ms;
};

// kReleasing: every worker has finished stepping and one frees the arenas' pages; kReleased: done.
enum class ArenasState : uint32_t {
  kNone = 0,
  kMaking = 1,
  kReady = 2,
  kFailed = 3,
  kReleasing = 4,
  kReleased = 5
};

inline size_t BoardBytes(uint32_t workers) {
  return AlignUp(sizeof(BoardHeader)) + sizeof(WorkerSlot) * workers;
}
inline WorkerSlot* BoardSlot(void* base, uint32_t i) {
  return reinterpret_cast<WorkerSlot*>(static_cast<char*>(base) + AlignUp(sizeof(BoardHeader))) + i;
}

float BitsToFloat(uint32_t b);
uint32_t FloatToBits(float f);
double BitsToDouble(uint64_t b);
uint64_t DoubleToBits(double d);

// FNV-1a over bytes; how processes compare the weights they trained.
uint64_t Fnv1a(const void* data, size_t n, uint64_t h = 1469598103934665603ull);
std::string Hex64(uint64_t v);

}  // namespace shoal
