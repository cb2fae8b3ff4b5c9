#include "worker/model_file.h"

#include <malloc.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>

#include "shared/os/process.h"
#include "shared/os/procfs.h"
#include "shared/spec/admission.h"
#include "shared/spec/input_spec.h"
#include "worker/optimizers/in_backward.h"
#include "worker/tensor_file.h"

namespace shoal {
namespace {

std::string Shape(c10::IntArrayRef dims) {
  std::string out = "[";
  for (size_t i = 0; i < dims.size(); ++i) out += (i ? "," : "") + std::to_string(dims[i]);
  return out + "]";
}
std::string Shape(const torch::Tensor& t) { return Shape(t.sizes()); }

// Forward and backward passes that train nothing (the leader's probe, a worker's warm-up): the
// buffers (BatchNorm's statistics) are put back and the gradients dropped when it ends.
// The buffers run on private copies meanwhile: bound to the shared segment, another worker's
// steps or warm-up may be writing them, and putting back a copy taken here would undo those.
class LeavesNoTrace {
 public:
  explicit LeavesNoTrace(Model& model)
      : model_(model),
        params_(model.parameters()),
        // Each gradient dropped as soon as it is accumulated: nothing reads it, and a whole
        // model's gradients held at once made the warm-up the run's peak once a worker's steps
        // hold none (optimizer_in_backward).
        drop_(params_, [this](size_t i) { params_[i].mutable_grad().reset(); }) {
    torch::NoGradGuard no_grad;
    for (auto& b : model_.buffers()) {
      saved_.push_back(b.data());
      b.set_data(b.data().clone());
    }
  }
  ~LeavesNoTrace() {
    torch::NoGradGuard no_grad;
    for (auto& p : model_.parameters()) p.mutable_grad().reset();
    auto buffers = model_.buffers();
    for (size_t i = 0; i < buffers.size(); ++i) buffers[i].set_data(saved_[i]);
  }
  LeavesNoTrace(const LeavesNoTrace&) = delete;
  LeavesNoTrace& operator=(const LeavesNoTrace&) = delete;

