#include "client/report/report.h"

#include <google/protobuf/util/json_util.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include "client/report/pbjson.h"
#include "client/report/svg_chart.h"
#include "shared/kinds/kind.h"
#include "shared/report/text.h"
#include "shared/spec/spec_fields.h"
#include "shared/spec/sweep.h"

namespace shoal {
namespace {

using namespace report;

struct Metric {
  const char* key;
  const char* title;
  const char* format;
  bool gpu;
  Getter get;
  bool only_when_measured = false;  // no table when no point has the figure
};

template <typename T>
Getter If(bool (v1::Result::*has)() const, T (v1::Result::*get)() const) {
  return [has, get](const v1::Result& r) -> std::optional<double> {
    if (!(r.*has)()) return std::nullopt;
    return double((r.*get)());
  };
}

std::optional<double> EpochTrainS(const v1::Result& r) {
  if (r.epochs().empty()) return std::nullopt;
  const v1::EpochResult& e = r.epochs(std::min(1, r.epochs_size() - 1));  // epoch 2: 1 warms up
  if (!e.has_train_ms()) return std::nullopt;  // cuda_sync step: not timed apart from data
  return e.train_ms() / 1000;
}

std::vector<Metric> Metrics() {
  return {
      {"host_memory_gib", "Host memory: peak sum of PSS over all processes (GiB)", "%.2f", false,
       [](const v1::Result& r) -> std::optional<double> {
         if (!r.has_peak_pss_sum_bytes()) return std::nullopt;
         return double(r.peak_pss_sum_bytes()) / double(1ull << 30);
       }},
      {"leader_memory_gib",
       "The leader's own peak PSS (GiB), mostly reached as it loads the data set, before any "
       "worker shares its pages (its share at the sum's peak, inside the fixed part, is smaller)",
       "%.2f", false,
       [](const v1::Result& r) -> std::optional<double> {
         if (!r.has_leader_peak_pss_bytes()) return std::nullopt;
         return double(r.leader_peak_pss_bytes()) / double(1ull << 30);
       },
       true},
      {"gpu_memory_gib", "GPU memory: peak sum over the experiment's processes (GiB, NVML)", "%.2f",
       true,
       [](const v1::Result& r) -> std::optional<double> {
         if (!r.has_peak_gpu_memory_bytes()) return std::nullopt;
         return double(r.peak_gpu_memory_bytes()) / double(1ull << 30);
       }},
      {"gpu_util_percent", "GPU utilisation: mean while training, its devices (%, NVML)", "%.0f",
       true,
       [](const v1::Result& r) -> std::optional<double> {
         if (!r.has_gpu_util_mean_percent()) return std::nullopt;
         return r.gpu_util_mean_percent();
       }},
      {"gpu_sm_active_percent",
       "GPU SM activity: share of SMs busy, mean while training, its devices (%, NVML GPM)", "%.1f",
       true, If(&v1::Result::has_gpu_sm_active_percent, &v1::Result::gpu_sm_active_percent), true},
      {"gpu_joules_per_sample",
       "GPU energy per sample (J): its devices' mean power over the training window / samples/s",
       "%.4f", true, If(&v1::Result::has_gpu_joules_per_sample, &v1::Result::gpu_joules_per_sample),
       true},
      {"cpu_joules_per_sample",
       "CPU energy per sample (J): the CPU packages' mean power (RAPL) over the training window "
       "/ samples/s",
       "%.4f", false,
       If(&v1::Result::has_cpu_joules_per_sample, &v1::Result::cpu_joules_per_sample), true},
      {"samples_per_sec", "Throughput (samples/s, all workers)", "%.1f", false,
       [](const v1::Result& r) -> std::optional<double> {
         if (!r.has_samples_per_sec()) return std::nullopt;
         return r.samples_per_sec();
       }},
      {"start_ms", "start_ms: first worker requested -> every worker training (ms)", "%.0f", false,
       [](const v1::Result& r) -> std::optional<double> {
         if (!r.has_start_ms()) return std::nullopt;  // not every worker was seen to start
         return r.start_ms();
       }},
      {"epoch_train_s",
       "Training time of epoch 2 (s): the slowest worker's epoch less its data loading (forward, "
       "backward, update; data_parallel's all-reduce wait too); epoch 1 is warm-up (epoch 1 when "
       "there is only one)",
       "%.2f", false, EpochTrainS},
      {"final_loss", "Training loss (mean of the last batches of every worker)", "%.4f", false,
       [](const v1::Result& r) -> std::optional<double> {
         if (!r.has_last_loss()) return std::nullopt;
         return r.last_loss();
       }},
      {"test_accuracy", "Test accuracy (worker 0, after training)", "%.3f", false,
       [](const v1::Result& r) -> std::optional<double> {
         if (!r.has_test_accuracy()) return std::nullopt;
         return r.test_accuracy();
       }},
  };
}

// The names the sweep's model files were uploaded under, by hash (the daemon fills them in).
std::shared_ptr<const std::map<std::string, std::string>> FileNames(const ReportInput& in) {
  auto names = std::make_shared<std::map<std::string, std::string>>();
  for (const auto& [id, e] : in.experiments) {
    const std::string& ref = e.spec().model_file();
    if (!ref.empty() && !e.model_file().name().empty())
      (*names)[ref] = e.model_file().name() + " (" + ref.substr(0, 15) + ")";
  }
  return names;
}

// One view per run: every point of the sweep, repeats apart.
std::vector<PointView> RunViews(const ReportInput& in) {
  std::vector<PointView> out;
  const auto file_names = FileNames(in);
  for (const auto& p : in.sweep.points()) {
    PointView v{&p, nullptr, {}, file_names};
    if (auto it = in.experiments.find(p.experiment_id()); it != in.experiments.end())
      v.experiment = &it->second;
    if (v.experiment != nullptr) v.runs = {v.experiment};
    for (const auto& x : p.values()) v.values[x.field()] = x.value();
    if (p.values().empty()) {  // a sweep stored before axes existed
      v.values = {{"workers", std::to_string(p.workers())},
                  {"start", p.start()},
                  {"share", p.share() ? "yes" : "no"},
                  {"device", p.device()}};
    }
    out.push_back(std::move(v));
  }
  return out;
}

// Of the runs a cell counts, the one with the median throughput (the lower middle of an even
// count); else its latest run with a record.
const v1::Experiment* Representative(const PointView& cell) {
  auto counted = CountedRuns(cell);
  if (counted.empty()) return cell.runs.empty() ? nullptr : cell.runs.back();
  std::stable_sort(counted.begin(), counted.end(), [](const auto* a, const auto* b) {
    return a->result().samples_per_sec() < b->result().samples_per_sec();
  });
  return counted[(counted.size() - 1) / 2];
}

// One view per grid cell, its repeated runs together.
std::vector<PointView> Points(const ReportInput& in) {
  const std::vector<PointView> runs = RunViews(in);
  const size_t cells = Cells(in.sweep);
  if (cells == runs.size()) return runs;
  std::vector<PointView> out(runs.begin(), runs.begin() + long(cells));
  for (auto& v : out) {
    v.repeats = runs.size() / cells;
    v.runs.clear();
  }
  for (const auto& r : runs) {
    PointView& v = out[CellOf(in.sweep, *r.point)];
    if (r.experiment != nullptr) v.runs.push_back(r.experiment);
    if (!v.point->note().empty() && r.point->note().empty()) v.point = r.point;
  }
  for (auto& v : out) v.experiment = Representative(v);
  return out;
}

ReportLayout MakeLayout(const v1::Sweep& sweep) {
  ReportLayout l;
  auto axes = VaryingAxes(sweep);
  auto col = std::find_if(axes.begin(), axes.end(),
                          [](const v1::Axis& a) { return a.field() == "workers"; });
  if (col == axes.end() && !axes.empty()) col = std::prev(axes.end());
  if (col == axes.end()) {
    l.columns = {"value"};
    return l;
  }
  l.column_field = col->field();
  l.columns.assign(col->values().begin(), col->values().end());
  for (const auto& a : axes)
    if (a.field() != l.column_field) l.row_fields.push_back(a.field());
  return l;
}

bool OnGpu(const PointView& v) {
  return v.point->device() == "cuda" ||
         (v.experiment != nullptr && v.experiment->result().has_peak_gpu_memory_bytes());
}

Table GridTable(const std::vector<PointView>& points, const ReportLayout& l, const Metric& m) {
  Table t;
  t.key = m.key;
  t.title = m.title;
  t.column_field = l.column_field;
  t.columns = l.columns;
  t.row_fields = l.row_fields;
  for (const auto& v : points) {
    // CPU points have no GPU figures: the GPU tables list GPU points only, as the study's do
    // (and any other point whose processes NVML saw on a GPU).
    if (m.gpu && !OnGpu(v)) continue;
    const auto labels = Labels(v, l.row_fields);
    auto row = std::find_if(t.rows.begin(), t.rows.end(),
                            [&](const Row& r) { return r.labels == labels; });
    if (row == t.rows.end())
      row = t.rows.insert(t.rows.end(), {labels, std::vector<Cell>(l.columns.size())});
    row->cells[ColumnOf(v, l)] = PointCell(v, t, m.gpu, m.get, m.format);
  }
  if (t.rows.empty() && m.gpu) t.empty_note = "no GPU points in this sweep";
  return t;
}

// Every point was told not to evaluate (--eval-samples 0): the accuracy table would be all "-".
bool NoneEvaluated(const std::vector<PointView>& points) {
  return std::all_of(points.begin(), points.end(), [](const PointView& v) {
    // Absent: a kind that does not evaluate (multi_model).
    return v.experiment != nullptr && v.experiment->spec().eval_samples() == 0;
  });
}

bool AnyMeasured(const std::vector<PointView>& points, const Getter& get) {
  return std::any_of(points.begin(), points.end(), [&](const PointView& v) {
    return std::any_of(v.runs.begin(), v.runs.end(),
                       [&](const v1::Experiment* e) { return get(e->result()).has_value(); });
  });
}

bool AnyGpu(const std::vector<PointView>& points) {
  return std::any_of(points.begin(), points.end(), OnGpu);
}

bool AnyEpochs(const std::vector<PointView>& points) {
  return std::any_of(points.begin(), points.end(), [](const PointView& v) {
    return v.experiment != nullptr && v.experiment->spec().has_epochs();
  });
}

bool OptimizerVaries(const v1::Sweep& sweep) {
  for (const auto& a : VaryingAxes(sweep)) {
    const SpecField* f = FindSpecField(a.field());
    if (f != nullptr && f->path.rfind("optimizer.", 0) == 0) return true;
  }
  return false;
}

}  // namespace

std::vector<v1::Axis> VaryingAxes(const v1::Sweep& sweep) {
  std::vector<v1::Axis> out;
  auto axes = SweepAxes(sweep.spec());
  if (!axes.ok()) return out;
  for (const auto& a : *axes)
    if (a.values_size() > 1) out.push_back(a);
  return out;
}

std::vector<std::pair<std::string, std::string>> FixedFields(const ReportInput& in) {
  std::set<std::string> varying;
  for (const auto& a : VaryingAxes(in.sweep)) varying.insert(a.field());
  const auto points = Points(in);
  const bool ran = std::any_of(points.begin(), points.end(),
                               [](const PointView& v) { return v.experiment != nullptr; });
  std::vector<std::pair<std::string, std::string>> out;
  for (const auto& f : SpecFields()) {
    if (varying.count(f.name) || f.name == "name" || f.name == "force") continue;
    // The experiments the tables show (an earlier attempt of a point run again is not one).
    std::set<std::string> seen;
    for (const auto& v : points)
      if (v.experiment != nullptr) seen.insert(SpecFieldText(v.experiment->spec(), f));
    if (!ran) seen.insert(SpecFieldText(in.sweep.spec().base(), f));
    // Absent at some points and present at others (an option of one optimiser) is "per point".
    if (seen.size() == 1 && !seen.begin()->empty()) out.push_back({f.name, *seen.begin()});
    if (seen.size() > 1) out.push_back({f.name, "per point"});
  }
  return out;
}

namespace {

constexpr size_t kCurveColumns = 6;

// Loss of worker 0 at evenly spaced steps and training times, common to every point.
std::vector<Table> CurveTables(const std::vector<PointView>& points,
                               const std::vector<std::string>& fields) {
  // Steps run to the longest curve ("-" past a shorter one's end); times span what every point
  // covers (from the last first point to the first last point), so every cell holds a loss that
  // was measured.
  uint64_t max_step = 0;
  double t_from = 0, t_to = -1;
  for (const auto& v : points) {
    if (v.experiment == nullptr || v.experiment->result().curve().empty()) continue;
    const auto& curve = v.experiment->result().curve();
    max_step = std::max<uint64_t>(max_step, curve.rbegin()->step());
    t_from = std::max(t_from, curve.begin()->t_ms());
    t_to = t_to < 0 ? curve.rbegin()->t_ms() : std::min(t_to, curve.rbegin()->t_ms());
  }
  if (max_step == 0) return {};
  t_to = std::max(t_to, t_from);
  std::vector<uint64_t> steps;
  std::vector<double> times;
  std::vector<std::string> step_cols, time_cols;
  for (size_t k = 1; k <= kCurveColumns; ++k) {  // marks that coincide are shown once
    const uint64_t step = std::max<uint64_t>(1, max_step * k / kCurveColumns);
    if (steps.empty() || step != steps.back()) {
      steps.push_back(step);
      step_cols.push_back(std::to_string(step));
    }
    const double t = t_from + (t_to - t_from) * double(k - 1) / (kCurveColumns - 1);
    const std::string heading = Fmt("%.2f s", t / 1000);
    if (time_cols.empty() || heading != time_cols.back()) {
      times.push_back(t);
      time_cols.push_back(heading);
    }
  }
  // The latest curve point at or before x (steps or ms); missing before the first and past the
  // last (a point that stopped at step 20 has no loss at step 40).
  auto at = [](const v1::Result& r, auto key, double x) {
    const v1::CurvePoint* best = nullptr;
    for (const auto& p : r.curve())
      if (double(key(p)) <= x + 1e-9) best = &p;
    const bool past = !r.curve().empty() && double(key(*r.curve().rbegin())) < x - 1e-9;
    return best && !past ? Value(best->loss(), "%.4f") : Missing();
  };
  return {PointTable(points, fields, "loss_by_step", "Training loss of worker 0 against its steps",
                     "step", step_cols,
                     [&](const v1::Experiment& e, size_t k) {
                       return at(
                           e.result(), [](const v1::CurvePoint& p) { return p.step(); },
                           double(steps[k]));
                     }),
          PointTable(points, fields, "loss_by_time",
                     "Training loss of worker 0 against its training time (evaluation excluded)",
                     "time", time_cols, [&](const v1::Experiment& e, size_t k) {
                       return at(
                           e.result(), [](const v1::CurvePoint& p) { return p.t_ms(); }, times[k]);
                     })};
}

// Test accuracy and cumulative training time after each epoch.
std::vector<Table> EpochTables(const std::vector<PointView>& points,
                               const std::vector<std::string>& fields) {
  int epochs = 0;
  for (const auto& v : points)
    if (v.experiment) epochs = std::max(epochs, v.experiment->result().epochs_size());
  if (epochs == 0) return {};
  std::vector<std::string> cols;
  for (int e = 1; e <= epochs; ++e) cols.push_back("epoch " + std::to_string(e));
  auto acc = [](const v1::Experiment& e, size_t k) {
    const v1::Result& r = e.result();
    if (int(k) >= r.epochs_size() || !r.epochs(int(k)).has_test_accuracy()) return Missing();
    return Value(r.epochs(int(k)).test_accuracy(), "%.3f");
  };
  auto time = [](const v1::Experiment& e, size_t k) {
    const v1::Result& r = e.result();
    if (int(k) >= r.epochs_size()) return Missing();
    double t = 0;
    for (size_t e = 0; e <= k; ++e) t += r.epochs(int(e)).wall_ms();
    return Value(t / 1000, "%.2f");
  };
  return {PointTable(points, fields, "accuracy_by_epoch",
                     "Test accuracy (worker 0) after each epoch", "epoch", cols, acc),
          PointTable(points, fields, "time_by_epoch",
                     "Training time (s, slowest worker) to the end of each epoch, data loading "
                     "included, evaluation excluded",
                     "epoch", cols, time)};
}

void MarkdownTable(std::ostringstream& o, const Table& t) {
  o << "\n## " << t.title << "\n\n";
  if (!t.empty_note.empty()) {
    o << "(" << t.empty_note << ")\n";
    return;
  }
  if (!t.column_field.empty()) o << "Columns: " << t.column_field << ".\n\n";
  o << "|";
  for (const auto& f : t.row_fields) o << " " << f << " |";
  for (const auto& c : t.columns) o << " " << c << " |";
  o << "\n|";
  for (size_t i = 0; i < t.row_fields.size() + t.columns.size(); ++i) o << " --- |";
  o << "\n";
  for (const auto& r : t.rows) {
    o << "|";
    for (const auto& l : r.labels) o << " " << l << " |";
    for (const auto& c : r.cells) {
      o << " " << (c.text.empty() ? " " : c.text);
      if (c.footnote) o << " [" << c.footnote << "]";
      o << " |";
    }
    o << "\n";
  }
  for (size_t i = 0; i < t.footnotes.size(); ++i)
    o << "\n[" << i + 1 << "] " << t.footnotes[i] << "\n";
}

std::string CsvField(const std::string& v) {
  if (v.find_first_of(",\"\n") == std::string::npos) return v;
  std::string out = "\"";
  for (char c : v) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

// The value at a dotted path ("command.report_lines_ignored"), null where any part is absent: a
// figure one run's kind has and another's has not (const operator[] on a missing key is undefined).
nlohmann::json JsonPath(const nlohmann::json& j, const std::string& path) {
  const nlohmann::json* at = &j;
  size_t begin = 0;
  while (true) {
    const size_t dot = path.find('.', begin);
    const std::string key = path.substr(begin, dot == std::string::npos ? dot : dot - begin);
    if (!at->is_object()) return nullptr;
    const auto it = at->find(key);
    if (it == at->end()) return nullptr;
    at = &*it;
    if (dot == std::string::npos) return *at;
    begin = dot + 1;
  }
}

std::string JsonScalar(const nlohmann::json& v) {
  if (v.is_null()) return "";
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) return Fmt("%.17g", v.get<double>());
  return v.dump();
}

bool AnyOfKind(const std::vector<PointView>& points, const std::string& kind) {
  return std::any_of(points.begin(), points.end(), [&](const PointView& v) {
    return v.experiment != nullptr && v.experiment->spec().kind() == kind;
  });
}

// A figure to two decimals, where rounding to 0 reads 0.00, never -0.00.
Cell Hundredths(double v) { return Value(std::fabs(v) < 0.005 ? 0.0 : v, "%.2f"); }

// "4" or "4, 8": worker counts as a footnote names them.
std::string CountList(const std::vector<double>& counts) {
  std::string out;
  for (double w : counts) out += (out.empty() ? "" : ", ") + Fmt("%.0f", w);
  return out;
}

// The kind says its workers shared memory that does not grow with them (hogwild's turns).
bool MemorySharedByWorkers(const v1::ExperimentSpec& s) {
  const KindRules* kind = FindKind(s.kind());
  return kind != nullptr && kind->memory_shared_by_workers && kind->memory_shared_by_workers(s);
}

// The worker counts at which some point's workers took turns at their steps (their host memory
// is the shared step arenas', which do not grow with the workers).
std::set<double> TurnsAt(const std::vector<PointView>& points) {
  std::set<double> out;
  for (const auto& v : points)
    if (v.experiment != nullptr && MemorySharedByWorkers(v.experiment->spec()))
      out.insert(v.experiment->spec().workers());
  return out;
}

// The row of `grid` (a memory table whose columns are the worker counts `workers`) as what each
// extra worker costs and the fixed part (the peak at the fewest workers less that many workers'
// share), from its fewest and its most workers with a figure; a footnote naming the counts
// outside those that have none, when there are such; "-" without two worker counts to go by.
// Counts in `turns` are left out, and named: their workers shared step arenas by turns.
Row PerWorkerRow(const Row& row, const std::vector<double>& workers, const std::set<double>& turns,
                 Table& t) {
  std::optional<size_t> lo, hi;
  std::vector<double> turned;  // counts with a figure, left out: their workers took turns
  for (size_t k = 0; k < row.cells.size(); ++k) {
    if (!row.cells[k].has_value) continue;
    if (turns.count(workers[k])) {
      turned.push_back(workers[k]);
      continue;
    }
    if (!lo || workers[k] < workers[*lo]) lo = k;
    if (!hi || workers[k] > workers[*hi]) hi = k;
  }
  const bool slope = lo && workers[*hi] != workers[*lo];
  Row out{row.labels, {Missing(), Missing()}};
  if (slope) {
    const double per =
        (row.cells[*hi].value - row.cells[*lo].value) / (workers[*hi] - workers[*lo]);
    out.cells = {Hundredths(per), Hundredths(row.cells[*lo].value - per * workers[*lo])};
    out.cells[1].ratio = false;
  }
  std::string why;
  std::vector<double> outside;
  for (double w : workers)
    if (slope && (w < workers[*lo] || w > workers[*hi]) && !turns.count(w)) outside.push_back(w);
  if (!outside.empty()) {
    std::sort(outside.begin(), outside.end());
    why = "from " + Fmt("%.0f", workers[*lo]) + " and " + Fmt("%.0f", workers[*hi]) +
          " workers: " + CountList(outside) + (outside.size() == 1 ? " has" : " have") +
          " no figure";
  }
  if (!turned.empty()) {
    std::sort(turned.begin(), turned.end());
    why += (why.empty() ? "" : "; ") + CountList(turned) +
           " left out: their workers took turns at their steps and shared step arenas, a cost "
           "that does not grow with workers";
  }
  if (!why.empty()) {
    const int note = Footnote(t, why);
    for (auto& c : out.cells) c.footnote = note;
  }
  return out;
}

// The study's question of a worker count grid, answered per row of a memory table (`grid`, its
// columns the worker counts): what each extra worker costs and the part that does not grow.
Table PerWorkerTable(const Table& grid, const char* what, const std::set<double>& turns) {
  std::vector<double> workers;
  for (const auto& c : grid.columns) workers.push_back(std::strtod(c.c_str(), nullptr));
  Table t;
  t.key = Lower(what) + "_memory_per_worker_gib";
  t.title = std::string(what) +
            " memory per extra worker (GiB): the peak at the most workers less the peak at the "
            "fewest, over the workers between them; fixed: the peak at the fewest less that many "
            "workers' share (the leader, shared weights, whatever does not grow with workers)";
  t.column_field = "figure";
  t.columns = {"per worker", "fixed"};
  t.row_fields = grid.row_fields;
  for (const auto& g : grid.rows) t.rows.push_back(PerWorkerRow(g, workers, turns, t));
  return t;
}

}  // namespace

std::vector<Table> BuildTables(const ReportInput& in) {
  const auto points = Points(in);
  const ReportLayout l = MakeLayout(in.sweep);
  const bool gpu = AnyGpu(points), epochs = AnyEpochs(points);
  std::vector<Table> tables;
  for (const auto& m : Metrics()) {
    if (m.gpu && !gpu) continue;
    if (std::string(m.key) == "epoch_train_s" && !epochs) continue;
    if (std::string(m.key) == "test_accuracy" && NoneEvaluated(points)) continue;
    if (m.only_when_measured && !AnyMeasured(points, m.get)) continue;
    tables.push_back(GridTable(points, l, m));
    // After each memory table: what each worker adds, where the worker count is the columns.
    const std::string key = m.key;
    if ((key == "host_memory_gib" || key == "gpu_memory_gib") && l.column_field == "workers" &&
        l.columns.size() > 1) {
      const bool host = key == "host_memory_gib";
      tables.push_back(PerWorkerTable(tables.back(), host ? "Host" : "GPU",
                                      host ? TurnsAt(points) : std::set<double>{}));
    }
  }
  std::vector<std::string> fields;
  for (const auto& a : VaryingAxes(in.sweep)) fields.push_back(a.field());
  if (OptimizerVaries(in.sweep)) {
    for (auto& t : CurveTables(points, fields)) tables.push_back(std::move(t));
    for (auto& t : EpochTables(points, fields)) tables.push_back(std::move(t));
  }
  for (const KindRules& kind : AllKinds()) {  // each kind's own tables, in registry order
    if (kind.report_tables == nullptr || !AnyOfKind(points, kind.name)) continue;
    for (auto& t : kind.report_tables({points, l, fields})) tables.push_back(std::move(t));
  }
  return tables;
}

std::string RunsLine(const v1::Sweep& sweep) {
  const uint32_t n = Repeats(sweep.spec());
  if (n <= 1) return "Runs: 1 run per point: each cell is one run, with no spread to judge it by.";
  return "Runs: " + std::to_string(n) +
         " per point, interleaved (every point once, then again, ...). Each cell is the median "
         "of a point's succeeded runs, disturbed runs left out while an undisturbed one is left, "
         "with their (min\u2013max) beside it; a footnote marks a cell whose runs spread over " +
         Fmt("%.0f", kNoisySpread * 100) +
         "% of its median as noisy. Tables of a kind's own figures by variant, stage or replica "
         "show the run with the median throughput.";
}

std::string KindNotes(const ReportInput& in) {
  const std::vector<PointView> points = Points(in);
  std::string out;
  for (const KindRules& k : AllKinds()) {
    if (k.report_note == nullptr) continue;
    const std::string note = k.report_note(points);
    if (!note.empty()) out += (out.empty() ? "" : "\n\n") + note;
  }
  return out;
}

std::vector<std::pair<v1::Host, int>> RunHosts(const ReportInput& in) {
  std::vector<std::pair<v1::Host, int>> hosts;  // each host its runs, in the order first seen
  for (const auto& v : RunViews(in)) {
    if (v.experiment == nullptr || !v.experiment->has_host()) continue;
    const v1::Host& h = v.experiment->host();
    auto same = std::find_if(hosts.begin(), hosts.end(),
                             [&](const auto& k) { return SameHost(k.first, h); });
    if (same == hosts.end())
      hosts.push_back({h, 1});
    else
      ++same->second;
  }
  return hosts;
}

std::string HostsNote(const ReportInput& in) {
  const auto hosts = RunHosts(in);
  if (hosts.empty()) return "";
  if (hosts.size() == 1) return "Host: " + text::HostText(hosts[0].first) + ".";
  std::string out = "Hosts: the runs ran on " + std::to_string(hosts.size()) +
                    " hosts, and a figure from one does not compare with another's:";
  for (const auto& [h, runs] : hosts)
    out += " " + text::HostText(h) + " (" + std::to_string(runs) + (runs == 1 ? " run" : " runs") +
           ");";
  out.back() = '.';
  return out;
}

std::string RenderMarkdown(const ReportInput& in) {
  std::ostringstream o;
  const auto& s = in.sweep;
  o << "# Sweep " << s.id() << (s.spec().name().empty() ? "" : " (" + s.spec().name() + ")") << ": "
    << Lower(v1::ExperimentState_Name(s.state())) << "\n\nFixed:";
  bool first = true;
  for (const auto& [field, value] : FixedFields(in)) {
    o << (first ? " " : ", ") << field << " " << value;
    first = false;
  }
  o << "\n\n" << RunsLine(in.sweep) << "\n";
  if (const std::string hosts = HostsNote(in); !hosts.empty()) o << "\n" << hosts << "\n";
  if (const std::string notes = KindNotes(in); !notes.empty()) o << "\n" << notes << "\n";
  for (const auto& t : BuildTables(in)) MarkdownTable(o, t);
  return o.str();
}

std::string RenderCsv(const ReportInput& in) {
  // Every spec field and every scalar figure of Result, by reflection, so a new one shows up
  // without touching this.
  // A kind's figures (a message such as data_parallel) are columns "data_parallel.step_ms".
  std::vector<std::string> figures;
  const auto* d = v1::Result::descriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const auto* f = d->field(i);
    // Result.threads repeats the spec's threads column: one column per name.
    if (f->is_repeated() || FindSpecField(f->name()) != nullptr) continue;
    if (f->message_type() == nullptr) {
      figures.push_back(f->name());
      continue;
    }
    for (int k = 0; k < f->message_type()->field_count(); ++k)
      if (!f->message_type()->field(k)->is_repeated())
        figures.push_back(f->name() + "." + f->message_type()->field(k)->name());
  }
  std::sort(figures.begin(), figures.end());
  std::ostringstream o;
  o << "sweep_id,index,cell,repeat,note,experiment_id,state,error,host";
  for (const auto& f : SpecFields()) o << "," << f.name;
  for (const auto& k : figures) o << "," << k;
  o << "\n";
  for (const auto& v : RunViews(in)) {
    const v1::Experiment* ex = v.experiment;
    o << in.sweep.id() << "," << v.point->index() << "," << CellOf(in.sweep, *v.point) << ","
      << v.point->repeat() << "," << CsvField(v.point->note()) << "," << v.point->experiment_id()
      << "," << (ex ? Lower(v1::ExperimentState_Name(ex->state())) : "") << ","
      << CsvField(ex ? ex->error() : "") << ","
      << CsvField(ex && ex->has_host() ? ex->host().hostname() : "");
    for (const auto& f : SpecFields()) {
      const std::string value =
          ex ? SpecFieldText(ex->spec(), f) : (v.values.count(f.name) ? v.values.at(f.name) : "");
      o << "," << CsvField(value);
    }
    if (ex == nullptr) {  // no result: every figure empty
      o << std::string(figures.size(), ',') << "\n";
      continue;
    }
    const nlohmann::json r = ToJson(ex->result());
    for (const auto& k : figures) o << "," << CsvField(JsonScalar(JsonPath(r, k)));
    o << "\n";
  }
  return o.str();
}

