#include "server/run_summary.h"

#include <sys/wait.h>

#include <algorithm>
#include <climits>
#include <set>

#include "shared/ipc/layout.h"
#include "shared/kinds/kind.h"
#include "shared/os/process.h"
#include "shared/spec/spec.h"

namespace shoal {
namespace {

using Reports = google::protobuf::RepeatedPtrField<ipc::v1::WorkerReading>;

void FillMemory(const RunFacts& f, v1::Result* r) {
  if (f.sampler.peak_pss_sum) r->set_peak_pss_sum_bytes(*f.sampler.peak_pss_sum);
  if (f.sampler.peak_rss_sum) r->set_peak_rss_sum_bytes(*f.sampler.peak_rss_sum);
  if (f.sampler.peak_uss_sum) r->set_peak_uss_sum_bytes(*f.sampler.peak_uss_sum);
  if (f.sampler.sum_of_peak_pss) r->set_sum_of_peak_pss_bytes(*f.sampler.sum_of_peak_pss);
  uint64_t shared = 0;
  for (const auto& [what, bytes] : f.segments) shared += bytes;
  r->set_shared_bytes(shared);
  if (auto it = f.segments.find("weights"); it != f.segments.end())
    r->set_weights_bytes(it->second);
  if (auto it = f.segments.find("data"); it != f.segments.end()) r->set_data_bytes(it->second);
  r->set_sampler_cpu_ms(NsToMs(f.sampler.cpu_ns));
  r->set_sampler_cpu_percent(100.0 * double(f.sampler.cpu_ns) /
                             double(std::max<uint64_t>(1, f.wall_ns)));
  r->set_smaps_reads(f.sampler.smaps_reads);
  r->set_statm_reads(f.sampler.statm_reads);
}

// Throughput is taken over the time the workers actually trained, whatever the end state: from
// the first worker's first step to the last step any worker finished.
// `phases_timed`: the workers timed data, forward, backward and update apart (not cuda_sync step).
void FillTraining(const Reports& ws, uint32_t workers, uint64_t start_real, bool phases_timed,
                  v1::Result* r) {
  uint64_t first = UINT64_MAX, last_first = 0, last = 0, first_req = UINT64_MAX;
  uint64_t samples = 0, steps = 0, data = 0, fwd = 0, bwd = 0, opt = 0;
  uint32_t started = 0;
  for (const auto& w : ws) {
    samples += w.samples();
    steps += w.steps();
    data += w.data_ns();
    fwd += w.forward_ns();
    bwd += w.backward_ns();
    opt += w.optimizer_ns();
    if (w.first_step_ns() == 0) continue;
    ++started;
    first = std::min(first, w.first_step_ns());
    last_first = std::max(last_first, ReadyNs(w));
    last = std::max(last, w.last_step_ns());
    if (w.requested_ns() > 0) first_req = std::min(first_req, w.requested_ns());
  }
  r->set_samples(samples);
  r->set_steps(steps);
  if (phases_timed) {
    r->set_data_ms(NsToMs(data));
    r->set_forward_ms(NsToMs(fwd));
    r->set_backward_ms(NsToMs(bwd));
    r->set_optimizer_ms(NsToMs(opt));
  }
  if (started == workers && started > 0) {  // every worker reached its first step
    r->set_ready_ms(NsToMs(last_first - std::min(last_first, start_real)));
    if (first_req != UINT64_MAX)
      r->set_start_ms(NsToMs(last_first - std::min(last_first, first_req)));
  }
  if (first != UINT64_MAX && last > first) {
    r->set_train_ms(NsToMs(last - first));
    r->set_samples_per_sec(double(samples) / (double(last - first) / 1e9));
  }
}

void FillLosses(const Reports& ws, v1::Result* r) {
  double first = 0, tail = 0;
  int n = 0;
  for (const auto& w : ws) {
    if (!w.has_first_loss() || !w.has_tail_loss()) continue;
    first += w.first_loss();
    tail += w.tail_loss();
    ++n;
  }
  if (n > 0) {
    r->set_first_loss(first / n);
    r->set_last_loss(tail / n);
  }
  for (const auto& w : ws) {
    if (w.index() != 0) continue;
    if (w.has_test_accuracy()) r->set_test_accuracy(w.test_accuracy());
    if (w.has_test_accuracy() && w.has_eval_images()) r->set_test_images(w.eval_images());
    if (w.has_test_accuracy()) r->set_eval_ms(NsToMs(w.eval_ns()));  // absent: not evaluated
    *r->mutable_curve() = w.curve();
  }
}

// With epochs, worker 0 evaluates between them while the others train on, so the window from the
// first step to the last includes its evaluations. When every sample is in a finished epoch, the
// training time is the epochs' own (each the slowest worker's, evaluation excluded) instead.
void ExcludeEvaluations(v1::Result* r) {
  if (r->epochs().empty()) return;
  double ms = 0;
  uint64_t samples = 0;
  for (const auto& e : r->epochs()) {
    ms += e.wall_ms();
    samples += e.samples();
  }
  if (samples != r->samples() || ms <= 0) return;  // a cut run: keep the window
  r->set_train_ms(ms);
  r->set_samples_per_sec(double(samples) / (ms / 1e3));
}

v1::ProcessInfo* FindWorker(std::map<pid_t, v1::ProcessInfo>& procs, uint32_t index) {
  for (auto& [pid, p] : procs)
    if (p.role() == "worker" && p.index() == int(index)) return &p;
  return nullptr;
}

}  // namespace

uint64_t ReadyNs(const ipc::v1::WorkerReading& w) {
  return w.has_ready_ns() ? w.ready_ns() : w.first_step_ns();
}

namespace {

// Worker 0's evaluations and a worker's kept steps, on the experiment's clock (ms since
// `start_real_ns`); a step starts at its end less its timed phases.
void PlaceEvaluationsAndSteps(const ipc::v1::WorkerReading& w, uint64_t start_real_ns,
                              v1::ProcessInfo* p) {
  auto since_start = [&](uint64_t ns) { return NsToMs(ns - std::min(ns, start_real_ns)); };
  if (w.evaluations() > 0) p->set_evaluations(w.evaluations());
  p->clear_evaluation_spans();
  for (const auto& span : w.eval_spans()) {
    v1::Interval* i = p->add_evaluation_spans();
    i->set_from_ms(since_start(span.start_ns()));
    i->set_to_ms(since_start(span.end_ns()));
  }
  p->clear_timed_steps();
  for (const auto& st : w.step_spans()) {
    const uint64_t total = st.data_ns() + st.forward_ns() + st.backward_ns() + st.comm_ns() +
                           st.optimizer_ns() + st.unsplit_ns();
    v1::TimedStep* t = p->add_timed_steps();
    t->set_step(st.step());
    t->set_start_ms(since_start(st.end_ns() - std::min(st.end_ns(), total)));
    t->set_data_ms(NsToMs(st.data_ns()));
    t->set_forward_ms(NsToMs(st.forward_ns()));
    t->set_backward_ms(NsToMs(st.backward_ns()));
    t->set_comm_ms(NsToMs(st.comm_ns()));
    t->set_optimizer_ms(NsToMs(st.optimizer_ns()));
    t->set_whole_ms(NsToMs(st.unsplit_ns()));
  }
}

}  // namespace

void ApplyWorkerReading(const ipc::v1::WorkerReading& w, uint64_t start_real_ns,
                        v1::ProcessInfo* p) {
  if (w.vmhwm_bytes() > 0) p->set_peak_rss_bytes(w.vmhwm_bytes());
  if (w.has_step_memory()) *p->mutable_step_memory() = w.step_memory();
  if (w.has_step_wait_ns()) p->set_step_wait_ms(NsToMs(w.step_wait_ns()));
  if (w.has_device_alloc_peak_bytes())
    p->set_peak_cuda_allocated_bytes(w.device_alloc_peak_bytes());
  if (w.has_device_reserved_peak_bytes())
    p->set_peak_cuda_reserved_bytes(w.device_reserved_peak_bytes());
  p->set_steps(w.steps());
  if (w.has_last_loss()) p->set_last_loss(w.last_loss());
  if (const uint64_t ready = ReadyNs(w); ready > 0) {
    p->set_ready_ms(NsToMs(ready - std::min(ready, start_real_ns)));
    if (w.requested_ns() > 0) p->set_start_ms(NsToMs(ready - std::min(ready, w.requested_ns())));
  }
  PlaceEvaluationsAndSteps(w, start_real_ns, p);
  // 0: the kind takes no fingerprint (multi_model, pipeline, data_loading's loaders).
  if (w.phase() == ipc::v1::FINISHED && w.weights_checksum() != 0)
    p->set_weights_checksum(Hex64(w.weights_checksum()));
}

void RecordExit(v1::ProcessInfo* p, int status) {
  p->set_alive(false);
  p->set_exit_known(true);
  p->set_exit_code(WIFEXITED(status) ? WEXITSTATUS(status) : -1);
  p->set_signal(WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

const Reports* WorkerReadings(const RunFacts& f) {
  if (f.result) return &f.result->workers();
  if (f.progress) return &f.progress->workers();
  return nullptr;
}

void FillEpochs(const Reports& workers, bool phases_timed, v1::Result* r) {
  std::map<uint32_t, v1::EpochResult> epochs;
  std::map<uint32_t, uint64_t> steps;
  for (const auto& w : workers) {
    for (const auto& x : w.epochs()) {
      v1::EpochResult& e = epochs[x.epoch()];
      e.set_epoch(x.epoch());
      if (x.wall_ns() >= uint64_t(e.wall_ms() * 1e6)) {  // the slowest worker's times
        e.set_wall_ms(NsToMs(x.wall_ns()));
        if (phases_timed) {
          e.set_data_ms(NsToMs(x.data_ns()));
          e.set_train_ms(NsToMs(x.wall_ns() - std::min(x.wall_ns(), x.data_ns())));
        }
      }
      e.set_mean_loss(e.mean_loss() + x.loss_sum());  // a sum until divided below
      e.set_samples(e.samples() + x.samples());
      steps[x.epoch()] += x.steps();
      if (w.index() == 0 && x.has_test_accuracy()) e.set_test_accuracy(x.test_accuracy());
    }
  }
  for (auto& [k, e] : epochs) {
    if (steps[k] == 0) continue;  // only loaders' records: no one trained this epoch
    e.set_mean_loss(e.mean_loss() / double(steps[k]));
    *r->add_epochs() = e;
  }
}

void FillResult(const RunFacts& f, v1::Result* r) {
  r->set_wall_ms(NsToMs(f.wall_ns));
  if (auto it = f.sampler.peak_pss.find(f.leader); it != f.sampler.peak_pss.end())
    r->set_leader_peak_pss_bytes(it->second);
  r->set_threads(f.spec.threads());
  r->set_leader_program(f.leader_program);
  r->set_leader_why(f.leader_why);
  FillMemory(f, r);
  // Every process's own high-water mark, or no sum: one missing would make it a lower bound.
  uint64_t hwm = f.result ? f.result->leader_vmhwm_bytes() : 0;
  bool hwm_known = hwm > 0;
  if (f.result) {
    if (f.result->initial_checksum() != 0)  // hogwild and data_parallel take one
      r->set_initial_weights_checksum(Hex64(f.result->initial_checksum()));
    if (f.result->final_checksum() != 0)  // data_parallel: no weights are shared
      r->set_final_shared_checksum(Hex64(f.result->final_checksum()));
    if (f.result->model_step_bytes() > 0) r->set_model_step_bytes(f.result->model_step_bytes());
    if (!f.result->step_bound_why().empty()) {
      r->set_step_bound_ms(f.result->step_bound_ms());
      r->set_step_bound_why(f.result->step_bound_why());
    }
  }
  if (const Reports* ws = WorkerReadings(f)) {
    const bool phases_timed = TimesEachPhase(f.spec);
    FillTraining(*ws, f.spec.workers(), f.start_real_ns, phases_timed, r);
    FillLosses(*ws, r);
    FillEpochs(*ws, phases_timed, r);
    ExcludeEvaluations(r);
    if (const KindRules* kind = FindKind(f.spec.kind()); kind && kind->summarize)
      kind->summarize(
          {f.spec, *ws, f.sampler.peak_pss, f.sampler.peak_gpu, f.result ? &*f.result : nullptr},
          r);
    for (const auto& w : *ws) {
      hwm += w.vmhwm_bytes();
      hwm_known = hwm_known && w.vmhwm_bytes() > 0;
    }
  } else {
    hwm_known = false;
  }
  if (hwm_known) r->set_peak_rss_hwm_sum_bytes(hwm);
}

void FillProcesses(const RunFacts& f, v1::Experiment* e) {
  std::map<pid_t, v1::ProcessInfo> procs = f.procs;
  if (auto it = procs.find(f.leader); it != procs.end() && f.result)
    if (f.result->leader_vmhwm_bytes() > 0)
      it->second.set_peak_rss_bytes(f.result->leader_vmhwm_bytes());
  if (const Reports* ws = WorkerReadings(f)) {
    for (const auto& w : *ws) {
      if (v1::ProcessInfo* p = FindWorker(procs, w.index()))
        ApplyWorkerReading(w, f.start_real_ns, p);
    }
  }
  if (f.result) {  // exits the leader (or the forkserver) saw
    for (const auto& x : f.result->exits())
      if (v1::ProcessInfo* p = FindWorker(procs, x.index())) RecordExit(p, x.wait_status());
  }
  if (f.leader_exited)
    if (auto it = procs.find(f.leader); it != procs.end()) RecordExit(&it->second, f.leader_status);
  e->clear_processes();
  for (auto& [pid, p] : procs) {
    if (f.group_gone) p.set_alive(false);
    if (auto it = f.sampler.peak_pss.find(pid); it != f.sampler.peak_pss.end())
      p.set_peak_pss_bytes(it->second);
    *e->add_processes() = p;
  }
  SetHelperRows(f.sampler, e);
}

void SetHelperRows(const SamplerFigures& f, v1::Experiment* e) {
  e->clear_fork_server_processes();
  for (const auto& [pid, role] : f.helpers) {
    v1::ProcessInfo* p = e->add_fork_server_processes();
    p->set_pid(pid);
    p->set_role(role);
    p->set_index(-1);
    if (auto it = f.peak_pss.find(pid); it != f.peak_pss.end()) p->set_peak_pss_bytes(it->second);
  }
}

std::pair<v1::ExperimentState, std::string> FinalState(const RunFacts& f) {
  const bool leader_ok =
      f.leader_exited && WIFEXITED(f.leader_status) && WEXITSTATUS(f.leader_status) == 0;
  const bool result_ok = f.result && f.result->ok();
  if (leader_ok && result_ok && f.group_gone && f.runtime_error.empty())
    return {v1::SUCCEEDED, ""};  // it finished before a late cancel could stop it
  // Processes that could not be stopped outlast any state: the error says so whatever it is.
  const std::string stuck = f.runtime_error.empty() ? "" : "; " + f.runtime_error;
  if (f.cancelled) return {v1::CANCELLED, "cancelled by request" + stuck};
  if (f.interrupted)
    return {v1::INTERRUPTED, "shoald was stopped while this experiment ran" + stuck};
  std::string why = f.result ? f.result->error() : "";
  if (why.empty()) why = f.leader_error;
  if (why.empty()) why = f.runtime_error;
  if (why.empty() && f.leader_exited) why = "leader " + DescribeWaitStatus(f.leader_status);
  if (why.empty()) why = "the leader ended without a result";
  return {v1::FAILED, why};
}

LiveFigures Live(const ipc::v1::Progress& p) {
  LiveFigures l;
  double sum = 0;
  int n = 0;
  for (const auto& w : p.workers()) {
    l.steps += w.steps();
    l.samples += w.samples();
    if (w.has_last_loss()) {
      sum += w.last_loss();
      ++n;
    }
  }
  if (n > 0) l.loss = sum / n;
  return l;
}

void LiveRate::Feed(uint64_t count, uint64_t now_ns) {
  constexpr uint64_t kWindowNs = 10'000'000'000ull;
  now_ns_ = now_ns;
  if (last_ && count < *last_) changes_.clear();  // a count that went back is a new one
  if (last_ && count != *last_) changes_.emplace_back(now_ns, count);
  last_ = count;
  while (changes_.size() > 2 && now_ns - changes_[1].first > kWindowNs) changes_.pop_front();
}

std::optional<double> LiveRate::per_sec() const {
  if (changes_.size() < 2) return std::nullopt;
  const auto& [t0, c0] = changes_.front();
  const auto& [t1, c1] = changes_.back();
  const double mean_gap = double(t1 - t0) / double(changes_.size() - 1);
  const double span = now_ns_ - t1 > mean_gap ? double(now_ns_ - t0) : double(t1 - t0);
  return span > 0 ? std::optional<double>(double(c1 - c0) / (span / 1e9)) : std::nullopt;
}

}  // namespace shoal
