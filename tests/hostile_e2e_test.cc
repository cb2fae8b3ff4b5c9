// Hostile input against the real shoald: over a thousand malformed requests (bytes that are not
// protobuf, oversized and control-character strings, bad ids, unknown fields, huge grids, bad
// page arguments, broken and escaping data sets made by the test). Every one must get the right
// code; afterwards the daemon serves, its RSS is back within a bound, `list` and `sweeps` work,
// and nothing was started, stored or left behind.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>

#include "shared/os/shm.h"
#include "shoal/v1/shoal.grpc.pb.h"
#include "tests/testutil.h"

namespace shoal {
namespace {

using testing::Daemon;
using testing::TempDir;
using Code = grpc::StatusCode;

const std::vector<std::string> kMethods = {
    "Submit",   "Get",        "List",        "Cancel",     "Watch",  "NodeInfo", "SubmitSweep",
    "GetSweep", "ListSweeps", "CancelSweep", "GetSamples", "Delete", "Prune"};

uint64_t RssKb(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6));
  return 0;
}

class HostileE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir_ / "data");
    daemon_ = std::make_unique<Daemon>(dir_ / "state", dir_ / "s.sock");
    ASSERT_TRUE(
        daemon_->Start({"--data-root", dir_ / "data", "--data-root", "/usr/share/datasets"}));
    channel_ = grpc::CreateChannel("unix:" + dir_ / "s.sock", grpc::InsecureChannelCredentials());
    stub_ = v1::Shoal::NewStub(channel_);
    generic_ = std::make_unique<grpc::GenericStub>(channel_);
  }

  // One call of `method` (of shoal.v1.Shoal, or a full "/pkg.Service/Method") with `bytes` as its
  // request, whatever they are; the response's bytes in `out`.
  grpc::Status Raw(const std::string& method, const std::string& bytes,
                   std::string* out = nullptr) {
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    grpc::Slice slice(bytes);
    grpc::ByteBuffer req(&slice, 1), resp;
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    grpc::Status status;
    const std::string path = method[0] == '/' ? method : "/shoal.v1.Shoal/" + method;
    generic_->UnaryCall(&ctx, path, grpc::StubOptions(), &req, &resp, [&](grpc::Status st) {
      std::lock_guard<std::mutex> l(mu);
      status = std::move(st);
      done = true;
      cv.notify_one();
    });
    std::unique_lock<std::mutex> l(mu);
    cv.wait(l, [&] { return done; });
    std::vector<grpc::Slice> slices;
    if (out != nullptr && status.ok() && resp.Dump(&slices).ok())
      for (const auto& sl : slices)
        out->append(reinterpret_cast<const char*>(sl.begin()), sl.size());
    return status;
  }

  // Sends a request and checks its code; counts it.
  void Expect(const std::string& method, const google::protobuf::Message& m, Code want,
              const std::string& what) {
    Check(method, m.SerializeAsString(), want, what);
  }
  void Check(const std::string& method, const std::string& bytes, Code want,
             const std::string& what) {
    const grpc::Status st = Raw(method, bytes);
    ++sent_;
    EXPECT_EQ(st.error_code(), want) << method << " with " << what << ": " << st.error_message();
    EXPECT_LT(st.error_message().size(), 1100u) << method << " with " << what;
  }

  void WriteGz(const std::string& path, const std::vector<uint8_t>& b) {
    gzFile f = gzopen(path.c_str(), "wb");
    gzwrite(f, b.data(), unsigned(b.size()));
    gzclose(f);
  }
  static std::vector<uint8_t> Idx(std::vector<uint32_t> dims, uint8_t label) {
    std::vector<uint8_t> b = {0, 0, 0x08, uint8_t(dims.size())};
    size_t n = 1;
    for (uint32_t d : dims) {
      for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t(d >> s));
      n *= d;
    }
    b.resize(b.size() + n, label);
    return b;
  }
  // A data set under the data root: images (n x side x side), labels (m, all `label`).
  std::string MakeSet(const std::string& name, uint32_t n, uint32_t m, uint32_t side,
                      uint8_t label) {
    const std::string d = dir_ / ("data/" + name);
    std::filesystem::create_directories(d);
    WriteGz(d + "/train-images-idx3-ubyte.gz", Idx({n, side, side}, 0));
    WriteGz(d + "/train-labels-idx1-ubyte.gz", Idx({m}, label));
    return d;
  }

  // The kinds of hostile request, each sent many times and checked.
  void SendGarbage();
  void SendBadStrings();
  void SendBadIds();
  void SendUnknownFields();
  void SendBadGrids();
  void SendBadPages();
  void SendBadDataSets();

  TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Shoal::Stub> stub_;
  std::unique_ptr<grpc::GenericStub> generic_;
  int sent_ = 0;
};

