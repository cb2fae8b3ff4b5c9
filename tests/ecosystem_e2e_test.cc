// The ecosystem end to end: /metrics of a running two-worker experiment, scraped and parsed by
// prometheus_client's own parser (tests/parse_metrics.py): states, the queue, every process's
// memory labelled; the configuration file; the Python client made from the same proto.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "shoal/v1/shoal.pb.h"
#include "tests/testutil.h"

namespace shoal {
namespace {

using nlohmann::json;
using testing::CommandResult;
using testing::RunCommand;

json Scrape(const std::string& url) {
  const CommandResult r = RunCommand(
      {"/usr/bin/python3", std::string(SHOAL_SOURCE_DIR) + "/tests/parse_metrics.py", url});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return r.exit_code == 0 ? json::parse(r.out) : json::object();
}

double Value(const json& m, const std::string& name, const std::string& label,
             const std::string& value) {
  for (const auto& s : m.value(name, json::array()))
    if (s[0].value(label, "") == value) return s[1].get<double>();
  return -1;
}

// Between experiments, a GPU node's /metrics reads every device now, as dcgm-exporter does: its
// memory, utilisation, power, energy counter and GPM activity (the fake NVML's), and the driver.
TEST(MetricsE2E, AnIdleGpuNodeIsDescribedDeviceByDevice) {
  testing::TempDir dir;
  testing::Daemon d(dir / "state", dir / "s.sock");
  const std::string port = std::to_string(testing::FreeLoopbackPort());
  ASSERT_TRUE(d.Start({"--metrics-listen", "127.0.0.1:" + port},
                      {std::string("SHOAL_NVML_LIBRARY=") + SHOAL_FAKE_NVML,
                       "SHOAL_FAKE_NVML_DEVICES=2", "SHOAL_FAKE_NVML_POWER_W=120"}));
  const std::string url = "http://127.0.0.1:" + port + "/metrics";
  const json first = Scrape(url);  // GPM needs two readings: the first has none
  EXPECT_FALSE(first.contains("shoal_gpu_sm_active_ratio"));
  const json m = Scrape(url);
  for (const std::string gpu : {"0", "1"}) {
    EXPECT_EQ(Value(m, "shoal_gpu_power_watts", "gpu", gpu), 120) << m.dump();
    EXPECT_GT(Value(m, "shoal_gpu_energy_joules_total", "gpu", gpu), 1e6);
    EXPECT_EQ(Value(m, "shoal_gpu_memory_total_bytes", "gpu", gpu), double(80ull << 30));
    EXPECT_EQ(Value(m, "shoal_gpu_memory_used_bytes", "gpu", gpu), double(512ull << 20));
    EXPECT_EQ(Value(m, "shoal_gpu_utilization_percent", "gpu", gpu), 37);
    EXPECT_DOUBLE_EQ(Value(m, "shoal_gpu_sm_active_ratio", "gpu", gpu), 0.615);
    EXPECT_DOUBLE_EQ(Value(m, "shoal_gpu_sm_occupancy_ratio", "gpu", gpu), 0.3325);
    EXPECT_DOUBLE_EQ(Value(m, "shoal_gpu_tensor_active_ratio", "gpu", gpu), 0.125);
    EXPECT_DOUBLE_EQ(Value(m, "shoal_gpu_dram_active_ratio", "gpu", gpu), 0.44);
  }
  EXPECT_EQ(m["shoal_build_info"][0][0].value("nvidia_driver", ""), "999.99-fake");
  // dcgm-exporter's labels: the node's Hostname on every series, each GPU's UUID, model, device.
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  for (const auto& series : m["shoal_gpu_power_watts"]) {
    const json& labels = series[0];
    EXPECT_EQ(labels.value("Hostname", ""), host) << labels.dump();
    EXPECT_EQ(labels.value("UUID", "").rfind("GPU-", 0), 0u) << labels.dump();
    EXPECT_FALSE(labels.value("modelName", "").empty()) << labels.dump();
    EXPECT_EQ(labels.value("device", ""), "nvidia" + labels.value("gpu", "")) << labels.dump();
  }
  EXPECT_EQ(m["shoal_forkserver_up"][0][0].value("Hostname", ""), host);
}

TEST(MetricsE2E, ARunningExperimentsProcessesAreScrapedWithTheirLabels) {
  testing::TempDir dir;
  testing::Daemon d(dir / "state", dir / "s.sock");
  const std::string port = std::to_string(testing::FreeLoopbackPort());
  ASSERT_TRUE(d.Start({"--metrics-listen", "127.0.0.1:" + port}));
  const std::string url = "http://127.0.0.1:" + port + "/metrics";
  const json idle = Scrape(url);
  EXPECT_EQ(Value(idle, "shoal_experiments", "state", "running"), 0);
  EXPECT_FALSE(idle.contains("shoal_process_pss_bytes"));  // nothing runs: no memory to show
  // An idle daemon still describes its node: /dev/shm, the forkserver, what it was built with.
  EXPECT_GT(idle["shoal_shm_free_bytes"][0][1].get<double>(), 0) << idle.dump();
  EXPECT_GE(idle["shoal_shm_total_bytes"][0][1].get<double>(),
            idle["shoal_shm_free_bytes"][0][1].get<double>());
  EXPECT_TRUE(idle.contains("shoal_forkserver_up"));
  EXPECT_TRUE(idle.contains("shoal_forkserver_restarts_total"));
  EXPECT_EQ(idle["shoal_build_info"][0][0].value("libtorch", ""), "1.13.0") << idle.dump();
  EXPECT_GE(idle.size(), 7u);
  const CommandResult sub = d.Cli({"submit", "--workers", "2", "--batches", "100000", "--dataset",
                                   "synthetic", "--eval-samples", "0", "--json"});
  ASSERT_EQ(sub.exit_code, 0) << sub.err;
  const std::string id = testing::Parse(sub)["id"];
  json m;
  ASSERT_TRUE(testing::WaitFor(
      [&] {
        m = Scrape(url);
        return m.value("shoal_process_pss_bytes", json::array()).size() >= 3;
      },
      60));
  EXPECT_EQ(Value(m, "shoal_experiments", "state", "running"), 1);
  EXPECT_EQ(m["shoal_queue_length"][0][1], 0);
  for (const std::string w : {"0", "1"}) {
    EXPECT_GT(Value(m, "shoal_process_pss_bytes", "worker", w), 1e6) << m.dump();
    EXPECT_GT(Value(m, "shoal_process_rss_bytes", "worker", w),
              Value(m, "shoal_process_uss_bytes", "worker", w));
  }
  for (const auto& s : m["shoal_process_pss_bytes"]) {
    EXPECT_EQ(s[0]["experiment"], id);
    EXPECT_EQ(s[0]["kind"], "hogwild");
  }
  EXPECT_GT(Value(m, "shoal_experiment_pss_bytes", "experiment", id), 2e6);
  const CommandResult other = RunCommand({"/usr/bin/python3", "-c",
                                          "import urllib.request,sys\ntry:\n  urllib.request."
                                          "urlopen(sys.argv[1])\nexcept Exception as e:\n  "
                                          "print(getattr(e, 'code', e))",
                                          "http://127.0.0.1:" + port + "/other"});
  EXPECT_EQ(other.out, "404\n");
  EXPECT_EQ(d.Cli({"cancel", id}).exit_code, 0);
}

// An open TCP connection to 127.0.0.1:port that has sent `bytes` and then nothing.
int SilentScraper(const std::string& port, const std::string& bytes) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(std::stoi(port)));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  EXPECT_EQ(::send(fd, bytes.data(), bytes.size(), 0), ssize_t(bytes.size()));
  return fd;
}

