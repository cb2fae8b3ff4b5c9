#include "worker/kinds/command/report_reader.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <nlohmann/json.hpp>

#include "shared/os/process.h"
#include "worker/scoreboard.h"

namespace shoal {
namespace {

// The slot's counter of a phase a report may time ("forward_ms"), or nullptr.
std::atomic<uint64_t> WorkerSlot::*PhaseOf(const std::string& key) {
  if (key == "data_ms") return &WorkerSlot::data_ns;
  if (key == "forward_ms") return &WorkerSlot::forward_ns;
  if (key == "backward_ms") return &WorkerSlot::backward_ns;
  if (key == "optimizer_ms") return &WorkerSlot::optimizer_ns;
  return nullptr;
}

}  // namespace

void RankReports::Feed(const char* data, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (data[i] != '\n') {
      if (!skipping_) partial_ += data[i];
      if (partial_.size() > kMaxLine) {  // count it once, drop the rest of it
        ++ignored_;
        partial_.clear();
        skipping_ = true;
      }
      continue;
    }
    if (!skipping_ && !Apply(partial_)) ++ignored_;
    partial_.clear();
    skipping_ = false;
  }
}

bool RankReports::Apply(const std::string& line) {
  const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return false;
  for (const auto& [key, value] : j.items()) {
    const bool count = (key == "step" || key == "samples") && value.is_number_unsigned();
    const bool number = value.is_number() && std::isfinite(value.get<double>());
    const bool loss = key == "loss" && number;
    const bool phase = PhaseOf(key) != nullptr && number && value.get<double>() >= 0 &&
                       value.get<double>() < 1e9;  // ms: under 11 days a step
    if (!count && !loss && !phase) return false;
  }
  if (first_) {
    first_ns_ = MonotonicNs();
    slot_->ready_ns.store(RealtimeNs());
    slot_->first_step_ns.store(RealtimeNs());
    slot_->phase.store(static_cast<uint32_t>(WorkerPhase::kTraining));
  }
  // The first report opens the measured window, as a built-in worker's first step starts it:
  // the samples it reports were made before the window and are not counted.
  if (j.contains("samples") && !first_) slot_->samples.fetch_add(j["samples"].get<uint64_t>());
  for (const auto& [key, value] : j.items())  // a phase's time of this step, as trainers add it
    if (auto member = PhaseOf(key); member != nullptr && !first_)
      (slot_->*member).fetch_add(uint64_t(value.get<double>() * 1e6));
  if (j.contains("loss")) {
    const uint32_t bits = FloatToBits(float(j["loss"].get<double>()));
    if (first_) slot_->first_loss_bits.store(bits);
    slot_->tail_loss_bits.store(bits);
    slot_->last_loss_bits.store(bits);
  }
  const bool has_loss = j.contains("loss");
  const float loss = has_loss ? float(j["loss"].get<double>()) : 0;
  first_ = false;
  MarkStepEnded(slot_);
  const uint64_t step = j.contains("step") ? j["step"].get<uint64_t>() : slot_->steps.load() + 1;
  slot_->steps.store(std::max(step, slot_->steps.load()), std::memory_order_release);
  if (has_loss) AddToCurve(loss);
  return true;
}

void RankReports::AddToCurve(float loss) {
  if (++since_ < stride_) return;
  since_ = 0;
  uint32_t k = slot_->curve_points.load();
  if (k == kCurvePoints) {  // full: keep every other point, take every other one from now on
    for (uint32_t i = 0; i < kCurvePoints / 2; ++i) {
      CurveRecord& to = slot_->curve[i];
      const CurveRecord& from = slot_->curve[2 * i + 1];
      to.step.store(from.step.load());
      to.t_ns.store(from.t_ns.load());
      to.loss_bits.store(from.loss_bits.load());
    }
    k = kCurvePoints / 2;
    stride_ *= 2;
  }
  slot_->curve[k].step.store(slot_->steps.load());
  slot_->curve[k].t_ns.store(MonotonicNs() - first_ns_);
  slot_->curve[k].loss_bits.store(FloatToBits(loss));
  slot_->curve_points.store(k + 1, std::memory_order_release);
}

void RankOutput::Feed(const char* data, size_t n) {
  partial_.append(data, n);
  size_t from = 0;
  std::string out;
  for (size_t nl; (nl = partial_.find('\n', from)) != std::string::npos; from = nl + 1)
    out += prefix_ + partial_.substr(from, nl + 1 - from);
  partial_.erase(0, from);
  if (partial_.size() > 64 * 1024) {  // a line that never ends: out it goes, as it is
    out += prefix_ + partial_ + "\n";
    partial_.clear();
  }
  if (!out.empty()) (void)WriteAll(STDERR_FILENO, out);
}

void RankOutput::Flush() {
  if (!partial_.empty()) (void)WriteAll(STDERR_FILENO, prefix_ + partial_ + "\n");
  partial_.clear();
}

ReportReader::~ReportReader() {
  if (thread_.joinable()) Finish();
  for (int fd : fds_) ::close(fd);
  for (int fd : output_fds_) ::close(fd);
}

void ReportReader::AddOutput(int fd, uint32_t rank) {
  output_fds_.push_back(fd);
  outputs_.emplace_back(rank);
}

void ReportReader::Add(int fd, WorkerSlot* slot) {
  fds_.push_back(fd);
  ranks_.emplace_back(slot);
}

void ReportReader::Start() {
  thread_ = std::thread([this] { Run(); });
}

void ReportReader::Run() {
  std::vector<pollfd> p;
  for (int fd : fds_) p.push_back({fd, POLLIN, 0});
  for (int fd : output_fds_) p.push_back({fd, POLLIN, 0});
  size_t open = p.size();
  char buf[65536];
  while (open > 0) {
    const uint64_t deadline = deadline_ns_.load();
    if (deadline != 0 && MonotonicNs() > deadline) break;
    if (::poll(p.data(), p.size(), 100) < 0 && errno != EINTR) break;
    for (size_t i = 0; i < p.size(); ++i) {
      if (p[i].fd < 0 || p[i].revents == 0) continue;
      const ssize_t n = ::read(p[i].fd, buf, sizeof buf);
      const bool report = i < ranks_.size();
      if (n > 0) {
        report ? ranks_[i].Feed(buf, size_t(n)) : outputs_[i - ranks_.size()].Feed(buf, size_t(n));
      } else if (n == 0 || errno != EINTR) {
        p[i].fd = -1;  // closed: the rank and whatever inherited its end are gone
        --open;
        if (!report) outputs_[i - ranks_.size()].Flush();
      }
    }
  }
  uint64_t ignored = 0;
  for (const auto& r : ranks_) ignored += r.ignored();
  ignored_.store(ignored);
}

uint64_t ReportReader::Finish(uint32_t grace_ms) {
  deadline_ns_.store(MonotonicNs() + uint64_t(grace_ms) * 1000000);
  if (thread_.joinable()) thread_.join();
  return ignored_.load();
}

}  // namespace shoal
