// A sweep placed on Slurm (server/slurm_sweeps.h), against a fake Slurm that answers as sbatch,
// scontrol and scancel do: the orders and script each task needs, the points following their
// tasks' states, each ended task's record stored (or the point failed in Slurm's words), cancels
// passed on as scancel.
#include "server/slurm_sweeps.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include "server/run_record.h"
#include "shared/spec/sweep.h"
#include "tests/testutil.h"

namespace shoal {
namespace {

class FakeSlurm : public Slurm {
 public:
  // Job ids 4242, 4243, ... in the order of the arrays submitted.
  StatusOr<std::string> SubmitArray(const ArrayJob& job) override {
    submitted.push_back(job);
    if (!refuse.empty() && submitted.size() > refuse_after) return InvalidArgument(refuse);
    return std::to_string(4241 + submitted.size());
  }
  StatusOr<uint32_t> MaxArraySize() override { return max_array_size; }
  // `tasks` are job 4242's; another job's are in `tasks_of`.
  StatusOr<std::vector<SlurmTask>> Tasks(const std::string& job_id) override {
    asked.push_back(job_id);
    if (while_asked) while_asked();
    return job_id == "4242" ? tasks : tasks_of[job_id];
  }
  Status Cancel(const std::vector<std::string>& targets, bool gently) override {
    for (const auto& t : targets) cancelled.push_back((gently ? "gently " : "") + t);
    return Status::Ok();
  }
  std::vector<ArrayJob> submitted;
  std::vector<std::string> asked, cancelled;
  std::vector<SlurmTask> tasks;
  std::map<std::string, std::vector<SlurmTask>> tasks_of;
  uint32_t max_array_size = 1001;
  std::string refuse;                 // sbatch's error, when set
  size_t refuse_after = 0;            // ... for the arrays after this many
  std::function<void()> while_asked;  // runs while scontrol "answers"
};

SlurmTask Task(uint32_t i, const std::string& state, const std::string& reason = "",
               const std::string& node = "") {
  SlurmTask t;
  t.index = i;
  t.state = state;
  t.reason = reason;
  t.node = node;
  t.exit_code = "0:0";
  return t;
}

class SlurmSweepsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto s = Store::Open(dir_ / "db");
    ASSERT_TRUE(s.ok());
    store_ = std::move(s).value();
    queue_ = std::make_unique<ExperimentQueue>(store_.get());
    queue_->Listen([this](const v1::Experiment& e) { heard_.push_back(e); });
    Follower(30000);
    std::filesystem::create_directories(dir_ / "logs");
    sw_.set_id("s0000000001");
    sw_.mutable_spec()->mutable_slurm()->set_partition("gpu");
    sw_.mutable_spec()->mutable_slurm()->set_time_limit("30:00");
    sw_.mutable_spec()->mutable_slurm()->set_max_parallel(2);
    for (uint32_t i = 0; i < 3; ++i) {
      v1::Experiment e;
      e.set_id("x000000000" + std::to_string(i));
      e.set_sweep_id(sw_.id());
      e.set_sweep_index(i);
      e.set_state(v1::QUEUED);
      e.mutable_spec()->set_workers(i + 1);
      exps_.push_back(e);
    }
  }
  void Follower(int64_t gentle_cancel_ms) {
    sweeps_ = std::make_unique<SlurmSweeps>(
        &slurm_, queue_.get(), store_.get(),
        SlurmSweepOptions{"/opt/shoal it's/shoald", dir_ / "slurm", dir_ / "logs", gentle_cancel_ms,
                          dir_ / "blobs", dir_ / "keys", dir_ / "profiles"});
  }
  // Placed, stored and followed, as the coordinator does it.
  void PlaceAll() {
    ASSERT_TRUE(sweeps_->Place(&sw_, &exps_).ok());
    ASSERT_TRUE(queue_->Adopt(exps_, &sw_).ok());
    sweeps_->Follow(sw_, exps_);
  }
  std::string SweepDir() const { return dir_ / ("slurm/" + sw_.id()); }
  // The folder of the sweep's first array (the only one, but in the tests of several).
  std::string ArrayDir() const { return SweepDir() + "/array-0"; }
  // The key the array's tasks seal their records with: what sbatch's environment carried.
  std::string Key() const {
    const std::string& var = slurm_.submitted.back().env.at(0);
    return KeyFromHex(var.substr(var.find('=') + 1)).value();
  }
  // Task `i`'s run as its record names it: its point's id and place, ended in `state`.
  v1::RunRecord RecordOf(uint32_t i, v1::ExperimentState state) const {
    v1::RunRecord r;
    v1::Experiment& e = *r.mutable_experiment();
    e.set_id(exps_[i].id());
    e.set_sweep_id(sw_.id());
    e.set_sweep_index(i);
    e.set_state(state);
    return r;
  }
  // `r` handed back by task `i`: where its task writes (its array's folder, under its index
  // there), sealed with the sweep's key.
  void Hand(uint32_t i, const v1::RunRecord& r) {
    const std::string dir = std::filesystem::path(exps_[i].slurm().output()).parent_path();
    ASSERT_TRUE(WriteRunRecord(r, RecordPath(dir, exps_[i].slurm().task()), Key()).ok());
  }
  // What task `i` hands back: its run, ended, under its order's place.
  void WriteRecord(uint32_t i, v1::ExperimentState state, const std::string& id = "",
                   const std::string& error = "") {
    v1::RunRecord r = RecordOf(i, state);
    v1::Experiment& e = *r.mutable_experiment();
    if (!id.empty()) e.set_id(id);
    e.set_error(error);
    e.mutable_host()->set_hostname("node" + std::to_string(i));
    for (int s = 0; s < 4; ++s) r.add_samples()->set_t_ms(50.0 * s);
    r.set_log("[worker 0] trained\n");
    Hand(i, r);
  }
  v1::Experiment Stored(uint32_t i) { return store_->Get(exps_[i].id()).value(); }

