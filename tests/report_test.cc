// The sweep report (client/report/report.h): tables laid out by the sweep's varying axes, rendered
// as Markdown (golden files tests/golden/report_*.md), CSV, JSON and SVG, and compared cell by
// cell. Every input is built by hand: the sweep's axes and points, and the experiments' records.
#include "client/report/report.h"

#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "client/report/html.h"
#include "client/report/timeline.h"
#include "shared/spec/spec.h"
#include "shared/spec/spec_fields.h"
#include "shared/spec/sweep.h"

namespace shoal {
namespace {

using Values = std::vector<std::pair<std::string, std::string>>;

constexpr uint64_t kGiB = 1ull << 30;
const char* const kImpossible =
    "impossible: fork + cuda + shared weights (a forked child cannot use the CUDA context of its "
    "parent)";
const char* const kNoGpu = "no GPU: this shoald runs CPU experiments only";
const char* const kPerWorkerTitle =
    " memory per extra worker (GiB): the peak at the most workers less the peak at the fewest, "
    "over the workers between them; fixed: the peak at the fewest less that many workers' share "
    "(the leader, shared weights, whatever does not grow with workers)";

SpecLimits Limits() {
  SpecLimits l;
  l.cores = 4;
  return l;
}

const std::string kOneRun =
    "Runs: 1 run per point: each cell is one run, with no spread to judge it by.";

std::string ReadGolden(const std::string& name) {
  const std::string path = std::string(SHOAL_SOURCE_DIR) + "/tests/golden/" + name;
  std::ifstream f(path);
  EXPECT_TRUE(f.good()) << path;
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// A sweep record and its experiments, as shoald would store them.
class SweepBuilder {
 public:
  SweepBuilder(const std::string& id, const std::string& name, v1::ExperimentSpec base = {}) {
    in_.sweep.set_id(id);
    in_.sweep.mutable_spec()->set_name(name);
    *in_.sweep.mutable_spec()->mutable_base() = std::move(base);
  }
  SweepBuilder& Axis(const std::string& field, const std::vector<std::string>& values) {
    v1::Axis* a = in_.sweep.mutable_spec()->add_axes();
    a->set_field(field);
    for (const auto& v : values) a->add_values(v);
    return *this;
  }
  // A point of the grid with its axis values (in grid order) and the resolved spec's columns.
  int Point(const Values& values, const std::string& note = "") {
    const int index = in_.sweep.points_size();
    v1::SweepPoint* p = in_.sweep.add_points();
    p->set_index(uint32_t(index));
    for (const auto& [field, value] : values) {
      auto* v = p->add_values();
      v->set_field(field);
      v->set_value(value);
    }
    const v1::ExperimentSpec s = Resolved(values);
    p->set_workers(s.workers());
    p->set_start(s.start());
    p->set_share(s.share());
    p->set_device(s.device());
    p->set_note(note);
    values_.push_back(values);
    return index;
  }
  // The experiment that ran the point, in state `state`; its result is the caller's to fill.
  v1::Result* Run(int index, v1::ExperimentState state, const std::string& error = "") {
    v1::Experiment e;
    e.set_id("e" + std::to_string(index));
    *e.mutable_spec() = Resolved(values_[size_t(index)]);
    e.set_state(state);
    e.set_error(error);
    e.set_sweep_id(in_.sweep.id());
    e.set_sweep_index(uint32_t(index));
    v1::SweepPoint* p = in_.sweep.mutable_points(index);
    p->set_experiment_id(e.id());
    p->set_state(state);
    v1::Experiment& stored = in_.experiments[e.id()] = e;
    return stored.mutable_result();
  }
  // Every point so far run `n` times: the points are copied as runs 2..n, run-major, as
  // ExpandGrid lays them out; each copy's experiment is the caller's to Run.
  SweepBuilder& Repeats(uint32_t n) {
    in_.sweep.mutable_spec()->set_repeats(n);
    const int cells = in_.sweep.points_size();
    for (uint32_t r = 1; r < n; ++r) {
      for (int c = 0; c < cells; ++c) {
        const int index = Point(values_[size_t(c)], in_.sweep.points(c).note());
        in_.sweep.mutable_points(index)->set_repeat(r);
      }
    }
    return *this;
  }
  SweepBuilder& State(v1::ExperimentState s) {
    in_.sweep.set_state(s);
    return *this;
  }
  ReportInput Build() const { return in_; }

 private:
  v1::ExperimentSpec Resolved(const Values& values) const {
    v1::ExperimentSpec s = in_.sweep.spec().base();
    for (const auto& [field, value] : values) {
      Status st = SetSpecField(&s, *FindSpecField(field), value);
      EXPECT_TRUE(st.ok()) << st.message();
    }
    ApplyDefaults(&s, Limits());
    return s;
  }

  ReportInput in_;
  std::vector<Values> values_;
};

void Epoch(v1::Result* r, double wall_ms, double data_ms, double train_ms,
           std::optional<double> accuracy) {
  v1::EpochResult* e = r->add_epochs();
  e->set_epoch(uint32_t(r->epochs_size()));
  e->set_wall_ms(wall_ms);
  e->set_data_ms(data_ms);
  e->set_train_ms(train_ms);
  if (accuracy) e->set_test_accuracy(*accuracy);
}

void Curve(v1::Result* r, uint64_t step, double t_ms, double loss) {
  v1::CurvePoint* p = r->add_curve();
  p->set_step(step);
  p->set_t_ms(t_ms);
  p->set_loss(loss);
}

// One varying axis (batch_size), workers fixed in the base: succeeded, failed, and a success
// whose throughput, loss and accuracy were not measured.
ReportInput OneAxis() {
  v1::ExperimentSpec base;
  base.set_workers(2);
  SweepBuilder b("s1", "batch", base);
  b.Axis("batch_size", {"16", "32", "64"}).State(v1::FAILED);
  v1::Result* r = b.Run(b.Point({{"batch_size", "16"}}), v1::SUCCEEDED);
  r->set_peak_pss_sum_bytes(kGiB + kGiB / 2);
  r->set_train_ms(8000);
  r->set_samples_per_sec(256.5);
  r->set_start_ms(123.4);
  r->set_steps(20);
  r->set_last_loss(0.123456);
  r->set_test_accuracy(0.9127);
  r = b.Run(b.Point({{"batch_size", "32"}}), v1::FAILED, "worker 1: killed by signal 9");
  r->set_peak_pss_sum_bytes(2 * kGiB);  // a failed point's figures are not shown
  r->set_samples_per_sec(300);
  r->set_train_ms(100);
  r = b.Run(b.Point({{"batch_size", "64"}}), v1::SUCCEEDED);
  r->set_peak_pss_sum_bytes(3 * kGiB / 4);
  r->set_start_ms(98.6);
  return b.Build();
}

// Two varying axes given as batch_size, optimizer: optimizer labels the rows (it comes first in
// the field table), batch_size is the columns, in the order given. Epochs and loss curves.
ReportInput TwoAxes() {
  v1::ExperimentSpec base;
  base.set_epochs(2);
  SweepBuilder b("s2", "", base);
  b.Axis("batch_size", {"32", "16"}).Axis("optimizer", {"adam", "sgd"}).State(v1::FAILED);

  v1::Result* r = b.Run(b.Point({{"optimizer", "adam"}, {"batch_size", "32"}}), v1::SUCCEEDED);
  r->set_peak_pss_sum_bytes(kGiB);
  r->set_train_ms(5000);
  r->set_samples_per_sec(1000);
  r->set_start_ms(50);
  r->set_steps(100);
  r->set_last_loss(0.2);
  r->set_test_accuracy(0.85);
  Epoch(r, 3000, 500, 2500, 0.8);
  Epoch(r, 2000, 500, 1500, 0.85);
  Curve(r, 25, 1000, 1.0);
  Curve(r, 50, 2000, 0.6);
  Curve(r, 75, 3000, 0.4);
  Curve(r, 100, 4000, 0.3);

  r = b.Run(b.Point({{"optimizer", "adam"}, {"batch_size", "16"}}), v1::SUCCEEDED);
  r->set_peak_pss_sum_bytes(kGiB / 2);
  r->set_train_ms(6000);
  r->set_samples_per_sec(800);
  r->set_start_ms(40);
  r->set_steps(200);
  r->set_last_loss(0.25);
  r->set_test_accuracy(0.7);
  Epoch(r, 5000, 1000, 4000, 0.7);  // one epoch only
  Curve(r, 50, 1500, 0.9);
  Curve(r, 200, 6000, 0.25);

  r = b.Run(b.Point({{"optimizer", "sgd"}, {"batch_size", "32"}}), v1::FAILED, "diverged");
  r->set_peak_pss_sum_bytes(kGiB);

  r = b.Run(b.Point({{"optimizer", "sgd"}, {"batch_size", "16"}}), v1::SUCCEEDED);
  r->set_peak_pss_sum_bytes(kGiB / 4);
  r->set_train_ms(7000);
  r->set_samples_per_sec(500);
  r->set_start_ms(30);
  r->set_steps(200);
  r->set_last_loss(0.15);
  r->set_test_accuracy(0.9);
  Epoch(r, 4000, 1000, 3000, std::nullopt);
  Epoch(r, 3500, 750, 2750, 0.9);
  Curve(r, 100, 3000, 0.5);
  Curve(r, 200, 6600, 0.15);
  return b.Build();
}

struct Figures {
  v1::ExperimentState state = v1::SUCCEEDED;
  uint64_t peak = 0;
  double samples_per_sec = 0, start_ms = 0, last_loss = 0;
  std::optional<double> accuracy;
};

// Three varying axes given as workers, device, start: workers are the columns, start and device
// label the rows. The cuda points cannot run (a note each); `figures` gives each cpu point's.
ReportInput ThreeAxes(
    const std::string& id, const std::vector<std::string>& starts,
    const std::vector<std::string>& workers,
    const std::function<Figures(const std::string&, const std::string&)>& figures) {
  v1::ExperimentSpec base;
  base.set_batches(10);
  SweepBuilder b(id, "", base);
  b.Axis("workers", workers).Axis("device", {"cpu", "cuda"}).Axis("start", starts);
  b.State(v1::FAILED);
  for (const auto& start : starts) {
    for (const std::string device : {"cpu", "cuda"}) {
      for (const auto& w : workers) {
        const Values values = {{"start", start}, {"device", device}, {"workers", w}};
        if (device == "cuda") {
          b.Point(values, start == "fork" ? kImpossible : kNoGpu);
          continue;
        }
        const Figures f = figures(start, w);
        const int k = b.Point(values);
        v1::Result* r =
            b.Run(k, f.state, f.state == v1::FAILED ? "leader: \"oops\", worker 1 died" : "");
        r->set_peak_pss_sum_bytes(f.peak);
        r->set_train_ms(1000);
        r->set_samples_per_sec(f.samples_per_sec);
        r->set_start_ms(f.start_ms);
        r->set_steps(10);
        r->set_last_loss(f.last_loss);
        if (f.accuracy) r->set_test_accuracy(*f.accuracy);
      }
    }
  }
  return b.Build();
}

ReportInput ThreeAxes() {
  return ThreeAxes("s3", {"fork", "spawn"}, {"1", "2"},
                   [](const std::string& start, const std::string& w) {
                     if (start == "fork" && w == "1")
                       return Figures{v1::SUCCEEDED, kGiB, 100, 10, 0.5, 0.5};
                     if (start == "fork") return Figures{v1::SUCCEEDED, 2 * kGiB, 180, 20, 0.6, {}};
                     if (w == "1") return Figures{v1::SUCCEEDED, 3 * kGiB, 90, 30, 0.55, 0.52};
                     return Figures{v1::FAILED, 5 * kGiB, 1, 1, 1, 1.0};
                   });
}

std::vector<std::string> Keys(const std::vector<Table>& tables) {
  std::vector<std::string> out;
  for (const auto& t : tables) out.push_back(t.key);
  return out;
}

// --- Markdown, golden. ---

TEST(ReportTest, MarkdownOneAxisGolden) {
  EXPECT_EQ(RenderMarkdown(OneAxis()), ReadGolden("report_1axis.md"));
}

TEST(ReportTest, MarkdownTwoAxesGolden) {
  EXPECT_EQ(RenderMarkdown(TwoAxes()), ReadGolden("report_2axes.md"));
}

TEST(ReportTest, MarkdownThreeAxesGolden) {
  EXPECT_EQ(RenderMarkdown(ThreeAxes()), ReadGolden("report_3axes.md"));
}

// --- Layout. ---

TEST(ReportTest, WorkersAreTheColumnsWhenTheyVary) {
  const auto tables = BuildTables(ThreeAxes());
  EXPECT_EQ(Keys(tables), (std::vector<std::string>{"host_memory_gib", "host_memory_per_worker_gib",
                                                    "gpu_memory_gib", "gpu_memory_per_worker_gib",
                                                    "gpu_util_percent", "samples_per_sec",
                                                    "start_ms", "final_loss", "test_accuracy"}));
  for (const auto& t : tables) {
    SCOPED_TRACE(t.key);
    const bool per_worker = t.key.find("per_worker") != std::string::npos;
    EXPECT_EQ(t.column_field, per_worker ? "figure" : "workers");
    EXPECT_EQ(t.columns, per_worker ? (std::vector<std::string>{"per worker", "fixed"})
                                    : (std::vector<std::string>{"1", "2"}));
    EXPECT_EQ(t.row_fields, (std::vector<std::string>{"start", "device"}));
  }
  // The GPU tables hold the cuda points only.
  for (const size_t k : {2, 3}) {
    ASSERT_EQ(tables[k].rows.size(), 2u);
    EXPECT_EQ(tables[k].rows[0].labels, (std::vector<std::string>{"fork", "cuda"}));
    EXPECT_EQ(tables[k].rows[1].labels, (std::vector<std::string>{"spawn", "cuda"}));
  }
  EXPECT_EQ(tables[2].footnotes, (std::vector<std::string>{kImpossible, kNoGpu}));
}

TEST(ReportTest, TheLastVaryingAxisIsTheColumnsOtherwise) {
  const auto tables = BuildTables(TwoAxes());
  EXPECT_EQ(Keys(tables), (std::vector<std::string>{"host_memory_gib", "samples_per_sec",
                                                    "start_ms", "epoch_train_s", "final_loss",
                                                    "test_accuracy", "loss_by_step", "loss_by_time",
                                                    "accuracy_by_epoch", "time_by_epoch"}));
  const Table& host = tables[0];
  EXPECT_EQ(host.column_field, "batch_size");
  EXPECT_EQ(host.columns, (std::vector<std::string>{"32", "16"}));  // as given, not sorted
  EXPECT_EQ(host.row_fields, (std::vector<std::string>{"optimizer"}));
  ASSERT_EQ(host.rows.size(), 2u);
  EXPECT_EQ(host.rows[1].labels, (std::vector<std::string>{"sgd"}));
  EXPECT_EQ(host.rows[1].cells[0].text, "failed");
  EXPECT_FALSE(host.rows[1].cells[0].has_value);
  EXPECT_TRUE(host.rows[1].cells[1].has_value);
  EXPECT_DOUBLE_EQ(host.rows[1].cells[1].value, 0.25);
  // The per-point tables label each row with every varying axis.
  EXPECT_EQ(tables[6].row_fields, (std::vector<std::string>{"optimizer", "batch_size"}));
  EXPECT_EQ(tables[6].column_field, "step");
  EXPECT_EQ(tables[6].rows.size(), 4u);
}

TEST(ReportTest, OneValueAxesAreFixedNotLaidOut) {
  SweepBuilder b("s4", "");
  b.Axis("seed", {"5"}).Axis("allocator", {"retain"}).State(v1::SUCCEEDED);
  v1::Result* r = b.Run(b.Point({{"allocator", "retain"}, {"seed", "5"}}), v1::SUCCEEDED);
  r->set_peak_pss_sum_bytes(kGiB);
  r->set_start_ms(7);
  const ReportInput in = b.Build();
  EXPECT_TRUE(VaryingAxes(in.sweep).empty());
  const auto tables = BuildTables(in);
  ASSERT_FALSE(tables.empty());
  EXPECT_EQ(tables[0].column_field, "");
  EXPECT_EQ(tables[0].columns, (std::vector<std::string>{"value"}));
  EXPECT_TRUE(tables[0].row_fields.empty());
  const std::string md = RenderMarkdown(in);
  EXPECT_NE(md.find("## Host memory: peak sum of PSS over all processes (GiB)\n\n"
                    "| value |\n| --- |\n| 1.00 |\n"),
            std::string::npos)
      << md;
  EXPECT_EQ(md.find("Columns:"), std::string::npos) << md;
  EXPECT_NE(
      md.find(
          "allocator retain, concurrent_steps 1, activations pytorch, kernels shoal, eval_samples"),
      std::string::npos)
      << md;
  EXPECT_NE(md.find("seed 5"), std::string::npos) << md;
}

TEST(ReportTest, VaryingAxesAreInGridOrder) {
  const auto axes = VaryingAxes(TwoAxes().sweep);
  ASSERT_EQ(axes.size(), 2u);
  EXPECT_EQ(axes[0].field(), "optimizer");
  EXPECT_EQ(axes[1].field(), "batch_size");
}

TEST(ReportTest, FixedFieldsListWhatDidNotVary) {
  const auto fixed = FixedFields(TwoAxes());
  const std::vector<std::pair<std::string, std::string>> want = {
      {"kind", "hogwild"},
      {"model", "mnist_convnet"},
      {"dataset", "synthetic"},
      {"start", "fork"},
      {"share", "yes"},
      {"device", "cpu"},
      {"lr", "per point"},         // each optimiser's default
      {"momentum", "per point"},   // sgd's, absent for adam
      {"dampening", "per point"},  // sgd's, absent for adam
      {"weight_decay", "0"},
      {"eps", "per point"},
      {"beta1", "per point"},
      {"beta2", "per point"},
      {"amsgrad", "per point"},
      {"optimizer_in_backward", "no"},
      {"epochs", "2"},
      {"threads", "4"},
      {"seed", "1"},
      {"allocator", "planned"},
      {"concurrent_steps", "1"},
      {"activations", "pytorch"},
      {"kernels", "shoal"},
      {"eval_samples", "1000"},
      {"sample_interval_ms", "200"},
      {"stall_timeout_ms", "60000"},
      {"step_timeout_ms", "1800000"},
      {"workers", "1"},
  };
  EXPECT_EQ(fixed, want);
}

TEST(ReportTest, FixedFieldsComeFromTheBaseBeforeAnythingRan) {
  v1::ExperimentSpec base;
  base.set_seed(9);
  base.set_name("label");
  SweepBuilder b("s5", "", base);
  b.Axis("workers", {"1", "2"}).State(v1::QUEUED);
  b.Point({{"workers", "1"}});
  b.Point({{"workers", "2"}});
  EXPECT_EQ(FixedFields(b.Build()),
            (std::vector<std::pair<std::string, std::string>>{{"seed", "9"}}));
}

// --- Cells. ---

TEST(ReportTest, PointsNotRunShowTheirState) {
  SweepBuilder b("s6", "");
  b.Axis("workers", {"1", "2", "4"}).State(v1::RUNNING);
  v1::Result* r = b.Run(b.Point({{"workers", "1"}}), v1::SUCCEEDED);
  r->set_peak_pss_sum_bytes(kGiB);
  b.Run(b.Point({{"workers", "2"}}), v1::RUNNING);
  const int queued = b.Point({{"workers", "4"}});
  ReportInput in = b.Build();
  in.sweep.mutable_points(queued)->set_state(v1::QUEUED);
  const auto tables = BuildTables(in);
  ASSERT_EQ(tables[0].rows.size(), 1u);
  const auto& cells = tables[0].rows[0].cells;
  ASSERT_EQ(cells.size(), 3u);
  EXPECT_EQ(cells[0].text, "1.00");
  EXPECT_EQ(cells[1].text, "running");
  EXPECT_EQ(cells[2].text, "queued");
  EXPECT_NE(RenderMarkdown(in).find("| 1.00 | running | queued |\n"), std::string::npos);
}

TEST(ReportTest, AnUnmeasuredReadyTimeIsADashNotZero) {
  SweepBuilder b("s12", "");
  b.Axis("seed", {"1", "2"}).State(v1::SUCCEEDED);
  b.Run(b.Point({{"seed", "1"}}), v1::SUCCEEDED)->set_start_ms(12);
  b.Run(b.Point({{"seed", "2"}}), v1::SUCCEEDED);  // start_ms never set
  const auto tables = BuildTables(b.Build());
  ASSERT_EQ(tables[2].key, "start_ms");
  EXPECT_EQ(tables[2].rows[0].cells[0].text, "12");
  EXPECT_EQ(tables[2].rows[0].cells[1].text, "-");
  EXPECT_FALSE(tables[2].rows[0].cells[1].has_value);
}

TEST(ReportTest, EpochTrainTimeIsEpochTwo) {
  v1::ExperimentSpec base;
  base.set_epochs(3);
  SweepBuilder b("s7", "", base);
  b.Axis("seed", {"1", "2", "3"}).State(v1::SUCCEEDED);
  v1::Result* r = b.Run(b.Point({{"seed", "1"}}), v1::SUCCEEDED);
  Epoch(r, 11000, 1000, 10000, std::nullopt);  // warm-up
  Epoch(r, 2500, 500, 2000, std::nullopt);
  Epoch(r, 3500, 500, 3000, std::nullopt);
  b.Run(b.Point({{"seed", "2"}}), v1::SUCCEEDED);                      // no epochs recorded
  v1::Result* whole = b.Run(b.Point({{"seed", "3"}}), v1::SUCCEEDED);  // cuda_sync step
  for (int i = 0; i < 2; ++i) whole->add_epochs()->set_wall_ms(2500);  // no data/train split
  const auto tables = BuildTables(b.Build());
  // seed is not an optimiser field: no curve or epoch tables, but the epoch-2 table.
  EXPECT_EQ(Keys(tables),
            (std::vector<std::string>{"host_memory_gib", "samples_per_sec", "start_ms",
                                      "epoch_train_s", "final_loss", "test_accuracy"}));
  EXPECT_EQ(tables[3].rows[0].cells[0].text, "2.00");
  EXPECT_DOUBLE_EQ(tables[3].rows[0].cells[0].value, 2.0);
  EXPECT_EQ(tables[3].rows[0].cells[1].text, "-");
  EXPECT_FALSE(tables[3].rows[0].cells[1].has_value);
  EXPECT_EQ(tables[3].rows[0].cells[2].text, "-");  // not timed apart: unknown, not 0.00
  EXPECT_FALSE(tables[3].rows[0].cells[2].has_value);
}

void Worker(v1::Experiment* e, int index, uint64_t peak_pss) {
  v1::ProcessInfo* p = e->add_processes();
  p->set_role("worker");
  p->set_index(index);
  p->set_peak_pss_bytes(peak_pss);
}

// Seed 003's table: per epoch (after the first) the trainer's wait and compute, the epoch, the
// loaders' CPU; and each kind of process's peak PSS. No loaders: the loaders' cell is "-".
TEST(ReportTest, DataLoadingTablesAverageEpochsAfterTheFirst) {
  v1::ExperimentSpec base;
  base.set_kind("data_loading");
  base.set_epochs(3);
  SweepBuilder b("s8", "", base);
  b.Axis("loaders", {"0", "2"}).State(v1::SUCCEEDED);
  for (int k = 0; k < 2; ++k) {
    v1::Result* r = b.Run(b.Point({{"loaders", k == 0 ? "0" : "2"}}), v1::SUCCEEDED);
    r->set_peak_pss_sum_bytes(900ull << 20);
    Epoch(r, 9000, 8000, 1000, std::nullopt);  // warm-up, left out
    Epoch(r, 3000, 1000 * (k + 1), 2000 - 1000 * k, std::nullopt);
    Epoch(r, 5000, 1000 * (k + 1), 4000 - 1000 * k, std::nullopt);
    // The trainer's own batch making (no loaders) takes milliseconds.
    for (const auto& e : r->epochs()) {
      auto* x = r->mutable_data_loading()->add_epochs();
      x->set_epoch(e.epoch());
      x->set_load_cpu_ms(k == 0 ? 3 : 1500);
    }
  }
  ReportInput in = b.Build();
  Worker(&in.experiments["e0"], 0, 300ull << 20);
  Worker(&in.experiments["e1"], 0, 200ull << 20);
  Worker(&in.experiments["e1"], 1, 100ull << 20);
  Worker(&in.experiments["e1"], 2, 150ull << 20);
  const auto tables = BuildTables(in);
  const Table& t = tables[tables.size() - 2];
  ASSERT_EQ(t.key, "data_loading_epoch_s");
  EXPECT_EQ(t.columns, (std::vector<std::string>{"data wait", "compute", "epoch", "load CPU"}));
  ASSERT_EQ(t.rows.size(), 2u);
  EXPECT_EQ(t.rows[1].labels, std::vector<std::string>{"2"});
  EXPECT_DOUBLE_EQ(t.rows[0].cells[0].value, 1.0);
  EXPECT_DOUBLE_EQ(t.rows[1].cells[0].value, 2.0);
  EXPECT_DOUBLE_EQ(t.rows[1].cells[1].value, 2.0);
  EXPECT_DOUBLE_EQ(t.rows[1].cells[2].value, 4.0);
  EXPECT_DOUBLE_EQ(t.rows[1].cells[3].value, 1.5);
  EXPECT_EQ(t.rows[0].cells[3].text, "0.003");  // not 0.00, which reads as none
  const Table& m = tables.back();
  ASSERT_EQ(m.key, "data_loading_memory_mib");
  EXPECT_EQ(m.rows[0].cells[0].text, "300");
  EXPECT_EQ(m.rows[0].cells[1].text, "-");
  EXPECT_EQ(m.rows[1].cells[1].text, "250");
  EXPECT_EQ(m.rows[1].cells[2].text, "900");
}

TEST(ReportTest, AnOptimiserOptionAxisAddsLossTablesWithoutEpochs) {
  SweepBuilder b("s8", "");
  b.Axis("lr", {"0.1", "0.01"}).State(v1::SUCCEEDED);
  v1::Result* r = b.Run(b.Point({{"lr", "0.1"}}), v1::SUCCEEDED);
  Curve(r, 6, 100, 2.0);
  Curve(r, 12, 200, 1.0);
  r = b.Run(b.Point({{"lr", "0.01"}}), v1::SUCCEEDED);
  Curve(r, 3, 50, 3.0);
  Curve(r, 9, 250, 1.5);
  const auto tables = BuildTables(b.Build());
  EXPECT_EQ(Keys(tables), (std::vector<std::string>{"host_memory_gib", "samples_per_sec",
                                                    "start_ms", "final_loss", "test_accuracy",
                                                    "loss_by_step", "loss_by_time"}));
  const Table& steps = tables[5];
  EXPECT_EQ(steps.columns, (std::vector<std::string>{"2", "4", "6", "8", "10", "12"}));
  ASSERT_EQ(steps.rows.size(), 2u);
  auto texts = [](const Row& row) {
    std::vector<std::string> out;
    for (const auto& c : row.cells) out.push_back(c.text);
    return out;
  };
  EXPECT_EQ(steps.rows[0].labels, (std::vector<std::string>{"0.1"}));
  EXPECT_EQ(texts(steps.rows[0]),
            (std::vector<std::string>{"-", "-", "2.0000", "2.0000", "2.0000", "1.0000"}));
  // Its curve ends at step 9: no loss at 10 or 12, which it never reached.
  EXPECT_EQ(texts(steps.rows[1]),
            (std::vector<std::string>{"-", "3.0000", "3.0000", "3.0000", "-", "-"}));
  // Times span what both curves cover: from the later first point (100 ms) to the earlier last
  // point (200 ms), so no cell is before a curve's start.
  const Table& time = tables[6];
  EXPECT_EQ(time.columns,
            (std::vector<std::string>{"0.10 s", "0.12 s", "0.14 s", "0.16 s", "0.18 s", "0.20 s"}));
  EXPECT_EQ(texts(time.rows[0]),
            (std::vector<std::string>{"2.0000", "2.0000", "2.0000", "2.0000", "2.0000", "1.0000"}));
  EXPECT_EQ(texts(time.rows[1]),
            (std::vector<std::string>{"3.0000", "3.0000", "3.0000", "3.0000", "3.0000", "3.0000"}));
}

TEST(ReportTest, NoCurvesNoLossTables) {
  SweepBuilder b("s9", "");
  b.Axis("optimizer", {"sgd", "adam"}).State(v1::SUCCEEDED);
  b.Run(b.Point({{"optimizer", "sgd"}}), v1::SUCCEEDED);
  b.Run(b.Point({{"optimizer", "adam"}}), v1::SUCCEEDED);
  EXPECT_EQ(Keys(BuildTables(b.Build())),
            (std::vector<std::string>{"host_memory_gib", "samples_per_sec", "start_ms",
                                      "final_loss", "test_accuracy"}));
}

TEST(ReportTest, AGpuPointWithoutNvmlSaysWhyItsCellsAreEmpty) {
  SweepBuilder b("s10", "");
  b.Axis("device", {"cpu", "cuda"}).State(v1::SUCCEEDED);
  b.Run(b.Point({{"device", "cpu"}}), v1::SUCCEEDED)->set_peak_pss_sum_bytes(kGiB);
  auto* cuda = b.Run(b.Point({{"device", "cuda"}}), v1::SUCCEEDED);
  cuda->set_peak_pss_sum_bytes(2 * kGiB);
  cuda->set_gpu_status("no GPU: libnvidia-ml.so.1 (NVML) not found");
  const auto tables = BuildTables(b.Build());
  ASSERT_EQ(tables[1].key, "gpu_memory_gib");
  EXPECT_EQ(tables[1].column_field, "device");
  ASSERT_EQ(tables[1].rows.size(), 1u);
  EXPECT_EQ(tables[1].rows[0].cells[0].text, "");  // the cpu column of a GPU table: nothing
  EXPECT_EQ(tables[1].rows[0].cells[1].text, "-");
  EXPECT_EQ(tables[1].rows[0].cells[1].footnote, 1);
  EXPECT_EQ(tables[1].footnotes,
            (std::vector<std::string>{"no GPU: libnvidia-ml.so.1 (NVML) not found"}));
  EXPECT_EQ(tables[0].rows[0].cells[1].text, "2.00");
}

TEST(ReportTest, GpuTablesCarryNvmlFiguresOfEveryPointSeenOnAGpu) {
  SweepBuilder b("s11", "");
  b.Axis("workers", {"1", "2"}).State(v1::SUCCEEDED);
  auto* one = b.Run(b.Point({{"workers", "1"}}), v1::SUCCEEDED);
  one->set_peak_gpu_memory_bytes(3 * kGiB / 2);
  one->set_gpu_util_mean_percent(41);
  one->set_gpu_util_peak_percent(60);
  auto* two = b.Run(b.Point({{"workers", "2"}}), v1::SUCCEEDED);
  two->set_peak_gpu_memory_bytes(3 * kGiB);  // seen on a GPU, utilisation never read
  const auto tables = BuildTables(b.Build());
  ASSERT_EQ(tables[2].key, "gpu_memory_gib");
  ASSERT_EQ(tables[2].rows.size(), 1u);
  EXPECT_EQ(tables[2].rows[0].cells[0].text, "1.50");
  EXPECT_EQ(tables[2].rows[0].cells[1].text, "3.00");
  ASSERT_EQ(tables[4].key, "gpu_util_percent");
  EXPECT_EQ(tables[4].rows[0].cells[0].text, "41");
  EXPECT_EQ(tables[4].rows[0].cells[1].text, "-");
}

// --- Memory per extra worker. ---

// workers 1, 2, 4 x share yes, no on cuda; `host[share]` and `gpu[share]` are each point's peaks
// in GiB (nullopt: the point failed).
ReportInput WorkerGrid(const std::map<std::string, std::vector<std::optional<double>>>& host,
                       const std::map<std::string, std::vector<std::optional<double>>>& gpu) {
  v1::ExperimentSpec base;
  base.set_device("cuda");
  SweepBuilder b("s12", "", base);
  b.Axis("workers", {"1", "2", "4"}).Axis("share", {"yes", "no"}).State(v1::SUCCEEDED);
  for (const std::string share : {"yes", "no"}) {
    for (size_t k = 0; k < 3; ++k) {
      const int i = b.Point({{"share", share}, {"workers", std::to_string(1 << k)}});
      const auto h = host.at(share)[k], g = gpu.at(share)[k];
      v1::Result* r = b.Run(i, h && g ? v1::SUCCEEDED : v1::FAILED, h && g ? "" : "oom");
      if (h) r->set_peak_pss_sum_bytes(uint64_t(*h * double(kGiB)));
      if (g) r->set_peak_gpu_memory_bytes(uint64_t(*g * double(kGiB)));
    }
  }
  return b.Build();
}

const Table& ByKey(const std::vector<Table>& tables, const std::string& key) {
  auto t = std::find_if(tables.begin(), tables.end(), [&](const Table& x) { return x.key == key; });
  EXPECT_NE(t, tables.end()) << key;
  return *t;
}

std::vector<std::string> Texts(const Row& r) {
  std::vector<std::string> out;
  for (const auto& c : r.cells) out.push_back(c.text);
  return out;
}

// A CPU sweep over workers on 4 cores: at 8 workers the default takes turns, 4 at once, and the
// report says so (at 1, 2 and 4 every worker steps at once: nothing to say); a typed value is
// "given". A sweep with no turns has no such line.
TEST(ReportTest, TheReportSaysWhereWorkersTookTurnsAtTheirSteps) {
  SweepBuilder b("s13", "");
  b.Axis("workers", {"1", "2", "4", "8"}).Axis("start", {"fork", "spawn"}).State(v1::SUCCEEDED);
  for (const std::string start : {"fork", "spawn"})
    for (const std::string w : {"1", "2", "4", "8"})
      b.Run(b.Point({{"start", start}, {"workers", w}}), v1::SUCCEEDED)
          ->set_peak_pss_sum_bytes(kGiB);
  const ReportInput in = b.Build();
  EXPECT_EQ(KindNotes(in),
            "Turns: 4 of 8 workers stepped at once (default: the cores' worth (4 cores, 1 thread "
            "each)), sharing that many step arenas (docs/allocators.md).");
  EXPECT_NE(RenderMarkdown(in).find("\nTurns: 4 of 8 workers"), std::string::npos);
  EXPECT_NE(RenderHtml(in, nullptr).find("<p>Turns: 4 of 8 workers"), std::string::npos);
  // What each extra worker costs is measured where every worker stepped at once: 8 is left out.
  const auto tables = BuildTables(in);
  const Table& host = ByKey(tables, "host_memory_per_worker_gib");
  EXPECT_EQ(host.footnotes, (std::vector<std::string>{
                                "8 left out: their workers took turns at their steps and shared "
                                "step arenas, a cost that does not grow with workers"}));
  ASSERT_EQ(host.rows.size(), 2u);
  for (const Row& r : host.rows) {
    EXPECT_EQ(Texts(r), (std::vector<std::string>{"0.00", "1.00"}));  // 1 GiB at 1..4
    EXPECT_EQ(r.cells[0].footnote, 1);
  }

  v1::ExperimentSpec typed;
  typed.mutable_hogwild()->set_concurrent_steps(1);
  SweepBuilder g("s14", "", typed);
  g.Axis("workers", {"2", "3"}).State(v1::SUCCEEDED);
  for (const std::string w : {"2", "3"}) g.Run(g.Point({{"workers", w}}), v1::SUCCEEDED);
  EXPECT_EQ(KindNotes(g.Build()),
            "Turns: 1 of 2 workers, 1 of 3 workers stepped at once (given), sharing that many "
            "step arenas (docs/allocators.md).");
  EXPECT_EQ(KindNotes(OneAxis()), "");
}

TEST(ReportTest, PerExtraWorkerIsTheSlopeFromTheFewestToTheMostWorkersOfEachRow) {
  // GPU, shared: a 0.5 GiB leader and 1.25 GiB a worker; private: 1.25 a worker, no leader.
  const auto tables =
      BuildTables(WorkerGrid({{"yes", {1.0, 1.5, 2.5}}, {"no", {1.0, 1.25, 1.75}}},
                             {{"yes", {1.75, 3.0, 5.5}}, {"no", {1.25, 2.5, 5.0}}}));
  const Table& host = ByKey(tables, "host_memory_per_worker_gib");
  const Table& gpu = ByKey(tables, "gpu_memory_per_worker_gib");
  EXPECT_EQ(tables[1].key, host.key);  // each right after its memory table
  EXPECT_EQ(tables[3].key, gpu.key);
  EXPECT_EQ(gpu.title.rfind("GPU memory per extra worker (GiB)", 0), 0u) << gpu.title;
  ASSERT_EQ(host.rows.size(), 2u);
  EXPECT_EQ(host.rows[0].labels, (std::vector<std::string>{"yes"}));
  EXPECT_EQ(Texts(host.rows[0]), (std::vector<std::string>{"0.50", "0.50"}));
  EXPECT_EQ(Texts(host.rows[1]), (std::vector<std::string>{"0.25", "0.75"}));
  ASSERT_EQ(gpu.rows.size(), 2u);
  EXPECT_EQ(Texts(gpu.rows[0]), (std::vector<std::string>{"1.25", "0.50"}));
  EXPECT_EQ(Texts(gpu.rows[1]), (std::vector<std::string>{"1.25", "0.00"}));
  EXPECT_DOUBLE_EQ(gpu.rows[0].cells[0].value, 1.25);
  EXPECT_TRUE(host.footnotes.empty());
}

TEST(ReportTest, PerExtraWorkerGoesByTheCountsWithAFigureAndSaysWhich) {
  // share no: 4 workers failed, so its slope is from 1 and 2; share yes: only 2 succeeded.
  const auto tables = BuildTables(
      WorkerGrid({{"yes", {std::nullopt, 1.5, std::nullopt}}, {"no", {1.0, 1.25, std::nullopt}}},
                 {{"yes", {1.75, 3.0, 5.5}}, {"no", {1.25, 2.5, 6.0}}}));
  const Table& host = ByKey(tables, "host_memory_per_worker_gib");
  EXPECT_EQ(Texts(host.rows[0]), (std::vector<std::string>{"-", "-"}));  // one count: no slope
  EXPECT_FALSE(host.rows[0].cells[0].has_value);
  EXPECT_EQ(Texts(host.rows[1]), (std::vector<std::string>{"0.25", "0.75"}));
  EXPECT_EQ(host.rows[1].cells[0].footnote, 1);
  EXPECT_EQ(host.footnotes, (std::vector<std::string>{"from 1 and 2 workers: 4 has no figure"}));
  // A failed point's figures are not used, though its record holds them (6 GiB at 4 would make
  // it 1.58).
  const Table& gpu = ByKey(tables, "gpu_memory_per_worker_gib");
  EXPECT_EQ(Texts(gpu.rows[1]), (std::vector<std::string>{"1.25", "0.00"}));
  EXPECT_EQ(gpu.rows[1].cells[0].footnote, 1);
}

// Workers listed 4,1,2 x start fork, spawn, forkserver on the CPU; `peaks[start]` in that column
// order (nullopt: the point failed).
ReportInput UnorderedWorkerGrid(
    const std::map<std::string, std::vector<std::optional<double>>>& peaks) {
  SweepBuilder b("s14", "");
  const std::vector<std::string> workers = {"4", "1", "2"};
  b.Axis("workers", workers).Axis("start", {"fork", "spawn", "forkserver"}).State(v1::SUCCEEDED);
  for (const std::string start : {"fork", "spawn", "forkserver"}) {
    for (size_t k = 0; k < workers.size(); ++k) {
      const auto peak = peaks.at(start)[k];
      v1::Result* r = b.Run(b.Point({{"start", start}, {"workers", workers[k]}}),
                            peak ? v1::SUCCEEDED : v1::FAILED, peak ? "" : "oom");
      r->set_peak_pss_sum_bytes(uint64_t(peak.value_or(9.0) * double(kGiB)));
    }
  }
  return b.Build();
}

TEST(ReportTest, PerExtraWorkerTakesTheFewestAndMostWorkersNotTheFirstAndLastColumns) {
  const auto in = UnorderedWorkerGrid({
      {"fork", {2.5, 1.0, 2.0}},            // not linear: 1 -> 4 is 0.5 a worker, 1 -> 2 is 1.0
      {"spawn", {3.0, std::nullopt, 2.0}},  // the fewest failed: from 2 and 4
      {"forkserver", {3.999, 0.999, 1.5}},  // fixed -0.001: reads 0.00
  });
  const auto tables = BuildTables(in);
  const Table& host = ByKey(tables, "host_memory_per_worker_gib");
  ASSERT_EQ(host.rows.size(), 3u);
  EXPECT_EQ(Texts(host.rows[0]), (std::vector<std::string>{"0.50", "0.50"}));
  EXPECT_EQ(host.rows[0].cells[0].footnote, 0);
  EXPECT_EQ(Texts(host.rows[1]), (std::vector<std::string>{"0.50", "1.00"}));
  EXPECT_EQ(host.rows[1].cells[1].footnote, 1);
  EXPECT_EQ(Texts(host.rows[2]), (std::vector<std::string>{"1.00", "0.00"}));
  EXPECT_EQ(host.footnotes, (std::vector<std::string>{"from 2 and 4 workers: 1 has no figure"}));
}

TEST(ReportTest, CompareDividesPerWorkerFiguresMadeAlikeAndNeverTheFixedPart) {
  const auto a = UnorderedWorkerGrid(
      {{"fork", {2.5, 1.0, 2.0}}, {"spawn", {3.0, 1.0, 2.0}}, {"forkserver", {4.0, 1.0, 1.5}}});
  // b: fork's slope doubled; spawn's fewest failed (a slope from other counts); forkserver alike.
  const auto b = UnorderedWorkerGrid({{"fork", {4.0, 1.0, 2.0}},
                                      {"spawn", {3.0, std::nullopt, 2.0}},
                                      {"forkserver", {4.0, 1.0, 1.5}}});
  const std::string md = RenderCompareMarkdown(a, b);
  const std::string title = "## Host" + std::string(kPerWorkerTitle);
  const size_t at = md.find(title);
  ASSERT_NE(at, std::string::npos) << md;
  const std::string per = md.substr(at, md.find("\n## ", at + 1) - at);
  EXPECT_NE(per.find("| fork | 2.00 | - |"), std::string::npos) << per;
  EXPECT_NE(per.find("| spawn | - | - |"), std::string::npos) << per;
  EXPECT_NE(per.find("| forkserver | 1.00 | - |"), std::string::npos) << per;
}

TEST(ReportTest, NoPerWorkerTableUnlessTheWorkerCountIsTheColumns) {
  for (const auto& in : {TwoAxes(), OneAxis()}) {
    for (const auto& key : Keys(BuildTables(in)))
      EXPECT_EQ(key.find("per_worker"), std::string::npos) << in.sweep.id() << " " << key;
  }
  // A CPU sweep over workers: host memory's only.
  SweepBuilder b("s13", "");
  b.Axis("workers", {"1", "2"}).State(v1::SUCCEEDED);
  b.Run(b.Point({{"workers", "1"}}), v1::SUCCEEDED)->set_peak_pss_sum_bytes(kGiB);
  b.Run(b.Point({{"workers", "2"}}), v1::SUCCEEDED)->set_peak_pss_sum_bytes(kGiB);
  const auto tables = BuildTables(b.Build());
  EXPECT_EQ(Keys(tables)[1], "host_memory_per_worker_gib");
  EXPECT_EQ(Texts(tables[1].rows[0]), (std::vector<std::string>{"0.00", "1.00"}));
  EXPECT_EQ(std::count_if(tables.begin(), tables.end(),
                          [](const Table& t) { return t.key.find("gpu") != std::string::npos; }),
            0);
}

TEST(ReportTest, LegacyPointsWithoutValuesAreLaidOutByTheirColumns) {
  ReportInput in;
  in.sweep.set_id("old");
  in.sweep.set_state(v1::SUCCEEDED);
  auto* spec = in.sweep.mutable_spec();
  spec->add_workers(1);
  spec->add_workers(2);
  spec->add_share(true);
  spec->add_share(false);
  int k = 0;
  for (bool share : {true, false}) {
    for (uint32_t w : {1u, 2u}) {
      v1::SweepPoint* p = in.sweep.add_points();
      p->set_index(uint32_t(k));
      p->set_workers(w);
      p->set_start("fork");
      p->set_share(share);
      p->set_device("cpu");
      p->set_experiment_id("x" + std::to_string(k));
      p->set_state(v1::SUCCEEDED);
      v1::Experiment e;
      e.set_id(p->experiment_id());
      e.set_state(v1::SUCCEEDED);
      e.mutable_spec()->set_workers(w);
      e.mutable_spec()->set_share(share);
      e.mutable_result()->set_peak_pss_sum_bytes(uint64_t(k + 1) * kGiB);
      in.experiments[e.id()] = e;
      ++k;
    }
  }
  const std::string md = RenderMarkdown(in);
  EXPECT_NE(md.find("Columns: workers.\n\n"
                    "| share | 1 | 2 |\n"
                    "| --- | --- | --- |\n"
                    "| yes | 1.00 | 2.00 |\n"
                    "| no | 3.00 | 4.00 |\n"),
            std::string::npos)
      << md;
}

// --- CSV. ---

std::vector<std::string> SplitCsv(const std::string& line) {
  std::vector<std::string> out;
  std::string cur;
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cur += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cur += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  out.push_back(cur);
  return out;
}

std::string Join(const std::vector<std::string>& parts) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i ? "," : "") + parts[i];
  return out;
}

const std::vector<std::string> kSpecColumns = {"kind",
                                               "model",
                                               "dataset",
                                               "start",
                                               "share",
                                               "device",
                                               "cuda_devices",
                                               "cuda_sync",
                                               "optimizer",
                                               "lr",
                                               "momentum",
                                               "dampening",
                                               "weight_decay",
                                               "eps",
                                               "lr_decay",
                                               "initial_accumulator_value",
                                               "rho",
                                               "beta1",
                                               "beta2",
                                               "amsgrad",
                                               "alpha",
                                               "centered",
                                               "optimizer_in_backward",
                                               "batch_size",
                                               "batches",
                                               "epochs",
                                               "epoch_samples",
                                               "threads",
                                               "seed",
                                               "allocator",
                                               "concurrent_steps",
                                               "activations",
                                               "kernels",
                                               "eval_samples",
                                               "sample_interval_ms",
                                               "stall_timeout_ms",
                                               "step_timeout_ms",
                                               "model_file",
                                               "input",
                                               "loss",
                                               "classes",
                                               "memory_format",
                                               "autocast",
                                               "nodes",
                                               "node_rank",
                                               "master",
                                               "models",
                                               "iterations",
                                               "loaders",
                                               "prefetch",
                                               "pin_memory",
                                               "layers",
                                               "filters",
                                               "stages",
                                               "balance",
                                               "chunks",
                                               "checkpoint",
                                               "scaling",
                                               "touch_mib",
                                               "hold_ms",
                                               "workers",
                                               "name",
                                               "force"};
// Result's scalar fields, alphabetically (the order of its JSON object); Result.threads is the
// spec's threads column.
const std::vector<std::string> kFigureColumns = {"backward_ms",
                                                 "baseline.minor_faults",
                                                 "baseline.ns_per_page",
                                                 "baseline.touch_mib",
                                                 "baseline.touch_ms",
                                                 "baseline.workers_touched",
                                                 "cgroup_memory_peak_bytes",
                                                 "command.report_lines_ignored",
                                                 "cpu_energy_j",
                                                 "cpu_energy_status",
                                                 "cpu_joules_per_sample",
                                                 "cpu_power_mean_w",
                                                 "data_bytes",
                                                 "data_ms",
                                                 "data_parallel.allreduce_busy_ms",
                                                 "data_parallel.allreduce_bytes_per_step",
                                                 "data_parallel.batch_per_worker",
                                                 "data_parallel.batch_total",
                                                 "data_parallel.buckets",
                                                 "data_parallel.bus_bandwidth_gbps",
                                                 "data_parallel.comm_ms",
                                                 "data_parallel.compute_ms",
                                                 "data_parallel.data_ms",
                                                 "data_parallel.optimizer_ms",
                                                 "data_parallel.parameters",
                                                 "data_parallel.replicas_identical",
                                                 "data_parallel.scaling",
                                                 "data_parallel.step_ms",
                                                 "data_parallel.steps_per_worker",
                                                 "data_parallel.world_size",
                                                 "disturbance",
                                                 "disturbed",
                                                 "eval_ms",
                                                 "final_shared_checksum",
                                                 "first_loss",
                                                 "forward_ms",
                                                 "gpm_status",
                                                 "gpu_dram_bw_percent",
                                                 "gpu_energy_j",
                                                 "gpu_energy_status",
                                                 "gpu_joules_per_sample",
                                                 "gpu_power_mean_w",
                                                 "gpu_reads",
                                                 "gpu_sm_active_percent",
                                                 "gpu_sm_occupancy_percent",
                                                 "gpu_status",
                                                 "gpu_tensor_active_percent",
                                                 "gpu_util_mean_percent",
                                                 "gpu_util_peak_percent",
                                                 "initial_weights_checksum",
                                                 "last_loss",
                                                 "leader_peak_pss_bytes",
                                                 "leader_program",
                                                 "leader_why",
                                                 "model_step_bytes",
                                                 "oom_kills",
                                                 "optimizer_ms",
                                                 "outside_cpu_cores",
                                                 "peak_gpu_memory_bytes",
                                                 "peak_pss_sum_bytes",
                                                 "peak_rss_hwm_sum_bytes",
                                                 "peak_rss_sum_bytes",
                                                 "peak_uss_sum_bytes",
                                                 "pipeline.bubble",
                                                 "pipeline.checkpoint",
                                                 "pipeline.chunks",
                                                 "pipeline.micro_batch",
                                                 "pipeline.model_memory_bytes",
                                                 "pipeline.parameters",
                                                 "pipeline.peak_activation_sum_bytes",
                                                 "pipeline.peak_allocated_sum_bytes",
                                                 "pipeline.stages",
                                                 "pipeline.step_ms",
                                                 "queued_ms",
                                                 "ready_ms",
                                                 "sampler_cpu_ms",
                                                 "sampler_cpu_percent",
                                                 "samples",
                                                 "samples_per_sec",
                                                 "shared_bytes",
                                                 "smaps_reads",
                                                 "start_ms",
                                                 "statm_reads",
                                                 "step_bound_ms",
                                                 "step_bound_why",
                                                 "steps",
                                                 "sum_of_peak_pss_bytes",
                                                 "test_accuracy",
                                                 "test_images",
                                                 "train_ms",
                                                 "wall_ms",
                                                 "weights_bytes"};

TEST(ReportTest, CsvHeaderHasEverySpecFieldAndEveryScalarFigure) {
  std::istringstream csv(RenderCsv(ThreeAxes()));
  std::string line;
  std::getline(csv, line);
  std::vector<std::string> want = {"sweep_id",      "index", "cell",  "repeat", "note",
                                   "experiment_id", "state", "error", "host"};
  want.insert(want.end(), kSpecColumns.begin(), kSpecColumns.end());
  want.insert(want.end(), kFigureColumns.begin(), kFigureColumns.end());
  EXPECT_EQ(line, Join(want));
  // Checked against the descriptors too, so that a new field cannot be missed.
  const auto header = SplitCsv(line);
  for (const auto& f : SpecFields())
    EXPECT_NE(std::find(header.begin(), header.end(), f.name), header.end()) << f.name;
  const auto* d = v1::Result::descriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    const auto* f = d->field(i);
    if (f->is_repeated()) continue;
    if (f->message_type() == nullptr) {
      EXPECT_NE(std::find(header.begin(), header.end(), f->name()), header.end()) << f->name();
      continue;
    }
    for (int k = 0; k < f->message_type()->field_count(); ++k) {  // a kind's figures, flattened
      if (f->message_type()->field(k)->is_repeated()) continue;   // per stage: JSON only
      const std::string column = f->name() + "." + f->message_type()->field(k)->name();
      EXPECT_NE(std::find(header.begin(), header.end(), column), header.end()) << column;
    }
  }
}