v1::SubmitRequest SubmitWith(const std::function<void(v1::ExperimentSpec*)>& set) {
  v1::SubmitRequest r;
  r.mutable_spec()->set_dataset("synthetic");
  set(r.mutable_spec());
  return r;
}

// Bytes that are not a message of the method.
void HostileE2E::SendGarbage() {
  std::mt19937 rng(7);
  for (const auto& m : kMethods) {
    for (int i = 0; i < 60; ++i) {
      std::string junk(1 + rng() % 200, '\0');
      for (auto& c : junk) c = char(rng());
      junk[0] = char(0xff);  // field 31, wire type 7: never valid
      Check(m, junk, Code::INVALID_ARGUMENT, "garbage bytes");
    }
  }
}

// Oversized strings and control characters in every string field of a spec.
void HostileE2E::SendBadStrings() {
  const std::vector<std::function<void(v1::ExperimentSpec*, const std::string&)>> fields = {
      [](auto* s, auto& v) { s->set_kind(v); },
      [](auto* s, auto& v) { s->set_model(v); },
      [](auto* s, auto& v) { s->set_dataset(v); },
      [](auto* s, auto& v) { s->set_start(v); },
      [](auto* s, auto& v) { s->set_device(v); },
      [](auto* s, auto& v) { s->set_allocator(v); },
      [](auto* s, auto& v) { s->set_name(v); },
      [](auto* s, auto& v) { s->mutable_optimizer()->set_name(v); }};
  for (const auto& set : fields) {
    for (size_t n : {size_t(4097), size_t(65536), size_t(1) << 20})
      Expect("Submit", SubmitWith([&](auto* s) { set(s, std::string(n, 'a')); }),
             Code::INVALID_ARGUMENT, std::to_string(n) + " bytes");
    for (char c : {'\0', '\1', '\n', '\x1b', '\x7f'})
      Expect("Submit", SubmitWith([&](auto* s) { set(s, std::string("fork") + c); }),
             Code::INVALID_ARGUMENT, "a control character");
  }
}

// Bad ids, for every method that takes one.
void HostileE2E::SendBadIds() {
  const std::vector<std::string> ids = {"",
                                        "x",
                                        std::string("x0123456789\0", 12),
                                        std::string(8000, 'x'),
                                        std::string(1 << 20, 's'),
                                        "../../etc/passwd",
                                        "X0123456789",
                                        "x0123456789 ",
                                        "s01234567890",
                                        "\xff\xfe"};
  for (const auto& id : ids) {
    v1::GetRequest g;
    g.set_id(id);
    for (const char* m : {"Get", "GetSweep", "GetSamples", "Cancel", "CancelSweep", "Delete"})
      Check(m, g.SerializeAsString(), Code::INVALID_ARGUMENT, "a bad id");
    v1::WatchRequest w;
    w.set_id(id);
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    auto reader = stub_->Watch(&ctx, w);
    v1::WatchEvent ev;
    EXPECT_FALSE(reader->Read(&ev));
    EXPECT_EQ(reader->Finish().error_code(), Code::INVALID_ARGUMENT);
    ++sent_;
  }
}

// Unknown fields are dropped, not echoed: a well-formed unknown id is NOT_FOUND.
void HostileE2E::SendUnknownFields() {
  for (int i = 0; i < 100; ++i) {
    v1::GetRequest g;
    g.set_id("x00000000" + std::to_string(10 + i % 90));
    std::string bytes = g.SerializeAsString();
    bytes += std::string("\xfa\x3e", 2);  // field 1007, length-delimited
    const std::string blob(100 + i * 1000, 'u');
    for (size_t v = blob.size();; v >>= 7) {  // varint length
      bytes += char((v & 0x7f) | (v >= 0x80 ? 0x80 : 0));
      if (v < 0x80) break;
    }
    bytes += blob;
    Check("Get", bytes, Code::NOT_FOUND, "unknown fields");
  }
}

// Huge and malformed grids.
void HostileE2E::SendBadGrids() {
  for (int i = 0; i < 40; ++i) {
    v1::SubmitSweepRequest r;
    r.mutable_spec()->mutable_base()->set_dataset("synthetic");
    for (const char* f : {"batch_size", "lr", "seed"}) {
      auto* a = r.mutable_spec()->add_axes();
      a->set_field(f);
      for (int v = 1; v <= 20 + i; ++v) a->add_values(std::to_string(v));
    }
    Expect("SubmitSweep", r, Code::INVALID_ARGUMENT, "a grid of 8000+ points");
  }
  for (int i = 0; i < 10; ++i) {
    v1::SubmitSweepRequest r;
    auto* a = r.mutable_spec()->add_axes();
    a->set_field(i % 2 ? std::string(1000, 'f') : "batch_size");
    for (int v = 0; v < 300; ++v) a->add_values("1");
    Expect("SubmitSweep", r, Code::INVALID_ARGUMENT, "an axis of 300 values");
  }
}

