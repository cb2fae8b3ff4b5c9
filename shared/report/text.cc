#include "shared/report/text.h"

#include <cstdarg>
#include <cstdio>
#include <map>
#include <string>

#include "shared/spec/spec_fields.h"

namespace shoal::text {

std::string F(const char* fmt, ...) {
  va_list ap, again;
  va_start(ap, fmt);
  va_copy(again, ap);
  const int n = std::vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  std::string out(n > 0 ? size_t(n) : 0, '\0');
  if (n > 0) std::vsnprintf(out.data(), out.size() + 1, fmt, again);
  va_end(again);
  return out;
}

std::string Gib(uint64_t b) { return F("%.2f GiB", double(b) / double(1ull << 30)); }
std::string Mib(uint64_t b) { return F("%.0fM", double(b) / double(1ull << 20)); }
std::string MibIf(bool known, uint64_t b) { return known ? Mib(b) : "-"; }
std::string GibIf(bool known, uint64_t b) { return known ? Gib(b) : "-"; }
std::string SizeIf(bool known, uint64_t b) {
  return !known ? "-" : b >= (1ull << 30) ? Gib(b) : Mib(b);
}
std::string MsIf(bool known, double ms) { return known ? F("%.0f", ms) : "-"; }

std::string Optimizer(const v1::ExperimentSpec& s) {
  std::string out = s.optimizer().name();
  for (const auto& f : SpecFields()) {
    if (f.path.rfind("optimizer.", 0) != 0 || f.name == "optimizer") continue;
    if (f.name == "optimizer_in_backward") continue;  // said once, after the options
    std::string v = SpecFieldText(s, f);
    if (!v.empty()) out += " " + f.name + " " + v;
  }
  if (s.optimizer().in_backward()) out += ", stepped in the backward pass";
  return out;
}

std::string Length(const v1::ExperimentSpec& s) {
  if (!s.has_epochs()) return F("batch %u x %u batches", s.batch_size(), s.batches());
  std::string out = F("batch %u x %u epochs", s.batch_size(), s.epochs());
  if (s.has_epoch_samples()) out += F(" of %u samples", s.epoch_samples());
  return out;
}

std::string HostText(const v1::Host& h) {
  std::string o =
      h.hostname() + ": " + (h.cpu_model().empty() ? "CPU ?" : h.cpu_model()) +
      F(", %u cores, %s, Linux %s", h.cores(), Gib(h.memory_bytes()).c_str(), h.kernel().c_str());
  o += "; LibTorch " + h.libtorch() + ", Shoal " + h.shoal();
  if (h.gpus().empty()) return o;
  std::map<std::string, int> models;
  for (const auto& g : h.gpus()) ++models[g];
  std::string gpus;
  for (const auto& [m, n] : models) gpus += (gpus.empty() ? "" : ", ") + F("%d x ", n) + m;
  return o + "; GPU " + gpus + (h.nvidia_driver().empty() ? "" : ", driver " + h.nvidia_driver()) +
         (h.cuda_driver().empty() ? "" : ", CUDA " + h.cuda_driver());
}

}  // namespace shoal::text