// ThreeAxes' point 0, which ran: its CSV line, its whole spec and every figure.
std::string RanPointLine() {
  // Point 0 ran: its whole spec and every figure; absent test_accuracy would be empty, not 0.
  const std::vector<std::string> spec0 = {"hogwild",   "mnist_convnet",
                                          "synthetic", "fork",
                                          "yes",       "cpu",
                                          "",  // cuda_devices: on the CPU, none
                                          "",  // cuda_sync: likewise
                                          "sgd",       "0.01",
                                          "0.5",       "0",
                                          "0",         "",
                                          "",          "",
                                          "",          "",
                                          "",          "",
                                          "",          "",
                                          "no",  // optimizer_in_backward
                                          "64",        "10",
                                          "",          "",
                                          "4",         "1",
                                          "planned",   "1",
                                          "pytorch",   "shoal",
                                          "1000",      "200",
                                          "60000",     "1800000",
                                          "",
                                          "",               // model_file, input, loss,
                                          "",          "",  // classes: no model file
                                          "",          "",  // memory_format, autocast: nor
                                          "",          "",  // models, iterations: not hogwild's
                                          "",          "",  // loaders, prefetch, pin_memory: nor
                                          "",          "",  // nodes, node_rank, master,
                                          "",          "",  // scaling: data_parallel's
                                          "",          "",  // layers, filters, stages,
                                          "",          "",  // balance, chunks, checkpoint:
                                          "",          "",  // pipeline's
                                          "",          "",  // touch_mib, hold_ms: baseline's
                                          "",          "1",
                                          "",          "no"};
  // The figures the test's result holds; every other one was not reported, so its cell is
  // empty, never 0 (no phase split, GPU reading, sampler figure, shared bytes or sample count).
  const std::map<std::string, std::string> set = {{"last_loss", "0.5"},
                                                  {"peak_pss_sum_bytes", "1073741824"},
                                                  {"samples_per_sec", "100"},
                                                  {"start_ms", "10"},
                                                  {"steps", "10"},
                                                  {"test_accuracy", "0.5"},
                                                  {"train_ms", "1000"}};
  std::vector<std::string> figures0;
  for (const auto& c : kFigureColumns) figures0.push_back(set.count(c) ? set.at(c) : "");
  std::vector<std::string> want0 = {"s3", "0", "0", "0", "", "e0", "succeeded", "", ""};
  want0.insert(want0.end(), spec0.begin(), spec0.end());
  want0.insert(want0.end(), figures0.begin(), figures0.end());
  return Join(want0);
}