  testing::TempDir dir_;
  std::unique_ptr<Store> store_;
  std::unique_ptr<ExperimentQueue> queue_;
  FakeSlurm slurm_;
  std::unique_ptr<SlurmSweeps> sweeps_;
  v1::Sweep sw_;
  std::vector<v1::Experiment> exps_;
  std::vector<v1::Experiment> heard_;
};

TEST_F(SlurmSweepsTest, APlacedSweepIsOneArrayWithAnOrderPerTaskAndAScript) {
  PlaceAll();
  ASSERT_EQ(slurm_.submitted.size(), 1u);
  const ArrayJob& job = slurm_.submitted[0];
  EXPECT_EQ(job.tasks, 3u);
  EXPECT_EQ(job.max_parallel, 2u);
  EXPECT_EQ(job.partition, "gpu");
  EXPECT_EQ(job.time_limit, "30:00");
  EXPECT_TRUE(job.exclusive);
  EXPECT_EQ(job.output, ArrayDir() + "/task-%a.out");
  EXPECT_TRUE(job.after.empty());
  EXPECT_EQ(sw_.slurm_job_ids_size(), 1);
  EXPECT_EQ(sw_.slurm_job_id(), "4242");
  for (uint32_t i = 0; i < 3; ++i) {
    auto order = ReadPointOrder(OrderPath(ArrayDir(), i));
    ASSERT_TRUE(order.ok()) << order.status().message();
    EXPECT_EQ(order->experiment_id(), exps_[i].id());
    EXPECT_EQ(order->index(), i);
    EXPECT_EQ(order->spec().workers(), i + 1);
    EXPECT_EQ(exps_[i].slurm().job_id(), "4242");
    EXPECT_EQ(exps_[i].slurm().task(), i);
    EXPECT_EQ(exps_[i].slurm().output(), TaskOutputPath(ArrayDir(), i));
  }
  struct stat st {};
  ASSERT_EQ(::stat(job.script.c_str(), &st), 0);
  EXPECT_TRUE(st.st_mode & S_IXUSR);
  std::ifstream in(job.script);
  const std::string script((std::istreambuf_iterator<char>(in)), {});
  // The binary's path is one word for sh, quote and space included.
  EXPECT_NE(script.find("'/opt/shoal it'\\''s/shoald' --run-point"), std::string::npos) << script;
}

// data_parallel over 2 nodes: each task is an allocation of 2 nodes, srun runs one run-point a
// node with its rank and the first node's address, and the nodes' records come back as one.
TEST_F(SlurmSweepsTest, ARunAcrossNodesIsOneTaskOfThatManyNodesAndOneRecord) {
  exps_.resize(1);
  exps_[0].mutable_spec()->set_kind("data_parallel");
  exps_[0].mutable_spec()->set_nodes(2);
  PlaceAll();
  ASSERT_EQ(slurm_.submitted.size(), 1u);
  EXPECT_EQ(slurm_.submitted[0].nodes, 2u);
  std::ifstream in(slurm_.submitted[0].script);
  const std::string script((std::istreambuf_iterator<char>(in)), {});
  for (const char* want :
       {"srun --ntasks=", "--ntasks-per-node=1", "--node-rank \"$SLURM_NODEID\"", "stop-$3",
        "--master \"$4\"", "record-$3.node-$SLURM_NODEID.pb", "NodeAddr="})
    EXPECT_NE(script.find(want), std::string::npos) << want << " in\n" << script;
  EXPECT_EQ(std::system(("sh -n " + slurm_.submitted[0].script).c_str()), 0);  // it parses
  for (uint32_t k = 0; k < 2; ++k) {
    WriteRecord(0, v1::SUCCEEDED);
    std::filesystem::rename(RecordPath(ArrayDir(), 0), NodeRecordPath(ArrayDir(), 0, k));
  }
  slurm_.tasks = {Task(0, "COMPLETED", "", "node[0-1]")};
  sweeps_->Poll();
  const v1::Experiment e = Stored(0);
  EXPECT_EQ(e.state(), v1::SUCCEEDED) << e.error();
  ASSERT_EQ(e.parts_size(), 2);
  EXPECT_EQ(store_->Samples(e.id())->size(), 8u);  // both nodes' samples
  EXPECT_FALSE(std::filesystem::exists(NodeRecordPath(ArrayDir(), 0, 1)));
}

