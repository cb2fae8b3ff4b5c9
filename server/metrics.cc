#include "server/metrics.h"

#include <cstdio>
#include <functional>

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

// The running experiment's labels: its id and kind, its sweep and name where it has them.
std::string ExperimentLabels(const MetricsSnapshot::Running& r) {
  std::string l = "experiment=\"" + Label(r.id) + "\",kind=\"" + Label(r.kind) + "\"";
  if (!r.sweep.empty()) l += ",sweep=\"" + Label(r.sweep) + "\"";
  if (!r.name.empty()) l += ",name=\"" + Label(r.name) + "\"";
  return l;
}

std::string ProcessLabels(const MetricsSnapshot::Running& r, const v1::ProcessSample& p) {
  const std::string worker = p.index() >= 0 ? std::to_string(p.index()) : "";
  return "{" + ExperimentLabels(r) + ",role=\"" + Label(p.role()) + "\",worker=\"" + worker + "\"}";
}

// A GPU's labels: its index, and dcgm-exporter's UUID, modelName and device where NVML named it.
std::string GpuLabels(uint32_t index, const MetricsSnapshot::Node& n) {
  std::string l = "gpu=\"" + std::to_string(index) + "\"";
  auto it = n.gpu_identity.find(index);
  if (it != n.gpu_identity.end())
    l += ",UUID=\"" + Label(it->second.uuid) + "\",modelName=\"" + Label(it->second.model) +
         "\",device=\"nvidia" + std::to_string(index) + "\"";
  return "{" + l + "}";
}

// Every series' labels with Hostname="host" added first (the node's, as dcgm-exporter's).
std::string WithHostname(const std::string& text, const std::string& host) {
  if (host.empty()) return text;
  const std::string label = "Hostname=\"" + Label(host) + "\"";
  std::string out;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string line = text.substr(at, end - at);
    if (!line.empty() && line[0] != '#') {
      const size_t brace = line.find('{'), space = line.find(' ');
      if (brace != std::string::npos && brace < space)
        line.insert(brace + 1, line[brace + 1] == '}' ? label : label + ",");
      else
        line.insert(space, "{" + label + "}");
    }
    out += line + "\n";
    at = end + 1;
  }
  return out;
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

// The running experiment's processes on the GPU, only from a sample that has an NVML reading.
void ProcessGpuFamily(std::string* o, const MetricsSnapshot::Running& r) {
  const v1::Sample& s = r.sample;
  if (s.gpus_size() == 0) return;  // no NVML reading in this sample
  Family(o, "shoal_process_gpu_memory_bytes", "gauge",
         "GPU memory NVML lists for a process of the running experiment, all devices");
  for (const auto& p : s.processes()) {
    if (p.has_gpu_memory_bytes())
      *o += "shoal_process_gpu_memory_bytes" + ProcessLabels(r, p) + " " +
            Num(double(p.gpu_memory_bytes())) + "\n";
  }
}