 private:
  Model& model_;
  std::vector<torch::Tensor> params_;
  GradientHooks drop_;
  std::vector<torch::Tensor> saved_;
};

std::string MiB(uint64_t b) { return std::to_string(b >> 20) + " MiB"; }

// What the target of one sample must be, from the output forward gave for a batch of `batch`.
StatusOr<TargetSpec> TargetFor(const v1::ExperimentSpec& spec, const torch::Tensor& out,
                               int64_t batch) {
  TargetSpec t;
  if (spec.loss() == "output") {
    t.classes = spec.classes();
    return t;
  }
  if (out.dim() < 1 || out.size(0) != batch)
    return InvalidArgument("model_file: forward returned " + Shape(out) + " for a batch of " +
                           std::to_string(batch) +
                           "; the batch must be the output's first dimension");
  if (spec.loss() == "mse") {
    t.dtype = out.scalar_type();
    t.dims.assign(out.sizes().begin() + 1, out.sizes().end());
    return t;
  }
  // [B, classes]: one class a sample; [B, ..., classes] (a language model's [B, T, vocab]): one
  // class a position, the targets [B, ...].
  if (out.dim() < 2 || out.size(-1) != int64_t(spec.classes()))
    return InvalidArgument(
        "model_file: loss cross_entropy wants forward to return [B, classes] = [" +
        std::to_string(batch) + "," + std::to_string(spec.classes()) +
        "], or [B, ..., classes] for a class per position (a language model's [B, T, vocab]); "
        "it returned " +
        Shape(out));
  t.classes = spec.classes();
  t.dims.assign(out.sizes().begin() + 1, out.sizes().end() - 1);
  return t;
}

torch::Tensor ProbeTargets(const TargetSpec& t, int64_t batch) {
  std::vector<int64_t> shape = {batch};
  shape.insert(shape.end(), t.dims.begin(), t.dims.end());
  if (t.classes > 0) return torch::randint(0, t.classes, shape, torch::kLong);
  return torch::randn(shape).to(t.dtype);
}

// The measured step: forward and backward, resident memory read after each.
StatusOr<uint64_t> MeasuredStep(ScriptedModel& model, const std::vector<torch::Tensor>& x,
                                const torch::Tensor& y) {
  const uint64_t rss0 = SelfStatusBytes("VmRSS");
  torch::Tensor loss = model.Loss(x, y);
  const uint64_t rss1 = SelfStatusBytes("VmRSS");
  // Every activation saved for backward: the probe's peak. The leader's 5 ms watch
  // (ImageKind::Prepare) read a 320 MiB leader every 11 ms (up to 19) on a busy 2-core machine,
  // and peaks of 10 ms fall between its reads: the probe's and the synthetic set's
  // (FillSyntheticTensors) are read where they are too. efficientnet_b0 at 64x64 read 292-311
  // MiB of a 318-323 MiB peak in 3 figure-test runs of about 12 with the watch alone, 2026-11-30.
  NoteOwnPss();
  if (loss.numel() != 1 || !loss.is_floating_point())
    return InvalidArgument("model_file: the loss is " + Shape(loss) + " " +
                           std::string(c10::toString(loss.scalar_type())) +
                           ", not one floating-point number (loss output: forward must return it)");
  if (!std::isfinite(loss.item<double>()))
    return InvalidArgument("model_file: one step on random inputs gave a loss of " +
                           std::to_string(loss.item<double>()) +
                           "; a model whose loss is not finite at the start cannot train");
  loss.backward();
  const uint64_t rss2 = SelfStatusBytes("VmRSS");
  return std::max(rss1, rss2) > rss0 ? std::max(rss1, rss2) - rss0 : 0;
}

// What a --dataset tensor file holds: {"inputs": Tensor or [Tensor, ...], "targets": Tensor}.
struct TensorFile {
  std::vector<torch::Tensor> inputs;
  torch::Tensor targets;
};

const char* const kTensorFileHelp =
    " (want torch.save({'inputs': x, 'targets': y}) of CPU tensors, batch first; several inputs "
    "as a list; a state_dict is an OrderedDict, which LibTorch cannot read: save dict(...) of it)";

StatusOr<torch::IValue> Unpickled(const std::string& path) {
  auto v = MapTensorFile(path);  // the tensors view the mapped file: no copy is read
  if (!v.ok() && v.status().code() == Code::kFailedPrecondition)
    return FailedPrecondition(v.status().message() + kTensorFileHelp);
  return v;
}

StatusOr<TensorFile> ReadTensorFile(const std::string& path) {
  ASSIGN_OR_RETURN(torch::IValue v, Unpickled(path));
  if (!v.isGenericDict())
    return FailedPrecondition("dataset: it holds " + v.tagKind() + ", not a dict" +
                              kTensorFileHelp);
  TensorFile f;
  for (const auto& kv : v.toGenericDict()) {
    const std::string key = kv.key().isString() ? kv.key().toStringRef() : "";
    const torch::IValue& value = kv.value();
    if (key == "targets" && value.isTensor()) f.targets = value.toTensor();
    if (key == "inputs" && value.isTensor()) f.inputs = {value.toTensor()};
    if (key == "inputs" && (value.isList() || value.isTuple())) {
      for (const auto& x : value.isList() ? value.toListRef() : value.toTupleRef().elements()) {
        if (!x.isTensor())
          return FailedPrecondition("dataset: an input is not a tensor" +
                                    std::string(kTensorFileHelp));
        f.inputs.push_back(x.toTensor());
      }
    }
  }
  if (f.inputs.empty() || !f.targets.defined())
    return FailedPrecondition("dataset: no 'inputs' and 'targets' tensors" +
                              std::string(kTensorFileHelp));
  return f;
}

// The file against the spec: each input's dtype and sample shape, as many samples in each, at
// least a batch, and targets the loss can take.
Status CheckTensorFile(const TensorFile& f, const std::vector<InputSpec>& inputs,
                       const TargetSpec& t, int64_t batch) {
  if (f.inputs.size() != inputs.size())
    return InvalidArgument("dataset: " + std::to_string(f.inputs.size()) + " inputs, input names " +
                           std::to_string(inputs.size()));
  const int64_t n = f.targets.dim() > 0 ? f.targets.size(0) : 0;
  if (n < batch)
    return InvalidArgument("dataset: " + std::to_string(n) + " samples, fewer than a batch of " +
                           std::to_string(batch));
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<int64_t> want = {n};
    for (int64_t d : inputs[i].SampleDims()) want.push_back(d);
    if (f.inputs[i].sizes().vec() != want || f.inputs[i].scalar_type() != DtypeOf(inputs[i]))
      return InvalidArgument("dataset: input " + std::to_string(i) + " is " + Shape(f.inputs[i]) +
                             " " + std::string(c10::toString(f.inputs[i].scalar_type())) + "; " +
                             InputText(inputs[i]) + " with " + std::to_string(n) +
                             " samples wants " + Shape(want) + ", batch first");
    if (inputs[i].high > 0 && (f.inputs[i].min().item<int64_t>() < 0 ||
                               f.inputs[i].max().item<int64_t>() >= inputs[i].high))
      return InvalidArgument("dataset: input " + std::to_string(i) + " has values outside [0, " +
                             std::to_string(inputs[i].high) + ")");
  }
  std::vector<int64_t> want = {n};
  want.insert(want.end(), t.dims.begin(), t.dims.end());
  if (f.targets.sizes().vec() != want)
    return InvalidArgument("dataset: targets are " + Shape(f.targets) + ", the loss wants " +
                           Shape(want));
  if (t.classes > 0 &&
      (f.targets.scalar_type() != torch::kLong || f.targets.min().item<int64_t>() < 0 ||
       f.targets.max().item<int64_t>() >= t.classes))
    return InvalidArgument("dataset: targets must be int64 class indices in [0, " +
                           std::to_string(t.classes) + ")");
  return Status::Ok();
}

}  // namespace