// Page arguments.
void HostileE2E::SendBadPages() {
  for (uint32_t size : {0u, 1001u, 1u << 31}) {
    v1::ListRequest r;
    r.set_page_size(size);
    Expect("List", r, Code::INVALID_ARGUMENT, "page size " + std::to_string(size));
    Expect("ListSweeps", r, Code::INVALID_ARGUMENT, "page size " + std::to_string(size));
  }
  for (const std::string& tok :
       std::vector<std::string>{"garbage", "-1.x", std::string(100, '9'), std::string("1.\0", 3)}) {
    v1::ListRequest r;
    r.set_page_token(tok);
    Expect("List", r, Code::INVALID_ARGUMENT, "a bad page token");
  }
}

// Broken data sets, and one that escapes the data root through a per-file symlink.
void HostileE2E::SendBadDataSets() {
  std::map<std::string, std::string> sets = {{"no images", MakeSet("empty", 0, 0, 28, 0)},
                                             {"count mismatch", MakeSet("mismatch", 10, 9, 28, 0)},
                                             {"labels above 9", MakeSet("labels", 10, 10, 28, 12)},
                                             {"32x32 images", MakeSet("big", 10, 10, 32, 0)}};
  const std::string escape = MakeSet("escape", 10, 10, 28, 0);
  std::filesystem::remove(escape + "/train-labels-idx1-ubyte.gz");
  std::filesystem::create_symlink("/etc/passwd", escape + "/train-labels-idx1-ubyte.gz");
  sets["a symlink to /etc/passwd"] = escape;
  const std::string cut = MakeSet("cut", 100, 100, 28, 0);
  std::filesystem::resize_file(cut + "/train-images-idx3-ubyte.gz", 200);
  sets["a cut gzip stream"] = cut;
  const std::string bomb = MakeSet("bomb", 1, 1, 28, 0);
  auto head = Idx({1, 28, 28}, 0);
  head[5] = 0x10;  // 1 M images claimed by a tiny file
  WriteGz(bomb + "/train-images-idx3-ubyte.gz", head);
  sets["a header promising 822 MB"] = bomb;
  sets["outside the data roots"] = "/tmp";
  for (const auto& [what, path] : sets)
    Expect("Submit", SubmitWith([&](auto* s) { s->set_dataset(path); }), Code::INVALID_ARGUMENT,
           what);
}

// The parent of each process.
std::map<pid_t, pid_t> Parents() {
  std::map<pid_t, pid_t> out;
  for (const auto& proc : std::filesystem::directory_iterator("/proc")) {
    const std::string name = proc.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;  // not a process
    std::ifstream stat(proc.path() / "stat");
    std::string text((std::istreambuf_iterator<char>(stat)), {});
    const size_t close = text.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(text.substr(close + 2));
    char state = 0;
    pid_t ppid = 0;
    if (rest >> state >> ppid) out[pid_t(std::atoi(name.c_str()))] = ppid;
  }
  return out;
}

// Whether `pid` is `root` or below it.
bool Below(pid_t pid, pid_t root, const std::map<pid_t, pid_t>& parents) {
  for (int depth = 0; pid > 1 && depth < 64; ++depth) {
    if (pid == root) return true;
    auto it = parents.find(pid);
    if (it == parents.end()) return false;
    pid = it->second;
  }
  return false;
}

// Shoal's segments new since `before` that no process outside the daemon's tree maps: left
// behind by the daemon (mapped by it or by nobody). Under ctest -j2 another test's run holds
// segments of its own meanwhile, mapped by its processes while it runs.
std::vector<std::string> LeftBehind(const std::vector<std::string>& before, pid_t daemon) {
  const auto parents = Parents();
  std::vector<std::string> out;
  for (const std::string& name : ListSegments("shoal.")) {
    if (std::find(before.begin(), before.end(), name) != before.end()) continue;
    bool elsewhere = false;
    for (const auto& [pid, ppid] : parents) {
      if (Below(pid, daemon, parents)) continue;
      std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
      for (std::string line; !elsewhere && std::getline(maps, line);)
        elsewhere = line.find("/dev/shm/" + name) != std::string::npos;
      if (elsewhere) break;
    }
    if (!elsewhere) out.push_back(name);
  }
  return out;
}

