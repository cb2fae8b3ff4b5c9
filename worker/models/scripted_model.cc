#include "worker/models/scripted_model.h"

#include <ATen/autocast_mode.h>
#include <sys/stat.h>
#include <torch/nn/functional/loss.h>

#include <cstdlib>
#include <set>

#include "shared/ipc/layout.h"
#include "shared/spec/spec.h"

namespace shoal {
namespace {

// A Model name for a module's dotted name: '/' for '.', which register_parameter refuses.
std::string LocalName(const std::string& dotted) {
  std::string name = dotted;
  for (char& c : name)
    if (c == '.') c = '/';
  return name;
}

// The dtypes a parameter may train in: the optimisers and the weight segment take all four.
bool TrainableDtype(c10::ScalarType t) {
  return t == torch::kFloat || t == torch::kHalf || t == torch::kBFloat16 || t == torch::kDouble;
}

// CPU autocast to `dtype` for one forward, as `with torch.autocast("cpu", dtype)` enters and
// leaves it: the cast weights are cached for the forward and dropped at its end.
class CpuAutocast {
 public:
  explicit CpuAutocast(c10::ScalarType dtype)
      : was_on_(at::autocast::is_cpu_enabled()), was_(at::autocast::get_autocast_cpu_dtype()) {
    at::autocast::set_cpu_enabled(true);
    at::autocast::set_autocast_cpu_dtype(dtype);
    at::autocast::increment_nesting();
  }
  ~CpuAutocast() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_cpu_enabled(was_on_);
    at::autocast::set_autocast_cpu_dtype(was_);
  }
  CpuAutocast(const CpuAutocast&) = delete;
  CpuAutocast& operator=(const CpuAutocast&) = delete;

 private:
  bool was_on_;
  c10::ScalarType was_;
};

}  // namespace

std::string TorchMessage(const std::exception& e, size_t limit) {
  std::string raw = e.what();
  // c10::Error appends the C++ stack after the message; TorchScript its source excerpts.
  for (const char* cut : {"\nException raised from", "\nFrame ", "\n:\n"}) {
    const size_t at = raw.find(cut);
    if (at != std::string::npos) raw.resize(at);
  }
  // The interpreter's errors end with the error itself ("RuntimeError: ..."), after its
  // tracebacks: it goes first, or the cut below would drop the one line that says what happened.
  if (raw.rfind("The following operation failed in the TorchScript interpreter.", 0) == 0) {
    const size_t end = raw.find_last_not_of('\n');
    const size_t start = raw.rfind('\n', end);
    if (end != std::string::npos && start != std::string::npos)
      raw = raw.substr(start + 1, end - start) + "\n" + raw.substr(0, start);
  }
  std::string out;
  for (unsigned char c : raw) {
    if (out.size() >= limit) return out + "...";
    if (c == '\n') {
      out += " | ";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += char(c);
    }
  }
  return out;
}

StatusOr<std::string> BlobPath(const std::string& field, const std::string& ref) {
  if (!IsSha256Ref(ref)) return InvalidArgument(field + ": '" + ref + "' is not sha256:<hex>");
  const char* dir = std::getenv("SHOAL_BLOB_DIR");
  if (dir == nullptr || *dir == '\0')
    return FailedPrecondition(field + ": SHOAL_BLOB_DIR is not set (shoald sets it)");
  const std::string path = std::string(dir) + "/" + ref.substr(7);
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    return NotFound(field + ": the uploaded file " + ref + " is no longer in " + dir +
                    " (removed by rm or prune since it was submitted?)");
  return path;
}

ScriptedModel::ScriptedModel(torch::jit::Module module, std::string loss)
    : module_(std::move(module)), loss_(std::move(loss)) {
  // A tied weight is one tensor under two names: registered once, or the optimiser would step it
  // twice. A frozen parameter is a buffer here: the optimiser, the gradient buckets of
  // data_parallel and the shared segment are for what trains.
  std::set<const void*> seen;
  for (const auto& p : module_.named_parameters(/*recurse=*/true)) {
    if (!seen.insert(p.value.unsafeGetTensorImpl()).second) continue;
    if (p.value.requires_grad()) {
      names_.push_back(p.name);
      register_parameter(LocalName(p.name), p.value);
    } else {
      frozen_ += 1;
      register_buffer(LocalName(p.name), p.value);
    }
  }
  for (const auto& b : module_.named_buffers(/*recurse=*/true)) {
    if (b.value.defined() && seen.insert(b.value.unsafeGetTensorImpl()).second)
      register_buffer(LocalName(b.name), b.value);
  }
}

StatusOr<std::shared_ptr<ScriptedModel>> ScriptedModel::Load(const std::string& path,
                                                             const std::string& loss) {
  try {
    torch::jit::Module m = torch::jit::load(path, torch::kCPU);
    return std::shared_ptr<ScriptedModel>(new ScriptedModel(std::move(m), loss));
  } catch (const std::exception& e) {
    return FailedPrecondition("model_file: not a TorchScript archive LibTorch can load: " +
                              TorchMessage(e));
  }
}

