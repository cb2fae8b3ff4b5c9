#include "shared/spec/spec_fields.h"

#include <google/protobuf/descriptor.h>
#include <google/protobuf/message.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <set>
#include <type_traits>

#include "shared/kinds/kind.h"
#include "shared/spec/number_text.h"

namespace shoal {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;

// Fields every kind reads, in the order the grid expands them.
std::vector<SpecField> CommonFields() {
  return {
      {"kind", "kind", "experiment kind: {kinds}", "hogwild"},
      {"model", "model", "network: {models}; torchscript is a model_file's",
       "mnist_convnet, torchscript with model_file"},
      {"dataset", "dataset", "directory of MNIST IDX files (gzipped or not), or 'synthetic'",
       "synthetic"},
      {"start", "start", "how workers start: fork | spawn | forkserver", "fork"},
      {"share", "share", "weights in one shared segment: yes | no", "yes"},
      {"device", "device", "cpu | cuda (hogwild, pipeline; not start fork with share yes)", "cpu"},
      {"cuda_devices", "cuda_devices",
       "device cuda: CUDA ordinals, comma-separated; worker (stage) i on the (i mod n)-th",
       "0 with device cuda", false},
      {"cuda_sync", "cuda_sync",
       "hogwild on cuda: events (phases timed by CUDA events, read once the step is done) | "
       "phases (wait for the device before each phase time) | step (once a step, when its loss "
       "is read: no phase split)",
       "events with device cuda"},
      {"optimizer", "optimizer.name",
       "sgd | nesterov | adagrad | adadelta | adam | adamw | rmsprop", "sgd"},
      {"lr", "optimizer.lr", "learning rate", "per optimizer (sgd 0.01)"},
      {"momentum", "optimizer.momentum", "sgd, nesterov, rmsprop", "sgd/nesterov 0.5, rmsprop 0"},
      {"dampening", "optimizer.dampening", "sgd", "0"},
      {"weight_decay", "optimizer.weight_decay", "every optimizer (L2; adamw decoupled)",
       "adamw 0.01, others 0"},
      {"eps", "optimizer.eps", "adagrad, adadelta, adam, adamw, rmsprop",
       "adagrad 1e-10, adadelta 1e-6, others 1e-8"},
      {"lr_decay", "optimizer.lr_decay", "adagrad", "0"},
      {"initial_accumulator_value", "optimizer.initial_accumulator_value", "adagrad", "0"},
      {"rho", "optimizer.rho", "adadelta", "0.9"},
      {"beta1", "optimizer.beta1", "adam, adamw", "0.9"},
      {"beta2", "optimizer.beta2", "adam, adamw", "0.999"},
      {"amsgrad", "optimizer.amsgrad", "adam, adamw: yes | no", "no"},
      {"alpha", "optimizer.alpha", "rmsprop smoothing constant", "0.99"},
      {"centered", "optimizer.centered", "rmsprop: yes | no", "no"},
      {"optimizer_in_backward", "optimizer.in_backward",
       "hogwild on cpu, every optimizer: step each parameter and free its gradient as soon as "
       "the backward pass has it: yes | no",
       "no"},
      {"batch_size", "batch_size", "samples per batch", "64"},
      {"batches", "batches", "batches per worker (exclusive with epochs)", "20 without epochs"},
      {"epochs", "epochs", "passes over the training set, split over the workers", "none"},
      {"epoch_samples", "epoch_samples", "training samples an epoch covers (at most the set)",
       "the whole set"},
      {"threads", "threads", "intra-op threads per worker", "floor(cores / workers), at least 1"},
      {"seed", "seed", "random seed", "1"},
      {"allocator", "allocator",
       "cache (exact-size reuse of step buffers) | planned (one arena, offsets planned from a "
       "traced "
       "step; hogwild, data_parallel) | retain (glibc heap, never trimmed) | system",
       "planned where the trainer marks its steps on the CPU, else cache"},
      {"activations", "activations",
       "pytorch (what PyTorch's autograd keeps for backward) | lean (mnist_convnet: max-pool keeps "
       "its indices only, fused with the ReLU; bit-identical)",
       "pytorch"},
      {"kernels", "kernels",
       "shoal (Shoal's CPU kernels where it has one: max_pool2d; bit-identical, faster) | "
       "libtorch (LibTorch's own everywhere)",
       "shoal"},
  };
}

// What is evaluated and watched around the training: every kind's too, after CommonFields.
std::vector<SpecField> RunControlFields() {
  return {
      {"eval_samples", "eval_samples", "test images evaluated after training (0: none)",
       "1000, 0 with a model file"},
      {"sample_interval_ms", "sample_interval_ms", "telemetry interval", "200"},
      {"stall_timeout_ms", "stall_timeout_ms",
       "fail when a worker has no heartbeat this long (0: off)", "60000"},
      {"step_timeout_ms", "step_timeout_ms",
       "fail when no training worker makes progress (a step, batch or evaluation) this long "
       "(0: off)",
       "600000 until a step is measured, then 100x the slowest step seen, 30 s .. 1800000 (a "
       "model file: 100x its probe's step, 5 s .. 1800000)"},
  };
}

// A model file's fields (hogwild and data_parallel read them; the other kinds ignore them).
std::vector<SpecField> ModelFileFields() {
  return {
      {"model_file", "model_file",
       "hogwild, data_parallel: your TorchScript model (a file path; the CLI uploads it and sends "
       "its sha256:HASH)",
       "none"},
      {"input", "input",
       "model_file: what forward takes, e.g. float32[B,3,32,32]; several separated by ';'; "
       "integer inputs with their range, int64[B,16]:1000",
       "none (required with model_file)"},
      {"loss", "loss",
       "model_file: cross_entropy (targets in [0, classes)) | mse (targets shaped like the "
       "output) | output (forward(inputs..., targets) returns the loss)",
       "cross_entropy (with model_file)"},
      {"classes", "classes", "model_file with loss cross_entropy or output: target classes",
       "none (required with those losses)"},
      {"memory_format", "memory_format",
       "model_file: contiguous | channels_last (its 4-d parameters, buffers and inputs in NHWC "
       "order)",
       "contiguous (with model_file)"},
      {"autocast", "autocast",
       "model_file: no | bfloat16 (forward under CPU autocast; CPUs with bfloat16 instructions)",
       "no (with model_file)"},
  };
}

// A run across nodes (data_parallel and command read them; the other kinds ignore them).
std::vector<SpecField> NodeFields() {
  return {
      {"nodes", "nodes",
       "data_parallel, command: nodes the run spans, a part each (on Slurm: srun places them)",
       "1"},
      {"node_rank", "node_rank", "data_parallel, command: this node's part (0 .. nodes - 1)",
       "0 (on Slurm: its place in the allocation)"},
      {"master", "master",
       "data_parallel, command with nodes > 1: HOST:PORT where node 0's worker 0 hosts the c10d "
       "store",
       "none (on Slurm: the allocation's first node)"},
  };
}

// The worker count, which every kind reads but several derive, and the label and switch last.
std::vector<SpecField> LastFields() {
  return {
      {"workers", "workers", "worker processes", "1"},
      {"name", "name", "a label", "none", false},
      {"force", "force", "start even if the admission check says it will not fit", "no", false},
  };
}

// Each registered kind's own fields (its table in shared/kinds/<kind>/rules.cc), after the
// common ones or after the field one names.
void AddKindFields(std::vector<SpecField>* all) {
  std::vector<SpecField> placed;  // those that name the field they follow, placed once all are in
  for (const KindRules& k : AllKinds())
    for (const SpecField& f : k.fields) (f.after.empty() ? *all : placed).push_back(f);
  for (const SpecField& f : placed) {
    auto at = std::find_if(all->begin(), all->end(),
                           [&](const SpecField& x) { return x.name == f.after; });
    all->insert(at == all->end() ? at : at + 1, f);
  }
}

// The common fields, with every kind's own (`with_kinds`) before the worker count, the label and
// the switch.
std::vector<SpecField> MakeFields(bool with_kinds) {
  std::vector<SpecField> all = CommonFields();
  for (SpecField& f : RunControlFields()) all.push_back(std::move(f));
  for (SpecField& f : ModelFileFields()) all.push_back(std::move(f));
  for (SpecField& f : NodeFields()) all.push_back(std::move(f));
  if (with_kinds) AddKindFields(&all);
  for (SpecField& f : LastFields()) all.push_back(std::move(f));
  return all;
}

std::vector<SpecField> MakeEveryField() { return MakeFields(true); }

// The message holding the path's last component, and that component's descriptor; M is
// const Message (reading) or Message (writing: missing sub-messages are created).
template <typename M>
std::pair<M*, const FieldDescriptor*> Resolve(M* m, const std::string& path) {
  std::string rest = path;
  for (size_t dot; (dot = rest.find('.')) != std::string::npos;) {
    const FieldDescriptor* f = m->GetDescriptor()->FindFieldByName(rest.substr(0, dot));
    if constexpr (std::is_const_v<M>) {
      m = &m->GetReflection()->GetMessage(*m, f);
    } else {
      m = m->GetReflection()->MutableMessage(m, f);
    }
    rest = rest.substr(dot + 1);
  }
  return {m, m->GetDescriptor()->FindFieldByName(rest)};
}

std::string Quote(const std::string& text) {
  std::string shown = text.size() > 40 ? text.substr(0, 40) + "..." : text;
  std::string out = "'";
  for (unsigned char c : shown) {
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    }
  }
  return out + "'";
}