Status CheckReportInput(const ReportInput& in) {
  const auto points = RunViews(in);
  for (const auto& a : VaryingAxes(in.sweep)) {
    for (const auto& v : points) {
      const std::string where = "sweep point " + std::to_string(v.point->index()) + ": ";
      auto value = v.values.find(a.field());
      if (value == v.values.end()) return InvalidArgument(where + "no value of axis " + a.field());
      if (std::find(a.values().begin(), a.values().end(), value->second) == a.values().end())
        return InvalidArgument(where + a.field() + " '" + value->second +
                               "' is not one of its axis's values");
    }
  }
  return {};
}

ReportInput ReportInputOf(const v1::SweepReport& r) {
  ReportInput in;
  in.sweep = r.sweep();
  for (const auto& e : r.experiments()) in.experiments[e.id()] = e;
  return in;
}

StatusOr<v1::SweepReport> SweepReportFromJson(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("sweep") || !j["sweep"].is_object())
    return InvalidArgument("no \"sweep\" object (want what report --format json writes)");
  v1::SweepReport r;
  google::protobuf::util::JsonParseOptions strict;  // a field of another version is an error
  if (auto st =
          google::protobuf::util::JsonStringToMessage(j["sweep"].dump(), r.mutable_sweep(), strict);
      !st.ok())
    return InvalidArgument("sweep: " + std::string(st.message()));
  const nlohmann::json none = nlohmann::json::array();
  const nlohmann::json& experiments = j.contains("experiments") ? j["experiments"] : none;
  if (!experiments.is_array()) return InvalidArgument("experiments: not a list");
  for (size_t i = 0; i < experiments.size(); ++i) {
    if (auto st = google::protobuf::util::JsonStringToMessage(experiments[i].dump(),
                                                              r.add_experiments(), strict);
        !st.ok())
      return InvalidArgument("experiments[" + std::to_string(i) +
                             "]: " + std::string(st.message()));
  }
  if (Status st = CheckReportInput(ReportInputOf(r)); !st.ok()) return st;
  return r;
}

