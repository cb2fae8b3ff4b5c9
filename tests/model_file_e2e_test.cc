// A user's TorchScript model end to end: the real CLI uploads it, the real shoald stores it and
// starts the leader and workers, which train it under every start method; a sweep takes model
// files as an axis; every bad file, input and upload is refused or failed with what is wrong,
// the daemon serving after each and nothing left in /dev/shm or the blob directory.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>

#include "shared/os/shm.h"
#include "shoal/v1/shoal.grpc.pb.h"
#include "tests/testutil.h"

namespace shoal {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::CommandResult;
using testing::Daemon;
using testing::Parse;
using testing::TempDir;

// One model of tests/models/make_models.py and how to train it.
struct UserModel {
  std::string file, input, loss, classes;
  std::vector<std::string> optimiser;  // flags
};

const std::vector<UserModel>& Models() {
  static const std::vector<UserModel> models = {
      {"mlp", "float32[B,64]", "cross_entropy", "10", {"--lr", "0.05"}},
      {"cnn", "float32[B,3,16,16]", "cross_entropy", "10", {"--lr", "0.02"}},
      {"encoder", "int64[B,6]:100", "cross_entropy", "5", {"--optimizer", "adam", "--lr", "0.003"}},
      {"own_loss", "float32[B,20]", "output", "4", {"--lr", "0.2"}},
  };
  return models;
}

class ModelFileE2E : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string error;
    models_ = new std::string(testing::MadeModels({{"make_models.py"}}, &error));
    ASSERT_FALSE(models_->empty()) << error;
  }
  static void TearDownTestSuite() { delete models_; }
  void SetUp() override {
    daemon_ = std::make_unique<Daemon>(dir_ / "state", dir_ / "s.sock");
    ASSERT_TRUE(
        daemon_->Start({"--grace-ms", "1000", "--max-upload-mb", "1", "--upload-grace-s", "0"}));
  }
  static std::string Model(const std::string& name) { return *models_ + "/" + name + ".pt"; }
  std::vector<std::string> Submit(const UserModel& m, const std::string& start) {
    std::vector<std::string> args = {
        "submit",    "--model-file", Model(m.file), "--input", m.input,   "--loss", m.loss,
        "--classes", m.classes,      "--workers",   "2",       "--start", start,    "--batch-size",
        "16",        "--batches",    "25",          "--wait",  "--json"};
    args.insert(args.end(), m.optimiser.begin(), m.optimiser.end());
    return args;
  }
  // What the blob directory holds, partial uploads included.
  std::vector<std::string> Blobs() const {
    std::vector<std::string> out;
    std::error_code ec;
    for (fs::directory_iterator it(dir_ / "state/blobs", ec), end; !ec && it != end; ++it)
      out.push_back(it->path().filename().string());
    return out;
  }
  // The daemon still answers, and nothing of experiment `id` is in /dev/shm.
  void ServesWithNothingLeft(const std::string& id) {
    EXPECT_EQ(daemon_->Cli({"list"}).exit_code, 0);
    if (!id.empty()) {
      EXPECT_TRUE(ListSegments(SegmentPrefix(id)).empty()) << id;
    }
  }
  static std::string* models_;
  TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
};
std::string* ModelFileE2E::models_ = nullptr;