TEST(ReportTest, CsvHasOneLinePerPoint) {
  const ReportInput in = ThreeAxes();
  std::istringstream csv(RenderCsv(in));
  std::vector<std::string> lines;
  for (std::string line; std::getline(csv, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 1u + 8u);

  // Point 0 ran: its whole spec and every figure.
  EXPECT_EQ(lines[1], RanPointLine());

  // Point 1 has no test accuracy: its column is empty.
  const auto header = SplitCsv(lines[0]);
  const auto acc =
      size_t(std::find(header.begin(), header.end(), "test_accuracy") - header.begin());
  EXPECT_EQ(SplitCsv(lines[2])[acc], "");
  EXPECT_EQ(SplitCsv(lines[1])[acc], "0.5");

  // Point 2 could not run: its note and its axis values, nothing else.
  std::vector<std::string> want2 = {"s3", "2", "2", "0", kImpossible, "", "", "", ""};
  for (const auto& c : kSpecColumns)
    want2.push_back(c == "start" ? "fork" : c == "device" ? "cuda" : c == "workers" ? "1" : "");
  want2.insert(want2.end(), kFigureColumns.size(), "");
  EXPECT_EQ(lines[3], Join(want2));

  // Point 5 failed with an error holding a comma and quotes: quoted, quotes doubled.
  EXPECT_EQ(
      lines[6].rfind("s3,5,5,0,,e5,failed,\"leader: \"\"oops\"\", worker 1 died\",,hogwild,", 0),
      0u)
      << lines[6];
  const auto f5 = SplitCsv(lines[6]);
  ASSERT_EQ(f5.size(), header.size());
  EXPECT_EQ(f5[7], "leader: \"oops\", worker 1 died");

  for (size_t i = 1; i < lines.size(); ++i) {
    const auto f = SplitCsv(lines[i]);
    ASSERT_EQ(f.size(), header.size()) << lines[i];
    EXPECT_EQ(f[1], std::to_string(i - 1));
    EXPECT_EQ(f[4], in.sweep.points(int(i - 1)).note());
  }
}

// --- JSON. ---

TEST(ReportTest, JsonHasTablesWithRowLabels) {
  const ReportInput in = ThreeAxes();
  const nlohmann::json j = nlohmann::json::parse(RenderJson(in).dump());
  ASSERT_EQ(j["tables"].size(), 9u);
  const auto& host = j["tables"][0];
  EXPECT_EQ(host["key"], "host_memory_gib");
  EXPECT_EQ(host["title"], "Host memory: peak sum of PSS over all processes (GiB)");
  EXPECT_EQ(host["column_field"], "workers");
  EXPECT_EQ(host["columns"], nlohmann::json({"1", "2"}));
  EXPECT_EQ(host["row_fields"], nlohmann::json({"start", "device"}));
  EXPECT_EQ(host["footnotes"], nlohmann::json({kImpossible, kNoGpu}));
  ASSERT_EQ(host["rows"].size(), 4u);
  EXPECT_EQ(host["rows"][0]["labels"], nlohmann::json({"fork", "cpu"}));
  EXPECT_EQ(host["rows"][1]["labels"], nlohmann::json({"fork", "cuda"}));
  EXPECT_EQ(host["rows"][2]["labels"], nlohmann::json({"spawn", "cpu"}));
  EXPECT_EQ(host["rows"][3]["labels"], nlohmann::json({"spawn", "cuda"}));
  EXPECT_EQ(host["rows"][0]["cells"][1],
            nlohmann::json({{"value", 2.0}, {"text", "2.00"}, {"footnote", 0}}));
  EXPECT_EQ(host["rows"][1]["cells"][0],
            nlohmann::json({{"value", nullptr}, {"text", "-"}, {"footnote", 1}}));
  EXPECT_EQ(host["rows"][2]["cells"][1],
            nlohmann::json({{"value", nullptr}, {"text", "failed"}, {"footnote", 0}}));
  EXPECT_EQ(host["rows"][3]["cells"][1],
            nlohmann::json({{"value", nullptr}, {"text", "n/a"}, {"footnote", 2}}));
  EXPECT_FALSE(host.contains("empty_note"));
  EXPECT_EQ(j["tables"][2]["key"], "gpu_memory_gib");
  EXPECT_EQ(j["tables"][2]["rows"].size(), 2u);
  const auto& per = j["tables"][1];
  EXPECT_EQ(per["key"], "host_memory_per_worker_gib");
  EXPECT_EQ(per["columns"], nlohmann::json({"per worker", "fixed"}));
  EXPECT_EQ(per["rows"][0]["cells"][0],
            nlohmann::json({{"value", 1.0}, {"text", "1.00"}, {"footnote", 0}}));

  EXPECT_EQ(j["fixed"]["threads"], "per point");
  EXPECT_EQ(j["fixed"]["batches"], "10");
  EXPECT_FALSE(j["fixed"].contains("workers"));
  EXPECT_FALSE(j["fixed"].contains("start"));
  EXPECT_EQ(j["sweep"]["id"], "s3");

  ASSERT_EQ(j["experiments"].size(), in.experiments.size());
  for (const auto& je : j["experiments"]) {
    v1::Experiment back;
    auto st = google::protobuf::util::JsonStringToMessage(je.dump(), &back);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(back.SerializeAsString(), in.experiments.at(back.id()).SerializeAsString());
  }
}

TEST(ReportTest, ReportFromJsonReadsBackWhatRenderJsonWrote) {
  for (const ReportInput& in : {OneAxis(), TwoAxes(), ThreeAxes()}) {
    StatusOr<ReportInput> back = ReportFromJson(RenderJson(in));
    ASSERT_TRUE(back.ok()) << back.status().message();
    EXPECT_EQ(RenderMarkdown(*back), RenderMarkdown(in)) << in.sweep.id();
    EXPECT_EQ(back->experiments.size(), in.experiments.size());
  }
}

TEST(ReportTest, AStateThisVersionDoesNotNameIsWrittenAsItsNumberAndReadBack) {
  ReportInput in = OneAxis();
  in.experiments.begin()->second.set_state(static_cast<v1::ExperimentState>(99));  // a newer one
  const nlohmann::json j = RenderJson(in);
  EXPECT_EQ(j["experiments"][0]["state"], 99) << j["experiments"][0]["state"];
  StatusOr<ReportInput> back = ReportFromJson(j);
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(int(back->experiments.begin()->second.state()), 99);
}

TEST(ReportTest, FixedFieldsAreThoseOfTheExperimentsThePointsShow) {
  ReportInput in = OneAxis();
  v1::Experiment earlier = in.experiments.begin()->second;  // an attempt a rerun replaced
  earlier.set_id("earlier");
  earlier.mutable_spec()->set_seed(7);
  in.experiments["earlier"] = earlier;
  std::string seed;
  for (const auto& [field, value] : FixedFields(in)) {
    if (field == "seed") seed = value;
  }
  EXPECT_EQ(seed, "1");  // not "per point"
}

TEST(ReportTest, ReportFromJsonSaysWhatDoesNotParse) {
  EXPECT_EQ(ReportFromJson(nlohmann::json::array()).status().message(),
            "no \"sweep\" object (want what report --format json writes)");
  nlohmann::json j = RenderJson(ThreeAxes());
  j["experiments"][1]["result"]["peak_pss_sum_bytes"] = "lots";
  const Status st = ReportFromJson(j).status();
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_EQ(st.message().rfind("experiments[1]: ", 0), 0u) << st.message();
  j = RenderJson(ThreeAxes());
  j["sweep"]["colour"] = "blue";  // written by another version: refused, not dropped
  EXPECT_EQ(ReportFromJson(j).status().message().rfind("sweep: ", 0), 0u);
  // A point outside its own grid would have no column: named, not drawn out of bounds.
  j = RenderJson(ThreeAxes());
  j["sweep"]["points"][1]["values"][2]["value"] = "3";  // workers 3 of an axis of 1 and 2
  EXPECT_EQ(ReportFromJson(j).status().message(),
            "sweep point 1: workers '3' is not one of its axis's values");
  j["sweep"]["points"][1]["values"].erase(2);
  EXPECT_EQ(ReportFromJson(j).status().message(), "sweep point 1: no value of axis workers");
}

TEST(ReportTest, JsonPerPointTablesLabelEveryAxis) {
  const nlohmann::json j = RenderJson(TwoAxes());
  const auto& steps = j["tables"][6];
  EXPECT_EQ(steps["key"], "loss_by_step");
  EXPECT_EQ(steps["column_field"], "step");
  EXPECT_EQ(steps["columns"], nlohmann::json({"33", "66", "100", "133", "166", "200"}));
  EXPECT_EQ(steps["rows"][1]["labels"], nlohmann::json({"adam", "16"}));
  EXPECT_EQ(steps["rows"][1]["cells"][0],
            nlohmann::json({{"value", nullptr}, {"text", "-"}, {"footnote", 0}}));
  EXPECT_EQ(steps["rows"][1]["cells"][5]["value"].get<double>(), 0.25);
}

// --- SVG. ---

// Tags open and close in order: enough to call the SVG well-formed for our purposes.
bool WellFormed(const std::string& xml, std::string* why) {
  auto fail = [why](const std::string& what) {
    *why = what;
    return false;
  };
  std::vector<std::string> stack;
  size_t i = 0;
  while ((i = xml.find('<', i)) != std::string::npos) {
    const size_t end = xml.find('>', i);
    if (end == std::string::npos) return fail("unterminated tag");
    std::string tag = xml.substr(i + 1, end - i - 1);
    i = end + 1;
    if (tag.empty()) return fail("empty tag");
    if (tag[0] == '?' || tag[0] == '!') continue;
    if (tag[0] == '/') {
      if (stack.empty() || stack.back() != tag.substr(1))
        return fail("mismatched </" + tag.substr(1) + ">");
      stack.pop_back();
      continue;
    }
    const bool self_closing = tag.back() == '/';
    const std::string name = tag.substr(0, tag.find_first_of(" /"));
    if (std::count(tag.begin(), tag.end(), '"') % 2 != 0)
      return fail("unbalanced quotes in <" + name + ">");
    if (!self_closing) stack.push_back(name);
  }
  if (!stack.empty()) return fail("unclosed <" + stack.back() + ">");
  return true;
}

size_t Count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t i = 0; (i = s.find(what, i)) != std::string::npos; i += what.size()) ++n;
  return n;
}