// Scrapers that connect and go quiet (or send half a request) hold neither the next scrape nor
// shoald's shutdown.
TEST(MetricsE2E, ASilentScraperHoldsNeitherTheNextScrapeNorTheShutdown) {
  testing::TempDir dir;
  testing::Daemon d(dir / "state", dir / "s.sock");
  const std::string port = std::to_string(testing::FreeLoopbackPort());
  ASSERT_TRUE(d.Start({"--metrics-listen", "127.0.0.1:" + port}));
  const int quiet = SilentScraper(port, ""), half = SilentScraper(port, "GET /metr");
  const CommandResult scrape = RunCommand(
      {"/usr/bin/python3", "-c",
       "import urllib.request,sys\nprint(urllib.request.urlopen(sys.argv[1], timeout=20).status)",
       "http://127.0.0.1:" + port + "/metrics"});
  EXPECT_EQ(scrape.out, "200\n") << scrape.err;
  const CommandResult late =
      RunCommand({"/usr/bin/python3", "-c",
                  "import urllib.request,sys,time\ntime.sleep(3)\n"
                  "print(urllib.request.urlopen(sys.argv[1], timeout=20).status)",
                  "http://127.0.0.1:" + port + "/metrics"});
  EXPECT_EQ(late.out, "200\n") << late.err;  // after the quiet ones' 2 s ran out
  const pid_t pid = d.pid();
  ::kill(pid, SIGTERM);
  EXPECT_TRUE(testing::WaitFor([&] { return !testing::ProcessAlive(pid); }, 15))
      << "shoald did not stop while a scraper was connected";
  for (int fd : {quiet, half}) ::close(fd);
}

