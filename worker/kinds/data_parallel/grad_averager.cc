#include "worker/kinds/data_parallel/grad_averager.h"

#include <algorithm>

#include "shared/kinds/data_parallel/board.h"

namespace shoal {
namespace {

// The dtype a set of tensors is reduced in: the widest of theirs (`dtype_of` each item), and
// float32 for bfloat16, which Gloo (LibTorch 1.13) cannot reduce ("Invalid scalar type").
template <typename Items, typename DtypeOf>
c10::ScalarType OnTheWire(const Items& items, DtypeOf dtype_of) {
  c10::ScalarType widest = dtype_of(*items.begin());
  for (const auto& item : items) widest = c10::promoteTypes(widest, dtype_of(item));
  return widest == torch::kBFloat16 ? torch::kFloat : widest;
}

int64_t SteadyNs(SteadyClock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

}  // namespace

GradAverager::GradAverager(c10::intrusive_ptr<c10d::ProcessGroup> pg, torch::nn::Module& model,
                           WorkerSlot* slot, uint64_t first_bucket_bytes, uint64_t bucket_bytes)
    : pg_(std::move(pg)), params_(model.parameters()), slot_(slot) {
  for (const auto& b : model.buffers())
    if (b.is_floating_point()) buffers_.push_back(b);
  std::vector<uint64_t> sizes;
  for (const auto& p : params_) sizes.push_back(uint64_t(p.numel()) * p.element_size());
  where_.resize(params_.size());
  for (auto& g : AssignBuckets(sizes, first_bucket_bytes, bucket_bytes)) {
    Bucket b;
    int64_t n = 0;
    // Mixed dtypes (a float16 body, a float32 head) reduce in the widest of them.
    const c10::ScalarType dtype =
        OnTheWire(g.params, [this](size_t k) { return params_[k].scalar_type(); });
    for (size_t k : g.params) {
      where_[k] = {buckets_.size(), b.params.size()};
      b.params.push_back(k);
      b.offsets.push_back(n);
      n += params_[k].numel();
    }
    b.flat = torch::zeros({n}, params_.front().options().dtype(dtype));
    b.pending = b.params.size();
    b.arrived.assign(b.params.size(), 0);
    bytes_per_step_ += uint64_t(n) * c10::elementSize(dtype);  // what goes on the wire
    buckets_.push_back(std::move(b));
  }
  for (size_t k = 0; k < params_.size(); ++k)
    params_[k].register_hook([this, k](torch::Tensor grad) { OnGrad(k, grad); });
  if (slot_ != nullptr) {
    data_parallel::BoardOf(slot_)->buckets.store(uint32_t(buckets_.size()));
    uint64_t n = 0;
    for (const auto& p : params_) n += uint64_t(p.numel());
    slot_->parameters.store(n);
  }
}

void GradAverager::OnGrad(size_t param, const torch::Tensor& grad) {
  Bucket& b = buckets_[where_[param].first];
  const size_t pos = where_[param].second;
  torch::Tensor slot = b.flat.narrow(0, b.offsets[pos], params_[param].numel());
  if (grad.defined()) {
    slot.copy_(grad.reshape({-1}));
  } else {  // autograd may call a hook with no gradient: it contributes zero
    slot.zero_();
  }
  b.arrived[pos] = 1;
  if (--b.pending == 0) b.ready = true;
  LaunchReady();
}

// Buckets go out in index order only: every rank must issue its collectives in the same order.
void GradAverager::LaunchReady() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_].ready) {
    Bucket& b = buckets_[next_launch_++];
    std::vector<torch::Tensor> t{b.flat};
    b.launched = SteadyClock::now();
    b.done_ns->store(0);
    b.work = pg_->allreduce(t);
    b.work->getFuture()->addCallback(
        [done = b.done_ns](c10::ivalue::Future&) { done->store(SteadyNs(SteadyClock::now())); });
  }
}

uint64_t GradAverager::AfterBackward() {
  const auto t0 = SteadyClock::now();
  // A parameter backward did not reach (unused this step) contributes a zero gradient.
  for (auto& b : buckets_) {
    if (b.ready) continue;
    for (size_t i = 0; i < b.params.size(); ++i)
      if (!b.arrived[i]) b.flat.narrow(0, b.offsets[i], params_[b.params[i]].numel()).zero_();
    b.ready = true;
  }
  LaunchReady();
  for (auto& b : buckets_) b.work->wait();
  const auto t1 = SteadyClock::now();
  const uint64_t busy = BusyNs();
  torch::NoGradGuard no_grad;
  const double world = pg_->getSize();
  for (auto& b : buckets_) {
    b.flat.div_(world);
    for (size_t i = 0; i < b.params.size(); ++i) {
      torch::Tensor& p = params_[b.params[i]];
      torch::Tensor avg = b.flat.narrow(0, b.offsets[i], p.numel()).view_as(p);
      if (p.grad().defined()) {
        p.mutable_grad().copy_(avg);
      } else {
        // In the parameter's memory order (channels_last: NHWC), as autograd lays gradients out.
        p.mutable_grad() = torch::empty_like(p).copy_(avg);
      }
    }
    b.pending = b.params.size();
    b.arrived.assign(b.params.size(), 0);
    b.ready = false;
    b.work.reset();
  }
  next_launch_ = 0;
  if (slot_ != nullptr) {
    data_parallel::BoardOf(slot_)->allreduce_busy_ns.fetch_add(busy, std::memory_order_relaxed);
    data_parallel::BoardOf(slot_)->allreduce_bytes.fetch_add(bytes_per_step_,
                                                             std::memory_order_relaxed);
  }
  return ElapsedNs(t0, t1);
}

uint64_t GradAverager::BusyNs() const {
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (const auto& b : buckets_) {
    const int64_t start = SteadyNs(b.launched);
    // The callback runs before wait() returns; were it late, count up to now.
    int64_t end = b.done_ns->load();
    if (end == 0) end = SteadyNs(SteadyClock::now());
    spans.push_back({start, std::max(start, end)});
  }
  std::sort(spans.begin(), spans.end());
  int64_t busy = 0, reach = INT64_MIN;
  for (const auto& [s, e] : spans) {
    if (e <= reach) continue;
    busy += e - std::max(s, reach);
    reach = e;
  }
  return uint64_t(busy);
}

void GradAverager::Broadcast(const std::vector<torch::Tensor>& tensors) {
  if (tensors.empty()) return;
  torch::NoGradGuard no_grad;
  const c10::ScalarType dtype =
      OnTheWire(tensors, [](const torch::Tensor& t) { return t.scalar_type(); });
  std::vector<torch::Tensor> flat_parts;
  for (const auto& t : tensors) flat_parts.push_back(t.detach().reshape({-1}).to(dtype));
  std::vector<torch::Tensor> flat{torch::cat(flat_parts)};
  pg_->broadcast(flat)->wait();
  int64_t off = 0;
  for (const auto& t : tensors) {
    t.detach().copy_(flat[0].narrow(0, off, t.numel()).view_as(t));
    off += t.numel();
  }
}

void GradAverager::BroadcastParameters() {
  Broadcast(params_);
  Broadcast(buffers_);
}

uint64_t GradAverager::BroadcastBuffers() {
  if (buffers_.empty()) return 0;
  const auto t0 = SteadyClock::now();
  Broadcast(buffers_);
  return ElapsedNs(t0, SteadyClock::now());
}

}  // namespace shoal