Status ParseUnsigned(const SpecField& f, const std::string& t, uint64_t max, uint64_t* out) {
  const bool digits = IsWholeNumberText(t);
  errno = 0;
  const unsigned long long v = digits ? std::strtoull(t.c_str(), nullptr, 10) : 0;
  if (!digits || errno == ERANGE || v > max) {
    return InvalidArgument(f.name + ": " + Quote(t) + " is not a whole number in 0.." +
                           std::to_string(max));
  }
  *out = v;
  return Status::Ok();
}

Status ParseDouble(const SpecField& f, const std::string& t, double* out) {
  errno = 0;
  // Plain decimal only: strtod would also take leading blanks, hex ("0x1p-3") and inf/nan.
  const bool decimal = IsPlainDecimalText(t);
  const double v = decimal ? std::strtod(t.c_str(), nullptr) : 0;
  if (!decimal || errno == ERANGE || !std::isfinite(v)) {
    return InvalidArgument(f.name + ": " + Quote(t) + " is not a finite number");
  }
  *out = v;
  return Status::Ok();
}

Status ParseBool(const SpecField& f, const std::string& t, bool* out) {
  if (t == "yes" || t == "true" || t == "1") {
    *out = true;
  } else if (t == "no" || t == "false" || t == "0") {
    *out = false;
  } else {
    return InvalidArgument(f.name + ": " + Quote(t) + " is not one of: yes, no");
  }
  return Status::Ok();
}

}  // namespace