// Every device's figures NVML gave; a figure it did not give has no series (not a 0). Named
// after dcgm-exporter's fields (docs/operations.md maps them).
void DeviceFamilies(std::string* o, const std::vector<v1::GpuDeviceSample>& gpus,
                    const MetricsSnapshot::Node& n) {
  using G = v1::GpuDeviceSample;
  struct Field {
    const char* name;
    const char* type;
    const char* help;
    bool (G::*has)() const;
    std::function<double(const G&)> get;
  };
  const Field fields[] = {
      {"shoal_gpu_memory_used_bytes", "gauge", "Memory used on a GPU, by every process on it",
       &G::has_memory_used_bytes, [](const G& g) { return double(g.memory_used_bytes()); }},
      {"shoal_gpu_memory_total_bytes", "gauge", "A GPU's memory", &G::has_memory_total_bytes,
       [](const G& g) { return double(g.memory_total_bytes()); }},
      {"shoal_gpu_utilization_percent", "gauge", "GPU busy time over NVML's sample period",
       &G::has_util_percent, [](const G& g) { return double(g.util_percent()); }},
      {"shoal_gpu_power_watts", "gauge", "A GPU's power draw", &G::has_power_mw,
       [](const G& g) { return g.power_mw() / 1000.0; }},
      {"shoal_gpu_energy_joules_total", "counter", "Energy a GPU consumed since its driver loaded",
       &G::has_energy_mj, [](const G& g) { return double(g.energy_mj()) / 1000.0; }},
      {"shoal_gpu_sm_active_ratio", "gauge", "Share of SMs busy (NVML GPM, Hopper and newer)",
       &G::has_sm_active_percent, [](const G& g) { return g.sm_active_percent() / 100; }},
      {"shoal_gpu_sm_occupancy_ratio", "gauge",
       "Warps resident of the most the SMs hold (NVML GPM)", &G::has_sm_occupancy_percent,
       [](const G& g) { return g.sm_occupancy_percent() / 100; }},
      {"shoal_gpu_tensor_active_ratio", "gauge", "Share of time the tensor pipes were busy (GPM)",
       &G::has_tensor_active_percent, [](const G& g) { return g.tensor_active_percent() / 100; }},
      {"shoal_gpu_dram_active_ratio", "gauge", "Share of DRAM bandwidth used (NVML GPM)",
       &G::has_dram_bw_percent, [](const G& g) { return g.dram_bw_percent() / 100; }},
  };
  for (const auto& f : fields) {
    std::string series;
    for (const auto& g : gpus)
      if ((g.*f.has)())
        series += std::string(f.name) + GpuLabels(g.index(), n) + " " + Num(f.get(g)) + "\n";
    if (series.empty()) continue;
    Family(o, f.name, f.type, f.help);
    *o += series;
  }
}

void NodeFamilies(std::string* o, const MetricsSnapshot::Node& n) {
  if (n.shm_free_bytes) {
    Family(o, "shoal_shm_free_bytes", "gauge", "Free space in /dev/shm");
    *o += "shoal_shm_free_bytes " + Num(double(*n.shm_free_bytes)) + "\n";
  }
  if (n.shm_total_bytes) {
    Family(o, "shoal_shm_total_bytes", "gauge", "Size of /dev/shm");
    *o += "shoal_shm_total_bytes " + Num(double(*n.shm_total_bytes)) + "\n";
  }
  if (n.cpu_energy_joules) {
    Family(o, "shoal_cpu_energy_joules_total", "counter",
           "Energy the CPU packages consumed (powercap RAPL; wraps at its range)");
    *o += "shoal_cpu_energy_joules_total " + Num(*n.cpu_energy_joules) + "\n";
  }
  Family(o, "shoal_forkserver_up", "gauge", "1 while shoald's forkserver runs, else 0");
  *o += "shoal_forkserver_up " + Num(n.fork_server_up ? 1 : 0) + "\n";
  Family(o, "shoal_forkserver_restarts_total", "counter", "Times shoald restarted its forkserver");
  *o += "shoal_forkserver_restarts_total " + Num(double(n.fork_server_restarts)) + "\n";
  Family(o, "shoal_build_info", "gauge", "The versions this shoald was built with (always 1)");
  std::string labels;
  for (const auto& [k, v] : n.build)
    labels += (labels.empty() ? "" : ",") + k + "=\"" + Label(v) + "\"";
  *o += "shoal_build_info{" + labels + "} 1\n";
}

void RunningFamilies(std::string* o, const MetricsSnapshot::Running& r) {
  const std::string labels = "{" + ExperimentLabels(r) + "}";
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
  ProcessGpuFamily(o, r);
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
  NodeFamilies(&o, s.node);
  // The devices: the node's reading now; else the running experiment's last sample's.
  if (!s.node.gpus.empty()) {
    DeviceFamilies(&o, s.node.gpus, s.node);
  } else if (s.running) {
    DeviceFamilies(&o, {s.running->sample.gpus().begin(), s.running->sample.gpus().end()}, s.node);
  }
  if (s.running) RunningFamilies(&o, *s.running);
  return WithHostname(o, s.node.hostname);
}

}  // namespace shoal