// scontrol may take seconds: meanwhile a submit's Follow goes through (the poll holds no lock
// while Slurm answers), and the array it adds is looked at from the next poll.
TEST_F(SlurmSweepsTest, ASubmitIsNotHeldUpWhileSlurmAnswersAPoll) {
  PlaceAll();
  v1::Sweep other = sw_;
  other.set_id("s0000000002");
  std::vector<v1::Experiment> more = {exps_[0]};
  more[0].set_id("x0000000009");
  more[0].set_sweep_id(other.id());
  more[0].mutable_slurm()->set_job_id("4343");  // an array of its own
  bool followed = false;
  slurm_.while_asked = [&] {
    if (followed) return;
    sweeps_->Follow(other, more);  // would wait forever for a lock the poll held
    followed = true;
  };
  slurm_.tasks = {Task(0, "PENDING", "Priority"), Task(1, "PENDING"), Task(2, "PENDING")};
  EXPECT_EQ(sweeps_->Poll(), 2u);
  EXPECT_TRUE(followed);
  slurm_.asked.clear();
  sweeps_->Poll();
  EXPECT_EQ(slurm_.asked.size(), 2u);  // both arrays
}

// A point's uploaded model file is shared with the nodes under the sweep's folder (a hard link to
// the daemon's store), each task's daemon finds it in its own blob folder, and it goes once the
// array has ended.
TEST_F(SlurmSweepsTest, AnUploadedModelFileIsSharedWithTheNodesUntilTheArrayEnds) {
  const std::string hex(64, 'a');
  std::filesystem::create_directories(dir_ / "blobs");
  std::ofstream(dir_ / ("blobs/" + hex)) << "a TorchScript archive";
  exps_.resize(1);
  exps_[0].mutable_spec()->set_model_file("sha256:" + hex);
  PlaceAll();
  const std::string shared = SweepDir() + "/blobs/" + hex;
  std::ifstream in(shared);
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(in)), {}), "a TorchScript archive");
  struct stat a {
  }, b{};
  ASSERT_EQ(::stat(shared.c_str(), &a), 0);
  ASSERT_EQ(::stat((dir_ / ("blobs/" + hex)).c_str(), &b), 0);
  EXPECT_EQ(a.st_ino, b.st_ino);  // one file system: a link, not a copy
  std::ifstream s(slurm_.submitted[0].script);
  const std::string script((std::istreambuf_iterator<char>(s)), {});
  EXPECT_NE(script.find("ln -s \"$f\" \"$state/blobs/\""), std::string::npos) << script;
  WriteRecord(0, v1::SUCCEEDED);
  slurm_.tasks = {Task(0, "COMPLETED", "", "node0")};
  EXPECT_EQ(sweeps_->Poll(), 0u);
  EXPECT_FALSE(std::filesystem::exists(SweepDir() + "/blobs"));
  EXPECT_TRUE(std::filesystem::exists(dir_ / ("blobs/" + hex)));  // the daemon's own stays
}

// One array asks one size of allocation for all its tasks: points over 1 and 2 nodes are an array
// each, their task indices their own.
TEST_F(SlurmSweepsTest, PointsOnUnlikeNodeCountsAreAnArrayEach) {
  exps_[1].mutable_spec()->set_kind("data_parallel");
  exps_[1].mutable_spec()->set_nodes(2);
  PlaceAll();
  ASSERT_EQ(slurm_.submitted.size(), 2u);
  EXPECT_EQ(slurm_.submitted[0].nodes, 1u);
  EXPECT_EQ(slurm_.submitted[0].tasks, 2u);
  EXPECT_EQ(slurm_.submitted[1].nodes, 2u);
  EXPECT_EQ(slurm_.submitted[1].tasks, 1u);
  EXPECT_EQ(exps_[2].slurm().job_id(), "4242");
  EXPECT_EQ(exps_[2].slurm().task(), 1u);
  EXPECT_EQ(exps_[1].slurm().job_id(), "4243");
  EXPECT_EQ(exps_[1].slurm().task(), 0u);
  EXPECT_EQ(ReadPointOrder(OrderPath(SweepDir() + "/array-1", 0))->experiment_id(), exps_[1].id());
}

