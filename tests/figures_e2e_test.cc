// Shoal's figures against an independent reading: a reader written here, not in the project,
// walks /proc/<pid>/smaps_rollup of every process of the experiment's process group every 50 ms
// and keeps the peak of the summed PSS; Shoal's peak of the sum must agree within 2%.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <thread>

#include "tests/testutil.h"

namespace shoal {
namespace {

using nlohmann::json;
using testing::CommandResult;
using testing::Daemon;
using testing::TempDir;
using testing::WaitFor;

using testing::kFashion;
using testing::Parse;

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// The process group of /proc/<pid>/stat (field 5, after the parenthesised name).
pid_t GroupOf(const std::string& pid) {
  const std::string stat = Slurp("/proc/" + pid + "/stat");
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream rest(stat.substr(close + 2));
  std::string state;
  long ppid = 0, pgrp = 0;
  rest >> state >> ppid >> pgrp;
  return state == "Z" ? -1 : pid_t(pgrp);
}

uint64_t PssKb(const std::string& pid) {
  std::istringstream in(Slurp("/proc/" + pid + "/smaps_rollup"));
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("Pss:", 0) == 0) return std::stoull(line.substr(4));
  return 0;
}

// Sums the PSS of every live process of the group, every 50 ms, until stopped.
class IndependentReader {
 public:
  explicit IndependentReader(pid_t pgid) : pgid_(pgid), thread_([this] { Loop(); }) {}
  ~IndependentReader() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  uint64_t peak_bytes() const { return peak_kb_ * 1024; }
  int reads() const { return reads_; }

 private:
  void Loop() {
    while (!stop_) {
      uint64_t sum = 0;
      DIR* d = ::opendir("/proc");
      while (dirent* e = d ? ::readdir(d) : nullptr) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        if (GroupOf(e->d_name) == pgid_) sum += PssKb(e->d_name);
      }
      if (d) ::closedir(d);
      peak_kb_ = std::max<uint64_t>(peak_kb_, sum);
      ++reads_;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  pid_t pgid_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> peak_kb_{0};
  std::atomic<int> reads_{0};
  std::thread thread_;
};

class FiguresE2E : public ::testing::TestWithParam<std::tuple<int, const char*>> {
 protected:
  void SetUp() override {
    daemon_ = std::make_unique<Daemon>(dir_ / "state", dir_ / "s.sock");
    ASSERT_TRUE(daemon_->Start());
  }
  void ExpectSamplesReadBack(const std::string& id, int workers, double peak);
  TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
};

// `get --samples` gives the run's kept samples back: every worker in them, no total above the
// peak the result reports, and the SVG draws each process.
void FiguresE2E::ExpectSamplesReadBack(const std::string& id, int workers, double peak) {
  const json kept = Parse(daemon_->Cli({"get", id, "--samples", "--format", "json"}));
  ASSERT_TRUE(kept["samples"].is_array()) << kept.dump();
  ASSERT_GE(kept["samples"].size(), 2u);
  std::set<std::string> seen;
  double last_t = -1;
  for (const auto& s : kept["samples"]) {
    EXPECT_LE(s["total_pss_bytes"].get<double>(), peak);
    EXPECT_GT(s["t_ms"].get<double>(), last_t);
    last_t = s["t_ms"].get<double>();
    for (const auto& p : s["processes"])
      if (p["role"] == "worker") seen.insert(std::to_string(p["index"].get<int>()));
  }
  EXPECT_EQ(seen.size(), size_t(workers));
  const auto svg = daemon_->Cli({"get", id, "--samples", "--format", "svg"});
  ASSERT_EQ(svg.exit_code, 0) << svg.err;
  for (int w = 0; w < workers; ++w)
    EXPECT_NE(svg.out.find("<title>worker " + std::to_string(w) + "</title>"), std::string::npos);
}

TEST_P(FiguresE2E, PeakPssSumAgreesWithAnIndependentReader) {
  const auto [workers, start] = GetParam();
  const std::string id = Parse(
      daemon_->Cli({"submit", "--workers", std::to_string(workers), "--start", start, "--batches",
                    "8", "--dataset", kFashion, "--eval-samples", "0", "--json"}))["id"];
  ASSERT_FALSE(id.empty());
  pid_t leader = -1;
  ASSERT_TRUE(WaitFor(
      [&] {
        const json e = Parse(daemon_->Cli({"get", id, "--json"}));
        for (const auto& p : e["processes"])
          if (p["role"] == "leader") leader = p["pid"].get<int>();
        return leader > 0;
      },
      30));
  IndependentReader reader(leader);  // the leader leads the experiment's process group
  json e;
  ASSERT_TRUE(WaitFor(
      [&] {
        e = Parse(daemon_->Cli({"get", id, "--json"}));
        return e["state"] != "RUNNING" && e["state"] != "QUEUED";
      },
      180));
  reader.Stop();
  ASSERT_EQ(e["state"], "SUCCEEDED") << e["error"];
  const double shoal = e["result"]["peak_pss_sum_bytes"].get<double>();
  const double independent = double(reader.peak_bytes());
  ASSERT_GT(reader.reads(), 20);
  std::printf("peak PSS sum, %d workers %s: Shoal %.1f MiB, independent %.1f MiB, ratio %.4f\n",
              workers, start, shoal / (1 << 20), independent / (1 << 20), shoal / independent);
  EXPECT_NEAR(shoal / independent, 1.0, 0.02)
      << "Shoal " << shoal / (1 << 20) << " MiB, independent reader " << independent / (1 << 20)
      << " MiB over " << reader.reads() << " reads";
  // The sum of each process's own peak is at least the peak of the sum.
  EXPECT_GE(e["result"]["sum_of_peak_pss_bytes"].get<double>(), shoal * 0.999);
  ExpectSamplesReadBack(id, workers, shoal);
}

// Two workers spawned and four forked: each start method, each count (the full 2 x 2 grid cost
// 65 s of CI's 25 minutes for what these two cover).
INSTANTIATE_TEST_SUITE_P(Workers, FiguresE2E,
                         ::testing::Values(std::make_tuple(2, "spawn"),
                                           std::make_tuple(4, "fork")));

}  // namespace
}  // namespace shoal