std::string ShortDouble(double v) {
  char buf[40];
  // At least the integer digits, so that 10 reads "10", not "1e+01".
  const double a = std::fabs(v);
  const int digits = a >= 1 && a < 1e17 ? int(std::floor(std::log10(a))) + 1 : 1;
  for (int prec = digits; prec <= 17; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::strtod(buf, nullptr) == v) break;
  }
  return buf;
}

std::string KindList() {
  std::string names;
  for (const std::string& k : KindNames()) names += (names.empty() ? "" : " | ") + k;
  return names;
}

namespace {

// "mnist_convnet (hogwild, data_loading), resnet18_cifar (data_parallel), ...": each model a kind
// trains, with the kinds that train it, in the registry's order.
std::string ModelList() {
  std::vector<std::pair<std::string, std::string>> models;  // (model, its kinds)
  for (const std::string& name : KindNames()) {
    for (const std::string& m : FindKind(name)->models) {
      auto it = std::find_if(models.begin(), models.end(), [&](auto& p) { return p.first == m; });
      if (it == models.end())
        models.push_back({m, name});
      else
        it->second += ", " + name;
    }
  }
  std::string out;
  for (const auto& [m, kinds] : models) out += (out.empty() ? "" : ", ") + m + " (" + kinds + ")";
  return out;
}

std::string Replaced(std::string text, const std::string& what, const std::string& with) {
  const size_t at = text.find(what);
  return at == std::string::npos ? text : text.replace(at, what.size(), with);
}

}  // namespace

std::string SpecFieldHelp(const SpecField& f) {
  std::string help = Replaced(f.help, "{kinds}", KindList());
  if (help.find("{models}") != std::string::npos) help = Replaced(help, "{models}", ModelList());
  std::string kinds;
  for (const std::string& name : KindNames()) {
    const auto& words = FindKind(name)->help_words;
    if (auto it = words.find(f.name); it != words.end())
      kinds += (kinds.empty() ? " (" : "; ") + name + ": " + it->second;
  }
  return kinds.empty() ? help : help + kinds + ")";
}

const std::vector<SpecField>& CommonSpecFields() {
  static const std::vector<SpecField> fields = MakeFields(false);
  return fields;
}

const std::vector<SpecField>& SpecFields() {
  return MadeFromRegistry<std::vector<SpecField>, MakeEveryField>();
}

const SpecField* FindSpecField(const std::string& name) {
  std::string n = name;
  for (auto& c : n)
    if (c == '-') c = '_';
  for (const auto& f : SpecFields())
    if (f.name == n) return &f;
  return nullptr;
}