// Slurm refuses an array of MaxArraySize tasks or more: a bigger sweep is cut into arrays of that
// many, each followed by its own job id; with --max-parallel each starts once the one before it
// has ended (so %K holds for the whole sweep); the sweep's shared files and key stay until the
// last array has ended; a restarted daemon follows them all; cancelling the sweep cancels each.
TEST_F(SlurmSweepsTest, ASweepPastMaxArraySizeIsSeveralArraysFollowedAsOne) {
  slurm_.max_array_size = 2;
  exps_.push_back(exps_[0]);
  exps_[3].set_id("x0000000003");
  exps_[3].set_sweep_index(3);
  exps_.push_back(exps_[0]);
  exps_[4].set_id("x0000000004");
  exps_[4].set_sweep_index(4);
  PlaceAll();
  ASSERT_EQ(slurm_.submitted.size(), 3u);
  EXPECT_EQ(slurm_.submitted[0].tasks, 2u);
  EXPECT_EQ(slurm_.submitted[2].tasks, 1u);
  EXPECT_TRUE(slurm_.submitted[0].after.empty());
  EXPECT_EQ(slurm_.submitted[1].after, "4242");
  EXPECT_EQ(slurm_.submitted[2].after, "4243");
  const auto argv = SbatchArgv(slurm_.submitted[1]);
  EXPECT_NE(std::find(argv.begin(), argv.end(), "--dependency=afterany:4242"), argv.end());
  EXPECT_EQ(sw_.slurm_job_id(), "4242");
  EXPECT_EQ(std::vector<std::string>(sw_.slurm_job_ids().begin(), sw_.slurm_job_ids().end()),
            (std::vector<std::string>{"4242", "4243", "4244"}));
  EXPECT_EQ(exps_[4].slurm().job_id(), "4244");
  EXPECT_EQ(exps_[4].slurm().output(), TaskOutputPath(SweepDir() + "/array-2", 0));
  slurm_.tasks = {Task(0, "COMPLETED"), Task(1, "COMPLETED")};
  slurm_.tasks_of["4243"] = {Task(0, "RUNNING"), Task(1, "PENDING")};
  slurm_.tasks_of["4244"] = {Task(0, "PENDING", "Dependency")};
  WriteRecord(0, v1::SUCCEEDED);
  WriteRecord(1, v1::SUCCEEDED);
  EXPECT_EQ(sweeps_->Poll(), 2u);  // the first array ended, two followed
  EXPECT_EQ(Stored(1).state(), v1::SUCCEEDED);
  EXPECT_EQ(Stored(2).state(), v1::RUNNING);
  EXPECT_EQ(queue_->Get(exps_[4].id())->slurm().reason(), "Dependency");
  EXPECT_TRUE(std::filesystem::exists(dir_ / "keys/s0000000001.key"));  // the others need it
  // A restarted daemon picks up both arrays still running; the sweep cancelled: each scancelled.
  Follower(30000);
  std::vector<v1::Experiment> left;
  for (uint32_t i = 2; i < 5; ++i) left.push_back(queue_->Get(exps_[i].id()).value());
  sweeps_->Follow(sw_, left);
  slurm_.asked.clear();
  for (const auto& e : left) ASSERT_TRUE(queue_->Cancel(e.id()).ok());
  sweeps_->Poll();
  EXPECT_EQ(slurm_.asked, (std::vector<std::string>{"4243", "4244"}));
  EXPECT_EQ(slurm_.cancelled, (std::vector<std::string>{"4243_1", "gently 4243_0", "4244"}));
  WriteRecord(2, v1::CANCELLED);
  slurm_.tasks_of["4243"] = {Task(0, "COMPLETED"), Task(1, "CANCELLED")};
  slurm_.tasks_of["4244"] = {Task(0, "CANCELLED")};
  EXPECT_EQ(sweeps_->Poll(), 0u);
  for (uint32_t i = 2; i < 5; ++i) EXPECT_EQ(Stored(i).state(), v1::CANCELLED) << i;
  EXPECT_FALSE(std::filesystem::exists(dir_ / "keys/s0000000001.key"));
}

// The second of two arrays refused: the first is cancelled, nothing is left, and the error says
// which array.
TEST_F(SlurmSweepsTest, AnArrayRefusedAfterAnotherWasPlacedCancelsItAndLeavesNothing) {
  slurm_.max_array_size = 2;
  slurm_.refuse = "sbatch: error: Batch job submission failed: Job violates accounting policy";
  slurm_.refuse_after = 1;
  const Status st = sweeps_->Place(&sw_, &exps_);
  EXPECT_NE(st.message().find("slurm: array 2 of 2: sbatch: error: Batch job submission failed"),
            std::string::npos)
      << st.message();
  EXPECT_EQ(slurm_.cancelled, std::vector<std::string>{"4242"});
  EXPECT_FALSE(std::filesystem::exists(SweepDir()));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "keys/s0000000001.key"));
  EXPECT_TRUE(sw_.slurm_job_id().empty());
}

TEST_F(SlurmSweepsTest, APlacementSlurmRefusesLeavesNoFilesAndNamesWhy) {
  slurm_.refuse = "sbatch: error: invalid partition specified: gpu";
  const Status st = sweeps_->Place(&sw_, &exps_);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("invalid partition specified: gpu"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(SweepDir()));
  EXPECT_TRUE(sw_.slurm_job_id().empty());
  sw_.mutable_spec()->mutable_slurm()->set_time_limit("half an hour");
  slurm_.refuse.clear();
  EXPECT_EQ(sweeps_->Place(&sw_, &exps_).code(), Code::kInvalidArgument);
  EXPECT_EQ(slurm_.submitted.size(), 1u);  // refused before sbatch
}

TEST_F(SlurmSweepsTest, PointsFollowTheirTasksAndAnEndedTaskHandsBackItsWholeRecord) {
  PlaceAll();
  slurm_.tasks = {Task(0, "RUNNING", "", "node0"), Task(1, "PENDING", "Priority"),
                  Task(2, "PENDING", "Priority")};
  EXPECT_EQ(sweeps_->Poll(), 1u);
  EXPECT_EQ(Stored(0).state(), v1::RUNNING);
  EXPECT_EQ(Stored(0).slurm().node(), "node0");
  EXPECT_GT(Stored(0).started_unix_ms(), 0);
  auto waiting = queue_->Get(exps_[1].id());
  EXPECT_EQ(waiting->state(), v1::QUEUED);
  EXPECT_EQ(waiting->slurm().reason(), "Priority");
  WriteRecord(0, v1::SUCCEEDED);
  slurm_.tasks = {Task(0, "COMPLETED", "", "node0"), Task(1, "RUNNING", "", "node1"),
                  Task(2, "PENDING", "JobArrayTaskLimit")};
  EXPECT_EQ(sweeps_->Poll(), 1u);
  const v1::Experiment done = Stored(0);
  EXPECT_EQ(done.state(), v1::SUCCEEDED);
  EXPECT_EQ(done.host().hostname(), "node0");
  EXPECT_EQ(done.slurm().state(), "COMPLETED");
  EXPECT_EQ(store_->Samples(done.id())->size(), 4u);
  EXPECT_FALSE(queue_->IsLive(done.id()));
  EXPECT_FALSE(std::filesystem::exists(RecordPath(ArrayDir(), 0)));
  // Slurm forgets ended tasks (MinJobAge): a task it no longer lists is read from its record.
  WriteRecord(1, v1::SUCCEEDED);
  WriteRecord(2, v1::SUCCEEDED);
  slurm_.tasks.clear();
  EXPECT_EQ(sweeps_->Poll(), 0u);
  EXPECT_EQ(Stored(1).state(), v1::SUCCEEDED);
  EXPECT_EQ(Stored(2).state(), v1::SUCCEEDED);
  EXPECT_EQ(slurm_.asked, std::vector<std::string>(3, "4242"));  // one scontrol per poll
}

