// command's figures: the report lines it ignored; its spec as `get` shows it.
#include "shared/kinds/command/figures.h"

#include "shared/report/text.h"

namespace shoal::command {

using namespace text;

std::string QuotedArgv(const google::protobuf::RepeatedPtrField<std::string>& argv) {
  std::string out;
  for (const std::string& a : argv) {
    const bool plain = !a.empty() && a.find_first_not_of(
                                         "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN"
                                         "OPQRSTUVWXYZ0123456789_-./=:,+@%") == std::string::npos;
    std::string q = "'";
    for (char c : a) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
    out += (out.empty() ? "" : " ") + (plain ? a : q + "'");
  }
  return out;
}

// A program's figures are what it reported: what it did not say is absent, never 0 (a phase
// only where some rank timed it).
void Summarize(const KindRunFacts& f, v1::Result* r) {
  if (f.leader != nullptr)
    r->mutable_command()->set_report_lines_ignored(f.leader->report_lines_ignored());
  if (r->data_ms() == 0) r->clear_data_ms();
  if (r->forward_ms() == 0) r->clear_forward_ms();
  if (r->backward_ms() == 0) r->clear_backward_ms();
  if (r->optimizer_ms() == 0) r->clear_optimizer_ms();
  if (r->samples() == 0) {
    r->clear_samples();
    r->clear_samples_per_sec();
  }
  if (r->steps() == 0) {
    r->clear_steps();
    r->clear_train_ms();
  }
}

std::string SpecLines(const v1::ExperimentSpec& s) {
  std::string o = F("  spec        command, %u workers, start %s, device %s%s\n", s.workers(),
                    s.start().c_str(), s.device().c_str(),
                    s.has_cuda_devices() ? (", cuda_devices " + s.cuda_devices()).c_str() : "");
  o += "  command     " + QuotedArgv(s.command().argv()) + "\n";
  if (s.command().has_cwd()) o += "  cwd         " + s.command().cwd() + "\n";
  if (!s.command().env().empty()) o += "  env         " + QuotedArgv(s.command().env()) + "\n";
  return o;
}

std::string ResultLines(const v1::Result& r) {
  if (!r.command().has_report_lines_ignored() || r.command().report_lines_ignored() == 0) return "";
  return F("  reports     %lu lines ignored (not a JSON object of known fields, or over 64 KiB)\n",
           UL(r.command().report_lines_ignored()));
}

}  // namespace shoal::command
