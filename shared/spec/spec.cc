#include "shared/spec/spec.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <map>

#include "shared/idx.h"
#include "shared/kinds/kind.h"
#include "shared/spec/input_spec.h"
#include "shared/spec/spec_fields.h"

namespace shoal {
namespace {

using Defaults = std::vector<std::pair<std::string, std::string>>;

// PyTorch 1.13's defaults (torch/optim/*.py), except SGD's lr and momentum, which follow the
// Hogwild study's recipe (torch.optim.SGD has no default lr and momentum 0).
const std::map<std::string, Defaults>& OptimizerTable() {
  static const std::map<std::string, Defaults> table = {
      {"sgd", {{"lr", "0.01"}, {"momentum", "0.5"}, {"dampening", "0"}, {"weight_decay", "0"}}},
      {"nesterov",
       {{"lr", "0.01"}, {"momentum", "0.5"}, {"dampening", "0"}, {"weight_decay", "0"}}},
      {"adagrad",
       {{"lr", "0.01"},
        {"lr_decay", "0"},
        {"weight_decay", "0"},
        {"initial_accumulator_value", "0"},
        {"eps", "1e-10"}}},
      {"adadelta", {{"lr", "1"}, {"rho", "0.9"}, {"eps", "1e-06"}, {"weight_decay", "0"}}},
      {"adam",
       {{"lr", "0.001"},
        {"beta1", "0.9"},
        {"beta2", "0.999"},
        {"eps", "1e-08"},
        {"weight_decay", "0"},
        {"amsgrad", "no"}}},
      {"adamw",
       {{"lr", "0.001"},
        {"beta1", "0.9"},
        {"beta2", "0.999"},
        {"eps", "1e-08"},
        {"weight_decay", "0.01"},
        {"amsgrad", "no"}}},
      {"rmsprop",
       {{"lr", "0.01"},
        {"alpha", "0.99"},
        {"eps", "1e-08"},
        {"weight_decay", "0"},
        {"momentum", "0"},
        {"centered", "no"}}},
  };
  return table;
}

Status InRange(const std::string& field, uint64_t v, uint64_t lo, uint64_t hi) {
  if (v >= lo && v <= hi) return Status::Ok();
  return InvalidArgument(field + ": " + std::to_string(v) + " is outside the allowed range " +
                         std::to_string(lo) + ".." + std::to_string(hi));
}

// lo < v <= hi when open_lo, else lo <= v; v < hi when open_hi.
Status RealInRange(const std::string& field, double v, double lo, double hi, bool open_lo,
                   bool open_hi) {
  const bool ok = std::isfinite(v) && (open_lo ? v > lo : v >= lo) && (open_hi ? v < hi : v <= hi);
  if (ok) return Status::Ok();
  // The value as typed (shortest round trip): %g would print 1.0000001 as the bound 1.
  return InvalidArgument(field + ": " + ShortDouble(v) + " is outside the allowed range " +
                         (open_lo ? "(" : "[") + ShortDouble(lo) + ", " + ShortDouble(hi) +
                         (open_hi ? ")" : "]"));
}

void DefaultOptimizer(v1::OptimizerSpec* o, v1::ExperimentSpec* s) {
  if (!o->has_name()) o->set_name("sgd");
  if (!o->has_in_backward()) o->set_in_backward(false);
  auto it = OptimizerTable().find(o->name());
  if (it == OptimizerTable().end()) return;  // ValidateSpec names it
  for (const auto& [field, text] : it->second) {
    const SpecField* f = FindSpecField(field);
    if (!HasSpecField(*s, *f)) (void)SetSpecField(s, *f, text);
  }
}

Status ValidateOptimizer(const v1::OptimizerSpec& o) {
  RETURN_IF_ERROR(OneOf("optimizer", o.name(), OptimizerNamesAllowed()));
  // An option the user gave that this optimiser does not have is refused, not ignored.
  const Defaults& mine = OptimizerDefaults(o.name());
  v1::ExperimentSpec probe;
  *probe.mutable_optimizer() = o;
  for (const auto& f : SpecFields()) {
    if (f.path.rfind("optimizer.", 0) != 0 || f.name == "optimizer") continue;
    if (f.name == "optimizer_in_backward") continue;  // every optimiser's
    const bool applies =
        std::any_of(mine.begin(), mine.end(), [&](const auto& d) { return d.first == f.name; });
    if (HasSpecField(probe, f) && !applies) {
      return InvalidArgument(f.name + ": does not apply to optimizer " + o.name() + " (" + f.help +
                             ")");
    }
  }
  RETURN_IF_ERROR(RealInRange("lr", o.lr(), 0, 10, true, false));
  if (o.has_momentum()) RETURN_IF_ERROR(RealInRange("momentum", o.momentum(), 0, 1, false, true));
  if (o.has_dampening())
    RETURN_IF_ERROR(RealInRange("dampening", o.dampening(), 0, 1, false, false));
  RETURN_IF_ERROR(RealInRange("weight_decay", o.weight_decay(), 0, 1, false, false));
  if (o.has_eps()) RETURN_IF_ERROR(RealInRange("eps", o.eps(), 0, 1, true, false));
  if (o.has_lr_decay()) RETURN_IF_ERROR(RealInRange("lr_decay", o.lr_decay(), 0, 1, false, false));
  if (o.has_initial_accumulator_value())
    RETURN_IF_ERROR(RealInRange("initial_accumulator_value", o.initial_accumulator_value(), 0, 1000,
                                false, false));
  if (o.has_rho()) RETURN_IF_ERROR(RealInRange("rho", o.rho(), 0, 1, false, true));
  if (o.has_beta1()) RETURN_IF_ERROR(RealInRange("beta1", o.beta1(), 0, 1, false, true));
  if (o.has_beta2()) RETURN_IF_ERROR(RealInRange("beta2", o.beta2(), 0, 1, false, true));
  if (o.has_alpha()) RETURN_IF_ERROR(RealInRange("alpha", o.alpha(), 0, 1, false, true));
  if (o.name() == "nesterov" && o.momentum() <= 0) {
    return InvalidArgument("momentum: nesterov needs momentum > 0 (got " +
                           ShortDouble(o.momentum()) + ")");
  }
  if (o.name() == "nesterov" && o.dampening() != 0) {
    return InvalidArgument("dampening: nesterov needs dampening 0 (got " +
                           ShortDouble(o.dampening()) + ")");
  }
  return Status::Ok();
}

// Only a kind whose trainer can (KindRules::steps_in_backward) steps inside the backward pass.
// CUDA is not tried yet.
Status ValidateInBackward(const v1::ExperimentSpec& s, const KindRules& kind) {
  if (!s.optimizer().in_backward()) return Status::Ok();
  if (!kind.steps_in_backward) {
    std::string which;
    for (const KindRules& k : AllKinds())
      if (k.steps_in_backward) which += (which.empty() ? "" : ", ") + k.name;
    return InvalidArgument("optimizer_in_backward: only " + which +
                           " steps its optimizer in the backward pass (kind " + s.kind() +
                           " does not)");
  }
  if (s.device() != "cpu")
    return InvalidArgument("optimizer_in_backward: cpu only (not tried on " + s.device() + ")");
  return Status::Ok();
}

Status ValidateLength(const v1::ExperimentSpec& s, const SpecLimits& limits) {
  if (s.has_batches() && s.has_epochs())
    return InvalidArgument("batches, epochs: give one of them, not both");
  if (s.has_batches()) RETURN_IF_ERROR(InRange("batches", s.batches(), 1, limits.max_batches));
  if (s.has_epochs()) RETURN_IF_ERROR(InRange("epochs", s.epochs(), 1, limits.max_epochs));
  if (s.has_epoch_samples()) {
    if (!s.has_epochs()) return InvalidArgument("epoch_samples: only with epochs");
    RETURN_IF_ERROR(InRange("epoch_samples", s.epoch_samples(), 1, 100000000));
  }
  return Status::Ok();
}

void ApplyCommonDefaults(v1::ExperimentSpec* s, const SpecLimits& limits);

}  // namespace

Status OneOf(const std::string& field, const std::string& value,
             const std::vector<std::string>& allowed) {
  std::string list;
  for (const auto& a : allowed) {
    if (value == a) return Status::Ok();
    list += (list.empty() ? "" : ", ") + a;
  }
  std::string shown = value.size() > 40 ? value.substr(0, 40) + "..." : value;
  return InvalidArgument(field + ": '" + shown + "' is not one of: " + list);
}

const Defaults& OptimizerDefaults(const std::string& name) {
  static const Defaults none;
  auto it = OptimizerTable().find(name);
  return it == OptimizerTable().end() ? none : it->second;
}

const std::vector<std::string>& OptimizerNamesAllowed() {
  static const std::vector<std::string> names = {"sgd",  "nesterov", "adagrad", "adadelta",
                                                 "adam", "adamw",    "rmsprop"};
  return names;
}

namespace {

// The common fields the kind ignores, and the CUDA fields of a kind that cannot train on CUDA.
std::vector<std::string> IgnoredFields(const KindRules& kind) {
  std::vector<std::string> out = kind.ignores;
  if (std::find(kind.devices.begin(), kind.devices.end(), "cuda") == kind.devices.end())
    out.insert(out.end(), CudaOnlyFields().begin(), CudaOnlyFields().end());
  return out;
}

// Whether the kind reads the field: a foreign one is absent, and its checks do not apply.
bool Reads(const KindRules& kind, const std::string& field) {
  const auto ignored = IgnoredFields(kind);
  return std::find(ignored.begin(), ignored.end(), field) == ignored.end();
}

// The fields given of the kind whose settings the spec holds: by their flat names where the
// field table has them ("layers"), else as its message names them (the command kind's argv,
// env, cwd, given after `--` and by --env, --cwd).
std::string GivenSettings(const v1::ExperimentSpec& s, const std::string& kind) {
  const auto* top = v1::ExperimentSpec::descriptor()->FindFieldByName(kind);
  const auto& m = s.GetReflection()->GetMessage(s, top);
  std::vector<const google::protobuf::FieldDescriptor*> set;
  m.GetReflection()->ListFields(m, &set);
  std::string names;
  for (const auto* f : set) {
    std::string name = f->name();
    for (const SpecField& x : SpecFields())
      if (x.path == kind + "." + f->name()) name = x.name;
    names += (names.empty() ? "" : ", ") + name;
  }
  return names.empty() ? kind : names;
}

// A field of one kind's message given to another kind: the schema says whose it is.
Status CheckSettingsKind(const v1::ExperimentSpec& s) {
  const std::string held = SettingsKind(s);
  if (held.empty() || held == s.kind()) return Status::Ok();
  const KindRules* owner = FindKind(held);
  if (owner != nullptr && owner->runs_user_code)
    return InvalidArgument(GivenSettings(s, held) + ": kind " + s.kind() +
                           " runs no program of yours (kind " + held + " does)");
  return InvalidArgument(GivenSettings(s, held) + ": not a field of kind " + s.kind() + " (it is " +
                         held + "'s)");
}

}  // namespace

void ClearDaemonSetFields(v1::ExperimentSpec* s) {
  s->clear_allocator_why();
  if (s->has_hogwild()) s->mutable_hogwild()->clear_concurrent_steps_why();
  s->clear_step_timeout_why();
}

void ApplyDefaults(v1::ExperimentSpec* s, const SpecLimits& limits) {
  if (!s->has_kind()) s->set_kind("hogwild");
  const KindRules* kind = FindKind(s->kind());
  // Another kind's settings: refused as they are (ValidateSpec), not replaced by this kind's.
  if (const std::string held = SettingsKind(*s); !held.empty() && held != s->kind()) kind = nullptr;
  const v1::ExperimentSpec given = *s;
  if (kind != nullptr && kind->defaults != nullptr) kind->defaults(s, limits);
  ApplyCommonDefaults(s, limits);
  if (kind != nullptr && kind->late_defaults != nullptr) kind->late_defaults(s, limits);
  // A field the kind does not read is not filled in (and is refused if given: ValidateSpec).
  for (const auto& name : kind != nullptr ? IgnoredFields(*kind) : std::vector<std::string>{}) {
    const SpecField* f = FindSpecField(name);
    if (!HasSpecField(given, *f)) ClearSpecField(s, *f);
  }
  if (!s->has_allocator()) s->clear_allocator_why();  // a kind that does not read it
  if (!s->has_step_timeout_ms()) s->clear_step_timeout_why();
}

namespace {

// A kind's default of a common field where it is a value other than hogwild's ("" when the same or
// unset). Against hogwild with the same optimiser and workers: what follows from those (an
// optimiser's own momentum, threads from workers) is stated under those fields, not as the kind's.
std::string KindDefaultValue(const std::string& kind, const SpecField& f) {
  const SpecLimits limits;  // a default that depends on the machine is in words (default_words)
  v1::ExperimentSpec mine;
  mine.set_kind(kind);
  ApplyDefaults(&mine, limits);
  v1::ExperimentSpec base;
  if (f.path != "optimizer.name" && !mine.optimizer().name().empty())
    base.mutable_optimizer()->set_name(mine.optimizer().name());
  if (f.name != "workers" && mine.has_workers()) base.set_workers(mine.workers());
  ApplyDefaults(&base, limits);
  const std::string value = SpecFieldText(mine, f);
  return value == SpecFieldText(base, f) ? "" : value;
}

}  // namespace

std::string SpecFieldDefault(const SpecField& f) {
  // The kind itself, or a kind's own field: its table's words.
  if (f.name == "kind" || !FieldKind(f).empty()) return f.fallback;
  std::vector<std::pair<std::string, std::string>> kinds;  // (words, kinds named with them)
  for (const std::string& name : KindNames()) {
    const KindRules& k = *FindKind(name);
    const auto& ignored = k.ignores;
    if (name == "hogwild" || std::count(ignored.begin(), ignored.end(), f.name) > 0) continue;
    const auto said = k.default_words.find(f.name);
    const std::string words =
        said != k.default_words.end() ? said->second : KindDefaultValue(name, f);
    if (words.empty()) continue;
    auto same = std::find_if(kinds.begin(), kinds.end(), [&](auto& g) { return g.first == words; });
    if (same == kinds.end())
      kinds.push_back({words, name});
    else
      same->second += ", " + name;
  }
  std::string out = f.fallback;
  for (size_t i = 0; i < kinds.size(); ++i)
    out += (i == 0 ? " (" : "; ") + kinds[i].second + ": " + kinds[i].first;
  return kinds.empty() ? out : out + ")";
}

uint32_t DefaultConcurrentSteps(const v1::ExperimentSpec& s, const SpecLimits& limits,
                                std::string* why) {
  const uint32_t workers = std::max<uint32_t>(1, s.workers());
  const uint32_t fit = std::max<uint32_t>(1, limits.cores / std::max<uint32_t>(1, s.threads()));
  // More workers stepping at once than the cores run only adds step memory; with the planned
  // allocator on the CPU the workers then share the cores' worth of step arenas
  // (docs/allocators.md, "Turns at the steps"). Otherwise a turn would save nothing.
  // Each reason at most the wire's 64 bytes (shared/spec/wire_check.h).
  if (fit >= workers) {
    *why = "default: all at once, as the cores allow";
    return workers;
  }
  if (s.device() != "cpu" || s.allocator() != "planned") {
    *why = "default: all at once (shared arenas need planned, on the CPU)";
    return workers;
  }
  *why = "default: the cores' worth (" + std::to_string(limits.cores) + " cores, " +
         std::to_string(s.threads()) + (s.threads() == 1 ? " thread" : " threads") + " each)";
  return fit;
}

std::string DefaultAllocator(const v1::ExperimentSpec& s, std::string* why) {
  const KindRules* kind = FindKind(s.kind());
  if (kind == nullptr || !kind->marks_steps) {
    *why = "default: " + s.kind() + " does not mark its steps";
    return "cache";
  }
  if (s.device() == "cuda") {
    *why = "default on CUDA: planned serves the CPU only";
    return "cache";
  }
  *why = "default: " + s.kind() + " marks its steps on the CPU";
  return "planned";
}

LeaderChoice ChooseLeader(const v1::ExperimentSpec& s) {
  const KindRules* kind = FindKind(s.kind());
  if (kind == nullptr || !kind->leader_without_libtorch)
    return {true, kind != nullptr && !kind->leader_why.empty()
                      ? kind->leader_why
                      : s.kind() + " builds its model in the leader"};
  if (kind->runs_user_code) return {false, "the workers are the user's program"};
  if (s.start() == "fork") return {true, "start fork: the workers inherit the leader's model"};
  if (s.model() == "torchscript" && s.device() == "cpu")
    return {true,
            "the leader loads and probes the model file, then execs shoal-leader: no worker "
            "inherits the model",
            true};
  if (s.model() == "torchscript") return {true, "the leader loads and probes the model file"};
  if (s.device() == "cuda" && s.share())
    return {true, "shared CUDA weights: the leader owns the device buffer"};
  return {false, "start " + s.start() + ": worker 0 writes the initial weights"};
}

std::vector<std::string> LeaderArgv(const LeaderCommand& c, const v1::ExperimentSpec& spec) {
  return {c.program,
          "--role",
          "leader",
          "--experiment",
          c.experiment_id,
          "--spec-json",
          SpecToJson(spec),
          "--status-fd",
          std::to_string(c.status_fd),
          "--parent",
          std::to_string(c.parent),
          "--worker-bin",
          c.worker_bin,
          "--forkserver-socket",
          c.fork_server_socket};
}

namespace {

// Written into the spec, so that its record says where each worker trained: a kind that spreads
// over devices puts worker i on i mod the devices there are; the others use device 0.
void DefaultCudaDevices(v1::ExperimentSpec* s, const SpecLimits& limits) {
  if (s->device() != "cuda" || s->has_cuda_devices() || limits.cuda_devices == 0) return;
  const KindRules* kind = FindKind(s->kind());
  std::string list = "0";
  if (kind != nullptr && kind->spreads_over_devices) {
    for (uint32_t i = 1; i < s->workers(); ++i)
      list += "," + std::to_string(i % limits.cuda_devices);
  }
  s->set_cuda_devices(list);
}

void ApplyCommonDefaults(v1::ExperimentSpec* s, const SpecLimits& limits) {
  if (!s->has_model()) s->set_model(s->has_model_file() ? "torchscript" : "mnist_convnet");
  if (s->has_model_file()) {
    if (!s->has_loss()) s->set_loss("cross_entropy");
    if (!s->has_memory_format()) s->set_memory_format("contiguous");
    if (!s->has_autocast()) s->set_autocast("no");
    if (!s->has_eval_samples()) s->set_eval_samples(0);  // a model file comes with no test set
  }
  if (!s->has_dataset()) s->set_dataset("synthetic");
  if (!s->has_workers()) s->set_workers(1);
  if (!s->has_start()) s->set_start("fork");
  if (!s->has_share()) s->set_share(true);
  if (!s->has_device()) s->set_device("cpu");
  if (!s->has_batch_size()) s->set_batch_size(64);
  if (!s->has_batches() && !s->has_epochs()) s->set_batches(kDefaultBatches);
  DefaultOptimizer(s->mutable_optimizer(), s);
  if (!s->has_threads()) {  // a default is never refused: held to the cap a typed value meets
    s->set_threads(std::clamp<uint32_t>(limits.cores / std::max<uint32_t>(1, s->workers()), 1,
                                        limits.max_threads));
  }
  if (!s->has_allocator()) {
    std::string why;
    s->set_allocator(DefaultAllocator(*s, &why));
    s->set_allocator_why(why);
  }
  if (!s->has_seed()) s->set_seed(1);
  if (!s->has_sample_interval_ms()) s->set_sample_interval_ms(200);
  if (!s->has_activations()) s->set_activations("pytorch");
  if (!s->has_kernels()) s->set_kernels("shoal");
  if (!s->has_eval_samples()) s->set_eval_samples(1000);
  if (!s->has_stall_timeout_ms()) s->set_stall_timeout_ms(60000);
  if (!s->has_step_timeout_ms()) {
    s->set_step_timeout_ms(kDefaultStepTimeoutMs);
    s->set_step_timeout_why("the default");
  }
  if (!s->has_force()) s->set_force(false);
  DefaultCudaDevices(s, limits);
  // Cleared again for the kinds that do not read it (ApplyDefaults).
  if (s->device() == "cuda" && !s->has_cuda_sync()) s->set_cuda_sync("events");
}

}  // namespace

bool IsEnvironmentName(const std::string& name) {
  return !name.empty() && !std::isdigit(static_cast<unsigned char>(name[0])) &&
         std::all_of(name.begin(), name.end(), [](char c) {
           return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
         });
}

std::vector<std::string> SplitCommas(const std::string& text) {
  std::vector<std::string> out;
  size_t from = 0;
  for (;;) {
    const size_t comma = text.find(',', from);
    out.push_back(text.substr(from, comma == std::string::npos ? comma : comma - from));
    if (comma == std::string::npos) return out;
    from = comma + 1;
  }
}

StatusOr<std::vector<uint32_t>> ParseCommaList(const std::string& field, const std::string& text,
                                               const std::string& what, size_t max_digits) {
  std::vector<uint32_t> out;
  for (const std::string& part : SplitCommas(text)) {
    if (part.empty() || part.size() > max_digits ||
        part.find_first_not_of("0123456789") != std::string::npos)
      return InvalidArgument(field + ": '" + text + "' is not a comma-separated list of " + what);
    out.push_back(uint32_t(std::stoul(part)));
  }
  return out;
}

uint32_t CudaOrdinal(const v1::ExperimentSpec& spec, uint32_t index) {
  if (!spec.has_cuda_devices()) return 0;
  auto list = ParseCommaList("cuda_devices", spec.cuda_devices(), "device ordinals");
  return list.ok() && !list->empty() ? (*list)[index % list->size()] : 0;
}

namespace {

// Only with device cuda; ordinals the worker's LibTorch can see (when the daemon knows how many:
// it does wherever cuda can run); hogwild's shared weights live on one device.
Status ValidateCudaDevices(const v1::ExperimentSpec& s, const SpecLimits& limits) {
  if (!s.has_cuda_devices()) return Status::Ok();
  if (s.device() != "cuda")
    return InvalidArgument("cuda_devices: only with device cuda (device is " + s.device() + ")");
  ASSIGN_OR_RETURN(std::vector<uint32_t> list,
                   ParseCommaList("cuda_devices", s.cuda_devices(), "device ordinals", 2));
  for (uint32_t d : list) {
    if (d > kMaxCudaOrdinal)
      return InvalidArgument("cuda_devices: device " + std::to_string(d) + " is past ordinal " +
                             std::to_string(kMaxCudaOrdinal));
    if (limits.cuda_devices > 0 && d >= limits.cuda_devices) {
      return InvalidArgument("cuda_devices: device " + std::to_string(d) + " in '" +
                             s.cuda_devices() + "', but the worker's LibTorch sees " +
                             std::to_string(limits.cuda_devices) + " device(s) (0.." +
                             std::to_string(int(limits.cuda_devices) - 1) + ")");
    }
  }
  if (s.share() && std::count(list.begin(), list.end(), list[0]) != long(list.size())) {
    return InvalidArgument("cuda_devices: '" + s.cuda_devices() +
                           "' names several devices, but shared weights live on one and every "
                           "worker trains on it (give one device, or share no)");
  }
  return Status::Ok();
}

// Only with device cuda: on the CPU every time is the work done.
Status ValidateCudaSync(const v1::ExperimentSpec& s) {
  if (!s.has_cuda_sync()) return Status::Ok();
  if (s.device() != "cuda")
    return InvalidArgument("cuda_sync: only with device cuda (device is " + s.device() + ")");
  return OneOf("cuda_sync", s.cuda_sync(), {"events", "phases", "step"});
}

}  // namespace

bool IsSha256Ref(const std::string& ref) {
  return ref.size() == 71 && ref.compare(0, 7, "sha256:") == 0 &&
         ref.find_first_not_of("0123456789abcdef", 7) == std::string::npos;
}

namespace {

// A model file's description (input, loss, classes), and the fields that need one.
Status ValidateModelFile(const v1::ExperimentSpec& s) {
  if (!s.has_model_file()) {
    if (IsSha256Ref(s.dataset()))
      return InvalidArgument("dataset: an uploaded tensor file is for a model_file's training");
    for (const char* f : {"input", "loss", "classes", "memory_format", "autocast"})
      if (HasSpecField(s, *FindSpecField(f)))
        return InvalidArgument(std::string(f) + ": only with model_file (a model of your own)");
    if (s.model() == "torchscript")
      return InvalidArgument("model: torchscript is a model file's: give model_file");
    return Status::Ok();
  }
  if (!IsSha256Ref(s.model_file()))
    return InvalidArgument("model_file: '" + s.model_file().substr(0, 80) +
                           "' is not sha256:<64 hex digits> (the CLI uploads a file path and "
                           "sends its hash)");
  if (s.model() != "torchscript")
    return InvalidArgument("model: '" + s.model() +
                           "' beside model_file; the file is the model (leave model out)");
  if (!s.has_input())
    return InvalidArgument("input: required with model_file (e.g. float32[B,784])");
  RETURN_IF_ERROR(ParseInputs(s.input()).status());
  RETURN_IF_ERROR(OneOf("loss", s.loss(), LossNames()));
  if (s.loss() == "mse" && s.has_classes())
    return InvalidArgument(
        "classes: loss mse has no classes (its targets are shaped like the output)");
  if (s.loss() != "mse" && !s.has_classes())
    return InvalidArgument("classes: required with loss " + s.loss() +
                           " (targets in [0, classes))");
  if (s.has_classes()) RETURN_IF_ERROR(InRange("classes", s.classes(), 2, 1000000));
  if (s.dataset() != "synthetic" && !IsSha256Ref(s.dataset()))
    return InvalidArgument(
        "dataset: a model file trains on synthetic data or on a tensor file (the CLI uploads "
        "--dataset FILE.pt and sends sha256:HASH), not on '" +
        s.dataset().substr(0, 80) + "'");
  if (s.eval_samples() != 0)
    return InvalidArgument("eval_samples: a model file has no test set to evaluate (give 0)");
  return Status::Ok();
}

// The measured options a model file trains with: the memory order of its 4-d tensors, and
// autocast where the CPU has bfloat16 instructions (elsewhere LibTorch emulates them: resnet50's
// step ran 15x slower under it on an AVX2 CPU, docs/your-model.md).
Status ValidateModelFileOptions(const v1::ExperimentSpec& s, const SpecLimits& limits) {
  if (!s.has_model_file()) return Status::Ok();
  RETURN_IF_ERROR(OneOf("memory_format", s.memory_format(), {"contiguous", "channels_last"}));
  RETURN_IF_ERROR(OneOf("autocast", s.autocast(), {"no", "bfloat16"}));
  // Shoal's autocast is LibTorch's CPU autocast; a CUDA forward would run it in float32 and
  // say nothing.
  if (s.autocast() == "bfloat16" && s.device() == "cuda")
    return InvalidArgument(
        "autocast: bfloat16 is CPU autocast for now; on device cuda give autocast no (a model "
        "scripted in bfloat16 trains in it)");
  if (s.autocast() == "bfloat16" && !limits.bf16_missing.empty())
    return FailedPrecondition("autocast: bfloat16 on this node's CPU is emulated, not run: " +
                              limits.bf16_missing);
  return Status::Ok();
}

}  // namespace

Status ValidateSpec(const v1::ExperimentSpec& s, const SpecLimits& limits) {
  const KindRules* kind = FindKind(s.kind());
  if (kind == nullptr) return OneOf("kind", s.kind(), KindNames());
  RETURN_IF_ERROR(CheckSettingsKind(s));
  for (const auto& name : IgnoredFields(*kind)) {
    if (HasSpecField(s, *FindSpecField(name)))
      return InvalidArgument(name + ": not a field of kind " + s.kind());
  }
  RETURN_IF_ERROR(OneOf("model", s.model(), kind->models));
  RETURN_IF_ERROR(ValidateModelFile(s));
  RETURN_IF_ERROR(ValidateModelFileOptions(s, limits));
  RETURN_IF_ERROR(InRange("workers", s.workers(), 1, limits.max_workers));
  RETURN_IF_ERROR(OneOf("start", s.start(), {"fork", "spawn", "forkserver"}));
  RETURN_IF_ERROR(OneOf("device", s.device(), {"cpu", "cuda"}));
  if (std::find(kind->devices.begin(), kind->devices.end(), s.device()) == kind->devices.end())
    return InvalidArgument("device: kind " + s.kind() +
                           " does not train on cuda yet; allowed: cpu");
  if (ForkCudaShare(s)) return InvalidArgument(std::string("device: ") + kForkCudaShareWhy);
  RETURN_IF_ERROR(ValidateCudaDevices(s, limits));
  RETURN_IF_ERROR(ValidateCudaSync(s));
  if (Reads(*kind, "batch_size"))
    RETURN_IF_ERROR(InRange("batch_size", s.batch_size(), 1, limits.max_batch_size));
  RETURN_IF_ERROR(ValidateLength(s, limits));
  if (Reads(*kind, "optimizer")) RETURN_IF_ERROR(ValidateOptimizer(s.optimizer()));
  RETURN_IF_ERROR(ValidateInBackward(s, *kind));
  if (Reads(*kind, "threads"))
    RETURN_IF_ERROR(InRange("threads", s.threads(), 1, limits.max_threads));
  RETURN_IF_ERROR(InRange("sample_interval_ms", s.sample_interval_ms(),
                          limits.min_sample_interval_ms, limits.max_sample_interval_ms));
  if (Reads(*kind, "allocator"))
    RETURN_IF_ERROR(OneOf("allocator", s.allocator(), {"cache", "planned", "retain", "system"}));
  if (s.allocator() == "planned" && !kind->marks_steps)
    return InvalidArgument(
        "allocator: planned needs a trainer that marks its steps (hogwild, "
        "data_parallel); kind " +
        s.kind() + " does not");
  if (s.has_kernels())  // foreign to kind command
    RETURN_IF_ERROR(OneOf("kernels", s.kernels(), {"shoal", "libtorch"}));
  if (s.has_activations())  // foreign to the kinds that build no mnist_convnet
    RETURN_IF_ERROR(OneOf("activations", s.activations(), {"pytorch", "lean"}));
  if (s.activations() == "lean" && s.model() != "mnist_convnet")
    return InvalidArgument("activations: lean is written for model mnist_convnet only, not " +
                           s.model());
  RETURN_IF_ERROR(InRange("eval_samples", s.eval_samples(), 0, limits.max_eval_samples));
  if (s.stall_timeout_ms() != 0) {
    RETURN_IF_ERROR(InRange("stall_timeout_ms", s.stall_timeout_ms(), limits.min_stall_timeout_ms,
                            limits.max_stall_timeout_ms));
  }
  if (s.step_timeout_ms() != 0) {
    RETURN_IF_ERROR(InRange("step_timeout_ms", s.step_timeout_ms(), limits.min_stall_timeout_ms,
                            limits.max_step_timeout_ms));
  }
  if (s.name().size() > 128) return InvalidArgument("name: longer than 128 characters");
  if (s.has_name() && s.name().empty())
    return InvalidArgument("name: empty (leave it out for no label)");
  if (s.has_dataset() && s.dataset().empty())
    return InvalidArgument("dataset: empty (want a directory or 'synthetic')");
  if (kind->validate) RETURN_IF_ERROR(kind->validate(s, limits));
  // Last: everything else about a cuda spec is checked before saying the node cannot run it.
  if (s.device() == "cuda" && !limits.cuda_missing.empty())
    return FailedPrecondition("device cuda: " + limits.cuda_missing);
  return Status::Ok();
}

const char* const kForkCudaShareWhy =
    "cuda with start fork and shared weights is impossible: the weights' CUDA buffer must exist "
    "before the workers are forked, and a forked child cannot use the CUDA context of its parent "
    "(use start spawn or forkserver, or share no)";

const std::vector<std::string>& CudaOnlyFields() {
  static const std::vector<std::string> names = {"cuda_devices", "cuda_sync"};
  return names;
}

bool TimesEachPhase(const v1::ExperimentSpec& s) { return s.cuda_sync() != "step"; }

bool ForkCudaShare(const v1::ExperimentSpec& s) {
  return s.device() == "cuda" && s.start() == "fork" && s.share();
}

Status CheckDataset(const std::string& dataset, const std::vector<std::string>& data_roots) {
  if (dataset == "synthetic" || dataset.empty()) return Status::Ok();  // empty: a kind without data
  // An uploaded tensor file: no path on this machine; the daemon's blob store looks it up.
  if (IsSha256Ref(dataset)) return Status::Ok();
  if (!data_roots.empty()) {
    char buf[PATH_MAX];
    if (::realpath(dataset.c_str(), buf) == nullptr) {
      return InvalidArgument(
          "dataset: '" + dataset +
          "' is not a directory (want a directory of MNIST IDX files, or 'synthetic')");
    }
    const std::string real = buf;
    bool inside = false;
    std::string list;
    for (const auto& root : data_roots) {
      list += (list.empty() ? "" : ", ") + root;
      char rbuf[PATH_MAX];
      if (::realpath(root.c_str(), rbuf) == nullptr) continue;
      const std::string r = rbuf;
      if (real == r || real.compare(0, r.size() + 1, r + "/") == 0) inside = true;
    }
    if (!inside) {
      return InvalidArgument("dataset: '" + dataset + "' is outside the data roots (" + list + ")");
    }
  }
  // A bad data set is the caller's bad argument, whatever the reader calls it.
  Status st = CheckMnistDir(dataset);
  return st.ok() ? st : InvalidArgument("dataset: " + st.message());
}

std::string SpecToJson(const v1::ExperimentSpec& spec) {
  std::string out;
  (void)google::protobuf::util::MessageToJsonString(spec, &out);
  return out;
}

StatusOr<v1::ExperimentSpec> SpecFromJson(const std::string& json) {
  v1::ExperimentSpec spec;
  auto st = google::protobuf::util::JsonStringToMessage(json, &spec);
  if (!st.ok()) return InvalidArgument("spec JSON: " + std::string(st.message()));
  return spec;
}

Status CheckTrainingSet(const v1::ExperimentSpec& s, uint64_t n_train) {
  if (n_train == 0) return InvalidArgument("dataset: it has no training images");
  if (!s.has_epochs()) return Status::Ok();
  // A typed epoch larger than the set is refused rather than cut to it: the run would not be
  // the one asked for.
  if (s.has_epoch_samples() && s.epoch_samples() > n_train) {
    return InvalidArgument("epoch_samples: " + std::to_string(s.epoch_samples()) +
                           " is more than the " + std::to_string(n_train) + " training images of " +
                           s.dataset());
  }
  if (BatchesPerEpoch(s, n_train) == 0) {
    return InvalidArgument("epoch_samples: an epoch of " +
                           std::to_string(s.has_epoch_samples() ? s.epoch_samples() : n_train) +
                           " samples over " + std::to_string(Ranks(s)) +
                           " workers leaves none to a worker");
  }
  return Status::Ok();
}

uint64_t BatchesPerEpoch(const v1::ExperimentSpec& s, uint64_t n_train) {
  const uint64_t per_epoch =
      s.has_epoch_samples() ? std::min<uint64_t>(s.epoch_samples(), n_train) : n_train;
  const uint64_t w = Ranks(s);           // data_parallel: every node's workers
  const uint64_t shard = per_epoch / w;  // the remainder of per_epoch / w is not used
  const uint64_t b = std::max<uint32_t>(1, BatchOf(s));
  return (shard + b - 1) / b;
}

uint64_t StepsPerWorker(const v1::ExperimentSpec& s, uint64_t n_train) {
  if (s.multi_model().has_iterations()) return s.multi_model().iterations();
  if (s.has_epochs()) return uint64_t(s.epochs()) * BatchesPerEpoch(s, n_train);
  return s.batches();
}

}  // namespace shoal