TEST_F(HostileE2E, AThousandHostileRequestsGetTheRightCodeAndLeaveNothing) {
  const std::vector<std::string> segments_before = ListSegments("shoal.");
  // Warm the daemon's allocator and gRPC before the baseline.
  ASSERT_EQ(Raw("NodeInfo", "").error_code(), Code::OK);
  ASSERT_EQ(Raw("List", "").error_code(), Code::OK);
  const uint64_t rss_before = RssKb(daemon_->pid());
  ASSERT_GT(rss_before, 0u) << "the daemon's VmRSS could not be read";

  SendGarbage();
  SendBadStrings();
  SendBadIds();
  SendUnknownFields();
  SendBadGrids();
  SendBadPages();
  SendBadDataSets();
  // A request over gRPC's 4 MB limit.
  Expect("Submit", SubmitWith([](auto* s) { s->set_name(std::string(5 << 20, 'n')); }),
         Code::RESOURCE_EXHAUSTED, "a 5 MB request");

  std::printf("hostile requests sent: %d\n", sent_);
  EXPECT_GE(sent_, 1000);
  // Still serving, listings work, nothing started or stored, nothing left behind.
  ASSERT_EQ(Raw("NodeInfo", "").error_code(), Code::OK);
  const auto list = daemon_->Cli({"list", "--json"});
  EXPECT_EQ(list.exit_code, 0) << list.err;
  EXPECT_EQ(testing::Parse(list).value("experiments", nlohmann::json::array()).size(), 0u);
  EXPECT_EQ(daemon_->Cli({"sweeps"}).exit_code, 0);
  EXPECT_EQ(LeftBehind(segments_before, daemon_->pid()), std::vector<std::string>{});
  const uint64_t rss_after = RssKb(daemon_->pid());
  ASSERT_GT(rss_after, 0u) << "the daemon's VmRSS could not be read";
  std::printf("daemon RSS: %lu kB before, %lu kB after\n", rss_before, rss_after);
  EXPECT_LT(rss_after, rss_before + 64 * 1024)
      << "RSS grew by " << (rss_after - rss_before) << " kB";
}

