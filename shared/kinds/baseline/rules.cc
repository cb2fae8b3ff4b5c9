// baseline: N workers that train nothing; each touches `touch_mib` MiB of fresh memory, holds it
// `hold_ms`, and ends. What a bare worker process costs under each start method (the floor under
// every kind's memory figures), and what a page's first touch costs on this machine (the page
// fault cost that makes machines of one kind differ several-fold).
#include "shared/ipc/layout.h"
#include "shared/kinds/baseline/board.h"
#include "shared/kinds/baseline/figures.h"
#include "shared/kinds/kind.h"

namespace shoal {
namespace {

constexpr uint32_t kMaxTouchMib = 64 << 10;  // 64 GiB a worker
constexpr uint32_t kMaxHoldMs = 3600 * 1000;

void Defaults(v1::ExperimentSpec* s, const SpecLimits&) {
  if (!s->has_model()) s->set_model("none");
  if (!s->baseline().has_touch_mib()) s->mutable_baseline()->set_touch_mib(64);
  if (!s->baseline().has_hold_ms()) s->mutable_baseline()->set_hold_ms(500);
}

Status AtMost(const char* field, uint32_t v, uint32_t max) {
  if (v <= max) return Status::Ok();
  return InvalidArgument(std::string(field) + ": " + std::to_string(v) +
                         " is outside the allowed range 0.." + std::to_string(max));
}

Status Validate(const v1::ExperimentSpec& s, const SpecLimits&) {
  RETURN_IF_ERROR(AtMost("touch_mib", s.baseline().touch_mib(), kMaxTouchMib));
  return AtMost("hold_ms", s.baseline().hold_ms(), kMaxHoldMs);
}

// Each worker: its touched memory and a bare shoal-worker (LibTorch loaded, no model); the
// leader likewise.
StatusOr<ExperimentEstimate> Estimate(const v1::ExperimentSpec& s) {
  constexpr uint64_t kProcessBytes = 160ull << 20;
  ExperimentEstimate e;
  e.shm_bytes = BoardBytes(s.workers());
  e.memory_bytes =
      kProcessBytes + s.workers() * (kProcessBytes + (uint64_t(s.baseline().touch_mib()) << 20));
  return e;
}

}  // namespace

KindRules BaselineRules() {
  KindRules k;
  k.name = "baseline";
  k.summary = "N workers that train nothing: a bare worker's memory, a page's first-touch cost";
  k.models = {"none"};
  k.leader_why = "baseline's leader is shoal-worker, whose code its forked workers run";
  k.fields = {
      {"touch_mib", "baseline.touch_mib",
       "baseline: MiB of fresh memory each worker touches, a page at a time (0: none)", "64"},
      {"hold_ms", "baseline.hold_ms", "baseline: how long each worker holds it before ending",
       "500"},
  };
  k.references = {
      {"touch_mib",
       "baseline: MiB of fresh anonymous memory each worker maps and writes a byte of every "
       "4 KiB page of, timed (its first touch: the page faults); 0 .. 65536, 0 for none"},
      {"hold_ms",
       "baseline: how long each worker holds its touched memory before it ends, so the "
       "sampler reads it; 0 .. 3600000"},
  };
  // Every common field but these is about training.
  k.ignores = CommonFieldsBut({"kind", "model", "workers", "start", "device", "sample_interval_ms",
                               "name", "stall_timeout_ms", "force"});
  k.defaults = Defaults;
  k.validate = Validate;
  k.estimate = Estimate;
  k.read_board = baseline::ReadBoard;
  k.summarize = baseline::Summarize;
  k.report_tables = baseline::ReportTables;
  k.spec_lines = baseline::SpecLines;
  k.result_lines = baseline::ResultLines;
  return k;
}

}  // namespace shoal
