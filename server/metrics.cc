#include "server/metrics.h"

#include <cstdio>

namespace shoal {
namespace {

// A label value as the exposition format wants it: \, " and newline escaped.
std::string Label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    out += c == '\n' ? std::string("\\n") : std::string(1, c);
  }
  return out;
}

std::string Num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

void Family(std::string* o, const char* name, const char* type, const char* help) {
  *o += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

std::string ProcessLabels(const MetricsSnapshot::Running& r, const v1::ProcessSample& p) {
  const std::string worker = p.index() >= 0 ? std::to_string(p.index()) : "";
  return "{experiment=\"" + Label(r.id) + "\",kind=\"" + Label(r.kind) + "\",role=\"" +
         Label(p.role()) + "\",worker=\"" + worker + "\"}";
}

void ProcessFamilies(std::string* o, const MetricsSnapshot::Running& r) {
  struct Field {
    const char* name;
    const char* help;
    uint64_t (v1::ProcessSample::*get)() const;
  };
  const Field fields[] = {
      {"shoal_process_rss_bytes", "Resident set size of a process of the running experiment",
       &v1::ProcessSample::rss_bytes},
      {"shoal_process_pss_bytes", "Proportional set size (shared pages split among sharers)",
       &v1::ProcessSample::pss_bytes},
      {"shoal_process_uss_bytes", "Unique set size (pages no other process maps)",
       &v1::ProcessSample::uss_bytes},
  };
  for (const auto& f : fields) {
    Family(o, f.name, "gauge", f.help);
    for (const auto& p : r.sample.processes())
      *o += f.name + ProcessLabels(r, p) + " " + Num(double((p.*f.get)())) + "\n";
  }
}

// NVML's figures, only from a sample that has a reading: an absent figure is not a 0.
void GpuFamilies(std::string* o, const MetricsSnapshot::Running& r) {
  const v1::Sample& s = r.sample;
  if (s.gpus_size() == 0) return;  // no NVML reading in this sample
  Family(o, "shoal_process_gpu_memory_bytes", "gauge",
         "GPU memory NVML lists for a process of the running experiment, all devices");
  for (const auto& p : s.processes()) {
    if (p.has_gpu_memory_bytes())
      *o += "shoal_process_gpu_memory_bytes" + ProcessLabels(r, p) + " " +
            Num(double(p.gpu_memory_bytes())) + "\n";
  }
  Family(o, "shoal_gpu_memory_used_bytes", "gauge", "Memory used on a GPU, by every process on it");
  for (const auto& g : s.gpus())
    if (g.has_memory_used_bytes())
      *o += "shoal_gpu_memory_used_bytes{gpu=\"" + std::to_string(g.index()) + "\"} " +
            Num(double(g.memory_used_bytes())) + "\n";
  Family(o, "shoal_gpu_utilization_percent", "gauge", "GPU busy time over NVML's sample period");
  for (const auto& g : s.gpus())
    if (g.has_util_percent())
      *o += "shoal_gpu_utilization_percent{gpu=\"" + std::to_string(g.index()) + "\"} " +
            Num(double(g.util_percent())) + "\n";
}

void RunningFamilies(std::string* o, const MetricsSnapshot::Running& r) {
  const std::string labels = "{experiment=\"" + Label(r.id) + "\",kind=\"" + Label(r.kind) + "\"}";
  const v1::Sample& s = r.sample;
  Family(o, "shoal_experiment_pss_bytes", "gauge", "Summed PSS of the running experiment");
  *o += "shoal_experiment_pss_bytes" + labels + " " + Num(double(s.total_pss_bytes())) + "\n";
  Family(o, "shoal_experiment_samples_per_second", "gauge",
         "Training samples per second of the running experiment, all workers");
  if (s.has_samples_per_sec())
    *o += "shoal_experiment_samples_per_second" + labels + " " + Num(s.samples_per_sec()) + "\n";
  Family(o, "shoal_experiment_steps", "gauge", "Steps the running experiment's workers have taken");
  *o += "shoal_experiment_steps" + labels + " " + Num(double(s.steps())) + "\n";
  Family(o, "shoal_sampler_cpu_percent", "gauge",
         "CPU the telemetry sampler itself uses, percent of one core");
  *o += "shoal_sampler_cpu_percent" + labels + " " + Num(s.sampler_cpu_percent()) + "\n";
  ProcessFamilies(o, r);
  GpuFamilies(o, r);
}

}  // namespace

std::string RenderMetrics(const MetricsSnapshot& s) {
  std::string o;
  Family(&o, "shoal_experiments", "gauge", "Experiments on record, by state");
  for (int st = v1::QUEUED; st <= v1::INTERRUPTED; ++st) {
    auto it = s.experiments.find(v1::ExperimentState(st));
    std::string name = v1::ExperimentState_Name(v1::ExperimentState(st));
    for (auto& c : name) c = char(std::tolower(static_cast<unsigned char>(c)));
    o += "shoal_experiments{state=\"" + name + "\"} " +
         Num(double(it == s.experiments.end() ? 0 : it->second)) + "\n";
  }
  Family(&o, "shoal_queue_length", "gauge", "Experiments waiting to run");
  auto q = s.experiments.find(v1::QUEUED);
  o += "shoal_queue_length " + Num(double(q == s.experiments.end() ? 0 : q->second)) + "\n";
  if (s.running) RunningFamilies(&o, *s.running);
  return o;
}

}  // namespace shoal