StatusOr<ReportInput> ReportFromJson(const nlohmann::json& j) {
  StatusOr<v1::SweepReport> r = SweepReportFromJson(j);
  if (!r.ok()) return r.status();
  return ReportInputOf(*r);
}

nlohmann::json RenderJson(const ReportInput& in) {
  nlohmann::json j;
  j["sweep"] = ToJson(in.sweep);
  j["experiments"] = nlohmann::json::array();
  for (const auto& v : RunViews(in))
    if (v.experiment) j["experiments"].push_back(ToJson(*v.experiment));
  j["fixed"] = nlohmann::json::object();
  for (const auto& [field, value] : FixedFields(in)) j["fixed"][field] = value;
  j["tables"] = nlohmann::json::array();
  for (const auto& t : BuildTables(in)) {
    nlohmann::json jt = {{"key", t.key},
                         {"title", t.title},
                         {"columns", t.columns},
                         {"column_field", t.column_field},
                         {"row_fields", t.row_fields},
                         {"footnotes", t.footnotes}};
    jt["rows"] = nlohmann::json::array();
    for (const auto& r : t.rows) {
      nlohmann::json cells = nlohmann::json::array();
      for (const auto& c : r.cells) {
        nlohmann::json jc = {{"value", c.has_value ? nlohmann::json(c.value) : nlohmann::json()},
                             {"text", c.text},
                             {"footnote", c.footnote}};
        if (c.runs > 0) {  // a median of repeated runs
          jc["runs"] = c.runs;
          jc["min"] = c.lo;
          jc["max"] = c.hi;
          jc["noisy"] = c.noisy;
        }
        cells.push_back(jc);
      }
      jt["rows"].push_back({{"labels", r.labels}, {"cells", cells}});
    }
    if (!t.empty_note.empty()) jt["empty_note"] = t.empty_note;
    j["tables"].push_back(jt);
  }
  return j;
}