void ExpectTrained(const json& e, const std::string& what, uint64_t steps = 50) {
  ASSERT_EQ(e["state"], "SUCCEEDED") << what << ": " << e["error"];
  const json& r = e["result"];
  EXPECT_EQ(r["steps"].get<uint64_t>(), steps) << what;
  std::printf("%s: loss %.4f -> %.4f\n", what.c_str(), r["first_loss"].get<double>(),
              r["last_loss"].get<double>());
  EXPECT_LT(r["last_loss"].get<double>(), r["first_loss"].get<double>()) << what;
  EXPECT_GT(r["samples_per_sec"].get<double>(), 0) << what;
  EXPECT_GT(r["peak_pss_sum_bytes"].get<double>(), 0) << what;
  EXPECT_GT(r["model_step_bytes"].get<double>(), 0) << what;  // the leader's probe
  EXPECT_TRUE(r["test_accuracy"].is_null()) << what;          // no test set: absent, not 0
  // What its warm-up and steps were held to: no --step-timeout-ms, so the probe's bound.
  EXPECT_GE(r["step_bound_ms"].get<double>(), 5000) << what;
  EXPECT_EQ(r["step_bound_why"].get<std::string>().rfind("derived from the leader's probe", 0), 0u)
      << what;
  EXPECT_EQ(e["spec"]["model"], "torchscript");
  EXPECT_EQ(e["model_file"]["ref"], e["spec"]["model_file"]);
  EXPECT_GT(e["model_file"]["size_bytes"].get<double>(), 0);
  for (const auto& p : e["processes"]) EXPECT_FALSE(testing::ProcessAlive(p["pid"].get<int>()));
  EXPECT_TRUE(ListSegments(SegmentPrefix(e["id"].get<std::string>())).empty()) << what;
}

TEST_F(ModelFileE2E, EachModelTrainsUnderEveryStartMethod) {
  for (const UserModel& m : Models()) {
    for (const std::string start : {"fork", "spawn", "forkserver"}) {
      CommandResult r = daemon_->Cli(Submit(m, start));
      ASSERT_EQ(r.exit_code, 0) << m.file << " " << start << ": " << r.err << r.out;
      const json e = Parse(r);
      ExpectTrained(e, m.file + " " + start);
      EXPECT_EQ(e["model_file"]["name"], m.file + ".pt");
      EXPECT_EQ(e["spec"]["start"], start);
    }
  }
  EXPECT_EQ(Blobs().size(), 2 * Models().size());  // each file once (and its name), however used
}