void ExpectSvgShape(const std::string& svg) {
  std::string why;
  EXPECT_TRUE(WellFormed(svg, &why)) << why;
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  ASSERT_GE(svg.size(), 7u);
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  EXPECT_EQ(Count(svg, "<svg "), 1u);
}

TEST(ReportTest, MemorySvgHasOnePolylinePerRowWithData) {
  const std::string svg = RenderSvg(ThreeAxes());
  ExpectSvgShape(svg);
  EXPECT_EQ(Count(svg, "<polyline"), 2u);  // fork/cpu and spawn/cpu; the cuda rows have no data
  EXPECT_EQ(Count(svg, "<title>start fork, device cpu</title>"), 1u);
  EXPECT_EQ(Count(svg, "<title>start spawn, device cpu</title>"), 1u);
  EXPECT_EQ(Count(svg, ">start fork, device cpu</text>"), 1u);
  EXPECT_EQ(Count(svg, ">start fork, device cuda (no data)</text>"), 1u);
  EXPECT_EQ(Count(svg, ">start spawn, device cpu</text>"), 1u);
  EXPECT_EQ(Count(svg, ">start spawn, device cuda (no data)</text>"), 1u);
  EXPECT_EQ(Count(svg, "(no data)"), 2u);
  EXPECT_EQ(Count(svg, ">workers</text>"), 1u);
  EXPECT_EQ(Count(svg, ">host memory, GiB (sum of PSS)</text>"), 1u);
  EXPECT_NE(svg.find("Peak host memory (sum of PSS) — sweep s3"), std::string::npos);
  // fork/cpu has two points, spawn/cpu one (its 2-worker point failed): three markers.
  EXPECT_EQ(Count(svg, "<circle"), 3u);
}