namespace {

std::string RowLabel(const Table& t, const Row& r) {
  std::string out;
  for (size_t i = 0; i < r.labels.size(); ++i)
    out += (out.empty() ? "" : ", ") + t.row_fields[i] + " " + r.labels[i];
  return out.empty() ? "all" : out;
}

bool Dashed(const Table& t, const Row& r) {
  for (size_t i = 0; i < r.labels.size(); ++i)
    if (t.row_fields[i] == "share" && r.labels[i] == "no") return true;
  return false;
}

const Table* FindTable(const std::vector<Table>& tables, const std::string& key) {
  for (const auto& t : tables)
    if (t.key == key) return &t;
  return nullptr;
}

// One grid table (`key`) drawn against its columns, one polyline per row; a chart of nothing
// (it says so) when the sweep has no such table (GPU figures of a CPU sweep).
std::string GridSvg(const ReportInput& in, const std::string& key, const std::string& title,
                    const std::string& y_label) {
  const auto tables = BuildTables(in);
  const Table* t = FindTable(tables, key);
  LineChart c;
  c.title = title + " — sweep " + in.sweep.id();
  c.y_label = y_label;
  if (t == nullptr) return RenderLineChart(c);
  c.x_label = t->column_field;
  for (size_t i = 0; i < t->columns.size(); ++i) c.x_ticks.push_back({double(i), t->columns[i]});
  for (const auto& r : t->rows) {
    Series s{RowLabel(*t, r), Dashed(*t, r), {}};
    const bool ranged =
        std::any_of(r.cells.begin(), r.cells.end(), [](const Cell& c) { return c.runs > 1; });
    for (size_t i = 0; i < r.cells.size(); ++i) {
      if (!r.cells[i].has_value) continue;
      s.points.push_back({double(i), r.cells[i].value});
      // A median of repeats carries its runs' range; a single run's is itself.
      if (ranged)
        s.ranges.push_back(r.cells[i].runs > 1 ? std::pair{r.cells[i].lo, r.cells[i].hi}
                                               : std::pair{r.cells[i].value, r.cells[i].value});
    }
    c.series.push_back(std::move(s));
  }
  return RenderLineChart(c);
}

std::string LossSvg(const ReportInput& in) {
  std::vector<std::string> fields;
  for (const auto& a : VaryingAxes(in.sweep)) fields.push_back(a.field());
  LineChart c;
  c.title = "Training loss of worker 0 against steps — sweep " + in.sweep.id();
  c.x_label = "steps (worker 0)";
  c.y_label = "training loss";
  for (const auto& v : Points(in)) {
    std::string label;
    for (const auto& f : fields)
      label += (label.empty() ? "" : ", ") + f + " " +
               (v.values.count(f) ? v.values.at(f) : std::string());
    Series s{label.empty() ? "all" : label, false, {}};
    if (v.experiment != nullptr)
      for (const auto& p : v.experiment->result().curve())
        s.points.push_back({double(p.step()), p.loss()});
    c.series.push_back(std::move(s));
  }
  return RenderLineChart(c);
}

// Throughput against peak host memory: a scatter of the cells (their medians) per row, each
// labelled by its column, and the Pareto front joined.
std::string ParetoSvg(const ReportInput& in) {
  const auto tables = BuildTables(in);
  const Table* mem = FindTable(tables, "host_memory_gib");
  const Table* thr = FindTable(tables, "samples_per_sec");
  LineChart c;
  c.title = "Throughput against peak host memory — sweep " + in.sweep.id();
  c.x_label = "peak host memory, GiB (sum of PSS)";
  c.y_label = "samples/s (all workers)";
  std::vector<std::pair<double, double>> all;
  for (size_t r = 0; mem && thr && r < mem->rows.size(); ++r) {
    const Row& m = mem->rows[r];
    auto t = std::find_if(thr->rows.begin(), thr->rows.end(),
                          [&](const Row& x) { return x.labels == m.labels; });
    if (t == thr->rows.end()) continue;
    Series s{RowLabel(*mem, m), false, {}, true, {}};
    for (size_t k = 0; k < m.cells.size() && k < t->cells.size(); ++k) {
      if (!m.cells[k].has_value || !t->cells[k].has_value) continue;
      s.points.push_back({m.cells[k].value, t->cells[k].value});
      s.labels.push_back(mem->column_field.empty() ? ""
                                                   : mem->column_field + " " + mem->columns[k]);
      all.push_back(s.points.back());
    }
    c.series.push_back(std::move(s));
  }
  c.series.push_back({"Pareto front", false, ParetoFront(all)});
  return RenderLineChart(c);
}

}  // namespace