Status DatasetFits(uint64_t file_bytes, uint64_t available_bytes) {
  if (file_bytes <= available_bytes) return Status::Ok();
  return ResourceExhausted("dataset: the file is " + MiB(file_bytes) +
                           " and its shared segment holds a copy of it; the node has " +
                           MiB(available_bytes) + " available: refused before reading it");
}

StatusOr<std::shared_ptr<ScriptedModel>> LoadModelFile(const v1::ExperimentSpec& spec,
                                                       const FailNow& fail_now) {
  ASSIGN_OR_RETURN(std::string path, BlobPath("model_file", spec.model_file()));
  std::optional<StageBound> bound;
  if (fail_now) {
    std::error_code ec;
    const uint64_t size = std::filesystem::file_size(path, ec);
    const uint64_t bytes = ec ? 0 : size;  // gone since BlobPath looked: the load will say so
    bound.emplace("load", StageBound::LoadTime(bytes),
                  DataBytesNow() + StageBound::LoadMemory(bytes), fail_now);
  }
  auto loaded = ScriptedModel::Load(path, spec.loss());
  if (!loaded.ok() && bound)
    return Status(loaded.status().code(), bound->Explain(loaded.status().message()));
  ASSIGN_OR_RETURN(std::shared_ptr<ScriptedModel> model, std::move(loaded));
  const std::string why = model->Untrainable();
  if (!why.empty()) return FailedPrecondition("model_file: cannot train this module: " + why);
  // The same in the leader and every worker, before any weight is laid out or bound: the weight
  // segment records each tensor's order, and a worker's must match it.
  if (spec.memory_format() == "channels_last") model->UseChannelsLast();
  if (spec.autocast() == "bfloat16") model->UseAutocast(torch::kBFloat16);
  return model;
}

static StatusOr<ModelFileProbe> Probe(ScriptedModel& model, const v1::ExperimentSpec& spec);

StatusOr<ModelFileProbe> ProbeModelFile(ScriptedModel& model, const v1::ExperimentSpec& spec,
                                        const FailNow& fail_now) {
  ASSIGN_OR_RETURN(NodeCapacity node, ReadNodeCapacity());
  StageBound bound("probe", StageBound::ProbeTime(spec.step_timeout_ms()),
                   DataBytesNow() + node.memory_available_bytes, fail_now);
  auto probe = Probe(model, spec);
  // The step's activations and gradients are freed, but glibc keeps freed heap pages (its mmap
  // threshold rises to 32 MiB after the first large free) for the whole run: give them back, so
  // the leader costs what it holds, not what its probe once needed.
  malloc_trim(0);
  if (probe.ok()) return probe;
  return Status(probe.status().code(), bound.Explain(probe.status().message()));
}