TEST_F(SlurmSweepsTest, ATaskThatLeftNoRecordFailsInSlurmsWords) {
  PlaceAll();
  slurm_.tasks = {Task(0, "TIMEOUT", "TimeLimit", "node0"), Task(1, "OUT_OF_MEMORY", "", "node1"),
                  Task(2, "NODE_FAIL", "", "node1")};
  slurm_.tasks[0].exit_code = "0:15";
  EXPECT_EQ(sweeps_->Poll(), 0u);
  const v1::Experiment timed_out = Stored(0);
  EXPECT_EQ(timed_out.state(), v1::FAILED);
  EXPECT_EQ(timed_out.error(),
            "Slurm task 4242_0 ended TIMEOUT (TimeLimit) on node0, exit code 0:15, and wrote no "
            "record; its output: " +
                TaskOutputPath(ArrayDir(), 0));
  // In the words a sweep's skip-after-OOM rule knows.
  EXPECT_TRUE(IsOutOfMemory(Stored(1).error())) << Stored(1).error();
  EXPECT_NE(Stored(2).error().find("ended NODE_FAIL"), std::string::npos);
  EXPECT_EQ(heard_.back().state(), v1::FAILED);
}

TEST_F(SlurmSweepsTest, ARecordClaimingAnotherPlaceIsRefusedAndThePointFails) {
  PlaceAll();
  WriteRecord(0, v1::SUCCEEDED, "x0000000009");
  slurm_.tasks = {Task(0, "COMPLETED"), Task(1, "RUNNING"), Task(2, "RUNNING")};
  sweeps_->Poll();
  EXPECT_EQ(Stored(0).state(), v1::FAILED);
  EXPECT_NE(Stored(0).error().find("its record was refused"), std::string::npos);
  EXPECT_FALSE(store_->Get("x0000000009").ok());  // nothing stored under the claimed id
  // A file that is not a record: refused as one its task did not seal, not taken for a missing
  // record.
  std::ofstream(RecordPath(ArrayDir(), 1)) << "not a record \xff\xff";
  slurm_.tasks = {Task(1, "COMPLETED"), Task(2, "RUNNING")};
  sweeps_->Poll();
  EXPECT_EQ(Stored(1).state(), v1::FAILED);
  EXPECT_NE(Stored(1).error().find("its record was refused: " + RecordPath(ArrayDir(), 1) +
                                   ": not sealed with its sweep's key"),
            std::string::npos)
      << Stored(1).error();
}