std::vector<std::pair<double, double>> ParetoFront(std::vector<std::pair<double, double>> points) {
  // By memory, then by throughput, highest first: a point is on the front when it beats the
  // throughput of every point with no more memory.
  std::sort(points.begin(), points.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first < b.first : a.second > b.second;
  });
  std::vector<std::pair<double, double>> front;
  for (const auto& p : points)
    if (front.empty() || p.second > front.back().second) front.push_back(p);
  return front;
}

std::string RenderSvg(const ReportInput& in, const std::string& plot) {
  if (plot == "loss") return LossSvg(in);
  if (plot == "pareto") return ParetoSvg(in);
  if (plot == "throughput")
    return GridSvg(in, "samples_per_sec", "Throughput (samples/s, all workers)", "samples/s");
  if (plot == "gpu-memory")
    return GridSvg(in, "gpu_memory_gib", "Peak GPU memory (NVML, summed over the processes)",
                   "GPU memory, GiB (NVML)");
  if (plot == "gpu-util")
    return GridSvg(in, "gpu_util_percent", "GPU utilisation (NVML, mean while training)",
                   "GPU utilisation, %");
  return GridSvg(in, "host_memory_gib", "Peak host memory (sum of PSS)",
                 "host memory, GiB (sum of PSS)");
}