// Under spawn and the forkserver no worker inherits the leader's module: once the file is
// checked, probed and in the segments the leader execs shoal-leader on the same pid, so while
// the workers train it maps no LibTorch; the probe's figures, its bound and the weights it laid
// out (the fork leader's, checksum for checksum) come through the hand-off.
TEST_F(ModelFileE2E, UnderSpawnAndTheForkServerTheLeaderHandsOffToShoalLeader) {
  const UserModel& cnn = Models()[1];
  std::map<std::string, json> runs;
  for (const std::string start : {"fork", "spawn", "forkserver"}) {
    std::vector<std::string> args = Submit(cnn, start);
    args.erase(std::find(args.begin(), args.end(), "--wait"));
    // Long enough that the leader is still there to be read once a worker shows: 25 batches
    // ended before the maps were read on a fast machine.
    *(std::find(args.begin(), args.end(), "--batches") + 1) = "400";
    const std::string id = Parse(daemon_->Cli(args))["id"];
    pid_t leader = -1;
    ASSERT_TRUE(testing::WaitFor(
        [&] {  // a worker started: the leader has prepared (and handed off, where it does)
          const json e = Parse(daemon_->Cli({"get", id, "--json"}));
          bool worker = false;
          for (const auto& p : e["processes"]) {
            if (p["role"] == "leader") leader = p["pid"].get<int>();
            worker = worker || p["role"] == "worker";
          }
          return (worker && leader > 0) || e["state"] == "FAILED";
        },
        60));
    std::ifstream in("/proc/" + std::to_string(leader) + "/maps");
    const std::string maps((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    ASSERT_NE(maps.find("[stack]"), std::string::npos) << start << ": leader gone before read";
    EXPECT_EQ(maps.find("libtorch") == std::string::npos, start != "fork") << start;
    ASSERT_TRUE(testing::WaitFor(
        [&] {
          runs[start] = Parse(daemon_->Cli({"get", id, "--json"}));
          return runs[start]["state"] != "RUNNING" && runs[start]["state"] != "QUEUED";
        },
        120));
    ExpectTrained(runs[start], "cnn " + start, 2 * 400);
  }
  EXPECT_EQ(runs["fork"]["result"]["leader_program"], "shoal-worker");
  for (const std::string start : {"spawn", "forkserver"}) {
    const json& r = runs[start]["result"];
    EXPECT_EQ(r["leader_program"], "shoal-worker, then shoal-leader") << start;
    EXPECT_EQ(r["leader_why"],
              "the leader loads and probes the model file, then execs shoal-leader: no worker "
              "inherits the model");
    EXPECT_EQ(r["initial_weights_checksum"], runs["fork"]["result"]["initial_weights_checksum"]);
    EXPECT_EQ(r["weights_bytes"], runs["fork"]["result"]["weights_bytes"]);
    // Its peak is the one before the exec (LibTorch loaded, the probe run), which it read and
    // reported itself: more than shoal-leader alone ever holds.
    EXPECT_GT(r["leader_peak_pss_bytes"].get<double>(), 40.0 * (1 << 20)) << start;
    const auto it = std::find_if(runs[start]["processes"].begin(), runs[start]["processes"].end(),
                                 [](const json& p) { return p["role"] == "leader"; });
    ASSERT_NE(it, runs[start]["processes"].end());
    EXPECT_GT((*it)["peak_rss_bytes"].get<double>(), 40.0 * (1 << 20)) << start;  // VmHWM, kept
  }
}

TEST_F(ModelFileE2E, DataParallelReplicasStayIdentical) {
  const UserModel& cnn = Models()[1];
  std::vector<std::string> args = Submit(cnn, "spawn");
  args.insert(args.begin() + 1, {"--kind", "data_parallel"});
  CommandResult r = daemon_->Cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json e = Parse(r);
  ExpectTrained(e, "data_parallel");
  EXPECT_EQ(e["result"]["data_parallel"]["replicas_identical"], true);
  EXPECT_EQ(e["spec"]["share"], false);
  // A frozen backbone: only the trained head's gradients are averaged (a hook on a frozen
  // parameter would throw).
  UserModel partly = Models()[0];
  partly.file = "partly_frozen";
  std::vector<std::string> head = Submit(partly, "fork");
  head.insert(head.begin() + 1, {"--kind", "data_parallel"});
  CommandResult h = daemon_->Cli(head);
  ASSERT_EQ(h.exit_code, 0) << h.err << h.out;
  const json p = Parse(h);
  ExpectTrained(p, "data_parallel, frozen backbone");
  EXPECT_EQ(p["result"]["data_parallel"]["replicas_identical"], true);
  EXPECT_EQ(p["result"]["data_parallel"]["parameters"].get<uint64_t>(), 32u * 10 + 10);
}

TEST_F(ModelFileE2E, ASweepTakesModelFilesAsAnAxis) {
  const std::string two = Model("mlp") + "," + Model("mlp_wide");
  CommandResult r = daemon_->Cli({"sweep", "--model-file", two, "--input", "float32[B,64]",
                                  "--classes", "10", "--workers", "1,2", "--batches", "10",
                                  "--batch-size", "16", "--wait", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = Parse(r);
  ASSERT_EQ(j["experiments"].size(), 4u);
  std::set<std::string> labels;  // how a row names each file: its name and its hash's start
  for (const auto& e : j["experiments"]) {
    EXPECT_EQ(e["state"], "SUCCEEDED") << e["error"];
    const std::string ref = e["spec"]["model_file"];
    labels.insert("| " + e["model_file"]["name"].get<std::string>() + " (" + ref.substr(0, 15) +
                  ") |");
  }
  EXPECT_EQ(labels.size(), 2u);
  CommandResult md = daemon_->Cli({"report", j["sweep"]["id"].get<std::string>()});
  ASSERT_EQ(md.exit_code, 0) << md.err;
  for (const auto& label : labels) EXPECT_NE(md.out.find(label), std::string::npos) << md.out;
  EXPECT_NE(md.out.find("| mlp_wide.pt (sha256:"), std::string::npos) << md.out;
}

// --memory-format channels_last trains the same model in NHWC order. One worker and the same
// seed: the first loss is the contiguous run's (the same weights, the same batch), the last near
// it; shared weights under the forkserver and data_parallel's replicas under spawn train too.
TEST_F(ModelFileE2E, ChannelsLastTrainsTheSameModel) {
  const UserModel cnn = {
      "cnn_exact", "float32[B,3,16,16]", "cross_entropy", "10", {"--lr", "0.02"}};
  CommandResult r = daemon_->Cli({"sweep", "--model-file", Model(cnn.file), "--input", cnn.input,
                                  "--classes", "10", "--lr", "0.02", "--workers", "1",
                                  "--memory-format", "contiguous,channels_last", "--batches", "20",
                                  "--batch-size", "16", "--wait", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  std::map<std::string, json> runs;
  const json sweep = Parse(r);
  for (const auto& e : sweep["experiments"]) {
    ASSERT_EQ(e["state"], "SUCCEEDED") << e["error"];
    runs[e["spec"]["memory_format"].get<std::string>()] = e["result"];
  }
  ASSERT_EQ(runs.size(), 2u);
  const json &nchw = runs["contiguous"], &nhwc = runs["channels_last"];
  std::printf("loss NCHW %.5f -> %.5f, NHWC %.5f -> %.5f\n", nchw["first_loss"].get<double>(),
              nchw["last_loss"].get<double>(), nhwc["first_loss"].get<double>(),
              nhwc["last_loss"].get<double>());
  EXPECT_NEAR(nhwc["first_loss"].get<double>(), nchw["first_loss"].get<double>(), 1e-4);
  EXPECT_NEAR(nhwc["last_loss"].get<double>(), nchw["last_loss"].get<double>(),
              0.02 * nchw["last_loss"].get<double>());
  std::vector<std::string> shared = Submit(cnn, "forkserver");
  shared.insert(shared.end(), {"--memory-format", "channels_last"});
  CommandResult h = daemon_->Cli(shared);
  ASSERT_EQ(h.exit_code, 0) << h.err << h.out;
  const json hogwild = Parse(h);
  ExpectTrained(hogwild, "channels_last, shared, forkserver");
  const CommandResult got = daemon_->Cli({"get", hogwild["id"].get<std::string>()});
  EXPECT_NE(got.out.find("  input       float32[B,3,16,16], loss cross_entropy, 10 classes, "
                         "channels_last, one step "),
            std::string::npos)
      << got.out;
  std::vector<std::string> dp = Submit(cnn, "spawn");
  dp.insert(dp.begin() + 1, {"--kind", "data_parallel"});
  dp.insert(dp.end(), {"--memory-format", "channels_last"});
  CommandResult d = daemon_->Cli(dp);
  ASSERT_EQ(d.exit_code, 0) << d.err << d.out;
  const json e = Parse(d);
  ExpectTrained(e, "channels_last, data_parallel");
  EXPECT_EQ(e["result"]["data_parallel"]["replicas_identical"], true);
}

// --autocast bfloat16 runs where the CPU has bfloat16 instructions and is refused, naming why,
// where LibTorch would emulate them (this daemon reads the same /proc/cpuinfo).
TEST_F(ModelFileE2E, BfloatAutocastRunsOnlyOnACpuThatHasIt) {
  std::ifstream in("/proc/cpuinfo");
  const std::string cpuinfo((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const bool has_bf16 = cpuinfo.find(" avx512_bf16") != std::string::npos ||
                        cpuinfo.find(" amx_bf16") != std::string::npos;
  const UserModel cnn = {
      "cnn_exact", "float32[B,3,16,16]", "cross_entropy", "10", {"--lr", "0.02"}};
  std::vector<std::string> args = Submit(cnn, "fork");
  args.insert(args.end(), {"--autocast", "bfloat16"});
  CommandResult r = daemon_->Cli(args);
  if (has_bf16) {
    ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
    ExpectTrained(Parse(r), "autocast bfloat16");
  } else {
    EXPECT_NE(r.exit_code, 0) << r.out;
    EXPECT_NE(r.err.find("autocast: bfloat16 on this node's CPU is emulated, not run: its flags "
                         "name neither avx512_bf16 nor amx_bf16"),
              std::string::npos)
        << r.err;
  }
}

// Submits `args` and returns the failed experiment's error (the CLI exits non-zero).
std::string FailedWith(const Daemon& d, const std::vector<std::string>& args, std::string* id) {
  CommandResult r = d.Cli(args);
  EXPECT_NE(r.exit_code, 0) << r.out;
  const json e = Parse(r);
  if (e.is_object() && e.contains("id")) {
    *id = e["id"];
    EXPECT_EQ(e["state"], "FAILED");
    return e["error"].get<std::string>();
  }
  return r.err;
}

TEST_F(ModelFileE2E, BadFilesAndInputsFailNamingTheProblem) {
  std::ofstream(dir_ / "garbage.pt") << std::string(5000, 'g');
  {
    std::ifstream in(Model("cnn"), std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    std::ofstream(dir_ / "truncated.pt", std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  }
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--model-file", dir_ / "garbage.pt", "--input", "float32[B,64]", "--classes", "10"},
       "not a TorchScript archive"},
      {{"--model-file", dir_ / "truncated.pt", "--input", "float32[B,3,16,16]", "--classes", "10"},
       "not a TorchScript archive"},
      {{"--model-file", Model("mlp"), "--input", "float32[B,3,16,16]", "--classes", "10"},
       "forward refused the inputs"},
      {{"--model-file", Model("mlp"), "--input", "float32[B,64]", "--classes", "7"},
       "returned [16,10]"},
      {{"--model-file", Model("frozen"), "--input", "float32[B,64]", "--classes", "10"},
       "no trainable parameter"},
  };
  for (const auto& [flags, why] : cases) {
    std::vector<std::string> args = {"submit", "--batch-size", "16", "--workers", "2"};
    args.insert(args.end(), flags.begin(), flags.end());
    args.insert(args.end(), {"--wait", "--json"});
    std::string id;
    const std::string error = FailedWith(*daemon_, args, &id);
    EXPECT_NE(error.find(why), std::string::npos) << why << ": " << error;
    ServesWithNothingLeft(id);
  }
  // Refused before anything starts: no file uploaded, or more than --max-upload-mb.
  std::ofstream(dir_ / "big.pt") << std::string(1536 << 10, 'b');
  CommandResult big = daemon_->Cli(
      {"submit", "--model-file", dir_ / "big.pt", "--input", "float32[B,64]", "--classes", "10"});
  EXPECT_NE(big.exit_code, 0);
  EXPECT_NE(big.err.find("at most 1 MiB"), std::string::npos) << big.err;
  CommandResult unknown = daemon_->Cli({"submit", "--model-file", "sha256:" + std::string(64, 'e'),
                                        "--input", "float32[B,64]", "--classes", "10"});
  EXPECT_NE(unknown.err.find("is not stored on this daemon"), std::string::npos) << unknown.err;
  CommandResult missing = daemon_->Cli({"submit", "--model-file", dir_ / "nothing.pt", "--input",
                                        "float32[B,64]", "--classes", "10"});
  EXPECT_NE(missing.err.find("nothing.pt: cannot be read"), std::string::npos) << missing.err;
  ServesWithNothingLeft("");
  for (const auto& f : Blobs()) EXPECT_NE(f.rfind(".part-", 0), 0u) << f;
}

// Hostile and broken models (tests/models/make_hostile.py): each stage of the leader is bounded
// in time and memory, so a forward that never returns, one that allocates without bound, a NaN
// loss, and a graph of thousands of tiny tensors that TorchScript takes minutes to optimise all
// fail naming the stage and the cause, quickly, with nothing left; the queue behind them moves.
TEST_F(ModelFileE2E, HostileModelsFailNamingTheStageAndTheQueueMoves) {
  TempDir hostile;
  auto made = testing::RunModelScript("make_hostile.py", {hostile.path()});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"forever", "the leader's probe of the model ran past its bound of 1.0"},
      {"hoarder", "model_file: the leader's probe of the model passed its memory bound of"},
      {"nan", "gave a loss of nan"},
      {"many_tiny", "the leader's probe of the model ran past its bound of 1.0"},
  };
  for (const auto& [name, why] : cases) {
    const auto t0 = std::chrono::steady_clock::now();
    std::string id;
    const std::string error =
        FailedWith(*daemon_,
                   {"submit", "--model-file", hostile / (name + ".pt"), "--input", "float32[B,8]",
                    "--classes", "10", "--workers", "2", "--batch-size", "4", "--step-timeout-ms",
                    "1000", "--wait", "--json"},
                   &id);
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s: failed after %.1f s: %s\n", name.c_str(), took, error.substr(0, 160).c_str());
    EXPECT_NE(error.find(why), std::string::npos) << name << ": " << error;
    EXPECT_LT(took, 60) << name;
    ServesWithNothingLeft(id);
  }
  // A forward that returns in the leader's probe, then never in a worker's warm-up or in a later
  // step, with no --step-timeout-ms: the bound the leader derives from its probe (its floor, for
  // a step of microseconds) ends it, not the 30-minute default.
  constexpr double kFloorS = 5;  // worker/model_file.h's kStepBoundFloorMs
  // The bound is the floor unless the probe's passes took over 50 ms (a loaded machine).
  const std::vector<std::pair<std::string, std::string>> later = {
      {"warm_up_forever", "model_file: worker 0's warm-up of the model ran past its bound of "},
      {"step_forever", " ms (derived from the leader's probe: "},
  };
  for (const auto& [name, why] : later) {
    const auto t0 = std::chrono::steady_clock::now();
    std::string id;
    const std::string error = FailedWith(
        *daemon_,
        {"submit", "--model-file", hostile / (name + ".pt"), "--input", "float32[B,8]", "--classes",
         "10", "--workers", "1", "--start", "spawn", "--batch-size", "4", "--wait", "--json"},
        &id);
    const double took =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%s: failed after %.1f s: %s\n", name.c_str(), took, error.substr(0, 220).c_str());
    EXPECT_NE(error.find(why), std::string::npos) << name << ": " << error;
    EXPECT_GE(took, kFloorS) << name;
    EXPECT_LT(took, 60) << name;
    ServesWithNothingLeft(id);
  }
  // A forward that never returns, queued ahead of a good run: the good run still runs.
  CommandResult queued =
      daemon_->Cli({"submit", "--model-file", hostile / "forever.pt", "--input", "float32[B,8]",
                    "--classes", "10", "--step-timeout-ms", "1000", "--json"});
  ASSERT_EQ(queued.exit_code, 0) << queued.err;
  std::vector<std::string> good = Submit(Models()[0], "fork");
  CommandResult after = daemon_->Cli(good);
  ASSERT_EQ(after.exit_code, 0) << after.err << after.out;
  ExpectTrained(Parse(after), "mlp queued behind a forward that never returns");
}

TEST_F(ModelFileE2E, AnUploadCutHalfwayLeavesNoFile) {
  auto channel =
      grpc::CreateChannel("unix:" + daemon_->socket(), grpc::InsecureChannelCredentials());
  auto stub = v1::Shoal::NewStub(channel);
  grpc::ClientContext ctx;
  v1::StoredFile out;
  auto writer = stub->Upload(&ctx, &out);
  v1::UploadChunk chunk;
  chunk.set_name("half.pt");
  chunk.set_size(100000);
  chunk.set_data(std::string(50000, 'h'));
  ASSERT_TRUE(writer->Write(chunk));
  ASSERT_TRUE(testing::WaitFor([&] { return Blobs().size() == 1; }, 10));  // being written
  ctx.TryCancel();
  writer->Finish();
  EXPECT_TRUE(testing::WaitFor([&] { return Blobs().empty(); }, 10));
  ServesWithNothingLeft("");
}

// --dataset FILE.pt: the user's own tensors, uploaded like the model, checked against --input.
TEST_F(ModelFileE2E, ADataSetOfTheUsersOwnTrainsAndAWrongOneIsNamed) {
  const UserModel& m = Models()[0];
  std::vector<std::string> args = Submit(m, "spawn");
  args.insert(args.begin() + 1, {"--dataset", *models_ + "/mlp_data.pt"});
  CommandResult r = daemon_->Cli(args);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  const json e = Parse(r);
  ExpectTrained(e, "mlp on its own data");
  EXPECT_EQ(e["dataset_file"]["name"], "mlp_data.pt");
  EXPECT_EQ(e["dataset_file"]["ref"], e["spec"]["dataset"]);
  EXPECT_EQ(e["result"]["data_bytes"].get<double>() > 256 * 64 * 4, true);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"state_dict.pt", "LibTorch cannot read it: isGenericDict()"},  // an OrderedDict
      {"mlp.pt", "Unpickler found unknown type __torch__.Mlp"},       // a model, not tensors
  };
  for (const auto& [file, why] : bad) {
    std::vector<std::string> a = Submit(m, "fork");
    a.insert(a.begin() + 1, {"--dataset", *models_ + "/" + file});
    std::string id;
    const std::string error = FailedWith(*daemon_, a, &id);
    EXPECT_NE(error.find(why), std::string::npos) << file << ": " << error;
    ServesWithNothingLeft(id);
  }
  std::vector<std::string> wrong = Submit(m, "fork");  // its inputs are [256, 32]
  wrong.insert(wrong.begin() + 1, {"--dataset", *models_ + "/mlp_data_wrong.pt"});
  std::string id;
  const std::string error = FailedWith(*daemon_, wrong, &id);
  EXPECT_NE(error.find("input 0 is [256,32] Float; float32[B,64] with 256 samples wants "
                       "[256,64], batch first"),
            std::string::npos)
      << error;
  ServesWithNothingLeft(id);
}

// Each upload in progress holds a descriptor and a partial file: the ninth at once is refused,
// and the eight ended leave nothing.
TEST_F(ModelFileE2E, EightUploadsAtOnceAndNoMore) {
  auto stub = v1::Shoal::NewStub(
      grpc::CreateChannel("unix:" + daemon_->socket(), grpc::InsecureChannelCredentials()));
  struct Open {
    grpc::ClientContext ctx;
    v1::StoredFile out;
    std::unique_ptr<grpc::ClientWriter<v1::UploadChunk>> writer;
  };
  std::vector<std::unique_ptr<Open>> open;
  v1::UploadChunk chunk;
  chunk.set_name("part.pt");
  chunk.set_size(1000);
  chunk.set_data("x");
  for (int i = 0; i < 8; ++i) {
    open.push_back(std::make_unique<Open>());
    open.back()->writer = stub->Upload(&open.back()->ctx, &open.back()->out);
    ASSERT_TRUE(open.back()->writer->Write(chunk)) << i;
  }
  ASSERT_TRUE(testing::WaitFor([&] { return Blobs().size() == 8; }, 10));
  Open ninth;
  ninth.writer = stub->Upload(&ninth.ctx, &ninth.out);
  ninth.writer->Write(chunk);
  ninth.writer->WritesDone();
  const grpc::Status refused = ninth.writer->Finish();
  EXPECT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(refused.error_message().find("8 uploads are in progress"), std::string::npos)
      << refused.error_message();
  for (auto& o : open) {
    o->ctx.TryCancel();
    o->writer->Finish();
  }
  EXPECT_TRUE(testing::WaitFor([&] { return Blobs().empty(); }, 10));
  ServesWithNothingLeft("");
}

TEST_F(ModelFileE2E, RmRemovesAFileNoRecordUses) {
  const UserModel& m = Models()[3];
  CommandResult r = daemon_->Cli(Submit(m, "fork"));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string id = Parse(r)["id"];
  EXPECT_EQ(Blobs().size(), 2u);
  ASSERT_EQ(daemon_->Cli({"rm", id}).exit_code, 0);
  EXPECT_TRUE(Blobs().empty());
}

// --optimizer-in-backward yes: a model of 64 MiB of weights trains as well, and no worker holds
// its gradients: the run's peak PSS sum is lower by at least half the weights (the gradients are
// as large; a worker frees each as it is stepped), and the step's optimiser time is reported.
TEST(ModelFileInBackwardE2E, TheGradientsAreNeverHeldAndTheModelStillTrains) {
  TempDir dir;
  const std::string file = dir / "wide.pt";
  const CommandResult made = testing::RunCommand(
      {"/usr/bin/python3", "-W", "ignore", "-c",
       "import sys, torch; torch.manual_seed(0); torch.jit.script(torch.nn.Sequential("
       "torch.nn.Linear(4096, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, "
       "10))).save(sys.argv[1])",
       file});
  ASSERT_EQ(made.exit_code, 0) << made.err;
  Daemon daemon(dir / "state", dir / "s.sock");
  ASSERT_TRUE(daemon.Start());
  std::map<std::string, json> runs;
  for (const std::string in_backward : {"no", "yes"}) {
    const CommandResult r = daemon.Cli({"submit",
                                        "--model-file",
                                        file,
                                        "--input",
                                        "float32[B,4096]",
                                        "--classes",
                                        "10",
                                        "--workers",
                                        "2",
                                        "--start",
                                        "spawn",
                                        "--batch-size",
                                        "8",
                                        "--batches",
                                        "15",
                                        "--lr",
                                        "0.01",
                                        "--optimizer-in-backward",
                                        in_backward,
                                        "--wait",
                                        "--json"});
    ASSERT_EQ(r.exit_code, 0) << in_backward << ": " << r.err << r.out;
    runs[in_backward] = Parse(r);
    ASSERT_EQ(runs[in_backward]["state"], "SUCCEEDED") << runs[in_backward]["error"];
    EXPECT_EQ(runs[in_backward]["spec"]["optimizer"]["in_backward"], in_backward == "yes");
  }
  const json &plain = runs["no"]["result"], &within = runs["yes"]["result"];
  const double weights = within["weights_bytes"].get<double>();
  const double saved =
      plain["peak_pss_sum_bytes"].get<double>() - within["peak_pss_sum_bytes"].get<double>();
  std::printf("weights %.1f MiB; peak PSS sum %.1f -> %.1f MiB; loss %.4f -> %.4f\n",
              weights / 1048576, plain["peak_pss_sum_bytes"].get<double>() / 1048576,
              within["peak_pss_sum_bytes"].get<double>() / 1048576,
              within["first_loss"].get<double>(), within["last_loss"].get<double>());
  EXPECT_GT(weights, 60.0 * 1048576);
  EXPECT_GT(saved, 0.5 * weights);
  EXPECT_LT(within["last_loss"].get<double>(), within["first_loss"].get<double>());
  EXPECT_GT(within["optimizer_ms"].get<double>(), 0);
}

}  // namespace
}  // namespace shoal