TEST(ReportTest, GpuSvgsDrawTheGpuTablesRows) {
  const auto in = WorkerGrid({{"yes", {1.0, 1.5, 2.5}}, {"no", {1.0, 1.25, 1.75}}},
                             {{"yes", {1.75, 3.0, 5.5}}, {"no", {1.25, 2.5, 5.0}}});
  ASSERT_TRUE(HasGpuFigures(in));
  const std::string mem = RenderSvg(in, "gpu-memory");
  ExpectSvgShape(mem);
  EXPECT_NE(mem.find("Peak GPU memory (NVML, summed over the processes) — sweep s12"),
            std::string::npos);
  EXPECT_EQ(Count(mem, ">GPU memory, GiB (NVML)</text>"), 1u);
  EXPECT_EQ(Count(mem, "<polyline"), 2u);  // share yes and no
  EXPECT_EQ(Count(mem, "<circle"), 6u);
  EXPECT_EQ(Count(mem, "<title>share yes</title>"), 1u);
  // No utilisation was read: the rows are there, without data.
  const std::string util = RenderSvg(in, "gpu-util");
  EXPECT_EQ(Count(util, "<polyline"), 0u);
  EXPECT_EQ(Count(util, "(no data)"), 2u);
  // The host picture is the default, whatever the device.
  EXPECT_NE(RenderSvg(in).find("Peak host memory (sum of PSS)"), std::string::npos);
  // A CPU sweep has no GPU figures to draw.
  EXPECT_FALSE(HasGpuFigures(OneAxis()));
  EXPECT_EQ(Count(RenderSvg(OneAxis(), "gpu-memory"), "<polyline"), 0u);
}

