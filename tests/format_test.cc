// What the CLI prints (client/format.h), golden, and how it reads the spec's flags
// (client/spec_flags.h) from a real argv.
#include "client/format.h"

#include <gtest/gtest.h>

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "client/spec_flags.h"
#include "shared/spec/spec.h"
#include "shared/spec/spec_fields.h"
#include "shared/spec/sweep.h"

namespace shoal::cli {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;

std::string Sp(int n) { return std::string(size_t(n), ' '); }

v1::ExperimentSpec Resolved(const std::vector<std::pair<std::string, std::string>>& given) {
  v1::ExperimentSpec s;
  for (const auto& [field, value] : given) {
    Status st = SetSpecField(&s, *FindSpecField(field), value);
    EXPECT_TRUE(st.ok()) << st.message();
  }
  SpecLimits limits;
  limits.cores = 4;
  ApplyDefaults(&s, limits);
  return s;
}

v1::Experiment Finished() {
  v1::Experiment e;
  e.set_id("e123");
  e.set_state(v1::SUCCEEDED);
  *e.mutable_spec() = Resolved({{"optimizer", "adam"}, {"epochs", "2"}, {"workers", "2"}});
  e.set_started_unix_ms(1700000000000);
  (*e.mutable_environment())["PATH"] = "/usr/bin:/bin";
  (*e.mutable_environment())["HOME"] = "/root";
  auto* r = e.mutable_result();
  r->set_peak_pss_sum_bytes(kGiB + kGiB / 2);
  r->set_peak_rss_sum_bytes(2 * kGiB);
  r->set_peak_uss_sum_bytes(kGiB);
  r->set_peak_rss_hwm_sum_bytes(2 * kGiB + kGiB / 2);
  r->set_sum_of_peak_pss_bytes(kGiB * 7 / 4);
  r->set_shared_bytes(100 * kMiB);
  r->set_weights_bytes(2 * kMiB);
  r->set_data_bytes(50 * kMiB);
  r->set_ready_ms(250);
  r->set_start_ms(200);
  r->set_wall_ms(12345);
  r->set_train_ms(10000);
  r->set_queued_ms(5);
  r->set_samples_per_sec(1234.56);
  r->set_samples(12000);
  r->set_steps(188);
  r->set_first_loss(2.3);
  r->set_last_loss(0.1234);
  r->set_test_accuracy(0.9);
  r->set_test_images(600);  // fewer than eval_samples asked: the test set is smaller
  r->set_eval_ms(1500);
  r->set_data_ms(100);
  r->set_forward_ms(2000);
  r->set_backward_ms(3000);
  r->set_optimizer_ms(500);
  r->set_sampler_cpu_percent(1.25);
  r->set_sampler_cpu_ms(150);
  r->set_smaps_reads(60);
  r->set_statm_reads(600);
  auto* ep = r->add_epochs();
  ep->set_epoch(1);
  ep->set_wall_ms(6000);
  ep->set_data_ms(1000);
  ep->set_train_ms(5000);
  ep->set_mean_loss(0.5);
  ep->set_test_accuracy(0.85);
  ep = r->add_epochs();
  ep->set_epoch(2);
  ep->set_wall_ms(5000);
  ep->set_data_ms(800);
  ep->set_train_ms(4200);
  ep->set_mean_loss(0.2);  // no accuracy after this epoch
  auto* p = e.add_processes();
  p->set_pid(100);
  p->set_role("leader");
  p->set_index(-1);
  p->set_exit_known(true);
  p->set_exit_code(0);
  p->set_peak_rss_bytes(300 * kMiB);
  p->set_peak_pss_bytes(200 * kMiB);
  p = e.add_processes();
  p->set_pid(101);
  p->set_role("worker");
  p->set_index(0);
  p->set_start_ms(150.4);
  p->set_peak_rss_bytes(500 * kMiB);
  p->set_peak_pss_bytes(400 * kMiB);
  p->set_steps(94);
  p->set_exit_known(false);  // nobody saw it end
  p = e.add_processes();
  p->set_pid(102);
  p->set_role("worker");
  p->set_index(1);
  p->set_start_ms(160);
  p->set_peak_rss_bytes(510 * kMiB);
  p->set_peak_pss_bytes(410 * kMiB);
  p->set_steps(94);
  p->set_exit_known(true);
  p->set_signal(9);
  return e;
}

v1::Experiment Queued() {
  v1::Experiment e;
  e.set_id("e9");
  e.set_state(v1::QUEUED);
  *e.mutable_spec() = Resolved({});
  return e;
}

TEST(FormatTest, FinishedExperimentWithEpochsAndProcesses) {
  const std::string want =
      "experiment e123  succeeded\n"
      "  spec        hogwild mnist_convnet, 2 workers, start fork, share yes, device cpu, batch 64 "
      "x 2 epochs, 2 threads\n"
      "  optimiser   adam lr 0.001 weight_decay 0 eps 1e-08 beta1 0.9 beta2 0.999 amsgrad no\n"
      "  dataset     synthetic\n"
      "  allocator   planned (default: hogwild marks its steps on the CPU)\n"
      "  environment HOME, PATH (nothing else passed)\n"
      "  memory      peak PSS sum 1.50 GiB (sum of peak PSS 1.75 GiB), RSS sum 2.00 GiB, USS sum "
      "1.00 GiB, VmHWM sum 2.50 GiB; shared 100M (weights 2M, data 50M)\n"
      "  time        ready_ms 250, start_ms 200, wall_ms 12345, train_ms 10000, queued_ms 5\n"
      "  throughput  1234.6 samples/s (12000 samples, 188 steps)\n"
      "  loss        first 2.3000, last 0.1234; test accuracy 0.900 on 600 images (1.5 s)\n"
      "  step split  data 100 ms, forward 2000 ms, backward 3000 ms, optimiser 500 ms (all "
      "workers)\n"
      "  sampler     1.25% of a core (150.0 ms CPU; 60 smaps_rollup walks, 600 statm/stat "
      "reads)\n"
      "  epochs      epoch" +
      Sp(4) + "wall s" + Sp(4) + "data s" + Sp(3) + "train s" + Sp(6) + "loss" + Sp(2) +
      "accuracy\n" + Sp(14) + "1" + Sp(10) + "6.00" + Sp(6) + "1.00" + Sp(6) + "5.00" + Sp(4) +
      "0.5000" + Sp(5) + "0.850\n" + Sp(14) + "2" + Sp(10) + "5.00" + Sp(6) + "0.80" + Sp(6) +
      "4.20" + Sp(4) + "0.2000" + Sp(9) + "-\n" + "  processes   pid" + Sp(5) + "role" + Sp(7) +
      "index start" + Sp(4) + "peak RSS" + Sp(2) + "peak PSS" + Sp(2) + "steps" + Sp(4) + "exit\n" +
      Sp(14) + "100" + Sp(5) + "leader     -" + Sp(5) + "-" + Sp(8) + "300M" + Sp(6) + "200M" +
      Sp(6) + "0" + Sp(8) + "code 0\n" + Sp(14) + "101" + Sp(5) + "worker     0" + Sp(5) +
      "150 ms" + Sp(3) + "500M" + Sp(6) + "400M" + Sp(6) + "94" + Sp(7) + "unknown\n" + Sp(14) +
      "102" + Sp(5) + "worker     1" + Sp(5) + "160 ms" + Sp(3) + "510M" + Sp(6) + "410M" + Sp(6) +
      "94" + Sp(7) + "signal 9\n";
  EXPECT_EQ(FormatExperiment(Finished()), want);
}

// A figure the run never had is a dash, not 0: here no worker reached its first step, and one
// process's VmHWM is missing.
// Where it ran, on one line after the spec; a record from before hosts were recorded has none.
TEST(FormatTest, TheHostLineSaysWhereItRan) {
  v1::Experiment e;
  e.set_id("x1");
  e.set_state(v1::SUCCEEDED);
  EXPECT_EQ(FormatExperiment(e).find("  host "), std::string::npos);
  v1::Host* h = e.mutable_host();
  h->set_hostname("gpu7");
  h->set_cpu_model("AMD EPYC 9654");
  h->set_cores(192);
  h->set_memory_bytes(uint64_t(1536) << 30);
  h->set_kernel("6.8.0");
  h->set_libtorch("2.5.1");
  h->set_shoal("0.1.0");
  for (int i = 0; i < 8; ++i) h->add_gpus("NVIDIA H200");
  h->set_nvidia_driver("560.35");
  h->set_cuda_driver("12.6");
  EXPECT_NE(FormatExperiment(e).find(
                "  host        gpu7: AMD EPYC 9654, 192 cores, 1536.00 GiB, Linux 6.8.0; LibTorch "
                "2.5.1, Shoal 0.1.0; GPU 8 x NVIDIA H200, driver 560.35, CUDA 12.6\n"),
            std::string::npos)
      << FormatExperiment(e);
}

TEST(FormatTest, UnknownTimesThroughputAndVmHwmSumAreDashes) {
  v1::Experiment e = Finished();
  auto* r = e.mutable_result();
  for (auto clear :
       {&v1::Result::clear_ready_ms, &v1::Result::clear_start_ms, &v1::Result::clear_train_ms,
        &v1::Result::clear_samples_per_sec, &v1::Result::clear_peak_rss_hwm_sum_bytes})
    (r->*clear)();
  for (auto& p : *e.mutable_processes()) p.clear_start_ms();
  const std::string out = FormatExperiment(e);
  EXPECT_NE(out.find("VmHWM sum -;"), std::string::npos) << out;
  EXPECT_NE(out.find("ready_ms -, start_ms -, wall_ms 12345, train_ms -, queued_ms 5\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("throughput  - samples/s (12000 samples"), std::string::npos) << out;
  EXPECT_EQ(out.find(" ms   "), std::string::npos) << "no process start time: " << out;
}

// A forkserver run's forkserver and its idle children follow the experiment's processes, with
// their peak PSS, and neither steps nor an exit of their own.
TEST(FormatTest, TheForkServersProcessesFollowTheExperimentsOwn) {
  v1::Experiment e = Finished();
  v1::ProcessInfo* z = e.add_fork_server_processes();
  z->set_pid(4242);
  z->set_role("forkserver");
  z->set_index(-1);
  z->set_peak_pss_bytes(30ull << 20);
  const std::string out = FormatExperiment(e);
  EXPECT_NE(out.find("4242    forkserver -     -        -         30M       -        shoald's\n"),
            std::string::npos)
      << out;
  EXPECT_LT(out.find(std::to_string(e.processes(0).pid())), out.find("4242"));
  // Its idle children are alike: the first one's row, then how many more and their range.
  for (int i = 0; i < 4; ++i) {
    v1::ProcessInfo* p = e.add_fork_server_processes();
    p->set_pid(4243 + i);
    p->set_role("pool");
    p->set_index(-1);
    p->set_peak_pss_bytes(uint64_t(5 + i % 2) << 20);
  }
  const std::string pooled = FormatExperiment(e);
  EXPECT_NE(pooled.find("4243    pool       -     -        -         5M        -        shoald's\n"
                        "              ... (3 more idle forkserver children, 5M-6M each)\n"),
            std::string::npos)
      << pooled;
  EXPECT_EQ(pooled.find("4244"), std::string::npos) << pooled;  // --json lists it
}

// What held the run's processes is said where the record has it.
TEST(FormatTest, SaysWhatContainedTheRun) {
  v1::Experiment e = Finished();
  EXPECT_EQ(FormatExperiment(e).find("contained"), std::string::npos);
  e.set_containment("cgroup /sys/fs/cgroup/shoal-runs/s/x1");
  EXPECT_NE(FormatExperiment(e).find("  contained   cgroup /sys/fs/cgroup/shoal-runs/s/x1\n"),
            std::string::npos);
}

// A data_parallel run that failed before any replica ended a step has its set-up, not per-step
// figures of 0 ms.
TEST(FormatTest, DataParallelWithoutAStepHasNoPerStepFigures) {
  v1::Experiment e = Finished();
  e.mutable_spec()->set_kind("data_parallel");  // its kind prints its replicas
  auto* d = e.mutable_result()->mutable_data_parallel();
  d->set_world_size(2);
  d->set_scaling("weak");
  std::string out = FormatExperiment(e);
  EXPECT_NE(out.find("  per step    - (no step ended)\n"), std::string::npos) << out;
  EXPECT_NE(out.find(", - all-reduced per step; replicas identical: -"), std::string::npos) << out;
  d->set_steps_per_worker(5);
  d->set_step_ms(12.5);
  out = FormatExperiment(e);
  EXPECT_NE(out.find("  per step    12.5 ms: data 0.0"), std::string::npos) << out;
}

// A run across nodes: its total is known only where every part's figure is.
TEST(FormatTest, PartsSumOnlyWhatEveryPartKnows) {
  v1::Experiment e = Finished();
  for (uint32_t rank : {0u, 1u}) {
    auto* p = e.add_parts();
    p->set_node_rank(rank);
    p->set_daemon("node" + std::to_string(rank) + ":7443");
    p->set_state(v1::SUCCEEDED);
    p->set_samples_per_sec(80.5);
    p->set_peak_pss_sum_bytes(1ull << 30);
  }
  e.mutable_parts(0)->set_sum_of_peak_pss_bytes(3ull << 29);
  EXPECT_NE(FormatExperiment(e).find("  161.0 samples/s over all nodes"), std::string::npos)
      << FormatExperiment(e);
  e.mutable_parts(1)->clear_samples_per_sec();  // its daemon was lost before it said
  const std::string out = FormatExperiment(e);
  EXPECT_NE(out.find("  - samples/s over all nodes"), std::string::npos) << out;
  EXPECT_NE(out.find("80.5 samples/s, peak PSS sum 1.00 GiB (sum of peak PSS 1.50 GiB)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find(", - samples/s, peak PSS sum 1.00 GiB (sum of peak PSS -)"), std::string::npos)
      << out;
}

TEST(FormatTest, QueuedExperimentIsItsSpecOnly) {
  EXPECT_EQ(FormatExperiment(Queued()),
            "experiment e9  queued\n"
            "  spec        hogwild mnist_convnet, 1 workers, start fork, share yes, device cpu, "
            "batch 64 x 20 batches, 4 threads\n"
            "  optimiser   sgd lr 0.01 momentum 0.5 dampening 0 weight_decay 0\n"
            "  dataset     synthetic\n"
            "  allocator   planned (default: hogwild marks its steps on the CPU)\n");
}

// Turns given or by default: how many stepped at once, and why; every worker at once by default
// is not shown.
TEST(FormatTest, WorkersTakingTurnsAtTheirStepsSayHowMany) {
  v1::Experiment e;
  e.set_id("e8");
  e.set_state(v1::QUEUED);
  *e.mutable_spec() = Resolved({{"workers", "8"}, {"concurrent_steps", "2"}});
  EXPECT_NE(FormatExperiment(e).find("  steps       2 of 8 workers at once (given)\n"),
            std::string::npos)
      << FormatExperiment(e);
  *e.mutable_spec() = Resolved({{"workers", "8"}});  // 4 cores
  EXPECT_NE(FormatExperiment(e).find("  steps       4 of 8 workers at once (default: the cores' "
                                     "worth (4 cores, 1 thread each))\n"),
            std::string::npos)
      << FormatExperiment(e);
  *e.mutable_spec() = Resolved({{"workers", "4"}});
  EXPECT_EQ(FormatExperiment(e).find("  steps "), std::string::npos) << FormatExperiment(e);
}

TEST(FormatTest, LeanActivationsAreNamedOnTheSpecLine) {
  v1::Experiment e = Queued();
  e.mutable_spec()->set_activations("lean");
  EXPECT_NE(FormatExperiment(e).find("batch 64 x 20 batches, 4 threads, activations lean\n"),
            std::string::npos)
      << FormatExperiment(e);
}

// cuda_sync step: the spec line says so, and the phase split the workers did not time is a dash
// with the reason, in the result and in each epoch.
TEST(FormatTest, StepsTimedWholeShowNoPhaseSplit) {
  v1::Experiment e = Finished();
  e.mutable_spec()->set_device("cuda");
  e.mutable_spec()->set_cuda_sync("step");
  auto* r = e.mutable_result();
  for (auto clear : {&v1::Result::clear_data_ms, &v1::Result::clear_forward_ms,
                     &v1::Result::clear_backward_ms, &v1::Result::clear_optimizer_ms})
    (r->*clear)();
  for (auto& x : *r->mutable_epochs()) {
    x.clear_data_ms();
    x.clear_train_ms();
  }
  const std::string out = FormatExperiment(e);
  EXPECT_NE(out.find("2 threads, cuda_sync step\n"), std::string::npos) << out;
  EXPECT_NE(out.find("  step split  - (cuda_sync step: the device is waited for once a step)\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find(Sp(14) + "1" + Sp(10) + "6.00" + Sp(9) + "-" + Sp(9) + "-" + Sp(4) + "0.5000"),
            std::string::npos)
      << out;
  // A phases run that ended before any worker reported has no split either, and no such reason.
  e.mutable_spec()->set_cuda_sync("phases");
  const std::string phases = FormatExperiment(e);
  EXPECT_EQ(phases.find("step split"), std::string::npos) << phases;
}

// On CUDA the processes table gains a device column: each process's, '-' for one without.
TEST(FormatTest, CudaProcessesShowTheirDevice) {
  v1::Experiment e = Finished();
  e.mutable_processes(1)->set_cuda_device(0);
  e.mutable_processes(2)->set_cuda_device(1);
  const std::string out = FormatExperiment(e);
  EXPECT_NE(out.find("steps    device exit\n"), std::string::npos) << out;
  EXPECT_NE(out.find("0        -       code 0\n"), std::string::npos) << out;  // the leader
  EXPECT_NE(out.find("94       cuda:0  unknown\n"), std::string::npos) << out;
  EXPECT_NE(out.find("94       cuda:1  signal 9\n"), std::string::npos) << out;
}

TEST(FormatTest, ACudaPipelineStageShowsItsDeviceFiguresAndOnlyWhatIsKnown) {
  v1::Experiment e = Finished();
  e.mutable_spec()->set_kind("pipeline");  // its kind prints its stages
  auto* p = e.mutable_result()->mutable_pipeline();
  p->set_stages(2);
  for (uint32_t i = 0; i < 2; ++i) {
    auto* st = p->add_stage();
    st->set_stage(i);
    st->set_end_layer(12 * (i + 1));
    st->set_peak_allocated_bytes(300 * kMiB);
  }
  p->mutable_stage(0)->set_cuda_device(0);
  p->mutable_stage(0)->set_peak_reserved_bytes(400 * kMiB);
  p->mutable_stage(0)->set_peak_gpu_memory_bytes(900 * kMiB);
  p->mutable_stage(1)->set_cuda_device(1);
  p->mutable_stage(1)->set_peak_reserved_bytes(410 * kMiB);  // NVML never read it
  const std::string out = FormatExperiment(e);
  EXPECT_NE(out.find("cuda:0: peak reserved 400M, peak GPU memory 900M (NVML)\n"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("cuda:1: peak reserved 410M, peak GPU memory - (NVML)\n"), std::string::npos)
      << out;
  for (uint32_t i = 0; i < 2; ++i) {
    p->mutable_stage(i)->clear_cuda_device();
    p->mutable_stage(i)->clear_peak_reserved_bytes();
  }
  p->mutable_stage(0)->clear_peak_gpu_memory_bytes();
  EXPECT_EQ(FormatExperiment(e).find("cuda:"), std::string::npos);  // a CPU pipeline
}

// A small model's memory in MiB, a large one's in GiB: never "0.00 GiB" for 5 MB.
TEST(FormatTest, PipelineSizesBelowAGibAreInMib) {
  v1::Experiment e = Finished();
  e.mutable_spec()->set_kind("pipeline");  // its kind prints its stages
  auto* p = e.mutable_result()->mutable_pipeline();
  p->set_model_memory_bytes(5139888);
  p->set_peak_allocated_sum_bytes(3ull << 30);
  EXPECT_NE(FormatExperiment(e).find("model memory 5M; peak allocated 3.00 GiB, activations -"),
            std::string::npos)
      << FormatExperiment(e);
}

TEST(FormatTest, FailedExperimentShowsItsError) {
  v1::Experiment e = Queued();
  e.set_state(v1::FAILED);
  e.set_error("worker 1: killed by signal 9");
  const std::string out = FormatExperiment(e);
  EXPECT_EQ(out.substr(0, out.find('\n') + 1),
            "experiment e9  failed: worker 1: killed by signal 9\n");
  EXPECT_NE(out.find("\n  processes   pid"), std::string::npos);
}

TEST(FormatTest, WhatTheServerSentCannotDriveTheTerminal) {
  v1::Experiment e = Finished();
  e.set_state(v1::FAILED);
  e.set_error("\x1b[2J\x1b]0;owned\x07gone");
  const std::string out = FormatExperiment(e);
  EXPECT_EQ(out.find('\x1b'), std::string::npos);
  EXPECT_NE(out.find("failed: \\x1b[2J\\x1b]0;owned\\x07gone\n"), std::string::npos) << out;
}

TEST(FormatTest, ALongErrorIsPrintedWhole) {
  v1::Experiment e = Queued();
  e.set_state(v1::FAILED);
  const std::string error(1500, 'x');
  e.set_error(error);
  const std::string out = FormatExperiment(e);
  EXPECT_EQ(out.substr(0, out.find('\n') + 1), "experiment e9  failed: " + error + "\n");
}

TEST(FormatTest, ListPrintsDashesForWhatHasNotHappened) {
  const std::string want =
      "id" + Sp(11) + "state" + Sp(7) + "kind" + Sp(9) + "optimiser workers start" + Sp(6) +
      "share" + Sp(3) + "wall s" + Sp(5) + "peak PSS" + Sp(2) + "samples/s" + Sp(2) + "start_ms\n" +
      "e123" + Sp(9) + "succeeded" + Sp(3) + "hogwild" + Sp(6) + "adam" + Sp(12) + "2 fork" +
      Sp(7) + "yes" + Sp(7) + "12.3" + Sp(5) + "1.50 GiB" + Sp(5) + "1234.6" + Sp(7) + "200\n" +
      "e9" + Sp(11) + "queued" + Sp(6) + "hogwild" + Sp(6) + "sgd" + Sp(13) + "1 fork" + Sp(7) +
      "yes" + Sp(10) + "-" + Sp(12) + "-" + Sp(10) + "-" + Sp(9) + "-\n";
  EXPECT_EQ(FormatList({Finished(), Queued()}), want);
}

// ... and a process without a CPU figure yet (its first sample) a dash, not 0%.
TEST(FormatTest, SampleLineWithoutATotalPrintsADash) {
  v1::Sample s;
  s.set_t_ms(1500);
  s.set_steps(40);
  s.set_steps_per_sec(26.666);
  s.set_loss(std::nan(""));
  s.set_total_pss_bytes(230 * kMiB);
  s.set_total_rss_bytes(300 * kMiB);
  s.set_total_uss_bytes(180 * kMiB);
  s.set_shared_bytes(50 * kMiB);
  s.set_sampler_cpu_percent(0.5);
  auto* p = s.add_processes();
  p->set_pid(1);
  p->set_role("leader");
  p->set_index(-1);
  p->set_rss_bytes(100 * kMiB);
  p->set_pss_bytes(80 * kMiB);
  p->set_uss_bytes(60 * kMiB);
  p->set_cpu_percent(1.0);
  p = s.add_processes();
  p->set_pid(2);
  p->set_role("forkserver");
  p->set_index(-1);
  p->set_rss_bytes(40 * kMiB);
  p->set_pss_bytes(20 * kMiB);
  p->set_uss_bytes(10 * kMiB);
  p = s.add_processes();
  p->set_pid(3);
  p->set_role("worker");
  p->set_index(0);
  p->set_rss_bytes(200 * kMiB);
  p->set_pss_bytes(150 * kMiB);
  p->set_uss_bytes(120 * kMiB);
  p->set_cpu_percent(98.7);
  EXPECT_EQ(FormatSampleLine(s),
            "t=1.5s steps 40/- 26.67/s loss - | PSS 230M RSS 300M USS 180M shm 50M | sampler "
            "0.50% | L 100M/80M/60M 1% | F 40M/20M/10M - | w0 200M/150M/120M 99%\n");

  s.set_steps_total(100);
  s.set_loss(0.4321);
  s.clear_processes();
  EXPECT_EQ(FormatSampleLine(s),
            "t=1.5s steps 40/100 26.67/s loss 0.4321 | PSS 230M RSS 300M USS 180M shm 50M | "
            "sampler 0.50%\n");

  s.set_steps_total(0);  // present though zero: printed, not "-"
  EXPECT_NE(FormatSampleLine(s).find("steps 40/0 "), std::string::npos);

  s.clear_steps_per_sec();  // the first tick: no rate yet
  EXPECT_NE(FormatSampleLine(s).find("steps 40/0 -/s "), std::string::npos) << FormatSampleLine(s);
}

// A device NVML answered only in part: what it did not say is "-", never 0.
TEST(FormatTest, ADevicesUnknownFiguresAreDashes) {
  v1::NodeInfoResponse n;
  n.set_hostname("h");
  n.set_cores(2);
  auto* g = n.add_gpus();
  g->set_index(0);
  g->set_name("H100");
  g->set_memory_total_bytes(80 * kGiB);
  EXPECT_NE(FormatNode(n).find("GPU 0: H100, 80.00 GiB (- used), compute capability -, "
                               "utilisation -\n"),
            std::string::npos)
      << FormatNode(n);
  g->set_memory_used_bytes(kGiB);
  g->set_compute_capability("9.0");
  g->set_util_percent(0);  // known to be idle: printed
  EXPECT_NE(FormatNode(n).find("GPU 0: H100, 80.00 GiB (1.00 GiB used), compute capability 9.0, "
                               "0% busy\n"),
            std::string::npos)
      << FormatNode(n);

  v1::Sample s;
  auto* d = s.add_gpus();
  d->set_index(1);
  d->set_memory_total_bytes(80 * kGiB);
  EXPECT_NE(FormatSampleLine(s).find(" | gpu1 -/80.00 GiB util -\n"), std::string::npos)
      << FormatSampleLine(s);
  d->set_util_percent(37);
  d->set_memory_used_bytes(kGiB);
  EXPECT_NE(FormatSampleLine(s).find(" | gpu1 1.00 GiB/80.00 GiB 37%\n"), std::string::npos)
      << FormatSampleLine(s);
}

TEST(FormatTest, SweepPoints) {
  v1::Sweep sw;
  sw.set_id("s5");
  sw.set_state(v1::RUNNING);
  auto* p = sw.add_points();
  p->set_index(0);
  auto* v = p->add_values();
  v->set_field("optimizer");
  v->set_value("sgd");
  v = p->add_values();
  v->set_field("batch_size");
  v->set_value("16");
  p->set_experiment_id("e1");
  p->set_state(v1::SUCCEEDED);
  p = sw.add_points();
  p->set_index(1);
  v = p->add_values();
  v->set_field("device");
  v->set_value("cuda");
  v = p->add_values();
  v->set_field("workers");
  v->set_value("2");
  p->set_note("no GPU: this shoald runs CPU experiments only");
  p = sw.add_points();  // a point stored before axes existed: no values
  p->set_index(2);
  p->set_workers(4);
  p->set_experiment_id("e3");
  p->set_state(v1::RUNNING);
  const std::string want =
      "sweep s5  running\n"
      "  point values" +
      Sp(35) + "experiment" + Sp(3) + "state" + Sp(7) + "note\n" +
      "  0     optimizer sgd, batch_size 16" + Sp(13) + "e1" + Sp(11) + "succeeded" + Sp(3) + "\n" +
      "  1     device cuda, workers 2" + Sp(19) + "-" + Sp(12) + "skipped" + Sp(5) +
      "no GPU: this shoald runs CPU experiments only\n" + "  2     -" + Sp(40) + "e3" + Sp(11) +
      "running" + Sp(5) + "\n";
  EXPECT_EQ(FormatSweepPoints(sw), want);

  sw.set_state(v1::FAILED);
  sw.set_error("point 0 failed");
  const std::string out = FormatSweepPoints(sw);
  EXPECT_EQ(out.substr(0, out.find('\n') + 1), "sweep s5  failed: point 0 failed\n");
}

// A sweep run twice per point: each point's cell and run, and `get` of one run lists its cell's.
TEST(FormatTest, RepeatedSweepShowsRunsAndGetListsACellsRuns) {
  v1::SweepReport r;
  v1::Sweep& sw = *r.mutable_sweep();
  sw.set_id("s6");
  sw.set_state(v1::RUNNING);
  sw.mutable_spec()->set_repeats(2);
  for (uint32_t i = 0; i < 4; ++i) {
    v1::SweepPoint* p = sw.add_points();
    p->set_index(i);
    p->set_repeat(i / 2);
    auto* v = p->add_values();
    v->set_field("workers");
    v->set_value(i % 2 == 0 ? "1" : "2");
    p->set_experiment_id("x" + std::to_string(i));
    p->set_state(i < 3 ? v1::SUCCEEDED : v1::RUNNING);
    v1::Experiment* e = r.add_experiments();
    e->set_id(p->experiment_id());
    e->set_sweep_id("s6");
    e->set_sweep_index(i);
    if (i < 3) e->mutable_result()->set_samples_per_sec(100 + i);
    if (i == 1) {
      e->mutable_result()->set_disturbed(true);
      e->mutable_result()->set_disturbance("busy");
    }
  }
  const std::string points = FormatSweepPoints(sw);
  EXPECT_NE(points.find("  2 runs of each of 2 points, interleaved\n"), std::string::npos);
  EXPECT_NE(points.find("\n  1     2 of 2    workers 2"), std::string::npos) << points;
  const std::string runs = FormatSweepRuns(r.experiments(1), r);
  EXPECT_EQ(runs,
            "sweep s6, point 1, run 1 of 2; its runs:\n"
            "  run 1   x1           succeeded        101.0 samples/s  disturbed: busy\n"
            "  run 2   x3           running              - samples/s\n");
  r.mutable_sweep()->clear_spec();
  EXPECT_EQ(FormatSweepRuns(r.experiments(1), r), "sweep s6, point 1 (1 run)\n");
}

// --- Flags. ---

// Parses a real argv, as main() would hand it over.
void Parse(CLI::App& app, std::vector<std::string> args) {
  std::string program = "shoal";
  std::vector<char*> argv = {program.data()};
  for (auto& a : args) argv.push_back(a.data());
  app.parse(int(argv.size()), argv.data());
}

// The spec (submit) or the sweep the flags make of `args`.
StatusOr<v1::ExperimentSpec> SubmitOf(std::vector<std::string> args) {
  CLI::App app;
  SpecFlags flags;
  flags.Add(&app, false);
  Parse(app, std::move(args));
  return flags.Spec();
}
StatusOr<v1::SweepSpec> SweepOf(std::vector<std::string> args) {
  CLI::App app;
  SpecFlags flags;
  flags.Add(&app, true);
  Parse(app, std::move(args));
  return flags.Sweep();
}

// Exactly the fields in `given` are present in the spec.
void ExpectOnly(const v1::ExperimentSpec& spec, const std::set<std::string>& given) {
  for (const auto& f : SpecFields())
    EXPECT_EQ(HasSpecField(spec, f), given.count(f.name) > 0) << f.name;
}

TEST(SpecFlagsTest, EveryFieldHasAFlag) {
  CLI::App app;
  SpecFlags flags;
  flags.Add(&app, false);
  for (const auto& f : SpecFields()) {
    std::string flag = "--" + f.name;
    for (auto& c : flag)
      if (c == '_') c = '-';
    EXPECT_NO_THROW(app.get_option(flag)) << flag;
  }
}

TEST(SpecFlagsTest, NothingGivenIsAnEmptySpec) {
  CLI::App app;
  SpecFlags flags;
  flags.Add(&app, false);
  Parse(app, {});
  auto spec = flags.Spec();
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  ExpectOnly(*spec, {});
  EXPECT_EQ(spec->ByteSizeLong(), 0u);
}

TEST(SpecFlagsTest, SubmitSetsOnlyTheGivenFields) {
  CLI::App app;
  SpecFlags flags;
  flags.Add(&app, false);
  Parse(app, {"--workers", "3", "--batch-size", "32", "--lr", "0.05", "--share", "no", "--dataset",
              "/data/mnist,v2", "--momentum", "0", "--name", "a, b"});
  auto spec = flags.Spec();
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  ExpectOnly(*spec, {"workers", "batch_size", "lr", "share", "dataset", "momentum", "name"});
  EXPECT_EQ(spec->workers(), 3u);
  EXPECT_EQ(spec->batch_size(), 32u);
  EXPECT_EQ(spec->optimizer().lr(), 0.05);
  EXPECT_FALSE(spec->share());
  EXPECT_EQ(spec->dataset(), "/data/mnist,v2");  // a path or a label may hold commas
  EXPECT_EQ(spec->name(), "a, b");
  EXPECT_EQ(spec->optimizer().momentum(), 0.0);
  EXPECT_FALSE(spec->optimizer().has_name());  // the daemon picks sgd, not the CLI
}

TEST(SpecFlagsTest, WorkersZeroIsSentAsGiven) {
  CLI::App app;
  SpecFlags flags;
  flags.Add(&app, false);
  Parse(app, {"--workers", "0"});
  auto spec = flags.Spec();
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  ExpectOnly(*spec, {"workers"});
  EXPECT_TRUE(spec->has_workers());
  EXPECT_EQ(spec->workers(), 0u);
  // The daemon keeps the 0 and refuses it.
  v1::ExperimentSpec s = *spec;
  ApplyDefaults(&s, SpecLimits{});
  EXPECT_EQ(s.workers(), 0u);
  EXPECT_EQ(ValidateSpec(s, SpecLimits{}).message(),
            "workers: 0 is outside the allowed range 1..64");
}

TEST(SpecFlagsTest, SubmitRefusesAList) {
  {
    CLI::App app;
    SpecFlags flags;
    flags.Add(&app, false);
    Parse(app, {"--workers", "1", "--workers", "2"});
    auto spec = flags.Spec();
    ASSERT_FALSE(spec.ok());
    EXPECT_EQ(spec.status().message(), "workers: given 2 times; it takes one value");
  }
  {
    CLI::App app;
    SpecFlags flags;
    flags.Add(&app, false);
    EXPECT_THROW(Parse(app, {"--lr", "0.1", "0.2"}), CLI::ExtrasError);
  }
  {
    // A comma list is a list too, except in the fields whose values may hold commas.
    CLI::App app;
    SpecFlags flags;
    flags.Add(&app, false);
    Parse(app, {"--workers", "1,2"});
    auto spec = flags.Spec();
    ASSERT_FALSE(spec.ok());
    EXPECT_EQ(spec.status().message(),
              "workers: submit takes one value (a list is a sweep: shoal sweep)");
  }
}

TEST(SpecFlagsTest, SubmitRefusesABadValue) {
  CLI::App app;
  SpecFlags flags;
  flags.Add(&app, false);
  Parse(app, {"--lr", "fast"});
  auto spec = flags.Spec();
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(spec.status().message(), "lr: 'fast' is not a finite number");
}

TEST(SpecFlagsTest, ForceSetsForce) {
  CLI::App app;
  SpecFlags flags;
  flags.Add(&app, false);
  Parse(app, {"--force"});
  auto spec = flags.Spec();
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  ExpectOnly(*spec, {"force"});
  EXPECT_TRUE(spec->force());
  for (const char* no : {"--force=no", "--force=false", "--force=0"}) {  // typed: it means no
    auto sweep = SweepOf({no});
    ASSERT_TRUE(sweep.ok()) << sweep.status().message();
    EXPECT_TRUE(sweep->base().has_force()) << no;
    EXPECT_FALSE(sweep->base().force()) << no;
  }
}

// A value in brackets is the value: CLI11 would otherwise unwrap it as a list.
TEST(SpecFlagsTest, BracketsAreKeptInAValue) {
  auto spec = SubmitOf({"--name", "[baseline]", "--dataset", "[data]"});
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->name(), "[baseline]");
  EXPECT_EQ(spec->dataset(), "[data]");
}

TEST(FormatTest, AnAgeIsADurationThatFitsInMilliseconds) {
  EXPECT_EQ(ParseDurationMs("30d").value(), 30ull * 86'400'000);
  EXPECT_EQ(ParseDurationMs("500ms").value(), 500u);
  EXPECT_EQ(ParseDurationMs("213503982334d").value(), 213503982334ull * 86'400'000);
  for (const char* bad : {"", "d", "30", "30 d", "-1d", "213503982335d", "99999999999999999999ms"})
    EXPECT_FALSE(ParseDurationMs(bad).ok()) << bad;
}

TEST(SpecFlagsTest, AnUnknownFlagIsAParseError) {
  CLI::App app;
  SpecFlags flags;
  flags.Add(&app, false);
  EXPECT_THROW(Parse(app, {"--colour", "red"}), CLI::ParseError);
}

TEST(SpecFlagsTest, SweepListsBecomeAxesAndSingleValuesTheBase) {
  CLI::App app;
  SpecFlags flags;
  flags.Add(&app, true);
  Parse(app, {"--workers", "1,2,4", "--batch-size", "32", "--optimizer", "sgd,adam", "--name",
              "study, take 2", "--force", "--seed", "7"});
  auto sweep = flags.Sweep();
  ASSERT_TRUE(sweep.ok()) << sweep.status().message();
  ASSERT_EQ(sweep->axes_size(), 2);
  EXPECT_EQ(sweep->axes(0).field(), "optimizer");
  EXPECT_EQ(
      std::vector<std::string>(sweep->axes(0).values().begin(), sweep->axes(0).values().end()),
      (std::vector<std::string>{"sgd", "adam"}));
  EXPECT_EQ(sweep->axes(1).field(), "workers");
  EXPECT_EQ(
      std::vector<std::string>(sweep->axes(1).values().begin(), sweep->axes(1).values().end()),
      (std::vector<std::string>{"1", "2", "4"}));
  ExpectOnly(sweep->base(), {"batch_size", "name", "force", "seed"});
  EXPECT_EQ(sweep->base().batch_size(), 32u);
  EXPECT_EQ(sweep->base().seed(), 7u);
  EXPECT_TRUE(sweep->base().force());
  EXPECT_EQ(sweep->base().name(), "study, take 2");  // a label, not an axis: commas kept
  EXPECT_EQ(sweep->name(), "study, take 2");
  EXPECT_EQ(sweep->workers_size(), 0);  // no legacy lists
  EXPECT_EQ(sweep->start_size(), 0);

  // And it expands: optimizer slowest, workers fastest.
  auto grid = ExpandGrid(*sweep, SpecLimits{});
  ASSERT_TRUE(grid.ok()) << grid.status().message();
  ASSERT_EQ(grid->size(), 6u);
  EXPECT_EQ((*grid)[2].spec.optimizer().name(), "sgd");
  EXPECT_EQ((*grid)[2].spec.workers(), 4u);
  EXPECT_EQ((*grid)[3].spec.optimizer().name(), "adam");
  EXPECT_EQ((*grid)[3].spec.workers(), 1u);
  EXPECT_EQ((*grid)[3].spec.batch_size(), 32u);
}

TEST(SpecFlagsTest, SweepWithOneValueOfEachIsAllBase) {
  CLI::App app;
  SpecFlags flags;
  flags.Add(&app, true);
  Parse(app, {"--workers", "0", "--lr", "0.5"});
  auto sweep = flags.Sweep();
  ASSERT_TRUE(sweep.ok()) << sweep.status().message();
  EXPECT_EQ(sweep->axes_size(), 0);
  ExpectOnly(sweep->base(), {"workers", "lr"});
  EXPECT_EQ(sweep->base().workers(), 0u);
  EXPECT_EQ(sweep->base().optimizer().lr(), 0.5);
  EXPECT_EQ(sweep->name(), "");
}

// Every typed value is kept or refused: an empty piece of a list is not dropped, and a flag given
// twice is not merged into one list.
TEST(SpecFlagsTest, SweepRefusesEmptyPiecesAndRepeatedFlags) {
  for (const char* list : {"1,,2", "1,", ",1"}) {
    auto s = SweepOf({"--workers", list});
    ASSERT_FALSE(s.ok()) << list;
    EXPECT_EQ(s.status().message(),
              std::string("workers: an empty value in the list '") + list + "'");
  }
  auto twice = SweepOf({"--workers", "1,2", "--workers", "3"});
  ASSERT_FALSE(twice.ok());
  EXPECT_EQ(twice.status().message(),
            "workers: given 2 times; a sweep takes one comma-separated list");
  auto named = SweepOf({"--name", "a", "--name", "b"});
  ASSERT_FALSE(named.ok());
  EXPECT_EQ(named.status().message(), "name: given 2 times; it takes one value (not an axis)");
  auto empty =
      SweepOf({"--name", ""});  // not an axis: the text whole, refused or kept by the daemon
  ASSERT_TRUE(empty.ok()) << empty.status().message();
  EXPECT_TRUE(empty->base().has_name());
}

TEST(SpecFlagsTest, SweepRefusesABadSingleValue) {
  CLI::App app;
  SpecFlags flags;
  flags.Add(&app, true);
  Parse(app, {"--batch-size", "big"});
  auto sweep = flags.Sweep();
  ASSERT_FALSE(sweep.ok());
  EXPECT_EQ(sweep.status().message(), "batch_size: 'big' is not a whole number in 0..4294967295");
}

// `logs --worker 1`: rank 1's lines, whole, however the log arrives in pieces.
TEST(FormatTest, RankLinesPicksOneRanksLinesAcrossPieces) {
  RankLines one(1);
  std::string got = one.Take("[rank 0] zero\n[rank 1] o", false);
  got += one.Take("ne\n[rank 10] ten\n[rank 1", false);
  got += one.Take("] last, unended", false);
  EXPECT_EQ(got, "one\n");
  got += one.Take("", true);
  EXPECT_EQ(got, "one\nlast, unended");
}

}  // namespace
}  // namespace shoal::cli