// What a task hands back is authenticated: a record not sealed under its sweep's key (written
// unsealed, or sealed by another sweep's task) is refused. The key lives in the daemon's own
// folder, not the shared one, survives a restart, and goes when the array has ended.
TEST_F(SlurmSweepsTest, ARecordNotSealedWithItsSweepsKeyIsRefused) {
  PlaceAll();
  const std::string key_file = dir_ / "keys/s0000000001.key";
  struct stat st {};
  ASSERT_EQ(::stat(key_file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat((dir_ / "keys").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  for (const auto& f : std::filesystem::recursive_directory_iterator(SweepDir())) {
    if (f.is_directory()) continue;
    std::ifstream in(f.path());
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    EXPECT_EQ(text.find(KeyToHex(Key())), std::string::npos) << f.path();
  }
  WriteRecord(0, v1::SUCCEEDED);
  v1::RunRecord r;
  r.mutable_experiment()->set_id(exps_[1].id());
  r.mutable_experiment()->set_sweep_id(sw_.id());
  r.mutable_experiment()->set_sweep_index(1);
  r.mutable_experiment()->set_state(v1::SUCCEEDED);
  ASSERT_TRUE(WriteRunRecord(r, RecordPath(ArrayDir(), 1)).ok());
  r.mutable_experiment()->set_id(exps_[2].id());
  r.mutable_experiment()->set_sweep_index(2);
  ASSERT_TRUE(WriteRunRecord(r, RecordPath(ArrayDir(), 2), NewRecordKey()).ok());
  Follower(30000);  // a restarted daemon: the key is read back
  sweeps_->Follow(sw_, exps_);
  slurm_.tasks = {Task(0, "COMPLETED"), Task(1, "COMPLETED"), Task(2, "COMPLETED")};
  EXPECT_EQ(sweeps_->Poll(), 0u);
  EXPECT_EQ(Stored(0).state(), v1::SUCCEEDED);
  for (uint32_t i : {1u, 2u}) {
    EXPECT_EQ(Stored(i).state(), v1::FAILED);
    EXPECT_NE(Stored(i).error().find("its record was refused: " + RecordPath(ArrayDir(), i) +
                                     ": not sealed with its sweep's key"),
              std::string::npos)
        << Stored(i).error();
  }
  EXPECT_FALSE(std::filesystem::exists(key_file));  // the array ended
}

// A run across nodes cancelled: a node whose peers stopped first fails of it; it is cancelled
// with the run, its words kept.
TEST_F(SlurmSweepsTest, ACancelledRunsPartThatFailedOfItsPeersIsCancelled) {
  PlaceAll();
  slurm_.tasks = {Task(0, "RUNNING"), Task(1, "RUNNING"), Task(2, "RUNNING")};
  sweeps_->Poll();
  ASSERT_TRUE(queue_->Cancel(exps_[0].id()).ok());
  sweeps_->Poll();  // asked to stop: its nodes stop a moment apart
  v1::RunRecord r = RecordOf(0, v1::FAILED);
  v1::Experiment& e = *r.mutable_experiment();
  for (auto [state, error] : {std::pair{v1::FAILED,
                                        "worker 0 exited with code 1: Connection "
                                        "closed by peer"},
                              std::pair{v1::CANCELLED, ""}}) {
    v1::NodePart* p = e.add_parts();
    p->set_state(state);
    p->set_error(error);
  }
  Hand(0, r);
  slurm_.tasks = {Task(0, "COMPLETED"), Task(1, "RUNNING"), Task(2, "RUNNING")};
  sweeps_->Poll();
  const v1::Experiment stored = Stored(0);
  EXPECT_EQ(stored.state(), v1::CANCELLED);
  ASSERT_EQ(stored.parts_size(), 2);
  for (const auto& part : stored.parts()) EXPECT_EQ(part.state(), v1::CANCELLED);
  EXPECT_NE(stored.parts(0).error().find("Connection closed by peer"), std::string::npos);
}

// A pending task is Slurm's to cancel; a running one is asked to stop (its batch shell gets
// SIGTERM, which its script passes to the run), so its record, cancelled, still comes back.
TEST_F(SlurmSweepsTest, PendingTasksAreCancelledAndRunningOnesAskedToStop) {
  PlaceAll();
  slurm_.tasks = {Task(0, "RUNNING"), Task(1, "PENDING"), Task(2, "PENDING")};
  sweeps_->Poll();
  ASSERT_TRUE(queue_->Cancel(exps_[1].id()).ok());
  sweeps_->Poll();
  EXPECT_EQ(slurm_.cancelled, std::vector<std::string>{"4242_1"});
  // A cancelled pending task leaves no record: the point ends cancelled, not failed.
  slurm_.tasks = {Task(0, "RUNNING"), Task(1, "CANCELLED"), Task(2, "PENDING")};
  sweeps_->Poll();
  EXPECT_EQ(Stored(1).state(), v1::CANCELLED);
  EXPECT_TRUE(Stored(1).error().empty());
  ASSERT_TRUE(queue_->Cancel(exps_[0].id()).ok());
  ASSERT_TRUE(queue_->Cancel(exps_[2].id()).ok());
  sweeps_->Poll();
  EXPECT_EQ(slurm_.cancelled, (std::vector<std::string>{"4242_1", "4242_2", "gently 4242_0"}));
  WriteRecord(0, v1::CANCELLED);
  slurm_.tasks = {Task(0, "COMPLETED"), Task(2, "CANCELLED")};
  EXPECT_EQ(sweeps_->Poll(), 0u);
  EXPECT_EQ(Stored(0).state(), v1::CANCELLED);
  EXPECT_EQ(store_->Samples(exps_[0].id())->size(), 4u);
  EXPECT_EQ(Stored(2).state(), v1::CANCELLED);
  EXPECT_EQ(slurm_.cancelled.size(), 3u);  // each asked once
}

// A point's cancel is stored with it: a shoald restarted before its poll sent it to Slurm sends it
// then, whatever the task's states written meanwhile; and the mark goes with the point's end.
TEST_F(SlurmSweepsTest, ACancelAskedJustBeforeARestartStillReachesSlurm) {
  PlaceAll();
  slurm_.tasks = {Task(0, "RUNNING"), Task(1, "PENDING"), Task(2, "PENDING")};
  sweeps_->Poll();
  ASSERT_TRUE(queue_->Cancel(exps_[1].id()).ok());
  EXPECT_TRUE(Stored(1).slurm().cancel_asked());
  slurm_.tasks = {Task(0, "RUNNING"), Task(1, "PENDING", "Resources"), Task(2, "PENDING")};
  queue_->Update(Stored(1));  // whoever follows it writes what Slurm says: the mark stays
  EXPECT_TRUE(Stored(1).slurm().cancel_asked());
  // Restarted before any poll: a new queue and follower from what was stored.
  queue_ = std::make_unique<ExperimentQueue>(store_.get());
  std::vector<v1::Experiment> left;
  for (uint32_t i = 0; i < 3; ++i) left.push_back(Stored(i));
  queue_->RestoreAdopted(left);
  Follower(30000);
  sweeps_->Follow(sw_, left);
  EXPECT_TRUE(slurm_.cancelled.empty());
  sweeps_->Poll();
  EXPECT_EQ(slurm_.cancelled, std::vector<std::string>{"4242_1"});
  slurm_.tasks = {Task(0, "RUNNING"), Task(1, "CANCELLED"), Task(2, "PENDING")};
  sweeps_->Poll();
  EXPECT_EQ(Stored(1).state(), v1::CANCELLED);
  EXPECT_FALSE(queue_->IsLive(exps_[1].id()));
  EXPECT_FALSE(Stored(0).slurm().cancel_asked());  // only the one asked
}

// With Slurm's default EnforcePartLimits=NO, sbatch takes a --time over the partition's MaxTime
// and leaves the task pending for good (PartitionTimeLimit): after three answers saying so,
// shoald cancels it and fails its point saying why. A task pending for a reason it waits through
// (Priority) is left alone, and so is one whose reason went away before the third answer.
TEST_F(SlurmSweepsTest, ATaskSlurmWillNeverStartIsCancelledAndItsPointFailsSayingWhy) {
  PlaceAll();
  slurm_.tasks = {Task(0, "PENDING", "PartitionTimeLimit"), Task(1, "PENDING", "Priority"),
                  Task(2, "PENDING", "PartitionTimeLimit")};
  sweeps_->Poll();
  sweeps_->Poll();
  slurm_.tasks[2] = Task(2, "RUNNING", "", "node1");  // the partition's limit was raised
  sweeps_->Poll();
  EXPECT_TRUE(slurm_.cancelled.empty());
  sweeps_->Poll();
  EXPECT_EQ(slurm_.cancelled, std::vector<std::string>{"4242_0"});
  slurm_.tasks = {Task(0, "CANCELLED", "PartitionTimeLimit"), Task(1, "PENDING", "Priority"),
                  Task(2, "RUNNING", "", "node1")};
  slurm_.tasks[0].exit_code = "0:0";
  sweeps_->Poll();
  EXPECT_EQ(Stored(0).state(), v1::FAILED);
  EXPECT_EQ(Stored(0).error(),
            "Slurm will not start task 4242_0: PartitionTimeLimit (its --time is over the "
            "partition's MaxTime); shoald cancelled it rather than leave it pending");
  EXPECT_EQ(Stored(2).state(), v1::RUNNING);
  EXPECT_TRUE(queue_->IsLive(exps_[1].id()));
  EXPECT_EQ(NeverStartsBecause("Resources"), "");
  EXPECT_EQ(NeverStartsBecause("ReqNodeNotAvail"), "");     // a node down may come back
  EXPECT_EQ(NeverStartsBecause("PartitionNodeLimit"), "");  // also said while nodes are drained
}

// A command run's profiler traces, shipped by its task beside its record (ProfilesPath), are moved
// into this daemon's profiles folder under the point's own id and listed; a name that leaves its
// folder is dropped, and nothing is left in the shared folder.
TEST_F(SlurmSweepsTest, ProfilerTracesShippedBesideARecordAreKeptWithIt) {
  PlaceAll();
  const std::string shipped = ProfilesPath(ArrayDir(), 0);
  std::filesystem::create_directories(shipped);
  std::ofstream(shipped + "/rank0.json") << "[]";
  v1::RunRecord r = RecordOf(0, v1::SUCCEEDED);
  v1::Experiment& e = *r.mutable_experiment();
  e.set_profile_dir("/somewhere/on/the/node");
  for (const char* name : {"rank0.json", "../../keys/s0000000001.key"}) {
    v1::ProfileTrace* t = e.add_profile_traces();
    t->set_name(name);
    t->set_size_bytes(2);
  }
  Hand(0, r);
  slurm_.tasks = {Task(0, "COMPLETED"), Task(1, "RUNNING"), Task(2, "RUNNING")};
  sweeps_->Poll();
  const v1::Experiment stored = Stored(0);
  EXPECT_EQ(stored.profile_dir(), dir_ / ("profiles/" + exps_[0].id()));
  ASSERT_EQ(stored.profile_traces_size(), 1);
  EXPECT_EQ(stored.profile_traces(0).name(), "rank0.json");
  std::ifstream kept(stored.profile_dir() + "/rank0.json");
  EXPECT_EQ(std::string((std::istreambuf_iterator<char>(kept)), {}), "[]");
  EXPECT_FALSE(std::filesystem::exists(shipped));
}

// Tasks named in one word, however many: 10,000 names would pass the argument limit.
TEST_F(SlurmSweepsTest, ManyTasksAreCancelledInOneWord) {
  PlaceAll();
  slurm_.tasks = {Task(0, "RUNNING"), Task(1, "PENDING"), Task(2, "PENDING")};
  sweeps_->Poll();
  ASSERT_TRUE(queue_->Cancel(exps_[1].id()).ok());
  ASSERT_TRUE(queue_->Cancel(exps_[2].id()).ok());
  sweeps_->Poll();
  EXPECT_EQ(slurm_.cancelled, std::vector<std::string>{"4242_[1-2]"});
}

// A task left out of scontrol's answer (it shortens a long list of pending tasks) has not ended:
// it ends with its record, or after three answers in a row without it.
TEST_F(SlurmSweepsTest, AnAbsentTaskEndsWithItsRecordOrAfterThreeAbsences) {
  PlaceAll();
  slurm_.tasks = {Task(0, "RUNNING")};
  sweeps_->Poll();
  sweeps_->Poll();
  EXPECT_TRUE(queue_->IsLive(exps_[1].id()));
  EXPECT_EQ(queue_->Get(exps_[1].id())->state(), v1::QUEUED);
  WriteRecord(2, v1::SUCCEEDED);
  sweeps_->Poll();
  EXPECT_EQ(Stored(2).state(), v1::SUCCEEDED);
  EXPECT_EQ(Stored(1).state(), v1::FAILED);
  EXPECT_NE(Stored(1).error().find("Slurm task 4242_1 is no longer known to Slurm"),
            std::string::npos)
      << Stored(1).error();
}

// Slurm's time limit sends the task SIGTERM, which its run reads as a cancel: nobody cancelled
// it, so the point fails naming Slurm's state, with the record of the run until then.
TEST_F(SlurmSweepsTest, ARunSlurmStoppedAtItsTimeLimitFailsSayingSo) {
  PlaceAll();
  WriteRecord(0, v1::CANCELLED);
  slurm_.tasks = {Task(0, "TIMEOUT", "TimeLimit"), Task(1, "RUNNING"), Task(2, "RUNNING")};
  sweeps_->Poll();
  EXPECT_EQ(Stored(0).state(), v1::FAILED);
  EXPECT_EQ(Stored(0).error(),
            "Slurm stopped task 4242_0: TIMEOUT (TimeLimit); the record of the run until then is "
            "kept");
  EXPECT_EQ(store_->Samples(exps_[0].id())->size(), 4u);
  // Signalled by Slurm, its processes fail of it: the same, with what the run said.
  WriteRecord(1, v1::FAILED, "", "leader killed by signal 9");
  // Stopped by its script as the limit neared (SIGUSR1 marked it): the task ends COMPLETED.
  WriteRecord(2, v1::CANCELLED);
  std::ofstream(LimitPath(ArrayDir(), 2)).put('\n');
  slurm_.tasks = {Task(1, "TIMEOUT", "TimeLimit"), Task(2, "COMPLETED")};
  sweeps_->Poll();
  EXPECT_EQ(Stored(1).error(),
            "Slurm stopped task 4242_1: TIMEOUT (TimeLimit) (the run then: leader killed by signal "
            "9); the record of the run until then is kept");
  EXPECT_EQ(Stored(2).state(), v1::FAILED);
  EXPECT_EQ(Stored(2).error(),
            "task 4242_2 stopped its run as its Slurm time limit neared (sbatch --signal); the "
            "record of the run until then is kept");
  EXPECT_FALSE(std::filesystem::exists(LimitPath(ArrayDir(), 2)));
}

// Slurm's cgroup took a worker (OUT_OF_MEMORY) while the task's daemon lived to write its record:
// failed in the words a sweep's skip-after-OOM rule reads.
TEST_F(SlurmSweepsTest, ARunSlurmStoppedForMemoryIsOutOfMemory) {
  PlaceAll();
  WriteRecord(0, v1::FAILED, "", "worker 0 killed by signal 9");
  slurm_.tasks = {Task(0, "OUT_OF_MEMORY"), Task(1, "RUNNING"), Task(2, "RUNNING")};
  sweeps_->Poll();
  EXPECT_EQ(Stored(0).state(), v1::FAILED);
  EXPECT_TRUE(IsOutOfMemory(Stored(0).error())) << Stored(0).error();
  EXPECT_NE(Stored(0).error().find("ran out of memory (OUT_OF_MEMORY)"), std::string::npos);
}

// A sweep cancelled before any task started: one scancel of the array.
TEST_F(SlurmSweepsTest, ACancelBeforeAnyTaskStartedIsOneScancelOfTheArray) {
  PlaceAll();
  slurm_.tasks = {Task(0, "PENDING"), Task(1, "PENDING"), Task(2, "PENDING")};
  sweeps_->Poll();
  for (const auto& e : exps_) ASSERT_TRUE(queue_->Cancel(e.id()).ok());
  sweeps_->Poll();
  EXPECT_EQ(slurm_.cancelled, std::vector<std::string>{"4242"});
  slurm_.tasks = {Task(0, "CANCELLED"), Task(1, "CANCELLED")};  // 2 already forgotten
  EXPECT_EQ(sweeps_->Poll(), 1u);
  EXPECT_EQ(Stored(0).state(), v1::CANCELLED);
  EXPECT_TRUE(queue_->IsLive(exps_[2].id()));
  slurm_.tasks.clear();
  sweeps_->Poll();
  EXPECT_EQ(sweeps_->Poll(), 0u);  // the third answer without it
  for (uint32_t i = 0; i < 3; ++i) EXPECT_EQ(Stored(i).state(), v1::CANCELLED);
  EXPECT_TRUE(Stored(2).error().empty());
}

// A running task that does not stop when asked is cancelled by Slurm outright after the grace;
// its run, killed, fails, and the point still ends cancelled, the run's own words kept.
TEST_F(SlurmSweepsTest, ARunningTaskThatOutstaysItsGraceIsCancelledOutright) {
  Follower(-1);  // no grace
  PlaceAll();
  slurm_.tasks = {Task(0, "RUNNING"), Task(1, "RUNNING"), Task(2, "PENDING")};
  sweeps_->Poll();
  ASSERT_TRUE(queue_->Cancel(exps_[0].id()).ok());
  sweeps_->Poll();
  sweeps_->Poll();
  EXPECT_EQ(slurm_.cancelled, (std::vector<std::string>{"gently 4242_0", "4242_0"}));
  WriteRecord(0, v1::FAILED, "", "leader killed by signal 9");
  slurm_.tasks[0].state = "CANCELLED";
  sweeps_->Poll();
  EXPECT_EQ(Stored(0).state(), v1::CANCELLED);
  EXPECT_EQ(Stored(0).error(), "leader killed by signal 9");
}

}  // namespace
}  // namespace shoal