TEST(ReportTest, LossSvgHasOnePolylinePerPointWithACurve) {
  const std::string svg = RenderSvg(TwoAxes(), "loss");
  ExpectSvgShape(svg);
  EXPECT_EQ(Count(svg, "<polyline"), 3u);
  for (const std::string label : {"optimizer adam, batch_size 32", "optimizer adam, batch_size 16",
                                  "optimizer sgd, batch_size 16"}) {
    EXPECT_EQ(Count(svg, "<title>" + label + "</title>"), 1u) << label;
    EXPECT_EQ(Count(svg, ">" + label + "</text>"), 1u) << label;
  }
  EXPECT_EQ(Count(svg, ">optimizer sgd, batch_size 32 (no data)</text>"), 1u);
  EXPECT_EQ(Count(svg, "<circle"), 4u + 2u + 2u);
  EXPECT_EQ(Count(svg, ">steps (worker 0)</text>"), 1u);
  EXPECT_EQ(Count(svg, ">training loss</text>"), 1u);
}

TEST(ReportTest, SvgOfNothingSaysNoData) {
  SweepBuilder b("s11", "");
  b.State(v1::QUEUED);
  b.Point({});
  const ReportInput in = b.Build();
  for (const std::string plot : {"memory", "loss"}) {
    SCOPED_TRACE(plot);
    const std::string svg = RenderSvg(in, plot);
    ExpectSvgShape(svg);
    EXPECT_EQ(Count(svg, "<polyline"), 0u);
    EXPECT_EQ(Count(svg, ">all (no data)</text>"), 1u);
  }
}