std::string ScriptedModel::Untrainable() {
  size_t i = 0;
  for (const auto& p : parameters()) {
    const std::string& name = names_[i++];
    if (!TrainableDtype(p.scalar_type()))
      return "parameter " + name + " is " + std::string(c10::toString(p.scalar_type())) +
             "; Shoal trains float32, float16, bfloat16 and float64 parameters";
  }
  for (const auto& b : named_buffers()) {
    if (!b.value().is_sparse() && !b.value().is_quantized() && !b.value().is_complex()) continue;
    return "buffer " + b.key() + " is " + std::string(c10::toString(b.value().scalar_type())) +
           " or sparse; the weight segment holds dense real tensors";
  }
  if (parameters().empty())
    return "it has no trainable parameter (frozen, or saved by optimize_for_inference: save the "
           "module before freezing it)";
  return "";
}

void ScriptedModel::UseChannelsLast() {
  torch::NoGradGuard no_grad;
  channels_last_ = true;
  for (const auto& set : {parameters(), buffers()})
    for (auto t : set)  // set_data reaches the module's own tensor: they share one TensorImpl
      if (t.dim() == 4) t.set_data(t.data().contiguous(torch::MemoryFormat::ChannelsLast));
}

void ScriptedModel::UseAutocast(c10::ScalarType dtype) { autocast_ = dtype; }

std::vector<torch::jit::IValue> ScriptedModel::Args(
    const std::vector<torch::Tensor>& inputs) const {
  std::vector<torch::jit::IValue> args;
  args.reserve(inputs.size() + 1);
  for (const auto& x : inputs) {
    if (channels_last_ && x.dim() == 4 && x.is_floating_point())
      args.emplace_back(x.contiguous(torch::MemoryFormat::ChannelsLast));
    else
      args.emplace_back(x);
  }
  return args;
}

namespace {

// forward's output as one tensor: itself, or a tuple's (a NamedTuple's) first element.
StatusOr<torch::Tensor> OutputTensor(const torch::jit::IValue& out) {
  if (out.isTensor()) return out.toTensor();
  if (out.isTuple()) {
    const auto& elements = out.toTupleRef().elements();
    if (!elements.empty() && elements[0].isTensor()) return elements[0].toTensor();
    return InvalidArgument("forward returned a Tuple whose first element is " +
                           (elements.empty() ? std::string("missing") : elements[0].tagKind()) +
                           ", not a Tensor (the output is a tuple's first element)");
  }
  return InvalidArgument("forward returned " + out.tagKind() +
                         ", not a Tensor or a tuple whose first element is one");
}

}  // namespace

StatusOr<torch::Tensor> ScriptedModel::Forward(std::vector<torch::jit::IValue> args) {
  if (!autocast_) return OutputTensor(module_.forward(std::move(args)));
  torch::jit::IValue out;
  {
    CpuAutocast on(*autocast_);
    out = module_.forward(std::move(args));
  }
  ASSIGN_OR_RETURN(torch::Tensor t, OutputTensor(out));
  if (parameters().empty()) return t;
  const auto dtype = parameters().front().scalar_type();
  return t.is_floating_point() && t.scalar_type() != dtype ? t.to(dtype) : t;
}

namespace {

// The probe (TryForward) has seen forward's output: a step's Forward that is no tensor now is a
// model that changed its output between calls, an error like any other LibTorch raises.
torch::Tensor Must(StatusOr<torch::Tensor> t) {
  if (!t.ok()) throw std::runtime_error(t.status().message());
  return std::move(*t);
}

}  // namespace

torch::Tensor ScriptedModel::forward(torch::Tensor x) { return Must(Forward(Args({x}))); }

StatusOr<torch::Tensor> ScriptedModel::TryForward(const std::vector<torch::Tensor>& inputs) {
  try {
    return Forward(Args(inputs));
  } catch (const std::exception& e) {
    return InvalidArgument("forward refused the inputs: " + TorchMessage(e));
  }
}

torch::Tensor ScriptedModel::Loss(const std::vector<torch::Tensor>& inputs,
                                  const torch::Tensor& target) {
  namespace F = torch::nn::functional;
  std::vector<torch::jit::IValue> args = Args(inputs);
  if (loss_ == "output") {  // forward(inputs..., targets) is the loss
    args.emplace_back(target);
    return Must(Forward(std::move(args)));
  }
  torch::Tensor out = Must(Forward(std::move(args)));
  if (loss_ == "mse") return F::mse_loss(out, target);
  // A class per position ([B, T, vocab] against [B, T]): the mean over every position, as
  // F.cross_entropy(logits.view(-1, vocab), targets.view(-1)) takes it.
  if (out.dim() > 2) return F::cross_entropy(out.reshape({-1, out.size(-1)}), target.reshape({-1}));
  return F::cross_entropy(out, target);
}

void ScriptedModel::train(bool on) {
  module_.train(on);
  Model::train(on);
}

}  // namespace shoal