bool HasGpuFigures(const ReportInput& in) { return AnyGpu(Points(in)); }

namespace {

std::string FootnoteText(const Table& t, const Cell& c) {
  return c.footnote > 0 ? t.footnotes[size_t(c.footnote - 1)] : "";
}

// A footnote that says how a figure was made, not how its runs went.
std::string Making(const std::string& note) {
  return note.rfind("median of", 0) == 0 || note.rfind("noisy", 0) == 0 ? "" : note;
}

bool SameMaking(const std::string& a, const std::string& b) { return Making(a) == Making(b); }

// b / a of two cells; where both are medians of repeats whose ranges overlap, marked as not
// distinguishable (the ratio may be noise).
Cell RatioCell(const Cell& a, const Cell& b, Table& t) {
  Cell out = Value(b.value / a.value, "%.2f");
  if (a.runs > 1 && b.runs > 1 && a.lo <= b.hi && b.lo <= a.hi) {
    out.text += " ~";
    out.footnote =
        Footnote(t, "~: the two cells' runs overlap (min\u2013max): not distinguishable");
  }
  return out;
}

}  // namespace

std::string RenderCompareMarkdown(const ReportInput& a, const ReportInput& b) {
  const auto ta = BuildTables(a), tb = BuildTables(b);
  std::ostringstream o;
  o << "# Sweep " << b.sweep.id() << " / sweep " << a.sweep.id() << " (ratio of each cell)\n\n"
    << "A: " << RunsLine(a.sweep) << "\n\nB: " << RunsLine(b.sweep) << "\n";
  for (const Table& x : ta) {
    auto y = std::find_if(tb.begin(), tb.end(), [&](const Table& t) { return t.key == x.key; });
    if (x.rows.empty() || y == tb.end()) continue;
    Table ratio = x;
    ratio.footnotes.clear();
    for (auto& r : ratio.rows) {
      auto other = std::find_if(y->rows.begin(), y->rows.end(),
                                [&](const Row& q) { return q.labels == r.labels; });
      for (size_t i = 0; i < r.cells.size(); ++i) {
        Cell out = Missing();
        auto col = std::find(y->columns.begin(), y->columns.end(), x.columns[i]);
        if (other != y->rows.end() && col != y->columns.end()) {
          const Cell& ca = r.cells[i];
          const Cell& cb = other->cells[size_t(col - y->columns.begin())];
          // Figures made the same way only: neither an intercept, both with the same footnote
          // (a per-worker figure from other worker counts is another figure).
          if (ca.has_value && cb.has_value && ca.value != 0 && ca.ratio && cb.ratio &&
              SameMaking(FootnoteText(x, ca), FootnoteText(*y, cb)))
            out = RatioCell(ca, cb, ratio);
        }
        r.cells[i] = out;
      }
    }
    std::ostringstream part;
    MarkdownTable(part, ratio);
    o << part.str();
  }
  return o.str();
}

}  // namespace shoal