static StatusOr<ModelFileProbe> Probe(ScriptedModel& model, const v1::ExperimentSpec& spec) {
  ASSIGN_OR_RETURN(std::vector<InputSpec> inputs, ParseInputs(spec.input()));
  const int64_t batch = spec.batch_size();
  ModelFileProbe p;
  for (const auto& t : model.parameters()) p.param_bytes += uint64_t(t.nbytes());
  LeavesNoTrace untrained(model);
  model.train();
  const std::vector<torch::Tensor> x = RandomInputs(inputs, batch, spec.seed());
  // Two passes, timed together: TorchScript's profiling executor profiles the first and optimises
  // the graph in the second, which is what a worker's warm-up repeats (an optimisation that may
  // take far longer than a step).
  const uint64_t t0 = MonotonicNs();
  torch::Tensor out;
  if (spec.loss() != "output") {
    torch::NoGradGuard no_grad;
    ASSIGN_OR_RETURN(out, model.TryForward(x));
  }
  ASSIGN_OR_RETURN(p.target, TargetFor(spec, out, batch));
  const torch::Tensor y = ProbeTargets(p.target, batch);
  try {
    if (spec.loss() == "output" || spec.device() == "cuda") {  // forward needs the targets
      torch::NoGradGuard no_grad;
      model.Loss(x, y);
    }
    // A CUDA run's leader stays off CUDA, and LibTorch's first backward initialises it (see
    // BackwardTouchesCuda): a forked worker could not use it, and the leader would hold the
    // driver for the run. Its workers' steps are on the device, where no host probe tells their
    // memory: the step is unmeasured (absent), and admission counts a CUDA worker's host memory.
    if (spec.device() != "cuda") {
      ASSIGN_OR_RETURN(p.step_bytes, MeasuredStep(model, x, y));
    }
  } catch (const std::exception& e) {
    return InvalidArgument("model_file: one training step failed: " + TorchMessage(e));
  }
  p.step_ns = MonotonicNs() - t0;
  return p;
}

static StatusOr<ShmSegment> LoadTensorFile(const v1::ExperimentSpec& spec,
                                           const std::vector<InputSpec>& inputs,
                                           const TargetSpec& target, const std::string& name) {
  ASSIGN_OR_RETURN(std::string path, BlobPath("dataset", spec.dataset()));
  std::error_code ec;
  const uint64_t bytes = std::filesystem::file_size(path, ec);
  ASSIGN_OR_RETURN(NodeCapacity node, ReadNodeCapacity());
  RETURN_IF_ERROR(DatasetFits(ec ? 0 : bytes, node.memory_available_bytes));
  ASSIGN_OR_RETURN(TensorFile f, ReadTensorFile(path));
  RETURN_IF_ERROR(CheckTensorFile(f, inputs, target, spec.batch_size()));
  const int64_t n = f.targets.size(0);
  ASSIGN_OR_RETURN(TensorSetHeader h, PlanTensorSet(inputs, target, n));
  ASSIGN_OR_RETURN(ShmSegment seg, ShmSegment::Create(name, h.total_bytes));
  std::memcpy(seg.data(), &h, sizeof h);
  CopyTensors(h, f.inputs, f.targets.to(target.dtype), seg.data(), ReleaseFilePages);
  NoteOwnPss();  // the file's pages read and the segment both resident: the leader's peak
  return seg;
}

StatusOr<ShmSegment> MakeModelFileData(const v1::ExperimentSpec& spec, const TargetSpec& target,
                                       const std::string& name) {
  ASSIGN_OR_RETURN(std::vector<InputSpec> inputs, ParseInputs(spec.input()));
  if (spec.dataset() != "synthetic") return LoadTensorFile(spec, inputs, target, name);
  ASSIGN_OR_RETURN(TensorSetHeader one, PlanTensorSet(inputs, target, 1));
  uint64_t sample = 0;
  for (uint32_t i = 0; i < one.count; ++i) sample += one.entries[i].sample_bytes;
  const int64_t n = SyntheticSamples(int64_t(sample), spec.batch_size());
  ASSIGN_OR_RETURN(TensorSetHeader h, PlanTensorSet(inputs, target, n));
  ASSIGN_OR_RETURN(ShmSegment seg, ShmSegment::Create(name, h.total_bytes));
  std::memcpy(seg.data(), &h, sizeof h);
  FillSyntheticTensors(h, inputs, target, spec.seed(), seg.data());
  return seg;
}

