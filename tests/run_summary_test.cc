#include "server/run_summary.h"

#include <gtest/gtest.h>
#include <signal.h>

#include "client/format.h"
#include "shared/kinds/kind.h"

namespace shoal {
namespace {

constexpr uint64_t kS = 1'000'000'000;

ipc::v1::WorkerReading Worker(uint32_t index, uint64_t first_s, uint64_t last_s, uint64_t samples) {
  ipc::v1::WorkerReading w;
  w.set_index(index);
  w.set_phase(ipc::v1::FINISHED);
  w.set_first_step_ns(first_s * kS);
  w.set_last_step_ns(last_s * kS);
  w.set_requested_ns(first_s * kS - kS / 10);
  w.set_samples(samples);
  w.set_steps(samples / 64);
  return w;
}

RunFacts Finished(bool ok) {
  RunFacts f;
  f.spec.set_workers(2);
  f.start_real_ns = 99 * kS;
  f.wall_ns = 10 * kS;
  f.leader = 500;
  f.leader_exited = true;
  f.leader_status = ok ? 0 : 1 << 8;
  f.result.emplace();
  f.result->set_ok(ok);
  *f.result->add_workers() = Worker(0, 100, 104, 640);
  *f.result->add_workers() = Worker(1, 101, 105, 640);
  return f;
}

TEST(RunSummaryTest, ThroughputIsOverTheTimeWorkersActuallyTrained) {
  RunFacts f = Finished(true);
  v1::Result r;
  FillResult(f, &r);
  EXPECT_EQ(r.samples(), 1280u);
  EXPECT_DOUBLE_EQ(r.train_ms(), 5000);  // first step at 100 s, last at 105 s
  EXPECT_DOUBLE_EQ(r.samples_per_sec(), 256);
  EXPECT_DOUBLE_EQ(r.ready_ms(), 2000);  // left the queue at 99 s, last first step at 101 s
  EXPECT_DOUBLE_EQ(r.start_ms(), 1100);  // first request at 99.9 s
  EXPECT_FALSE(r.has_test_accuracy());   // nobody evaluated: absent, not 0
}

// multi_model's workers are up at once and train one after another: start-up ends when each is
// ready, not when its turn comes (worker 1's first step, 101 s, waited for worker 0's training).
TEST(RunSummaryTest, AWorkerThatWaitsItsTurnIsStartedWhenReady) {
  RunFacts f = Finished(true);
  f.result->mutable_workers(1)->set_ready_ns(100 * kS + kS / 10);  // 0.1 s after its request
  f.result->mutable_workers(1)->set_requested_ns(100 * kS);
  v1::Result r;
  FillResult(f, &r);
  EXPECT_DOUBLE_EQ(r.start_ms(), 200);   // first request 99.9 s -> last ready 100.1 s
  EXPECT_DOUBLE_EQ(r.ready_ms(), 1100);  // left the queue at 99 s
  EXPECT_DOUBLE_EQ(r.train_ms(), 5000);  // training is still first step to last
  v1::ProcessInfo p;
  ApplyWorkerReading(f.result->workers(1), f.start_real_ns, &p);
  EXPECT_NEAR(p.start_ms(), 100, 1e-6);
}

// Worker 0's evaluations are placed on the experiment's clock (ms since it started), the first
// ones span by span, with how many there were.
TEST(RunSummaryTest, EvaluationsArePlacedOnTheExperimentsClock) {
  RunFacts f = Finished(true);
  ipc::v1::WorkerReading w = f.result->workers(0);
  for (uint64_t at : {101, 103}) {
    auto* span = w.add_eval_spans();
    span->set_start_ns(at * kS);
    span->set_end_ns(at * kS + kS / 4);
  }
  w.set_evaluations(20);
  v1::ProcessInfo p;
  ApplyWorkerReading(w, f.start_real_ns, &p);
  ASSERT_EQ(p.evaluation_spans_size(), 2);
  EXPECT_DOUBLE_EQ(p.evaluation_spans(1).from_ms() - p.evaluation_spans(0).from_ms(), 2000);
  EXPECT_DOUBLE_EQ(p.evaluation_spans(0).to_ms() - p.evaluation_spans(0).from_ms(), 250);
  EXPECT_DOUBLE_EQ(p.evaluation_spans(0).from_ms(), double(101 * kS - f.start_real_ns) / 1e6);
  EXPECT_EQ(p.evaluations(), 20u);
  ApplyWorkerReading(f.result->workers(1), f.start_real_ns, &p);  // worker 1 evaluated nothing
  EXPECT_EQ(p.evaluation_spans_size(), 0);
}

// A timed step starts at its end less its timed phases, on the experiment's clock.
TEST(RunSummaryTest, TimedStepsStartAtTheirEndLessTheirPhases) {
  RunFacts f = Finished(true);
  ipc::v1::WorkerReading w = f.result->workers(0);
  auto* st = w.add_step_spans();
  st->set_step(7);
  st->set_end_ns(100 * kS + kS / 2);
  st->set_data_ns(10'000'000);
  st->set_forward_ns(20'000'000);
  st->set_backward_ns(30'000'000);
  st->set_optimizer_ns(40'000'000);
  v1::ProcessInfo p;
  ApplyWorkerReading(w, f.start_real_ns, &p);
  ASSERT_EQ(p.timed_steps_size(), 1);
  EXPECT_EQ(p.timed_steps(0).step(), 7u);
  EXPECT_NEAR(p.timed_steps(0).start_ms(), double(100 * kS + kS / 2 - f.start_real_ns) / 1e6 - 100,
              1e-6);
  EXPECT_DOUBLE_EQ(p.timed_steps(0).forward_ms(), 20);
  EXPECT_DOUBLE_EQ(p.timed_steps(0).whole_ms(), 0);
}

// cuda_sync step: the workers timed their steps whole, so the phase split is unknown (absent,
// not 0), in the result and in every epoch; throughput is timed as before.
TEST(RunSummaryTest, StepsTimedWholeHaveNoPhaseSplit) {
  RunFacts f = Finished(true);
  v1::Result timed;
  FillResult(f, &timed);
  EXPECT_TRUE(timed.has_forward_ms());
  EXPECT_TRUE(timed.has_data_ms());
  f.spec.set_device("cuda");
  f.spec.set_cuda_sync("step");
  for (auto& w : *f.result->mutable_workers()) {
    auto* x = w.add_epochs();
    x->set_epoch(1);
    x->set_wall_ns(3 * kS);
    x->set_steps(10);
  }
  v1::Result r;
  FillResult(f, &r);
  EXPECT_FALSE(r.has_data_ms());
  EXPECT_FALSE(r.has_forward_ms());
  EXPECT_FALSE(r.has_backward_ms());
  EXPECT_FALSE(r.has_optimizer_ms());
  EXPECT_DOUBLE_EQ(r.samples_per_sec(), 256);
  ASSERT_EQ(r.epochs_size(), 1);
  EXPECT_DOUBLE_EQ(r.epochs(0).wall_ms(), 3000);
  EXPECT_FALSE(r.epochs(0).has_data_ms());
  EXPECT_FALSE(r.epochs(0).has_train_ms());
}

// A pipeline stage's memory the seed's way: on the CPU from the counting allocator; on CUDA from
// LibTorch's CUDA allocator (allocated, and reserved as the seed read it) and NVML per process,
// and unknown (absent) where the worker had no CUDA allocator figures.
RunFacts TwoStages(const std::string& device) {
  RunFacts f = Finished(true);
  f.spec.set_kind("pipeline");
  f.spec.set_device(device);
  f.spec.mutable_pipeline()->set_layers(6);
  f.spec.mutable_pipeline()->set_filters(16);
  f.spec.mutable_pipeline()->set_stages(2);
  f.spec.mutable_pipeline()->set_chunks(1);
  f.spec.set_batch_size(4);
  for (int i = 0; i < 2; ++i) {
    auto* w = f.result->mutable_workers(i);
    w->set_pid(600 + i);
    w->set_parameters(1000);
    w->set_alloc_peak_bytes(50000);  // the CPU allocator's peak
  }
  return f;
}

TEST(RunSummaryTest, PipelineStagesTakeTheirDevicesAllocatorFigures) {
  v1::Result cpu;
  FillResult(TwoStages("cpu"), &cpu);
  ASSERT_EQ(cpu.pipeline().stage_size(), 2);
  EXPECT_EQ(cpu.pipeline().stage(0).peak_allocated_bytes(), 50000u);
  EXPECT_EQ(cpu.pipeline().stage(0).peak_activation_bytes(), 50000u - 12 * 1000);
  EXPECT_FALSE(cpu.pipeline().stage(0).has_peak_reserved_bytes());  // unknown on the CPU: absent
  EXPECT_FALSE(cpu.pipeline().stage(0).has_peak_gpu_memory_bytes());
  EXPECT_FALSE(cpu.pipeline().stage(0).has_cuda_device());

  RunFacts f = TwoStages("cuda");
  f.spec.set_cuda_devices("3,1");
  f.result->mutable_workers(1)->set_device_alloc_peak_bytes(80000);
  f.result->mutable_workers(1)->set_device_reserved_peak_bytes(90000);
  f.sampler.peak_gpu[601] = 500000;
  v1::Result r;
  FillResult(f, &r);
  ASSERT_EQ(r.pipeline().stage_size(), 2);
  const auto& blind = r.pipeline().stage(0);  // a CUDA stage without the allocator's figures
  EXPECT_FALSE(blind.has_peak_allocated_bytes()) << "its CPU allocations are not the model's";
  EXPECT_FALSE(blind.has_peak_activation_bytes());
  const auto& gpu = r.pipeline().stage(1);
  EXPECT_EQ(gpu.peak_allocated_bytes(), 80000u);
  EXPECT_EQ(gpu.peak_activation_bytes(), 80000u - 12 * 1000);
  EXPECT_EQ(gpu.peak_reserved_bytes(), 90000u);
  EXPECT_EQ(gpu.peak_gpu_memory_bytes(), 500000u);
  EXPECT_EQ(blind.cuda_device(), 3u);  // where each stage trained, from its spec
  EXPECT_EQ(gpu.cuda_device(), 1u);
  // The sums over stages hold only where every stage's figure is known: here one is not.
  EXPECT_EQ(cpu.pipeline().peak_allocated_sum_bytes(), 2 * 50000u);
  EXPECT_FALSE(r.pipeline().has_peak_allocated_sum_bytes());
  EXPECT_FALSE(r.pipeline().has_peak_activation_sum_bytes());
}

// A pipeline whose stages never ended a step has no step time and no bubble (not 0 ms, 0%).
TEST(RunSummaryTest, APipelineThatNeverSteppedHasNoStepOrBubble) {
  RunFacts f = TwoStages("cpu");
  for (auto& w : *f.result->mutable_workers()) {
    w.set_steps(0);
    w.mutable_pipeline()->set_step_wall_ns(0);
  }
  v1::Result r;
  FillResult(f, &r);
  EXPECT_FALSE(r.pipeline().has_step_ms());
  EXPECT_FALSE(r.pipeline().has_bubble());
  EXPECT_FALSE(r.pipeline().has_peak_allocated_sum_bytes());  // a stage's peak: after a step
  for (const auto& st : r.pipeline().stage()) {               // its times: unknown, not 0 ms
    EXPECT_FALSE(st.has_step_ms() || st.has_forward_ms() || st.has_backward_ms() ||
                 st.has_wait_ms() || st.has_optimizer_ms() || st.has_data_ms() ||
                 st.has_other_ms());
    EXPECT_EQ(st.parameters(), 1000u);  // said before its first step
  }
  EXPECT_EQ(r.pipeline().parameters(), 2000u);
  // A stage that died before it said its parameters leaves the whole's count unknown.
  f.result->mutable_workers(1)->set_parameters(0);
  v1::Result cut;
  FillResult(f, &cut);
  EXPECT_FALSE(cut.pipeline().stage(1).has_parameters());
  EXPECT_FALSE(cut.pipeline().stage(1).has_model_memory_bytes());
  EXPECT_FALSE(cut.pipeline().has_parameters());
  EXPECT_FALSE(cut.pipeline().has_model_memory_bytes());
  v1::Experiment e;
  e.set_state(v1::FAILED);
  *e.mutable_spec() = f.spec;  // a pipeline's record: its kind prints its stages
  *e.mutable_result() = cut;
  const std::string out = cli::FormatExperiment(e);
  EXPECT_NE(out.find("; - parameters, model memory -;"), std::string::npos) << out;
  EXPECT_NE(out.find("-        -        -        -       \n"), std::string::npos) << out;
}

// data_parallel: whether the replicas ended alike is known only when every one ended; before any
// step there is no per-step figure (absent, not 0 ms in the JSON and CSV).
TEST(RunSummaryTest, ReplicasIdenticalOnlyWhenEveryReplicaFinished) {
  RunFacts f = Finished(true);
  f.spec.set_kind("data_parallel");
  for (auto& w : *f.result->mutable_workers()) w.set_weights_checksum(7);
  v1::Result r;
  FillResult(f, &r);
  EXPECT_TRUE(r.data_parallel().replicas_identical());
  EXPECT_TRUE(r.data_parallel().has_step_ms());
  f.result->mutable_workers(1)->set_weights_checksum(8);
  FillResult(f, &r);
  EXPECT_FALSE(r.data_parallel().replicas_identical());
  f.result->mutable_workers(1)->set_phase(ipc::v1::TRAINING);  // cut short: cannot say
  r.Clear();
  FillResult(f, &r);
  EXPECT_FALSE(r.data_parallel().has_replicas_identical());
  for (auto& w : *f.result->mutable_workers()) w.set_steps(0);
  r.Clear();
  FillResult(f, &r);
  const auto& d = r.data_parallel();
  EXPECT_FALSE(d.has_step_ms() || d.has_compute_ms() || d.has_comm_ms() || d.has_data_ms() ||
               d.has_optimizer_ms() || d.has_allreduce_busy_ms() ||
               d.has_allreduce_bytes_per_step() || d.has_steps_per_worker());
}

// A kind that takes no fingerprint of its weights shows none, not sixteen zeros that would read
// as one, and as every stage "identical".
TEST(RunSummaryTest, NoFingerprintTakenIsNoneShown) {
  RunFacts f = TwoStages("cpu");
  v1::Result r;
  FillResult(f, &r);
  EXPECT_TRUE(r.initial_weights_checksum().empty());
  ipc::v1::WorkerReading w = f.result->workers(0);
  w.set_phase(ipc::v1::FINISHED);
  v1::ProcessInfo p;
  ApplyWorkerReading(w, 0, &p);
  EXPECT_TRUE(p.weights_checksum().empty());
  w.set_weights_checksum(0xabcdef);  // hogwild's
  ApplyWorkerReading(w, 0, &p);
  EXPECT_EQ(p.weights_checksum(), "0000000000abcdef");
}

// A stage's step is its wall time: what no phase times (the sends into the neighbours' slots,
// zero_grad) is `other`, and the bubble is the wait's share of the whole step.
TEST(RunSummaryTest, APipelineStepIsTheStagesWallTime) {
  constexpr uint64_t ms = kS / 1000;
  RunFacts f = TwoStages("cpu");
  for (int i = 0; i < 2; ++i) {
    auto* w = f.result->mutable_workers(i);  // 10 steps each
    w->set_forward_ns(300 * ms);
    w->set_backward_ns(500 * ms);
    w->set_comm_ns((i == 0 ? 100 : 400) * ms);
    w->mutable_pipeline()->set_step_wall_ns((i == 0 ? 1000 : 1200) * ms);
  }
  v1::Result r;
  FillResult(f, &r);
  const auto& p = r.pipeline();
  EXPECT_DOUBLE_EQ(p.stage(0).step_ms(), 100);  // 1000 ms over 10 steps
  EXPECT_DOUBLE_EQ(p.stage(0).other_ms(), 10);  // 100 - (30 + 50 + 10)
  EXPECT_DOUBLE_EQ(p.stage(1).step_ms(), 120);
  EXPECT_DOUBLE_EQ(p.stage(1).other_ms(), 0);  // all of it timed
  EXPECT_DOUBLE_EQ(p.step_ms(), 120);          // the slowest stage's
  EXPECT_DOUBLE_EQ(p.bubble(), (10.0 / 100 + 40.0 / 120) / 2);
}

// multi_model: a variant whose clock did not move has no total time, and one without a VmHWM or
// a sampled PSS has no such peak, and one without a loss no final loss: absent, not 0.
TEST(RunSummaryTest, AVariantHasOnlyTheFiguresItsWorkerGave) {
  RunFacts f = Finished(true);
  f.spec.set_kind("multi_model");
  f.spec.mutable_multi_model()->set_models(1);
  f.result->mutable_workers(0)->set_pid(700);
  f.result->mutable_workers(1)->set_pid(701);
  f.result->mutable_workers(0)->set_vmhwm_bytes(300u << 20);
  f.sampler.peak_pss[700] = 200u << 20;
  f.result->mutable_workers(1)->set_last_step_ns(f.result->workers(1).first_step_ns());
  f.result->mutable_workers(0)->set_last_loss(0.25f);
  f.result->mutable_workers(1)->clear_last_loss();
  v1::Result r;
  FillResult(f, &r);
  const auto& variants = r.multi_model().variants();
  ASSERT_EQ(variants.size(), 2);
  EXPECT_DOUBLE_EQ(variants[0].final_loss(), 0.25);
  EXPECT_FALSE(variants[1].has_final_loss());
  EXPECT_DOUBLE_EQ(variants[0].total_ms(), 4000);
  EXPECT_EQ(variants[0].peak_rss_bytes(), 300u << 20);
  EXPECT_EQ(variants[0].peak_pss_bytes(), 200u << 20);
  EXPECT_FALSE(variants[1].has_total_ms());
  EXPECT_FALSE(variants[1].has_peak_rss_bytes());
  EXPECT_FALSE(variants[1].has_peak_pss_bytes());
}

// Unknown through the set-up ticks and the first step (a rate needs two step ends); then the
// rise between changes over the time between them, whatever the ticks in between.
TEST(RunSummaryTest, ALiveRateStartsFromTheFirstStepsNotFromZero) {
  LiveRate rate;
  rate.Feed(0, 1 * kS);
  rate.Feed(0, 2 * kS);
  EXPECT_FALSE(rate.per_sec().has_value());
  rate.Feed(50, 3 * kS);
  EXPECT_FALSE(rate.per_sec().has_value());  // set-up time is not training time
  rate.Feed(150, 4 * kS);
  EXPECT_DOUBLE_EQ(*rate.per_sec(), 100);
}

// Steps of 2.5 s against ticks of 200 ms: 64 samples a step read as 25.6/s within the ticks'
// rounding at every tick while the steps keep coming, where a per-tick average swung from 2.8
// to 340.
TEST(RunSummaryTest, ALiveRateOfStepsLongerThanATickIsSteady) {
  LiveRate rate;
  uint64_t samples = 0;
  for (uint64_t ms = 0; ms <= 20000; ms += 200) {
    samples = ms / 2500 * 64;  // the steps that ended by this tick
    rate.Feed(samples, ms * 1'000'000);
    if (ms < 5200) continue;  // two step ends seen from the tick after 5 s
    ASSERT_TRUE(rate.per_sec().has_value()) << ms;
    EXPECT_NEAR(*rate.per_sec(), 25.6, 1.1) << ms;  // a tick either way over 2.5 s: 24.6..26.7
  }
  // Then it stalls: past the mean interval, the rate falls.
  rate.Feed(samples, 26000ull * 1'000'000);
  EXPECT_LT(*rate.per_sec(), 25.6 * 0.6);
}

TEST(RunSummaryTest, ACancelledRunReportsWhatItDid) {
  RunFacts f = Finished(false);
  f.result.reset();
  f.cancelled = true;
  f.progress.emplace();
  *f.progress->add_workers() = Worker(0, 100, 102, 192);
  v1::Result r;
  FillResult(f, &r);
  EXPECT_DOUBLE_EQ(r.samples_per_sec(), 96);  // 192 samples over 2 s, not over microseconds
  EXPECT_FALSE(r.has_ready_ms());             // one of two workers never started: unknown
  EXPECT_FALSE(r.has_start_ms());
  EXPECT_FALSE(r.has_peak_rss_hwm_sum_bytes());  // no leader result: no one's VmHWM
  EXPECT_EQ(FinalState(f).first, v1::CANCELLED);
}

// Nothing trained: the times and the throughput are unknown, not 0.
TEST(RunSummaryTest, ARunThatNeverTrainedHasNoTimesOrThroughput) {
  RunFacts f = Finished(false);
  for (auto& w : *f.result->mutable_workers()) w = Worker(w.index(), 0, 0, 0);
  v1::Result r;
  FillResult(f, &r);
  EXPECT_FALSE(r.has_train_ms());
  EXPECT_FALSE(r.has_samples_per_sec());
  EXPECT_FALSE(r.has_ready_ms());
  EXPECT_FALSE(r.has_start_ms());
}

// The VmHWM sum adds the leader's and every worker's own mark, or is absent: a worker killed
// before reading its own would make the sum a lower bound printed as the figure.
TEST(RunSummaryTest, TheVmHwmSumNeedsEveryProcesssMark) {
  RunFacts f = Finished(true);
  f.result->set_leader_vmhwm_bytes(100);
  f.result->mutable_workers(0)->set_vmhwm_bytes(1000);
  v1::Result r;
  FillResult(f, &r);
  EXPECT_FALSE(r.has_peak_rss_hwm_sum_bytes());  // worker 1 gave none
  f.result->mutable_workers(1)->set_vmhwm_bytes(2000);
  r.Clear();
  FillResult(f, &r);
  EXPECT_EQ(r.peak_rss_hwm_sum_bytes(), 3100u);
}

TEST(RunSummaryTest, EpochsTakeTheSlowestWorkersTimesAndEveryWorkersLoss) {
  google::protobuf::RepeatedPtrField<ipc::v1::WorkerReading> ws;
  for (uint32_t i = 0; i < 2; ++i) {
    auto* w = ws.Add();
    w->set_index(i);
    for (uint32_t e = 1; e <= 2; ++e) {
      auto* x = w->add_epochs();
      x->set_epoch(e);
      x->set_wall_ns((i == 1 ? 3 : 2) * kS);
      x->set_data_ns((i == 1 ? kS / 2 : kS / 4));
      x->set_loss_sum(10.0 * e);
      x->set_steps(5);
      x->set_samples(320);
      if (i == 0) x->set_test_accuracy(0.5f * float(e));
    }
  }
  v1::Result r;
  FillEpochs(ws, true, &r);
  ASSERT_EQ(r.epochs_size(), 2);
  EXPECT_EQ(r.epochs(1).epoch(), 2u);
  EXPECT_DOUBLE_EQ(r.epochs(1).wall_ms(), 3000);
  EXPECT_DOUBLE_EQ(r.epochs(1).data_ms(), 500);
  EXPECT_DOUBLE_EQ(r.epochs(1).train_ms(), 2500);
  EXPECT_DOUBLE_EQ(r.epochs(1).mean_loss(), 40.0 / 10);
  EXPECT_EQ(r.epochs(1).samples(), 640u);
  EXPECT_FLOAT_EQ(r.epochs(1).test_accuracy(), 1.0f);
}

// data_loading: the trainer's times; the loaders' CPU summed with the trainer's own; an epoch
// only loaders worked on (the run was cut before the trainer reached it) is no epoch.
TEST(RunSummaryTest, LoadCpuIsSummedAndLoaderOnlyEpochsDropped) {
  google::protobuf::RepeatedPtrField<ipc::v1::WorkerReading> ws;
  auto* trainer = ws.Add();
  trainer->set_index(0);
  auto* x = trainer->add_epochs();
  x->set_epoch(1);
  x->set_wall_ns(4 * kS);
  x->set_data_ns(kS);
  x->set_steps(5);
  x->set_samples(160);
  trainer->mutable_data_loading()->add_epoch_load_cpu_ns(0);  // it had loaders
  for (uint32_t i = 1; i <= 2; ++i) {
    auto* loader = ws.Add();
    loader->set_index(i);
    for (uint32_t e = 1; e <= 2; ++e) {
      loader->add_epochs()->set_epoch(e);
      loader->mutable_data_loading()->add_epoch_load_cpu_ns(i * kS);
    }
  }
  v1::ExperimentSpec spec;
  spec.set_kind("data_loading");
  const std::map<pid_t, uint64_t> none;
  const KindRunFacts facts{spec, ws, none, none};
  const KindRules* kind = FindKind("data_loading");
  v1::Result r;
  FillEpochs(ws, true, &r);
  kind->summarize(facts, &r);
  ASSERT_EQ(r.epochs_size(), 1);
  EXPECT_DOUBLE_EQ(r.epochs(0).wall_ms(), 4000);
  EXPECT_DOUBLE_EQ(r.epochs(0).train_ms(), 3000);
  ASSERT_EQ(r.data_loading().epochs_size(), 1);  // epoch 2 was the loaders' only
  EXPECT_EQ(r.data_loading().epochs(0).epoch(), 1u);
  EXPECT_DOUBLE_EQ(r.data_loading().epochs(0).load_cpu_ms(), 3000);
  // None measured (the loaders' reports lost): absent, not 0.
  ws.DeleteSubrange(1, 2);
  v1::Result h;
  FillEpochs(ws, true, &h);
  kind->summarize(facts, &h);
  EXPECT_EQ(h.data_loading().epochs_size(), 0);
}

// With epochs the training time leaves out worker 0's evaluations between them: the epochs' own
// walls, not the first-to-last window (100 s -> 105 s here, 2 s of it evaluating).
TEST(RunSummaryTest, EpochTrainingTimeExcludesEvaluations) {
  RunFacts f = Finished(true);
  for (auto& w : *f.result->mutable_workers()) {
    for (uint32_t e = 1; e <= 2; ++e) {
      auto* x = w.add_epochs();
      x->set_epoch(e);
      x->set_wall_ns(w.index() == 0 ? kS : 3 * kS / 2);
      x->set_samples(320);
      x->set_steps(5);
    }
  }
  v1::Result r;
  FillResult(f, &r);
  EXPECT_DOUBLE_EQ(r.train_ms(), 3000);  // two epochs of 1.5 s, the slowest worker's
  EXPECT_DOUBLE_EQ(r.samples_per_sec(), 1280 / 3.0);
  // A run cut inside an epoch keeps the window: its last samples are in no epoch.
  f.result->mutable_workers(0)->set_samples(700);
  v1::Result cut;
  FillResult(f, &cut);
  EXPECT_DOUBLE_EQ(cut.train_ms(), 5000);
}

TEST(RunSummaryTest, EndStates) {
  EXPECT_EQ(FinalState(Finished(true)).first, v1::SUCCEEDED);
  RunFacts bad = Finished(false);
  bad.result->set_error("worker 1 killed by signal 9");
  EXPECT_EQ(FinalState(bad),
            std::make_pair(v1::FAILED, std::string("worker 1 killed by signal 9")));
  RunFacts gone = Finished(true);
  gone.group_gone = false;
  gone.runtime_error = "some processes of the experiment could not be stopped (D state?)";
  EXPECT_EQ(FinalState(gone).first, v1::FAILED);
  RunFacts silent = Finished(false);
  silent.result.reset();
  silent.leader_status = SIGSEGV;
  EXPECT_EQ(FinalState(silent).second, "leader killed by signal 11");
  RunFacts late_cancel = Finished(true);
  late_cancel.cancelled = true;  // it finished before the cancel could stop it
  EXPECT_EQ(FinalState(late_cancel).first, v1::SUCCEEDED);
}

TEST(RunSummaryTest, ProcessesCarryTheExitsTheKernelGave) {
  RunFacts f = Finished(false);
  for (uint32_t i = 0; i < 2; ++i) {
    v1::ProcessInfo p;
    p.set_pid(600 + int(i));
    p.set_role("worker");
    p.set_index(int(i));
    p.set_alive(true);
    f.procs[p.pid()] = p;
  }
  auto* x = f.result->add_exits();
  x->set_index(1);
  x->set_pid(601);
  x->set_wait_status(SIGKILL);
  f.sampler.helpers[500] = "forkserver";  // a forkserver run's forkserver, sampled with it
  f.sampler.peak_pss[500] = 7 << 20;
  v1::Experiment e;
  FillProcesses(f, &e);
  ASSERT_EQ(e.processes_size(), 2);  // the experiment's own
  ASSERT_EQ(e.fork_server_processes_size(), 1);
  EXPECT_EQ(e.fork_server_processes(0).role(), "forkserver");
  EXPECT_EQ(e.fork_server_processes(0).peak_pss_bytes(), 7u << 20);
  EXPECT_FALSE(e.processes(0).exit_known());  // worker 0: nobody saw it end
  EXPECT_TRUE(e.processes(1).exit_known());
  EXPECT_EQ(e.processes(1).signal(), SIGKILL);
  EXPECT_EQ(e.processes(0).steps(), 10u);
  EXPECT_NEAR(e.processes(0).start_ms(), 100, 1e-6);
}

// A CUDA worker's allocator peaks reach its process record as it reported them; a worker without
// them (the CPU, a LibTorch without CUDA) has none, not 0.
TEST(RunSummaryTest, ACudaWorkersAllocatorPeaksReachItsProcess) {
  ipc::v1::WorkerReading w = Worker(0, 100, 104, 640);
  v1::ProcessInfo cpu;
  ApplyWorkerReading(w, 99 * kS, &cpu);
  EXPECT_FALSE(cpu.has_peak_cuda_allocated_bytes());
  EXPECT_FALSE(cpu.has_peak_cuda_reserved_bytes());
  ipc::v1::WorkerReading stepless = w;  // no loss before its first step: none, not 0
  stepless.clear_last_loss();
  v1::ProcessInfo none;
  ApplyWorkerReading(stepless, 99 * kS, &none);
  EXPECT_FALSE(none.has_last_loss());
  w.set_last_loss(0.5f);
  ApplyWorkerReading(w, 99 * kS, &cpu);
  EXPECT_DOUBLE_EQ(cpu.last_loss(), 0.5);
  w.set_device_alloc_peak_bytes(7 << 20);
  w.set_device_reserved_peak_bytes(20 << 20);
  v1::ProcessInfo cuda;
  ApplyWorkerReading(w, 99 * kS, &cuda);
  EXPECT_EQ(cuda.peak_cuda_allocated_bytes(), 7u << 20);
  EXPECT_EQ(cuda.peak_cuda_reserved_bytes(), 20u << 20);
}

TEST(RunSummaryTest, LiveFiguresAverageTheLastLosses) {
  ipc::v1::Progress p;
  auto* a = p.add_workers();
  a->set_steps(3);
  a->set_samples(192);
  a->set_last_loss(1.0f);
  auto* b = p.add_workers();
  b->set_steps(1);
  b->set_samples(64);
  LiveFigures l = Live(p);
  EXPECT_EQ(l.steps, 4u);
  EXPECT_EQ(l.samples, 256u);
  ASSERT_TRUE(l.loss.has_value());
  EXPECT_DOUBLE_EQ(*l.loss, 1.0);  // worker b has no loss yet: not averaged in as 0
}

}  // namespace
}  // namespace shoal