// The service unit as systemd reads it: `systemd-analyze verify` (no running systemd needed)
// parses every directive, warning on any it does not know or cannot parse, and checks that
// ExecStart names a runnable file (here the built shoald, for /usr/local/bin's).
TEST(SystemdUnit, EveryDirectiveParsesAndTheDaemonRuns) {
  testing::TempDir dir;
  std::ifstream in(std::string(SHOAL_SOURCE_DIR) + "/deploy/shoald.service");
  std::stringstream text;
  text << in.rdbuf();
  std::string unit = text.str();
  const std::string installed = "/usr/local/bin/shoald";
  ASSERT_NE(unit.find(installed), std::string::npos);
  unit.replace(unit.find(installed), installed.size(), testing::BinDir() + "/shoald");
  std::ofstream(dir / "shoald.service") << unit;
  const CommandResult r =
      RunCommand({"/usr/bin/systemd-analyze", "verify", dir / "shoald.service"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.err, "");  // an unknown key or a bad value is only a warning
}

// gRPC server reflection, read by a client that has no shoal module (tests/reflection_client.py,
// as grpcurl would): it lists the services, describes shoal.v1.Shoal, and calls NodeInfo with
// messages built from the descriptors it was sent.
TEST(ReflectionE2E, AClientWithoutTheProtoListsDescribesAndCallsTheService) {
  testing::TempDir dir;
  testing::Daemon d(dir / "state", dir / "s.sock");
  ASSERT_TRUE(d.Start());
  const CommandResult r =
      RunCommand({"/usr/bin/python3", std::string(SHOAL_SOURCE_DIR) + "/tests/reflection_client.py",
                  testing::BinDir() + "/..", "unix:" + dir / "s.sock"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json out = json::parse(r.out);
  EXPECT_EQ(out["services"],
            json::array({"shoal.v1.Shoal", "grpc.reflection.v1alpha.ServerReflection"}));
  // Every method the compiled-in service has, with its streaming: what reflection sent is whole.
  const auto* svc = v1::ExperimentSpec::descriptor()->file()->FindServiceByName("Shoal");
  ASSERT_NE(svc, nullptr);
  ASSERT_EQ(out["methods"].size(), size_t(svc->method_count()));
  for (int i = 0; i < svc->method_count(); ++i) {
    const auto* m = svc->method(i);
    ASSERT_TRUE(out["methods"].contains(m->name())) << m->name();
    EXPECT_EQ(out["methods"][m->name()]["server_streaming"], m->server_streaming()) << m->name();
    EXPECT_EQ(out["methods"][m->name()]["client_streaming"], m->client_streaming()) << m->name();
  }
  EXPECT_EQ(out["methods"]["Watch"]["server_streaming"], true);
  EXPECT_EQ(out["unknown_error_code"], 5);  // NOT_FOUND
  EXPECT_EQ(out["node_info"]["stateDir"], dir / "state");
}

}  // namespace
}  // namespace shoal

namespace shoal {
namespace {

// deploy/shoald.toml's form: keys are the flags' names; a flag given on the command line wins.
TEST(ConfigE2E, TheFileSetsOptionsAndFlagsOverrideIt) {
  testing::TempDir dir;
  const std::string conf = dir / "shoald.toml";
  std::ofstream(conf) << "# test\nmax-workers = 3\nlog-level = \"warn\"\n";
  for (const auto& [extra, want] : std::vector<std::pair<std::vector<std::string>, int>>{
           {{}, 3}, {{"--max-workers", "5"}, 5}}) {
    testing::Daemon d(dir / "state", dir / "s.sock");
    std::vector<std::string> args = {"--config", conf};
    args.insert(args.end(), extra.begin(), extra.end());
    ASSERT_TRUE(d.Start(args));
    const json node = testing::Parse(d.Cli({"node", "--json"}));
    EXPECT_EQ(node["max_workers"], want);
    d.Stop();
  }
  std::ofstream(conf) << "max-wrokers = 3\n";  // a typo is refused, not ignored
  testing::Daemon bad(dir / "state", dir / "s.sock");
  EXPECT_FALSE(bad.Start({"--config", conf}));
}

// A value shoald would otherwise read as its default, as nothing or as "off" is refused at start,
// naming the option. (`timeout`: were one accepted, the daemon would run on and fail the test.)
TEST(ConfigE2E, EmptyUnknownAndNonFiniteValuesAreRefusedNamingTheOption) {
  testing::TempDir dir;
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--socket", ""}, "--socket: empty"},
      {{"--worker-bin", ""}, "--worker-bin: empty"},
      {{"--metrics-listen", ""}, "--metrics-listen: empty"},
      {{"--log-level", "bogus"}, "--log-level: bogus not in"},
      {{"--sampler-budget", "nan"}, "--sampler-budget: 'nan' is not a plain decimal number"},
      {{"--sampler-budget", "1e999"}, "--sampler-budget: Value 1e999 not in range"},
      {{"--data-root", dir / "none"}, "--data-root: Directory does not exist"},
  };
  for (const auto& [flags, why] : cases) {
    std::vector<std::string> argv = {
        "/usr/bin/timeout", "10",          testing::BinDir() + "/shoald",
        "--state-dir",      dir / "state", "--socket",
        dir / "s.sock"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    const testing::CommandResult r = testing::RunCommand(argv);
    EXPECT_NE(r.exit_code, 0) << flags[0];
    EXPECT_NE(r.exit_code, 124) << flags[0] << ": accepted";
    EXPECT_NE(r.err.find(why), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace shoal