void WarmUpModelFile(Model& model, const TensorSetHeader& set, int64_t batch, WorkerSlot* slot,
                     const torch::Device& device) {
  // The profiling executor profiles the first run and optimises from the second
  // (torch._C._jit_set_num_profiled_runs, 1 by default); a third runs the optimised graph once.
  constexpr int kRuns = kWarmUpRuns;
  std::vector<int64_t> idx(static_cast<size_t>(batch));
  for (int64_t i = 0; i < batch; ++i) idx[i] = i;
  std::vector<torch::Tensor> x;
  torch::Tensor y;
  GatherBatch(set, &set, idx.data(), batch, &x, &y);
  for (auto& t : x) t = t.to(device);
  y = y.to(device);
  // The passes' activations and gradients rise and fall within a fraction of a second, above
  // anything the steps hold: the leader reports them finely, as a traced step (supervisor.h).
  // Sampled at its usual ticks, a bench_cnn worker's 305 MiB there read 224-242.
  slot->tracing_step.store(1);
  {
    LeavesNoTrace untrained(model);
    for (int run = 0; run < kRuns; ++run) {
      model.Loss(x, y).backward();
      slot->heartbeat_ns.store(MonotonicNs(), std::memory_order_relaxed);
    }
  }
  // The warm-up's gradients and activations came from malloc (no step is marked yet) and are
  // freed, as is a worker's own loaded copy of shared weights once bound to the segment; the
  // steps' buffers come from the planned allocator. glibc would keep the freed pages for the run:
  // give them back.
  malloc_trim(0);
  slot->tracing_step.store(0);
}

StepBounds ModelFileStepBounds(const v1::ExperimentSpec& spec, uint64_t probe_step_ns,
                               uint32_t cores) {
  StepBounds b;
  if (spec.step_timeout_why().empty()) {  // a bound on one step; the warm-up takes kWarmUpRuns
    b.steps_ms = spec.step_timeout_ms();
    b.warm_up_ms = uint32_t(std::min<uint64_t>(uint64_t(kWarmUpRuns) * b.steps_ms, UINT32_MAX));
    b.why = "--step-timeout-ms as given";
    return b;
  }
  const uint64_t oversubscribed =
      std::max<uint64_t>(1, uint64_t(spec.workers()) * std::max<uint32_t>(1, spec.threads()) /
                                std::max<uint32_t>(1, cores));
  const uint64_t derived = kStepBoundFactor * oversubscribed * probe_step_ns / 1000000;
  const uint64_t ms = std::clamp<uint64_t>(derived, kStepBoundFloorMs,
                                           std::max(spec.step_timeout_ms(), kStepBoundFloorMs));
  char text[200];
  std::snprintf(text, sizeof text,
                "derived from the leader's probe: %llux its %.0f ms step x %llu (workers x threads "
                "/ cores), at least %u s; --step-timeout-ms gives another",
                static_cast<unsigned long long>(kStepBoundFactor), probe_step_ns / 1e6,
                static_cast<unsigned long long>(oversubscribed), kStepBoundFloorMs / 1000);
  b.steps_ms = b.warm_up_ms = uint32_t(ms);  // the probe's passes already hold the warm-up's
  b.why = text;
  return b;
}

uint64_t ModelFileWorkersNeed(const v1::ExperimentSpec& spec, const ModelFileProbe& probe,
                              const KindCopies& kind) {
  // Gradients and one optimiser state (momentum's; Adam's two are under-counted by one copy),
  // the weights when private, the kind's own copies.
  const uint64_t copies = (spec.share() ? 2 : 3) + kind.gradient_copies;
  // On CUDA the step, gradients and optimiser state are on the device; a worker holds LibTorch
  // with CUDA and its loaded copy of the weights (freed once moved, but the peak).
  const uint64_t per_worker =
      spec.device() == "cuda" ? kCudaWorkerBytes + probe.param_bytes
                              : kWorkerBaseBytes + probe.step_bytes + probe.param_bytes * copies;
  return per_worker * spec.workers() + probe.param_bytes;  // and the weights segment, made next
}

Status AdmitModelFileWorkers(const v1::ExperimentSpec& spec, const ModelFileProbe& probe,
                             const KindCopies& kind) {
  if (spec.force()) return Status::Ok();
  const uint64_t need = ModelFileWorkersNeed(spec, probe, kind);
  ASSIGN_OR_RETURN(NodeCapacity have, ReadNodeCapacity());
  if (need <= have.memory_available_bytes) return Status::Ok();
  return ResourceExhausted("model_file: one step of this model took " + MiB(probe.step_bytes) +
                           " in the leader (parameters " + MiB(probe.param_bytes) + "), so " +
                           std::to_string(spec.workers()) + " workers" + kind.what +
                           " and the weights segment need about " + MiB(need) +
                           " and the node has " + MiB(have.memory_available_bytes) +
                           " available (force yes starts anyway)");
}

}  // namespace shoal
