// A user's model: a TorchScript archive (torch.jit.script or torch.jit.trace, then save) loaded
// with torch::jit::load and trained as a Model, so every trainer, the weight segment and the
// optimisers take it as they take the built-in networks. Its parameters and buffers are
// registered on the Model under '/'-joined names: they are the very tensors the scripted module
// computes with, so set_data (shared weights) reaches its forward.
#pragma once

#include <torch/script.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "shared/status.h"
#include "worker/models/models.h"

namespace shoal {

class ScriptedModel : public Model {
 public:
  // Loads the archive at `path`. `loss`: cross_entropy | mse | output (shared/spec/input_spec.h).
  // FAILED_PRECONDITION with TorchScript's own message (escaped, cut) for a file it cannot load.
  static StatusOr<std::shared_ptr<ScriptedModel>> Load(const std::string& path,
                                                       const std::string& loss);

  torch::Tensor forward(torch::Tensor x) override;
  // forward(inputs...) as a tensor; INVALID_ARGUMENT naming what forward did with them.
  StatusOr<torch::Tensor> TryForward(const std::vector<torch::Tensor>& inputs);
  torch::Tensor Loss(const std::vector<torch::Tensor>& inputs,
                     const torch::Tensor& target) override;
  void train(bool on = true) override;

  // The measured options (spec memory_format, autocast), set once after Load, before the
  // weights are laid out or bound. Channels last: every rank-4 parameter and buffer is put in
  // NHWC order now, and every rank-4 floating input at each forward. Autocast: forward runs
  // under CPU autocast to `dtype`; a floating output comes back in the parameters' dtype, so the
  // loss and the gradients' accumulation stay there.
  void UseChannelsLast();
  void UseAutocast(c10::ScalarType dtype);

  // The module's own names of its trainable parameters, in registration order (the Model's are
  // '/'-joined); frozen parameters are the Model's buffers.
  const std::vector<std::string>& parameter_names() const { return names_; }
  size_t frozen() const { return frozen_; }
  // Why this module cannot be trained by Shoal ("" when it can): no trainable parameter, a
  // trainable parameter that is not floating point (float32, float16, bfloat16, float64), a
  // sparse, quantised or complex buffer. Any number of tensors, of any rank.
  std::string Untrainable();

 private:
  ScriptedModel(torch::jit::Module module, std::string loss);
  std::vector<torch::jit::IValue> Args(const std::vector<torch::Tensor>& inputs) const;
  // module_.forward, under autocast when it is on (LibTorch's exceptions pass through), as the
  // output tensor: forward's tensor, or the first element of the tuple it returned (torchvision's
  // GoogLeNetOutputs and InceptionOutputs: the logits). INVALID_ARGUMENT for anything else.
  StatusOr<torch::Tensor> Forward(std::vector<torch::jit::IValue> args);
  torch::jit::Module module_;
  bool channels_last_ = false;
  std::optional<c10::ScalarType> autocast_;
  std::string loss_;
  std::vector<std::string> names_;
  size_t frozen_ = 0;
};

// The message of a LibTorch exception for a user: its first line(s), control characters
// escaped, at most `limit` bytes (TorchScript's messages carry whole source excerpts and stacks).
std::string TorchMessage(const std::exception& e, size_t limit = 600);

// Where the daemon stored the uploaded file `ref` ("sha256:<hex>"): $SHOAL_BLOB_DIR/<hex>, the
// directory shoald gives every process it starts; NOT_FOUND, naming `field`, once it is gone.
StatusOr<std::string> BlobPath(const std::string& field, const std::string& ref);

}  // namespace shoal