std::string SettingsKindOf(const std::string& path) {
  const size_t dot = path.find('.');
  if (dot == std::string::npos) return "";
  const FieldDescriptor* top =
      v1::ExperimentSpec::descriptor()->FindFieldByName(path.substr(0, dot));
  const bool kind_message = top != nullptr && top->containing_oneof() != nullptr &&
                            top->containing_oneof()->name() == "settings";
  return kind_message ? top->name() : "";
}

std::string SettingsKind(const v1::ExperimentSpec& spec) {
  const auto* oneof = v1::ExperimentSpec::descriptor()->FindOneofByName("settings");
  const FieldDescriptor* set = spec.GetReflection()->GetOneofFieldDescriptor(spec, oneof);
  return set == nullptr ? "" : set->name();
}

Status SetSpecFieldTexts(v1::ExperimentSpec* spec,
                         const google::protobuf::RepeatedPtrField<v1::AxisValue>& fields) {
  std::set<std::string> seen;
  for (const v1::AxisValue& v : fields) {
    const SpecField* f = FindSpecField(v.field());
    if (f == nullptr) {
      std::string list;
      for (const auto& x : SpecFields()) list += (list.empty() ? "" : ", ") + x.name;
      return InvalidArgument("'" + v.field().substr(0, 40) +
                             "' is not a spec field (fields: " + list + ")");
    }
    if (!seen.insert(f->name).second)
      return InvalidArgument(f->name + ": given 2 times; it takes one value");
    if (HasSpecField(*spec, *f))
      return InvalidArgument(f->name + ": given both in the spec and by name");
    RETURN_IF_ERROR(SetSpecField(spec, *f, v.value()));
  }
  return Status::Ok();
}

Status SetSpecField(v1::ExperimentSpec* spec, const SpecField& f, const std::string& text) {
  // One kind's message at a time: setting another's would drop what was given of the first.
  const std::string kind = FieldKind(f), held = SettingsKind(*spec);
  if (!kind.empty() && !held.empty() && kind != held)
    return InvalidArgument(f.name + ": a field of kind " + kind + ", and the spec already holds " +
                           "kind " + held + "'s settings (an experiment is of one kind)");
  auto [m, fd] = Resolve<Message>(spec, f.path);
  const auto* r = m->GetReflection();
  uint64_t u = 0;
  double d = 0;
  bool b = false;
  switch (fd->cpp_type()) {
    case FieldDescriptor::CPPTYPE_UINT32:
      RETURN_IF_ERROR(ParseUnsigned(f, text, std::numeric_limits<uint32_t>::max(), &u));
      r->SetUInt32(m, fd, static_cast<uint32_t>(u));
      break;
    case FieldDescriptor::CPPTYPE_UINT64:
      RETURN_IF_ERROR(ParseUnsigned(f, text, std::numeric_limits<uint64_t>::max(), &u));
      r->SetUInt64(m, fd, u);
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      RETURN_IF_ERROR(ParseDouble(f, text, &d));
      r->SetDouble(m, fd, d);
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      RETURN_IF_ERROR(ParseBool(f, text, &b));
      r->SetBool(m, fd, b);
      break;
    case FieldDescriptor::CPPTYPE_STRING:
      r->SetString(m, fd, text);
      break;
    default:
      return Internal("spec field " + f.name + " has a type the table cannot set");
  }
  return Status::Ok();
}

bool HasSpecField(const v1::ExperimentSpec& spec, const SpecField& f) {
  auto [m, fd] = Resolve<const Message>(&spec, f.path);
  return m->GetReflection()->HasField(*m, fd);
}

void ClearSpecField(v1::ExperimentSpec* spec, const SpecField& f) {
  const std::string kind = FieldKind(f);
  if (!kind.empty() && SettingsKind(*spec) != kind) return;  // absent already
  auto [m, fd] = Resolve<Message>(spec, f.path);
  m->GetReflection()->ClearField(m, fd);
}

std::string SpecFieldText(const v1::ExperimentSpec& spec, const SpecField& f) {
  auto [m, fd] = Resolve<const Message>(&spec, f.path);
  const auto* r = m->GetReflection();
  if (!r->HasField(*m, fd)) return "";
  switch (fd->cpp_type()) {
    case FieldDescriptor::CPPTYPE_UINT32:
      return std::to_string(r->GetUInt32(*m, fd));
    case FieldDescriptor::CPPTYPE_UINT64:
      return std::to_string(r->GetUInt64(*m, fd));
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return ShortDouble(r->GetDouble(*m, fd));
    case FieldDescriptor::CPPTYPE_BOOL:
      return r->GetBool(*m, fd) ? "yes" : "no";
    case FieldDescriptor::CPPTYPE_STRING:
      return r->GetString(*m, fd);
    default:
      return "";
  }
}

}  // namespace shoal
