// A new kind, added the way docs/architecture.md says: its daemon half (rules and hooks, what
// shared/kinds/toy/ would hold) and its worker half (a WorkerKind, what worker/kinds/toy/ would
// hold), registered with one call each — and nothing else of Shoal is touched. The generic layers
// then check its spec, run it (the real leader forks real workers), summarise its run, put its
// table in a sweep's report and print its lines in `shoal get`.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>

#include "client/format.h"
#include "client/report/report.h"
#include "server/run_summary.h"
#include "shared/ipc/ipc_codec.h"
#include "shared/kinds/kind.h"
#include "shared/os/process.h"
#include "worker/kind.h"
#include "worker/leader.h"
#include "worker/scoreboard.h"
#include "worker/step_recorder.h"

namespace shoal {
namespace {

constexpr uint64_t kToySteps = 3;

// ---- what shared/kinds/toy/ would hold: no LibTorch ----
namespace toy {

Status Validate(const v1::ExperimentSpec& s, const SpecLimits&) {
  if (s.workers() > 4)
    return InvalidArgument("toy: at most 4 workers, got " + std::to_string(s.workers()));
  return Status::Ok();
}

// The toy's figure: the share of its workers that finished (a real kind fills its own message).
void Summarize(const KindRunFacts& f, v1::Result* r) {
  const auto finished = std::count_if(f.workers.begin(), f.workers.end(), [](const auto& w) {
    return w.phase() == ipc::v1::FINISHED && w.steps() == kToySteps;
  });
  r->set_test_accuracy(double(finished) / double(f.spec.workers()));
}

std::vector<Table> ReportTables(const KindTablesInput& in) {
  return {report::PointTable(in.points, in.fields, "toy_finished", "toy: workers finished",
                             "figure", {"share"}, [](const v1::Experiment& e, size_t) {
                               return report::Value(e.result().test_accuracy(), "%.2f");
                             })};
}

std::string ResultLines(const v1::Result& r) {
  return "  toy         " + std::to_string(int(100 * r.test_accuracy())) + "% finished\n";
}

std::string RoleName(const v1::ProcessInfo& p) { return p.role() == "worker" ? "toy" : p.role(); }

KindRules Rules() {
  KindRules k;
  k.name = "toy";
  k.summary = "a test's kind";
  k.models = {"toy_model"};
  k.validate = Validate;
  k.estimate = EstimateExperiment;
  k.ignores = {"model_file", "input", "loss", "classes"};
  k.summarize = Summarize;
  k.report_tables = ReportTables;
  k.result_lines = ResultLines;
  k.role_name = RoleName;
  return k;
}

}  // namespace toy

// ---- what worker/kinds/toy/ would hold ----
class ToyWorkerKind : public WorkerKind {
 public:
  Status Prepare(LeaderEnv&) override { return Status::Ok(); }
  std::vector<std::string> SegmentWhats() const override { return {}; }
  int RunWorker(WorkerEnv& env, bool) override {
    WorkerSlot* slot = env.slot;
    slot->pid.store(getpid());
    if (!PassStartGate(env.board, slot, env.lifetime_fd)) return kLeaderGoneExit;
    slot->ready_ns.store(RealtimeNs());
    slot->first_step_ns.store(RealtimeNs());
    slot->phase.store(static_cast<uint32_t>(WorkerPhase::kTraining));
    StepRecorder steps(slot, kToySteps);
    EpochTotals totals;
    for (uint64_t s = 0; s < kToySteps; ++s) {
      StepTimes t;
      t.forward_ns = 1000;
      steps.Step(t, 1.0f / float(s + 1), env.spec.batch_size(), &totals);
    }
    slot->vmhwm_bytes.store(SelfVmHwm());
    slot->phase.store(static_cast<uint32_t>(WorkerPhase::kFinished));
    Arrive(&env.board->finished);
    return 0;
  }
};

// The real leader in a child process, as shoald starts it: its frames, and its exit code.
struct LeaderRun {
  std::optional<ipc::v1::LeaderResult> result;
  std::vector<pid_t> workers;
  int status = -1;
};

LeaderRun RunToyLeader(const v1::ExperimentSpec& spec) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  const pid_t parent = ::getpid();
  const pid_t child = ::fork();
  if (child == 0) {
    ::close(fds[0]);
    ::setpgid(0, 0);  // the leader's SIGTERM handler takes its own group down, never the test's
    LeaderArgs a;
    a.spec = spec;
    a.experiment_id = "toy" + std::to_string(::getpid());
    a.status_fd = fds[1];
    a.parent = parent;
    ::_exit(RunLeader(a, MakeWorkerKindFor));
  }
  ::close(fds[1]);
  LeaderRun run;
  FrameReader reader;
  char buf[4096];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;) {
    reader.Feed(buf, size_t(n));
    ipc::v1::LeaderEvent e;
    for (auto got = reader.Next(&e); got.ok() && *got; got = reader.Next(&e)) {
      if (e.has_result()) run.result = e.result();
      if (e.has_worker_started()) run.workers.push_back(pid_t(e.worker_started().pid()));
    }
  }
  ::close(fds[0]);
  EXPECT_EQ(::waitpid(child, &run.status, 0), child);
  return run;
}

