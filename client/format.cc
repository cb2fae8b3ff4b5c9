#include "client/format.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <map>

#include "shared/kinds/kind.h"
#include "shared/report/text.h"
#include "shared/spec/spec.h"
#include "shared/spec/spec_fields.h"
#include "shared/spec/sweep.h"
#include "shared/spec/wire_check.h"

namespace shoal::cli {
namespace {

using namespace text;

// What the server sent, with every string safe for a terminal (names, errors and events may hold
// anything another user or a bad server put there).
template <typename M>
M Printable(const M& m) {
  M out = m;
  MakePrintable(&out);
  return out;
}

std::string SpecLines(const v1::ExperimentSpec& s) {
  if (const KindRules* kind = FindKind(s.kind()); kind && kind->spec_lines)
    return kind->spec_lines(s);
  std::string o =
      F("  spec        %s %s, %u workers, start %s, share %s, device %s, %s, %u threads\n",
        s.kind().c_str(), s.model().c_str(), s.workers(), s.start().c_str(),
        s.share() ? "yes" : "no", s.device().c_str(), Length(s).c_str(), s.threads());
  if (s.activations() == "lean") o.insert(o.size() - 1, ", activations lean");
  if (s.kernels() == "libtorch") o.insert(o.size() - 1, ", kernels libtorch");
  if (s.cuda_sync() == "step") o.insert(o.size() - 1, ", cuda_sync step");
  o += "  optimiser   " + Optimizer(s) + "\n";
  o += "  dataset     " + s.dataset() + "\n";
  return o;
}

// Which allocator the workers used, and whether it was given or shoald's default (and why).
std::string AllocatorLine(const v1::ExperimentSpec& s) {
  if (!s.has_allocator()) return "";
  return "  allocator   " + s.allocator() +
         (s.allocator_why().empty() ? " (given)" : " (" + s.allocator_why() + ")") + "\n";
}

// The names passed to the experiment's processes (values: get --json).
std::string EnvironmentLine(const v1::Experiment& e) {
  if (e.environment().empty()) return "";
  const std::map<std::string, std::string> env(e.environment().begin(), e.environment().end());
  std::string names;
  for (const auto& [k, v] : env) names += (names.empty() ? "" : ", ") + k;
  return "  environment " + names + " (nothing else passed)\n";
}

// Where it ran (absent on records from before hosts were recorded).
std::string HostLine(const v1::Experiment& e) {
  return e.has_host() ? "  host        " + HostText(e.host()) + "\n" : "";
}

// What held the run's processes (its cgroup, or its process group and /proc, and why).
std::string ContainmentLine(const v1::Experiment& e) {
  return e.containment().empty() ? "" : "  contained   " + e.containment() + "\n";
}

// Kind command: the torch.profiler traces its ranks wrote where Shoal told them.
std::string ProfilesLine(const v1::Experiment& e) {
  if (e.profile_traces().empty()) return "";
  uint64_t bytes = 0;
  for (const auto& t : e.profile_traces()) bytes += t.size_bytes();
  char size[32];
  std::snprintf(size, sizeof size, "%.1f MiB", double(bytes) / double(1 << 20));
  return "  profiles    " + std::to_string(e.profile_traces_size()) + " torch.profiler trace(s), " +
         size + ", in " + e.profile_dir() + "\n";
}

// A point placed on Slurm: its array task, as Slurm last said ("slurm  job 4242_1 PENDING
// (Priority)", "... COMPLETED on node7, exit code 0:0"), and where its output went.
std::string SlurmLine(const v1::Experiment& e) {
  if (!e.has_slurm()) return "";
  const v1::SlurmTaskInfo& t = e.slurm();
  std::string line =
      "  slurm       job " + t.job_id() + "_" + std::to_string(t.task()) + " " + t.state();
  if (!t.reason().empty()) line += " (" + t.reason() + ")";
  if (!t.node().empty()) line += " on " + t.node();
  if (!t.exit_code().empty()) line += ", exit code " + t.exit_code();
  return line + "; output " + t.output() + "\n";
}

// NVML GPM's view of the devices while training, or why there is none.
std::string GpmLine(const v1::Result& r) {
  if (!r.has_gpu_sm_active_percent())
    return r.gpm_status().empty() ? "" : "  GPU activity - (" + r.gpm_status() + ")\n";
  return F(
      "  GPU activity SM active %.1f%%, SM occupancy %.1f%%, tensor pipes %.1f%%, DRAM "
      "bandwidth %.1f%% (NVML GPM, mean while training)\n",
      r.gpu_sm_active_percent(), r.gpu_sm_occupancy_percent(), r.gpu_tensor_active_percent(),
      r.gpu_dram_bw_percent());
}

// GPU memory and utilisation (NVML), or why there are none.
std::string GpuLine(const v1::Result& r) {
  if (!r.has_peak_gpu_memory_bytes())
    return r.gpu_status().empty() ? "" : "  GPU         -: " + r.gpu_status() + "\n";
  const std::string util = r.has_gpu_util_mean_percent()
                               ? F("utilisation mean %.0f%%, peak %.0f%% while training",
                                   r.gpu_util_mean_percent(), r.gpu_util_peak_percent())
                               : std::string("utilisation unknown (no reading while training)");
  return F("  GPU         peak memory %s (its processes, summed); %s; %lu NVML readings\n",
           Gib(r.peak_gpu_memory_bytes()).c_str(), util.c_str(), UL(r.gpu_reads())) +
         GpmLine(r);
}

// Energy over the training window, GPU and CPU, each with its mean power and per sample.
std::string EnergyLine(const v1::Result& r) {
  auto part = [](const char* what, bool known, double j, double w, bool per, double jps,
                 const std::string& why) {
    if (!known) return std::string(what) + " - (" + why + ")";
    return F("%s %.1f J, %.1f W mean, %s J/sample", what, j, w, per ? F("%.4f", jps).c_str() : "-");
  };
  if (!r.has_gpu_energy_j() && r.gpu_energy_status().empty() && !r.has_cpu_energy_j() &&
      r.cpu_energy_status().empty())
    return "";
  std::string o = "  energy      ";
  if (r.has_peak_gpu_memory_bytes())
    o += part("GPU", r.has_gpu_energy_j(), r.gpu_energy_j(), r.gpu_power_mean_w(),
              r.has_gpu_joules_per_sample(), r.gpu_joules_per_sample(), r.gpu_energy_status()) +
         "; ";
  return o +
         part("CPU", r.has_cpu_energy_j(), r.cpu_energy_j(), r.cpu_power_mean_w(),
              r.has_cpu_joules_per_sample(), r.cpu_joules_per_sample(), r.cpu_energy_status()) +
         "\n";
}

// "-" for what is not known yet (running), or never will be (interrupted, never started).
std::string CountIf(bool known, uint64_t n) { return known ? std::to_string(n) : "-"; }

std::string MemoryLine(const v1::Result& r) {
  // The segments this kind made (data_loading has no weights segment; its ring is in the total).
  std::string parts;
  if (r.weights_bytes() > 0) parts += "weights " + Mib(r.weights_bytes());
  if (r.data_bytes() > 0) parts += (parts.empty() ? "data " : ", data ") + Mib(r.data_bytes());
  // The kernel's figures of the run's cgroup, where it had the memory controller.
  std::string kernel;
  if (r.has_cgroup_memory_peak_bytes())
    kernel = "; cgroup peak " + GibIf(true, r.cgroup_memory_peak_bytes());
  if (r.oom_kills() > 0) kernel += ", " + std::to_string(r.oom_kills()) + " OOM kill(s)";
  return F(
      "  memory      peak PSS sum %s (sum of peak PSS %s), RSS sum %s, USS sum %s, VmHWM sum "
      "%s; shared %s%s%s\n",
      GibIf(r.has_peak_pss_sum_bytes(), r.peak_pss_sum_bytes()).c_str(),
      GibIf(r.has_sum_of_peak_pss_bytes(), r.sum_of_peak_pss_bytes()).c_str(),
      GibIf(r.has_peak_rss_sum_bytes(), r.peak_rss_sum_bytes()).c_str(),
      GibIf(r.has_peak_uss_sum_bytes(), r.peak_uss_sum_bytes()).c_str(),
      GibIf(r.has_peak_rss_hwm_sum_bytes(), r.peak_rss_hwm_sum_bytes()).c_str(),
      MibIf(r.has_shared_bytes(), r.shared_bytes()).c_str(),
      parts.empty() ? "" : (" (" + parts + ")").c_str(), kernel.c_str());
}

// Which program led the run and what it cost on its own (absent: a record from before either).
std::string LeaderLine(const v1::Result& r) {
  if (r.leader_program().empty() && !r.has_leader_peak_pss_bytes()) return "";
  std::string o = "  leader      " + (r.leader_program().empty() ? "-" : r.leader_program());
  if (r.has_leader_peak_pss_bytes()) o += ", peak PSS " + Mib(r.leader_peak_pss_bytes());
  return o + (r.leader_why().empty() ? "" : " (" + r.leader_why() + ")") + "\n";
}

// The kind's own lines (a hook of its rules), or none: a record may be of a kind this CLI lacks.
template <typename Arg>
std::string KindLines(const v1::ExperimentSpec& s, std::string (*KindRules::*hook)(const Arg&),
                      const Arg& a) {
  const KindRules* kind = FindKind(s.kind());
  return kind && kind->*hook ? (kind->*hook)(a) : "";
}

// A process's role as its kind names it (data_loading's "trainer").
std::string RoleName(const v1::Experiment& e, const v1::ProcessInfo& p) {
  const KindRules* kind = FindKind(e.spec().kind());
  return kind && kind->role_name ? kind->role_name(p) : p.role();
}

// What the rest of the machine did while it ran (absent: not measured).
std::string MachineLine(const v1::Result& r) {
  if (!r.has_disturbed()) return "";
  const std::string cpu = r.has_outside_cpu_cores()
                              ? F("outside CPU %.2f cores", r.outside_cpu_cores())
                              : "outside CPU -";
  if (!r.disturbed()) return "  machine     " + cpu + "; undisturbed\n";
  return "  machine     " + cpu + "; DISTURBED: " + r.disturbance() + "\n";
}

std::string ResultLines(const v1::Experiment& e) {
  const auto& s = e.spec();
  const auto& r = e.result();
  std::string o = MemoryLine(r) + LeaderLine(r);
  o += F("  time        ready_ms %s, start_ms %s, wall_ms %s, train_ms %s, queued_ms %s\n",
         MsIf(r.has_ready_ms(), r.ready_ms()).c_str(), MsIf(r.has_start_ms(), r.start_ms()).c_str(),
         MsIf(r.has_wall_ms(), r.wall_ms()).c_str(), MsIf(r.has_train_ms(), r.train_ms()).c_str(),
         MsIf(r.has_queued_ms(), r.queued_ms()).c_str());
  o += F("  throughput  %s samples/s (%s samples, %s steps)\n",
         r.has_samples_per_sec() ? F("%.1f", r.samples_per_sec()).c_str() : "-",
         CountIf(r.has_samples(), r.samples()).c_str(), CountIf(r.has_steps(), r.steps()).c_str());
  // On the images evaluated: eval_samples asks for at most that many of the test set.
  const std::string acc = r.has_test_accuracy()
                              ? F("%.3f on %s images (%s s)", r.test_accuracy(),
                                  CountIf(r.has_test_images(), r.test_images()).c_str(),
                                  r.has_eval_ms() ? F("%.1f", r.eval_ms() / 1000).c_str() : "-")
                              : "-";
  o += F("  loss        first %s, last %s; test accuracy %s\n",
         r.has_first_loss() ? F("%.4f", r.first_loss()).c_str() : "-",
         r.has_last_loss() ? F("%.4f", r.last_loss()).c_str() : "-", acc.c_str());
  if (r.has_forward_ms() || r.has_data_ms() || r.has_backward_ms() || r.has_optimizer_ms()) {
    o +=
        F("  step split  data %s ms, forward %s ms, backward %s ms, optimiser %s ms (all "
          "workers)\n",
          MsIf(r.has_data_ms(), r.data_ms()).c_str(),
          MsIf(r.has_forward_ms(), r.forward_ms()).c_str(),
          MsIf(r.has_backward_ms(), r.backward_ms()).c_str(),
          MsIf(r.has_optimizer_ms(), r.optimizer_ms()).c_str());
  } else if (!TimesEachPhase(s)) {
    o += "  step split  - (cuda_sync step: the device is waited for once a step)\n";
  }
  if (r.has_sampler_cpu_ms()) {
    o +=
        F("  sampler     %.2f%% of a core (%.1f ms CPU; %lu smaps_rollup walks, %lu statm/stat "
          "reads)\n",
          r.sampler_cpu_percent(), r.sampler_cpu_ms(), UL(r.smaps_reads()), UL(r.statm_reads()));
  } else {
    o += "  sampler     -\n";
  }
  return o + MachineLine(r) + KindLines(s, &KindRules::result_lines, r) + GpuLine(r) +
         EnergyLine(r);
}

// A kind may add a column (data_loading: the CPU time spent making each epoch's batches).
std::string EpochLines(const v1::Result& r, const KindRules* kind) {
  if (r.epochs().empty()) return "";
  // The kind's column, where it has a cell for the first epoch.
  const bool column = kind != nullptr && kind->epoch_cell != nullptr &&
                      !kind->epoch_cell(r, r.epochs(0).epoch()).empty();
  std::string o = F("  epochs      %-5s %9s %9s %9s %9s %9s%s\n", "epoch", "wall s", "data s",
                    "train s", "loss", "accuracy", column ? kind->epoch_column_header.c_str() : "");
  auto secs = [](bool has, double ms) { return has ? F("%9.2f", ms / 1000) : F("%9s", "-"); };
  for (const auto& x : r.epochs()) {
    const std::string acc = x.has_test_accuracy() ? F("%.3f", x.test_accuracy()) : "-";
    const std::string cpu = column ? kind->epoch_cell(r, x.epoch()) : "";
    o += F("              %-5u %9.2f %s %s %9.4f %9s%s\n", x.epoch(), x.wall_ms() / 1000,
           secs(x.has_data_ms(), x.data_ms()).c_str(), secs(x.has_train_ms(), x.train_ms()).c_str(),
           x.mean_loss(), acc.c_str(), cpu.c_str());
  }
  return o;
}

std::string ExitText(const v1::ProcessInfo& p) {
  if (p.alive()) return "running";
  if (!p.exit_known()) return "unknown";
  return p.signal() ? "signal " + std::to_string(p.signal())
                    : "code " + std::to_string(p.exit_code());
}

// A run across nodes: each node's part, where it ran and how it ended.
std::string PartLines(const v1::Experiment& e) {
  if (e.parts_size() == 0) return "";
  std::string o;
  double total = 0;
  bool every = true;  // the sum is known only where every part's figure is
  for (const auto& p : e.parts()) {
    const std::string figures =
        p.has_samples_per_sec() || p.has_peak_pss_sum_bytes() || p.has_sum_of_peak_pss_bytes()
            ? F(", %s samples/s, peak PSS sum %s (sum of peak PSS %s)",
                p.has_samples_per_sec() ? F("%.1f", p.samples_per_sec()).c_str() : "-",
                GibIf(p.has_peak_pss_sum_bytes(), p.peak_pss_sum_bytes()).c_str(),
                GibIf(p.has_sum_of_peak_pss_bytes(), p.sum_of_peak_pss_bytes()).c_str())
            : "";
    total += p.samples_per_sec();
    every = every && p.has_samples_per_sec();
    o += F("  %-11s node %u on %s: %s %s%s%s%s\n", o.empty() ? "parts" : "", p.node_rank(),
           p.daemon().c_str(), p.experiment_id().empty() ? "-" : p.experiment_id().c_str(),
           StateName(p.state()).c_str(), figures.c_str(), p.error().empty() ? "" : ": ",
           p.error().c_str());
  }
  return o + F("  %-11s %s samples/s over all nodes; below: throughput over all nodes, the other "
               "figures node 0's, and every node's processes (a node's rows add up to its sum of "
               "peak PSS)\n",
               "", every ? F("%.1f", total).c_str() : "-");
}

// "... (15 more idle forkserver children, 5-9M each)" for the pool rows after the first.
std::string IdleChildrenLine(const std::vector<const v1::ProcessInfo*>& idle) {
  if (idle.size() < 2) return "";
  uint64_t lo = UINT64_MAX, hi = 0;
  for (size_t i = 1; i < idle.size(); ++i) {
    if (!idle[i]->has_peak_pss_bytes()) continue;
    lo = std::min<uint64_t>(lo, idle[i]->peak_pss_bytes());
    hi = std::max<uint64_t>(hi, idle[i]->peak_pss_bytes());
  }
  const std::string each = hi == 0              ? ""
                           : Mib(lo) == Mib(hi) ? ", " + Mib(lo) + " each"
                                                : ", " + Mib(lo) + "-" + Mib(hi) + " each";
  return F("              ... (%zu more idle forkserver children%s)\n", idle.size() - 1,
           each.c_str());
}

std::string ProcessLines(const v1::Experiment& e) {
  // The GPU column only where NVML saw some process of this experiment.
  const bool gpu = std::any_of(e.processes().begin(), e.processes().end(),
                               [](const auto& p) { return p.has_peak_gpu_memory_bytes(); });
  // A run across nodes has processes on several nodes: say which.
  const bool nodes = std::any_of(e.processes().begin(), e.processes().end(),
                                 [](const auto& p) { return p.has_node(); });
  // The device column only where a worker trained on CUDA.
  const bool cuda = std::any_of(e.processes().begin(), e.processes().end(),
                                [](const auto& p) { return p.has_cuda_device(); });
  std::string o = F("  processes   %s%-7s %-10s %-5s %-8s %-9s %-9s %-8s %s%s%s\n",
                    nodes ? "node " : "", "pid", "role", "index", "start", "peak RSS", "peak PSS",
                    "steps", cuda ? "device " : "", gpu ? "peak GPU  " : "", "exit");
  // The forkserver's processes (a forkserver run's) follow the experiment's own: their memory
  // is in the sums, though they are shoald's (no steps, no exit of theirs to tell).
  auto row = [&](const v1::ProcessInfo& p, bool own) {
    const std::string g =
        (!cuda ? ""
               : F("%-7s ", p.has_cuda_device() ? F("cuda:%u", p.cuda_device()).c_str() : "-")) +
        (!gpu
             ? ""
             : F("%-9s ", MibIf(p.has_peak_gpu_memory_bytes(), p.peak_gpu_memory_bytes()).c_str()));
    o += F("              %s%-7d %-10s %-5s %-8s %-9s %-9s %-8s %s%s\n",
           nodes ? F("%-4u ", p.node()).c_str() : "", p.pid(), RoleName(e, p).c_str(),
           p.index() < 0 ? "-" : std::to_string(p.index()).c_str(),
           p.has_start_ms() ? F("%.0f ms", p.start_ms()).c_str() : "-",
           MibIf(p.has_peak_rss_bytes(), p.peak_rss_bytes()).c_str(),
           MibIf(p.has_peak_pss_bytes(), p.peak_pss_bytes()).c_str(),
           own ? std::to_string(p.steps()).c_str() : "-", g.c_str(),
           own ? ExitText(p).c_str() : "shoald's");
  };
  for (const auto& p : e.processes()) row(p, true);
  // The forkserver's idle children are alike (16 by default): the first one, then their count
  // and range; `--json` lists each.
  std::vector<const v1::ProcessInfo*> idle;
  for (const auto& p : e.fork_server_processes()) {
    if (p.role() != "pool" || idle.empty()) row(p, false);
    if (p.role() == "pool") idle.push_back(&p);
  }
  return o + IdleChildrenLine(idle);
}

// --allocator planned: each worker's arena against its step's live peak, and how replays went.
std::string StepMemoryLines(const v1::Experiment& e) {
  std::string o;
  for (const auto& p : e.processes()) {
    if (!p.has_step_memory()) continue;
    const auto& m = p.step_memory();
    const double packed =
        m.arena_bytes() > 0 ? 100.0 * double(m.peak_live_bytes()) / double(m.arena_bytes()) : 0;
    const std::string faults = m.has_faults_per_step()
                                   ? F("%.0f page faults a step", m.faults_per_step())
                                   : "no step replayed";
    o +=
        F("  %-11s worker %d: arena %s for a live peak of %s (%.1f%% packed); %lu steps replayed, "
          "%lu fell back; %s\n",
          o.empty() ? "step memory" : "", p.index(), Mib(m.arena_bytes()).c_str(),
          Mib(m.peak_live_bytes()).c_str(), packed, UL(m.replayed_steps()), UL(m.fallback_steps()),
          faults.c_str());
  }
  return o;
}

char RoleLetter(const std::string& role) {
  return role == "leader" ? 'L' : role == "forkserver" ? 'F' : role == "pool" ? 'P' : 'w';
}

}  // namespace

std::string StateName(v1::ExperimentState s) {
  std::string n = v1::ExperimentState_Name(s);
  for (auto& c : n) c = static_cast<char>(std::tolower(c));
  return n;
}

// A model file: which one (name, size, hash), what it takes, and what its leader's probe step
// measured.
std::string ModelFileLines(const v1::Experiment& e) {
  const auto& s = e.spec();
  if (!s.has_model_file()) return "";
  const auto& f = e.model_file();
  std::string o =
      "  model file  " + (f.name().empty() ? std::string("(no longer stored)") : f.name());
  if (f.size_bytes() >= (1u << 20)) o += F(", %.1f MiB", double(f.size_bytes()) / (1 << 20));
  if (f.size_bytes() > 0 && f.size_bytes() < (1u << 20))
    o += F(", %.0f KiB", double(f.size_bytes()) / 1024);
  o += ", " + s.model_file() + "\n";
  o += "  input       " + s.input() + ", loss " + s.loss();
  if (s.has_classes()) o += F(", %u classes", s.classes());
  if (s.memory_format() == "channels_last") o += ", channels_last";  // the measured options
  if (s.has_autocast() && s.autocast() != "no") o += ", autocast " + s.autocast();
  if (e.has_dataset_file())
    o += ", data " + e.dataset_file().name() +
         F(" (%.0f KiB)", double(e.dataset_file().size_bytes()) / 1024);
  if (e.result().has_model_step_bytes())
    o += ", one step " + Mib(e.result().model_step_bytes()) + " (the leader's probe)";
  o += "\n";
  if (e.result().has_step_bound_ms())
    o += F("  bound       warm-up and steps %.1f s (", e.result().step_bound_ms() / 1000.0) +
         e.result().step_bound_why() + ")\n";
  return o;
}

std::string FormatExperiment(const v1::Experiment& raw) {
  const v1::Experiment e = Printable(raw);
  std::string o = F("experiment %s  %s%s%s\n", e.id().c_str(), StateName(e.state()).c_str(),
                    e.error().empty() ? "" : ": ", e.error().c_str());
  o += SpecLines(e.spec());
  o += AllocatorLine(e.spec());
  o += KindLines(e.spec(), &KindRules::setting_lines, e.spec());
  o += ModelFileLines(e);
  if (e.state() == v1::QUEUED) return o;
  return o + PartLines(e) + HostLine(e) + ContainmentLine(e) + SlurmLine(e) + EnvironmentLine(e) +
         ProfilesLine(e) + ResultLines(e) + EpochLines(e.result(), FindKind(e.spec().kind())) +
         KindLines(e.spec(), &KindRules::detail_lines, e.result()) + ProcessLines(e) +
         StepMemoryLines(e);
}

// "gpu0 1.5 GiB/80.0 GiB 37%": one device's memory used (by anyone) and utilisation.
std::string DeviceText(const v1::GpuDeviceSample& g) {
  return F("gpu%u %s/%s %s%s%s", g.index(),
           GibIf(g.has_memory_used_bytes(), g.memory_used_bytes()).c_str(),
           GibIf(g.has_memory_total_bytes(), g.memory_total_bytes()).c_str(),
           g.has_util_percent() ? F("%u%%", g.util_percent()).c_str() : "util -",
           g.has_power_mw() ? F(" %.0f W", g.power_mw() / 1000.0).c_str() : "",
           g.has_sm_active_percent() ? F(" SM %.0f%%", g.sm_active_percent()).c_str() : "");
}

std::string FormatSampleLine(const v1::Sample& raw) {
  const v1::Sample s = Printable(raw);
  const std::string loss = std::isnan(s.loss()) ? "-" : F("%.4f", s.loss());
  const std::string total = s.has_steps_total() ? std::to_string(s.steps_total()) : "-";
  const std::string rate = s.has_steps_per_sec() ? F("%.2f", s.steps_per_sec()) : "-";
  std::string o =
      F("t=%.1fs steps %lu/%s %s/s loss %s | PSS %s RSS %s USS %s shm %s | sampler %.2f%%",
        s.t_ms() / 1000, UL(s.steps()), total.c_str(), rate.c_str(), loss.c_str(),
        Mib(s.total_pss_bytes()).c_str(), Mib(s.total_rss_bytes()).c_str(),
        Mib(s.total_uss_bytes()).c_str(), Mib(s.shared_bytes()).c_str(), s.sampler_cpu_percent());
  for (const auto& p : s.processes()) {
    o += F(" | %c%s %s/%s/%s %s", RoleLetter(p.role()),
           p.index() < 0 ? "" : std::to_string(p.index()).c_str(), Mib(p.rss_bytes()).c_str(),
           Mib(p.pss_bytes()).c_str(), Mib(p.uss_bytes()).c_str(),
           p.has_cpu_percent() ? F("%.0f%%", p.cpu_percent()).c_str() : "-");
    if (p.has_gpu_memory_bytes()) o += " gpu " + Mib(p.gpu_memory_bytes());
  }
  if (s.has_gpu_memory_bytes()) o += " | GPU " + Mib(s.gpu_memory_bytes());
  for (const auto& g : s.gpus()) o += " | " + DeviceText(g);
  return o + "\n";
}

std::string FormatSampleTable(const v1::Sample& raw, uint64_t dropped) {
  const v1::Sample s = Printable(raw);
  const std::string loss = std::isnan(s.loss()) ? "-" : F("%.4f", s.loss());
  const std::string total = s.has_steps_total() ? std::to_string(s.steps_total()) : "-";
  const std::string steps = s.has_steps_per_sec() ? F("%.2f", s.steps_per_sec()) : "-";
  const std::string samples = s.has_samples_per_sec() ? F("%.1f", s.samples_per_sec()) : "-";
  std::string o =
      F("t=%.1f s   steps %lu/%s   %s steps/s   %s samples/s   loss %s   sampler "
        "%.2f%% core%s\n\n",
        s.t_ms() / 1000, UL(s.steps()), total.c_str(), steps.c_str(), samples.c_str(), loss.c_str(),
        s.sampler_cpu_percent(),
        dropped ? (", " + std::to_string(dropped) + " dropped").c_str() : "");
  const bool gpu = s.gpus_size() > 0;  // an NVML reading, whatever it could not say
  o += F("%-8s %-7s %10s %10s %10s %7s%s\n", "process", "pid", "RSS", "PSS", "USS", "CPU%",
         gpu ? F(" %10s %5s", "GPU mem", "SM%").c_str() : "");
  // Leader, forkserver, then workers by index.
  std::vector<const v1::ProcessSample*> procs;
  for (const auto& p : s.processes()) procs.push_back(&p);
  auto rank = [](const v1::ProcessSample* p) {
    return p->role() == "leader" ? -2 : p->role() == "forkserver" ? -1 : p->index();
  };
  std::sort(procs.begin(), procs.end(), [&](auto* a, auto* b) { return rank(a) < rank(b); });
  for (const auto* p : procs) {
    std::string name = p->role() == "worker" ? "worker " + std::to_string(p->index()) : p->role();
    const std::string g =
        !gpu ? ""
             : F(" %10s %5s", MibIf(p->has_gpu_memory_bytes(), p->gpu_memory_bytes()).c_str(),
                 p->has_gpu_util_percent() ? F("%.0f", p->gpu_util_percent()).c_str() : "-");
    o += F("%-8s %-7d %10s %10s %10s %7s%s\n", name.c_str(), p->pid(), Mib(p->rss_bytes()).c_str(),
           Mib(p->pss_bytes()).c_str(), Mib(p->uss_bytes()).c_str(),
           p->has_cpu_percent() ? F("%.0f%%", p->cpu_percent()).c_str() : "-", g.c_str());
  }
  o += F(
      "%-8s %-7s %10s %10s %10s%s\n", "total", "", Mib(s.total_rss_bytes()).c_str(),
      Mib(s.total_pss_bytes()).c_str(), Mib(s.total_uss_bytes()).c_str(),
      gpu ? F(" %18s", MibIf(s.has_gpu_memory_bytes(), s.gpu_memory_bytes()).c_str()).c_str() : "");
  o += F("shared segments %s\n", Mib(s.shared_bytes()).c_str());
  for (const auto& d : s.gpus()) o += DeviceText(d) + "\n";
  return o;
}

std::string FormatList(const std::vector<v1::Experiment>& raw) {
  std::vector<v1::Experiment> es;
  for (const auto& e : raw) es.push_back(Printable(e));
  std::string o =
      F("%-12s %-11s %-12s %-9s %7s %-10s %-5s %8s %12s %10s %9s\n", "id", "state", "kind",
        "optimiser", "workers", "start", "share", "wall s", "peak PSS", "samples/s", "start_ms");
  for (const auto& e : es) {
    const auto& r = e.result();
    const bool ran = e.started_unix_ms() != 0;
    const char* share = !e.spec().has_share() ? "-" : e.spec().share() ? "yes" : "no";
    o += F("%-12s %-11s %-12s %-9s %7u %-10s %-5s %8s %12s %10s %9s\n", e.id().c_str(),
           StateName(e.state()).c_str(), e.spec().kind().c_str(),
           e.spec().optimizer().name().c_str(), e.spec().workers(), e.spec().start().c_str(), share,
           r.has_wall_ms() ? F("%.1f", r.wall_ms() / 1000).c_str() : "-",
           GibIf(ran && r.has_peak_pss_sum_bytes(), r.peak_pss_sum_bytes()).c_str(),
           r.has_samples_per_sec() ? F("%.1f", r.samples_per_sec()).c_str() : "-",
           r.has_start_ms() ? F("%.0f", r.start_ms()).c_str() : "-");
  }
  return o;
}

std::string FormatSweepPoints(const v1::Sweep& raw) {
  const v1::Sweep sw = Printable(raw);
  std::string o = F("sweep %s  %s%s%s\n", sw.id().c_str(), StateName(sw.state()).c_str(),
                    sw.error().empty() ? "" : ": ", sw.error().c_str());
  const uint32_t repeats = Repeats(sw.spec());
  if (repeats > 1) o += F("  %u runs of each of %zu points, interleaved\n", repeats, Cells(sw));
  o += F("  %-5s %s%-40s %-12s %-11s %s\n", "point", repeats > 1 ? "run       " : "", "values",
         "experiment", "state", "note");
  for (const auto& p : sw.points()) {
    const std::string values = DescribePoint(p);
    const std::string run =
        repeats > 1 ? F("%-9s ", F("%u of %u", p.repeat() + 1, repeats).c_str()) : std::string();
    o += F("  %-5zu %s%-40s %-12s %-11s %s\n", CellOf(sw, p), run.c_str(),
           values.empty() ? "-" : values.c_str(),
           p.experiment_id().empty() ? "-" : p.experiment_id().c_str(),
           p.note().empty() ? StateName(p.state()).c_str() : "skipped", p.note().c_str());
  }
  return o;
}

std::string FormatSweepRuns(const v1::Experiment& e, const v1::SweepReport& raw) {
  const v1::SweepReport r = Printable(raw);
  const v1::Sweep& sw = r.sweep();
  if (e.sweep_index() >= uint32_t(sw.points_size())) return "";
  const v1::SweepPoint& me = sw.points(int(e.sweep_index()));
  const uint32_t repeats = Repeats(sw.spec());
  std::string o = F("sweep %s, point %zu", sw.id().c_str(), CellOf(sw, me));
  if (repeats <= 1) return o + " (1 run)\n";
  o += F(", run %u of %u; its runs:\n", me.repeat() + 1, repeats);
  for (const auto& p : sw.points()) {
    if (CellOf(sw, p) != CellOf(sw, me)) continue;
    const v1::Experiment* x = nullptr;
    for (const auto& y : r.experiments())
      if (y.id() == p.experiment_id()) x = &y;
    const auto& res = x ? x->result() : v1::Result::default_instance();
    o +=
        F("  run %-3u %-12s %-11s %10s samples/s%s%s\n", p.repeat() + 1,
          p.experiment_id().empty() ? "-" : p.experiment_id().c_str(),
          p.note().empty() ? StateName(p.state()).c_str() : "skipped",
          res.has_samples_per_sec() ? F("%.1f", res.samples_per_sec()).c_str() : "-",
          res.disturbed() ? "  disturbed: " : "", res.disturbed() ? res.disturbance().c_str() : "");
  }
  return o;
}

std::string FormatSweeps(const std::vector<v1::Sweep>& raw) {
  std::vector<v1::Sweep> sweeps;
  for (const auto& sw : raw) sweeps.push_back(Printable(sw));
  std::string o = F("%-12s %-11s %7s %7s  %s\n", "id", "state", "done", "points", "name");
  for (const auto& sw : sweeps) {
    int done = 0;
    for (const auto& p : sw.points())
      if (p.note().empty() && IsTerminal(p.state())) ++done;
    o += F("%-12s %-11s %7d %7d  %s\n", sw.id().c_str(), StateName(sw.state()).c_str(), done,
           sw.points_size(), sw.spec().name().c_str());
  }
  return o;
}

std::string FormatNode(const v1::NodeInfoResponse& raw) {
  const v1::NodeInfoResponse r = Printable(raw);
  std::string o = F("host %s: %u cores, memory %s (available %s), /dev/shm free %s of %s\n",
                    r.hostname().c_str(), r.cores(), Gib(r.memory_total_bytes()).c_str(),
                    Gib(r.memory_available_bytes()).c_str(), Gib(r.shm_free_bytes()).c_str(),
                    Gib(r.shm_total_bytes()).c_str());
  if (r.gpus().empty()) o += "GPUs: none (" + r.gpu_status() + ")\n";
  for (const auto& g : r.gpus()) {
    o += F("GPU %u: %s, %s (%s used), compute capability %s, %s%s\n", g.index(), g.name().c_str(),
           GibIf(g.has_memory_total_bytes(), g.memory_total_bytes()).c_str(),
           GibIf(g.has_memory_used_bytes(), g.memory_used_bytes()).c_str(),
           g.compute_capability().empty() ? "-" : g.compute_capability().c_str(),
           g.has_util_percent() ? F("%u%% busy", g.util_percent()).c_str() : "utilisation -",
           g.uuid().empty() ? "" : (", " + g.uuid()).c_str());
  }
  o += "device cuda: " + r.cuda_status() + "\n";
  o += "versions:";
  const std::map<std::string, std::string> versions(r.versions().begin(), r.versions().end());
  for (const auto& [k, v] : versions) o += " " + k + " " + v + ";";  // sorted: a proto map is not
  o += F("\nstate dir %s, max workers %u, forkserver pid %d (%u restarts)\n", r.state_dir().c_str(),
         r.max_workers(), r.fork_server_pid(), r.fork_server_restarts());
  return o;
}

StatusOr<uint64_t> ParseDurationMs(const std::string& text) {
  static const std::vector<std::pair<std::string, uint64_t>> units = {
      {"ms", 1}, {"s", 1000}, {"m", 60'000}, {"h", 3'600'000}, {"d", 86'400'000}};
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  const std::string unit = text.substr(digits);
  for (const auto& [name, ms] : units) {
    if (unit != name || digits == 0) continue;
    // Over ~5.8e8 years in ms would wrap, and wrap to a short age that prunes nearly everything.
    const uint64_t n = digits > 19 ? 0 : std::stoull(text.substr(0, digits));
    if (digits > 19 || n > UINT64_MAX / ms)
      return InvalidArgument("duration: '" + text.substr(0, 40) + "' is too long to count in ms");
    return n * ms;
  }
  return InvalidArgument("duration: '" + text.substr(0, 40) +
                         "' is not a number with a unit (ms, s, m, h, d), e.g. 30d");
}

std::string RankLines::Take(const std::string& data, bool end) {
  partial_ += data;
  std::string out;
  size_t from = 0;
  for (size_t nl; (nl = partial_.find('\n', from)) != std::string::npos; from = nl + 1) {
    if (partial_.compare(from, prefix_.size(), prefix_) == 0)
      out += partial_.substr(from + prefix_.size(), nl + 1 - from - prefix_.size());
  }
  partial_.erase(0, from);
  if (end && partial_.compare(0, prefix_.size(), prefix_) == 0)
    out += partial_.substr(prefix_.size());
  if (end) partial_.clear();
  return out;
}

}  // namespace shoal::cli