// --- Compare. ---

TEST(ReportTest, CompareIsTheRatioOfCellsMatchedByLabelsAndHeadings) {
  const ReportInput a = ThreeAxes();
  // b lists its starts and worker counts the other way round: its rows and columns are in
  // another order, and its 2-worker spawn point succeeded where a's failed.
  const ReportInput b = ThreeAxes("s3b", {"spawn", "fork"}, {"2", "1"},
                                  [](const std::string& start, const std::string& w) {
                                    if (start == "fork" && w == "1")
                                      return Figures{v1::SUCCEEDED, 2 * kGiB, 150, 15, 0.25, 0.75};
                                    if (start == "fork")
                                      return Figures{v1::SUCCEEDED, 4 * kGiB, 180, 30, 0.3, {}};
                                    if (w == "1")
                                      return Figures{v1::SUCCEEDED, 6 * kGiB, 45, 60, 0.55, 0.26};
                                    return Figures{v1::SUCCEEDED, kGiB, 10, 10, 0.1, 0.1};
                                  });
  ASSERT_EQ(BuildTables(b)[0].columns, (std::vector<std::string>{"2", "1"}));
  ASSERT_EQ(BuildTables(b)[0].rows[0].labels, (std::vector<std::string>{"spawn", "cpu"}));

  auto table = [](const std::string& title, const std::string& fork_cpu,
                  const std::string& spawn_cpu, bool gpu) {
    std::string t = "\n## " + title + "\n\nColumns: workers.\n\n| start | device | 1 | 2 |\n" +
                    "| --- | --- | --- | --- |\n";
    if (!gpu) t += "| fork | cpu | " + fork_cpu + " |\n";
    t += "| fork | cuda | - | - |\n";
    if (!gpu) t += "| spawn | cpu | " + spawn_cpu + " |\n";
    return t + "| spawn | cuda | - | - |\n";
  };
  // What each worker adds: fork's 2 GiB a worker in b against 1 in a; the fixed parts are both
  // 0 (no ratio), spawn's 2-worker point failed in a.
  auto per_worker = [](const std::string& what, const std::string& fork_cpu, bool gpu) {
    std::string t = "\n## " + what + kPerWorkerTitle +
                    "\n\nColumns: figure.\n\n| start | device | per worker | fixed |\n" +
                    "| --- | --- | --- | --- |\n";
    if (!gpu) t += "| fork | cpu | " + fork_cpu + " |\n";
    t += "| fork | cuda | - | - |\n";
    if (!gpu) t += "| spawn | cpu | - | - |\n";
    return t + "| spawn | cuda | - | - |\n";
  };
  const std::string want =
      "# Sweep s3b / sweep s3 (ratio of each cell)\n\nA: " + kOneRun + "\n\nB: " + kOneRun + "\n" +
      table("Host memory: peak sum of PSS over all processes (GiB)", "2.00 | 2.00", "2.00 | -",
            false) +
      per_worker("Host", "2.00 | -", false) +
      table("GPU memory: peak sum over the experiment's processes (GiB, NVML)", "", "", true) +
      per_worker("GPU", "", true) +
      table("GPU utilisation: mean while training, its devices (%, NVML)", "", "", true) +
      table("Throughput (samples/s, all workers)", "1.50 | 1.00", "0.50 | -", false) +
      table("start_ms: first worker requested -> every worker training (ms)", "1.50 | 1.50",
            "2.00 | -", false) +
      table("Training loss (mean of the last batches of every worker)", "0.50 | 0.50", "1.00 | -",
            false) +
      table("Test accuracy (worker 0, after training)", "1.50 | -", "0.50 | -", false);
  EXPECT_EQ(RenderCompareMarkdown(a, b), want);
}

// --- Repeats: medians, spreads, the noisy mark, disturbed and failed runs. ---

// workers 1, 2 run three times each; `samples(cell, run)` is a run's throughput, and run 2 of
// cell 1 fails when `fail` is set.
ReportInput Repeated(const std::string& id, const std::function<double(int, int)>& samples,
                     bool fail = false, int disturbed_run = -1) {
  SweepBuilder b(id, "");
  b.Axis("workers", {"1", "2"}).State(v1::SUCCEEDED);
  b.Point({{"workers", "1"}});
  b.Point({{"workers", "2"}});
  b.Repeats(3);
  for (int run = 0; run < 3; ++run) {
    for (int cell = 0; cell < 2; ++cell) {
      const int index = run * 2 + cell;
      const bool failed = fail && cell == 1 && run == 2;
      v1::Result* r = b.Run(index, failed ? v1::FAILED : v1::SUCCEEDED);
      r->set_samples_per_sec(samples(cell, run));
      r->set_peak_pss_sum_bytes(kGiB);
      if (run == disturbed_run) {
        r->set_disturbed(true);
        r->set_disturbance("other processes used 1.5 cores");
      }
    }
  }
  return b.Build();
}

const Table& TableOf(const std::vector<Table>& tables, const std::string& key) {
  auto t = std::find_if(tables.begin(), tables.end(), [&](const Table& x) { return x.key == key; });
  EXPECT_NE(t, tables.end()) << key;
  return *t;
}

// The records say where each run ran: one host is named once; runs on unlike hosts are listed
// with their counts, and a cell whose runs span them says its median mixes them.
TEST(ReportTest, TheReportSaysWhereTheRunsRanAndMarksACellOverUnlikeHosts) {
  ReportInput in = Repeated("s8", [](int c, int r) { return 100.0 + c + r; });
  EXPECT_EQ(HostsNote(in), "");  // records from before hosts were recorded
  v1::Host a;
  a.set_hostname("n1");
  a.set_cpu_model("Xeon");
  a.set_cores(2);
  a.set_memory_bytes(kGiB);
  a.set_kernel("6.1");
  a.set_libtorch("1.13.1");
  a.set_shoal("0.1.0");
  for (auto& [id, e] : in.experiments) *e.mutable_host() = a;
  EXPECT_EQ(HostsNote(in),
            "Host: n1: Xeon, 2 cores, 1.00 GiB, Linux 6.1; LibTorch 1.13.1, Shoal 0.1.0.");
  v1::Host b = a;
  b.set_hostname("n2");
  b.set_cpu_model("EPYC");
  b.add_gpus("H100");
  b.add_gpus("H100");
  b.set_nvidia_driver("550.54");
  for (auto& [id, e] : in.experiments)
    if (e.sweep_index() == 5) *e.mutable_host() = b;  // cell 1's third run
  EXPECT_EQ(HostsNote(in),
            "Hosts: the runs ran on 2 hosts, and a figure from one does not compare with "
            "another's: n1: Xeon, 2 cores, 1.00 GiB, Linux 6.1; LibTorch 1.13.1, Shoal 0.1.0 (5 "
            "runs); n2: EPYC, 2 cores, 1.00 GiB, Linux 6.1; LibTorch 1.13.1, Shoal 0.1.0; GPU 2 x "
            "H100, driver 550.54 (1 run).");
  const auto tables = BuildTables(in);
  const Table& t = TableOf(tables, "samples_per_sec");
  ASSERT_EQ(t.rows.size(), 1u);
  EXPECT_EQ(t.rows[0].cells[0].footnote, 0);  // all three on n1
  const Cell& mixed = t.rows[0].cells[1];
  ASSERT_GT(mixed.footnote, 0);
  EXPECT_EQ(t.footnotes[size_t(mixed.footnote - 1)],
            "its runs ran on unlike hosts (n1, n2): the median mixes them");
  EXPECT_NE(RenderMarkdown(in).find("Hosts: the runs ran on 2 hosts"), std::string::npos);
  const std::string csv = RenderCsv(in);
  EXPECT_NE(csv.find(",e5,succeeded,,n2,"), std::string::npos) << csv;
  EXPECT_NE(csv.find(",e0,succeeded,,n1,"), std::string::npos) << csv;
}

TEST(ReportTest, RepeatedCellIsTheMedianWithItsSpreadAndNoisyWhenWide) {
  const double runs[2][3] = {{100, 120, 90}, {200, 202, 199}};
  const auto tables = BuildTables(Repeated("s7", [&](int c, int r) { return runs[c][r]; }));
  const Table& t = TableOf(tables, "samples_per_sec");
  ASSERT_EQ(t.rows.size(), 1u);
  const Cell& wide = t.rows[0].cells[0];
  EXPECT_DOUBLE_EQ(wide.value, 100);
  EXPECT_EQ(wide.runs, 3);
  EXPECT_DOUBLE_EQ(wide.lo, 90);
  EXPECT_DOUBLE_EQ(wide.hi, 120);
  EXPECT_TRUE(wide.noisy);  // 30 > 10% of 100
  EXPECT_EQ(wide.text, "100.0 (90.0\u2013120.0)");
  ASSERT_GT(wide.footnote, 0);
  EXPECT_EQ(t.footnotes[size_t(wide.footnote - 1)],
            "noisy: its runs spread over more than 10% of their median");
  const Cell& tight = t.rows[0].cells[1];
  EXPECT_DOUBLE_EQ(tight.value, 200);
  EXPECT_FALSE(tight.noisy);  // 3 <= 20
  EXPECT_EQ(tight.footnote, 0);
  EXPECT_EQ(tight.text, "200.0 (199.0\u2013202.0)");
  const std::string md = RenderMarkdown(Repeated("s7", [&](int c, int r) { return runs[c][r]; }));
  EXPECT_NE(md.find("Runs: 3 per point, interleaved"), std::string::npos) << md;
}

TEST(ReportTest, AFailedRunIsLeftOutOfTheMedianAndSaidSo) {
  const auto tables = BuildTables(Repeated(
      "s8", [](int c, int r) { return c * 100.0 + r; }, /*fail=*/true));
  const Table& t = TableOf(tables, "samples_per_sec");
  const Cell& c = t.rows[0].cells[1];
  EXPECT_EQ(c.runs, 2);
  EXPECT_DOUBLE_EQ(c.value, 100.5);  // median of 100 and 101: the failed run's 102 is not shown
  ASSERT_GT(c.footnote, 0);
  EXPECT_EQ(t.footnotes[size_t(c.footnote - 1)].rfind("median of 2 of 3 runs", 0), 0u);
}