// Unknown fields never reach the store: a submit carrying 1 MB of them stores a small record.
// The standard grpc.health.v1 service, for stock probes: the whole server ("") and shoal.v1.Shoal
// are SERVING (HealthCheckResponse{status: SERVING} is the two bytes 08 01); an unknown service is
// NOT_FOUND.
TEST_F(HostileE2E, TheStandardHealthServiceSaysServing) {
  for (const std::string service : {"", "shoal.v1.Shoal"}) {
    std::string req, resp;
    if (!service.empty()) req = std::string("\x0a") + char(service.size()) + service;
    const grpc::Status st = Raw("/grpc.health.v1.Health/Check", req, &resp);
    ASSERT_TRUE(st.ok()) << service << ": " << st.error_message();
    EXPECT_EQ(resp, std::string("\x08\x01", 2)) << service;
  }
  EXPECT_EQ(Raw("/grpc.health.v1.Health/Check", std::string("\x0a\x03"
                                                            "abc"))
                .error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(HostileE2E, UnknownFieldsAreNotStored) {
  v1::SubmitRequest r = SubmitWith([](auto* s) {
    s->set_batches(1);
    s->set_eval_samples(0);
  });
  std::string bytes = r.SerializeAsString();
  bytes += std::string("\xfa\x3e", 2);
  const size_t n = 1 << 20;
  bytes += char(0x80 | (n & 0x7f));
  bytes += char(0x80 | ((n >> 7) & 0x7f));
  bytes += char(n >> 14);
  bytes += std::string(n, 'u');
  v1::SubmitRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  grpc::ClientContext ctx;
  v1::SubmitResponse resp;
  ASSERT_TRUE(stub_->Submit(&ctx, parsed, &resp).ok());
  grpc::ClientContext get_ctx;
  v1::GetRequest g;
  g.set_id(resp.id());
  v1::Experiment e;
  ASSERT_TRUE(stub_->Get(&get_ctx, g, &e).ok());
  EXPECT_LT(e.ByteSizeLong(), 16u * 1024);
  EXPECT_TRUE(e.spec().GetReflection()->GetUnknownFields(e.spec()).empty());
  (void)daemon_->Cli({"cancel", resp.id()});
}

int Threads(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  return -1;
}

// Watch streams cost no thread each, and beyond --max-watchers they are refused.
TEST(WatchersE2E, StreamsCostNoThreadAndTheCapHolds) {
  TempDir dir;
  Daemon daemon(dir / "state", dir / "s.sock");
  ASSERT_TRUE(daemon.Start({"--max-watchers", "200"}));
  const auto sub =
      daemon.Cli({"submit", "--batches", "100000", "--dataset", "synthetic", "--json"});
  const std::string id = testing::Parse(sub)["id"];
  auto channel = grpc::CreateChannel("unix:" + dir / "s.sock", grpc::InsecureChannelCredentials());
  auto stub = v1::Shoal::NewStub(channel);
  const int threads_before = Threads(daemon.pid());
  struct Stream {
    grpc::ClientContext ctx;
    std::unique_ptr<grpc::ClientReader<v1::WatchEvent>> reader;
  };
  std::vector<std::unique_ptr<Stream>> streams;
  v1::WatchRequest req;
  req.set_id(id);
  for (int i = 0; i < 200; ++i) {
    auto s = std::make_unique<Stream>();
    s->reader = stub->Watch(&s->ctx, req);
    v1::WatchEvent first;
    ASSERT_TRUE(s->reader->Read(&first)) << "stream " << i;
    streams.push_back(std::move(s));
  }
  const int threads_with = Threads(daemon.pid());
  std::printf("daemon threads: %d before, %d with 200 watchers\n", threads_before, threads_with);
  EXPECT_LT(threads_with, threads_before + 20);
  {
    grpc::ClientContext ctx;
    auto extra = stub->Watch(&ctx, req);
    v1::WatchEvent ev;
    EXPECT_FALSE(extra->Read(&ev));
    EXPECT_EQ(extra->Finish().error_code(), Code::RESOURCE_EXHAUSTED);
  }
  // Cancelling the experiment ends every stream.
  EXPECT_EQ(daemon.Cli({"cancel", id}).exit_code, 0);
  for (auto& s : streams) {
    v1::WatchEvent ev;
    while (s->reader->Read(&ev)) {
    }
    EXPECT_TRUE(s->reader->Finish().ok());
  }
}

// shoald --max-queued bounds the queue: a sweep with more points than room is refused whole,
// naming the cap, and nothing of it is kept.
TEST(QueueE2E, ASweepBeyondMaxQueuedIsRefusedWhole) {
  TempDir dir;
  Daemon daemon(dir / "state", dir / "s.sock");
  ASSERT_TRUE(daemon.Start({"--max-queued", "2"}));
  auto sweep = [&](const std::string& workers) {
    return daemon.Cli(
        {"sweep", "--batches", "100000", "--dataset", "synthetic", "--json", "--workers", workers});
  };
  auto refused = sweep("1,2,3");
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("over shoald's --max-queued 2"), std::string::npos) << refused.err;
  EXPECT_EQ(testing::Parse(daemon.Cli({"list", "--json"}))["experiments"].size(), 0u);
  EXPECT_EQ(testing::Parse(daemon.Cli({"sweeps", "--json"}))["sweeps"].size(), 0u);
  auto taken = sweep("1,2");
  ASSERT_EQ(taken.exit_code, 0) << taken.err;
  const std::string id = testing::Parse(taken)["id"];
  EXPECT_EQ(daemon.Cli({"cancel", id}).exit_code, 0);
}

// Watches cancelled at once, before or while the daemon reads the request, for unknown, bad and
// ended ids: the call finishes once (a second Finish would abort the daemon) and it keeps serving.
TEST(WatchersE2E, WatchesCancelledAtOnceLeaveTheDaemonServing) {
  TempDir dir;
  Daemon daemon(dir / "state", dir / "s.sock");
  ASSERT_TRUE(daemon.Start());
  auto channel = grpc::CreateChannel("unix:" + dir / "s.sock", grpc::InsecureChannelCredentials());
  auto stub = v1::Shoal::NewStub(channel);
  for (int i = 0; i < 300; ++i) {
    grpc::ClientContext ctx;
    v1::WatchRequest req;
    req.set_id(i % 3 == 0 ? "x0123456789" : i % 3 == 1 ? "bad" : "x00000000ff");
    auto reader = stub->Watch(&ctx, req);
    if (i % 2 == 0) std::this_thread::sleep_for(std::chrono::microseconds(i * 7 % 500));
    ctx.TryCancel();
    v1::WatchEvent ev;
    while (reader->Read(&ev)) {
    }
    (void)reader->Finish();
  }
  grpc::ClientContext ctx;
  v1::NodeInfoResponse info;
  EXPECT_TRUE(stub->NodeInfo(&ctx, {}, &info).ok());
  EXPECT_TRUE(testing::ProcessAlive(daemon.pid()));
}

}  // namespace
}  // namespace shoal