v1::ExperimentSpec ToySpec(uint32_t workers) {
  v1::ExperimentSpec s;
  s.set_kind("toy");
  s.set_model("toy_model");
  s.set_workers(workers);
  s.set_start("fork");
  ApplyDefaults(&s, SpecLimits{});
  return s;
}

class ToyKindTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    RegisterKind(toy::Rules());
    RegisterWorkerKind("toy", [] { return std::make_unique<ToyWorkerKind>(); });
  }
};

TEST_F(ToyKindTest, ANameIsRegisteredOnce) {
  EXPECT_FALSE(RegisterKind(toy::Rules()));
  EXPECT_FALSE(RegisterKind(*FindKind("hogwild")));
  EXPECT_FALSE(RegisterWorkerKind("toy", [] { return std::make_unique<ToyWorkerKind>(); }));
  EXPECT_NE(MakeWorkerKind("toy"), nullptr);
}

TEST_F(ToyKindTest, TheSpecIsCheckedByItsRules) {
  EXPECT_TRUE(ValidateSpec(ToySpec(2), SpecLimits{}).ok());
  const Status five = ValidateSpec(ToySpec(5), SpecLimits{});
  EXPECT_EQ(five.message(), "toy: at most 4 workers, got 5");
  v1::ExperimentSpec other = ToySpec(2);
  other.set_model("mnist_convnet");
  EXPECT_FALSE(ValidateSpec(other, SpecLimits{}).ok());  // not one of its models
  other = ToySpec(2);
  other.mutable_pipeline()->set_stages(2);
  EXPECT_NE(ValidateSpec(other, SpecLimits{}).message().find("stages"), std::string::npos);
}

TEST_F(ToyKindTest, ItRunsSummarisesTabulatesAndPrintsThroughTheGenericLayers) {
  const v1::ExperimentSpec spec = ToySpec(2);
  LeaderRun run = RunToyLeader(spec);
  ASSERT_TRUE(WIFEXITED(run.status)) << run.status;
  EXPECT_EQ(WEXITSTATUS(run.status), 0);
  ASSERT_TRUE(run.result.has_value());
  EXPECT_TRUE(run.result->ok()) << run.result->error();
  ASSERT_EQ(run.result->workers_size(), 2);
  EXPECT_EQ(run.workers.size(), 2u);

  RunFacts f;
  f.spec = spec;
  f.result = run.result;
  f.wall_ns = 1'000'000'000;
  v1::Result r;
  FillResult(f, &r);
  EXPECT_EQ(r.steps(), 2 * kToySteps);  // the generic figures, from the real workers' slots
  EXPECT_EQ(r.samples(), 2 * kToySteps * spec.batch_size());
  EXPECT_DOUBLE_EQ(r.test_accuracy(), 1.0);  // the toy's own, from its summarize hook

  v1::Experiment e;
  e.set_id("t1");
  e.set_state(v1::SUCCEEDED);
  *e.mutable_spec() = spec;
  *e.mutable_result() = r;
  v1::ProcessInfo* p = e.add_processes();
  p->set_pid(run.workers[0]);
  p->set_role("worker");
  p->set_index(0);
  const std::string out = cli::FormatExperiment(e);
  EXPECT_NE(out.find("  toy         100% finished\n"), std::string::npos) << out;
  EXPECT_NE(out.find(" toy        0 "), std::string::npos) << out;  // role, then index

  ReportInput in;
  *in.sweep.mutable_spec()->mutable_base() = spec;
  v1::SweepPoint* point = in.sweep.add_points();
  point->set_experiment_id("t1");
  point->set_state(v1::SUCCEEDED);
  in.experiments["t1"] = e;
  const auto tables = BuildTables(in);
  auto toy_table = std::find_if(tables.begin(), tables.end(),
                                [](const Table& t) { return t.key == "toy_finished"; });
  ASSERT_NE(toy_table, tables.end());
  ASSERT_EQ(toy_table->rows.size(), 1u);
  EXPECT_EQ(toy_table->rows[0].cells[0].text, "1.00");
}

}  // namespace
}  // namespace shoal