TEST(ReportTest, DisturbedRunsAreLeftOutWhileAnUndisturbedOneIsLeft) {
  const double runs[3] = {50, 52, 500};  // run 2 ran beside a busy machine
  const auto tables = BuildTables(Repeated(
      "s9", [&](int, int r) { return runs[r]; }, false, 2));
  const Cell& c = TableOf(tables, "samples_per_sec").rows[0].cells[0];
  EXPECT_EQ(c.runs, 2);
  EXPECT_DOUBLE_EQ(c.value, 51);
  EXPECT_DOUBLE_EQ(c.hi, 52);
}

TEST(ReportTest, CompareOfRepeatsIsTheRatioOfMediansMarkedWhereTheyOverlap) {
  // A: 100 (90-120) and 200 (199-202). B: 110 (95-130), overlapping A's; 300 (299-301), apart.
  const double ra[2][3] = {{100, 120, 90}, {200, 202, 199}};
  const double rb[2][3] = {{110, 130, 95}, {300, 301, 299}};
  const std::string md =
      RenderCompareMarkdown(Repeated("sa", [&](int c, int r) { return ra[c][r]; }),
                            Repeated("sb", [&](int c, int r) { return rb[c][r]; }));
  EXPECT_NE(md.find("| 1.10 ~ [1] | 1.50 |"), std::string::npos) << md;
  EXPECT_NE(md.find("[1] ~: the two cells' runs overlap (min\u2013max): not distinguishable"),
            std::string::npos);
}

TEST(ReportTest, CsvAndJsonKeepEveryRun) {
  const ReportInput in = Repeated("s10", [](int c, int r) { return c * 10.0 + r; });
  std::istringstream csv(RenderCsv(in));
  std::vector<std::string> lines;
  for (std::string line; std::getline(csv, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 1u + 6u);
  EXPECT_EQ(lines[4].rfind("s10,3,1,1,,e3,succeeded,", 0), 0u) << lines[4];
  const nlohmann::json j = RenderJson(in);
  EXPECT_EQ(j["experiments"].size(), 6u);
  for (const auto& t : j["tables"]) {
    if (t["key"] != "samples_per_sec") continue;
    EXPECT_EQ(t["rows"][0]["cells"][1]["runs"], 3);
    EXPECT_EQ(t["rows"][0]["cells"][1]["min"], 10.0);
    EXPECT_EQ(t["rows"][0]["cells"][1]["max"], 12.0);
  }
}

// --- Pareto and HTML. ---

TEST(ReportTest, TheParetoFrontKeepsThePointsNothingBeatsOnBothAxes) {
  // (memory, throughput): (2, 150) is beaten by (1, 200); (3, 200) by (1, 200) too (more memory,
  // no more throughput); (4, 300) and (1, 200) and (0.5, 50) are the front.
  const auto front = ParetoFront({{2, 150}, {1, 200}, {3, 200}, {4, 300}, {0.5, 50}});
  const std::vector<std::pair<double, double>> want = {{0.5, 50}, {1, 200}, {4, 300}};
  EXPECT_EQ(front, want);
  EXPECT_TRUE(ParetoFront({}).empty());
}

// A line chart of repeated cells draws each median with its runs' range as a bar through it.
TEST(ReportTest, LineChartsOfRepeatsDrawEachRange) {
  const double runs[2][3] = {{100, 120, 90}, {200, 202, 199}};
  const ReportInput in = Repeated("s13", [&](int c, int r) { return runs[c][r]; });
  const std::string svg = RenderSvg(in, "throughput");
  EXPECT_NE(svg.find("<title>all: 90\u2013120</title></line>"), std::string::npos) << svg;
  EXPECT_NE(svg.find("<title>all: 199\u2013202</title></line>"), std::string::npos);
  // One run a point: no bars.
  const std::string one = RenderSvg(OneAxis(), "throughput");
  EXPECT_EQ(one.find("\u2013"), std::string::npos) << one;
}

TEST(ReportTest, TheParetoPlotHasAPointPerCellAndItsFront) {
  const double runs[2][3] = {{100, 120, 90}, {200, 202, 199}};
  const std::string svg =
      RenderSvg(Repeated("s11", [&](int c, int r) { return runs[c][r]; }), "pareto");
  EXPECT_NE(svg.find("peak host memory, GiB"), std::string::npos);
  EXPECT_NE(svg.find(">workers 1</text>"), std::string::npos) << svg;
  EXPECT_NE(svg.find(">workers 2</text>"), std::string::npos);
  EXPECT_NE(svg.find("Pareto front"), std::string::npos);
  EXPECT_EQ(std::count(svg.begin(), svg.end(), '\n') > 10, true);
}

TEST(ReportTest, HtmlMarksNoisyCellsAndEscapesWhatItQuotes) {
  const double runs[2][3] = {{100, 120, 90}, {200, 202, 199}};
  ReportInput in = Repeated("s12", [&](int c, int r) { return runs[c][r]; });
  in.sweep.mutable_spec()->set_name("<b>mine</b>");
  v1::NodeInfoResponse node;
  node.set_hostname("gpu-node-7");
  node.set_cores(16);
  node.set_cpu_model("AMD EPYC 9454");
  (*node.mutable_versions())["libtorch"] = "1.13.0";
  const std::string html = RenderHtml(in, &node);
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_NE(html.find("&lt;b&gt;mine&lt;/b&gt;"), std::string::npos);
  EXPECT_EQ(html.find("<b>mine</b>"), std::string::npos);
  EXPECT_NE(html.find("<td class=\"noisy\">100.0 (90.0\u2013120.0) <sup>[1]</sup></td>"),
            std::string::npos)
      << html;
  EXPECT_NE(html.find("<dd>16 cores, AMD EPYC 9454</dd>"), std::string::npos);
  EXPECT_NE(html.find("<dt>libtorch</dt><dd>1.13.0</dd>"), std::string::npos);
  EXPECT_NE(html.find("Runs: 3 per point"), std::string::npos);
}

TEST(ReportTest, CompareSkipsTablesTheOtherSweepLacks) {
  // a has GPU tables (cuda points), b has none: only the shared tables are compared.
  const ReportInput a = ThreeAxes();
  SweepBuilder bb("cpu", "");
  bb.Axis("workers", {"1", "2"}).State(v1::SUCCEEDED);
  bb.Run(bb.Point({{"workers", "1"}}), v1::SUCCEEDED)->set_peak_pss_sum_bytes(kGiB);
  bb.Run(bb.Point({{"workers", "2"}}), v1::SUCCEEDED)->set_peak_pss_sum_bytes(kGiB);
  const std::string md = RenderCompareMarkdown(a, bb.Build());
  EXPECT_EQ(md.find("GPU"), std::string::npos) << md;
  // Rows are labelled by start and device in a, by nothing in b: no cell matches.
  EXPECT_NE(md.find("| fork | cpu | - | - |\n"), std::string::npos) << md;
  EXPECT_EQ(Count(md, "\n## "), 6u) << md;  // host memory's per-worker table too
}

}  // namespace
}  // namespace shoal

// --- One experiment's memory over time. ---

namespace shoal {
namespace {

v1::Sample TimelineSample(double t_ms, std::vector<std::tuple<std::string, int, uint64_t>> procs) {
  v1::Sample s;
  s.set_t_ms(t_ms);
  uint64_t total = 0;
  for (const auto& [role, index, pss_mib] : procs) {
    auto* p = s.add_processes();
    p->set_role(role);
    p->set_index(index);
    p->set_pss_bytes(pss_mib << 20);
    p->set_rss_bytes(2 * (pss_mib << 20));
    total += pss_mib << 20;
  }
  s.set_total_pss_bytes(total);
  s.set_total_rss_bytes(2 * total);
  s.set_total_uss_bytes(total / 2);
  return s;
}

std::vector<v1::Sample> Timeline() {
  return {TimelineSample(0, {{"leader", -1, 100}}),
          TimelineSample(
              500, {{"leader", -1, 110}, {"worker", 0, 200}, {"pool", -1, 3}, {"pool", -1, 5}}),
          TimelineSample(1000, {{"leader", -1, 120}, {"worker", 1, 250}, {"worker", 0, 210}})};
}

TEST(TimelineTest, TableHasOneColumnPerProcessAndSumsThePool) {
  EXPECT_EQ(FormatTimeline(Timeline(), "csv"),
            "t_s,total_pss_mib,total_rss_mib,total_uss_mib,leader pss_mib,worker 0 pss_mib,"
            "pool pss_mib,worker 1 pss_mib\n"
            "0.0,100.0,200.0,50.0,100.0,,,\n"
            "0.5,318.0,636.0,159.0,110.0,200.0,8.0,\n"
            "1.0,580.0,1160.0,290.0,120.0,210.0,,250.0\n");
  const std::string md = FormatTimeline(Timeline(), "md");
  EXPECT_EQ(md.substr(0, md.find('\n')),
            "| t_s | total_pss_mib | total_rss_mib | total_uss_mib | leader pss_mib | "
            "worker 0 pss_mib | pool pss_mib | worker 1 pss_mib |");
  EXPECT_EQ(Count(md, "\n"), 5u);  // head, rule, three samples
}

TEST(TimelineTest, SvgDrawsTheTotalAndEveryProcess) {
  const std::string svg = RenderTimelineSvg("Experiment x", Timeline());
  ExpectSvgShape(svg);
  EXPECT_EQ(Count(svg, "<polyline"), 5u);  // total, leader, worker 0, pool, worker 1
  for (const std::string label : {"total", "leader", "worker 0", "pool", "worker 1"})
    EXPECT_EQ(Count(svg, "<title>" + label + "</title>"), 1u) << label;
  EXPECT_EQ(Count(svg, ">PSS (MiB)</text>"), 1u);
}

TEST(TimelineTest, ARunAcrossNodesGetsANodeColumnAndSeriesPerNode) {
  std::vector<v1::Sample> samples = {TimelineSample(0, {{"worker", 0, 200}}),
                                     TimelineSample(0, {{"worker", 0, 300}}),
                                     TimelineSample(500, {{"worker", 0, 210}})};
  samples[0].set_node(0);
  samples[1].set_node(1);
  samples[2].set_node(0);
  EXPECT_EQ(FormatTimeline(samples, "csv"),
            "t_s,node,total_pss_mib,total_rss_mib,total_uss_mib,node 0 worker 0 pss_mib,"
            "node 1 worker 0 pss_mib\n"
            "0.0,0,200.0,400.0,100.0,200.0,\n"
            "0.0,1,300.0,600.0,150.0,,300.0\n"
            "0.5,0,210.0,420.0,105.0,210.0,\n");
  const std::string svg = RenderTimelineSvg("Experiment x", samples);
  for (const std::string label :
       {"node 0 total", "node 1 total", "node 0 worker 0", "node 1 worker 0"})
    EXPECT_EQ(Count(svg, "<title>" + label + "</title>"), 1u) << label;
  EXPECT_EQ(Count(svg, "<polyline"), 4u);
}

TEST(TimelineTest, NoSamplesIsAnEmptyTableNotAnError) {
  EXPECT_EQ(FormatTimeline({}, "csv"), "t_s,total_pss_mib,total_rss_mib,total_uss_mib\n");
  ExpectSvgShape(RenderTimelineSvg("Experiment x", {}));
}

}  // namespace
}  // namespace shoal
