// Sweeps end to end: a grid on real data fills every cell of the report; a daemon killed mid-sweep
// and restarted finishes it without rerunning finished points; a sweep can be cancelled.
#include <gtest/gtest.h>
#include <signal.h>
#include <zlib.h>

#include <array>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "shared/os/shm.h"
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

class SweepE2E : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(StartDaemon()); }
  bool StartDaemon() {
    daemon_ = std::make_unique<Daemon>(dir_ / "state", dir_ / "s.sock");
    return daemon_->Start({"--grace-ms", "1000"});
  }
  json Sweep(const std::string& id) { return Parse(daemon_->Cli({"get", id, "--json"}))["sweep"]; }
  // The sweep's JSON (`sweep_json`, what sweep --wait --json printed), saved, reports the same
  // Markdown and comparison with no daemon at all (a GPU node's, brought back); a file that is not
  // JSON (the SVG the test wrote) is named.
  void ExpectTheSavedJsonReportsTheSame(const std::string& sweep_json, const std::string& md,
                                        const std::string& cmp) {
    const std::string saved = dir_ / "sweep.json";
    std::ofstream(saved) << sweep_json;
    const std::vector<std::string> offline = {testing::BinDir() + "/shoal", "--socket",
                                              dir_ / "no-daemon.sock", "report", "--from-json"};
    auto run_offline = [&](std::vector<std::string> args) {
      args.insert(args.begin(), offline.begin(), offline.end());
      return testing::RunCommand(args);
    };
    CommandResult from = run_offline({saved});
    EXPECT_EQ(from.exit_code, 0) << from.err;
    EXPECT_EQ(from.out, md);
    CommandResult both = run_offline({"--compare", saved, saved});
    EXPECT_EQ(both.out, cmp) << both.err;
    CommandResult bad = run_offline({dir_ / "m.svg"});
    EXPECT_NE(bad.exit_code, 0);
    EXPECT_EQ(bad.err, "shoal: " + (dir_ / "m.svg") + ": not JSON\n");
  }
  TempDir dir_;
  std::unique_ptr<Daemon> daemon_;
};

// Every table of the 2x2x2 grid (start x share rows, 1 and 2 workers) has a figure in every cell,
// and no table of what was not measured (the GPU's, test accuracy).
void ExpectEveryCellFilled(const json& j) {
  int tables_checked = 0;
  for (const auto& t : j["tables"]) {
    EXPECT_NE(t["key"], "gpu_memory_gib");                   // a CPU-only sweep has no GPU tables
    if (t["key"] == "host_memory_per_worker_gib") continue;  // against memory's: next function
    ASSERT_EQ(t["rows"].size(), 4u) << t["key"];
    EXPECT_EQ(t["columns"], json::array({"1", "2"}));
    EXPECT_EQ(t["row_fields"], json::array({"start", "share"}));
    EXPECT_NE(t["key"], "test_accuracy");  // --eval-samples 0: measured nowhere, so no table
    for (const auto& row : t["rows"]) {
      for (const auto& c : row["cells"]) {
        ASSERT_TRUE(c["value"].is_number()) << t["key"] << " " << row.dump();
        EXPECT_GT(c["value"].get<double>(), 0) << t["key"];
      }
    }
    ++tables_checked;
  }
  EXPECT_EQ(tables_checked, 5);  // memory, the leader's, throughput, ready, loss
  // The leader is one process of every point: less than its point's sum, more than nothing.
  const json* sum = nullptr;
  const json* leader = nullptr;
  for (const auto& t : j["tables"]) {
    if (t["key"] == "host_memory_gib") sum = &t;
    if (t["key"] == "leader_memory_gib") leader = &t;
  }
  ASSERT_TRUE(sum && leader);
  for (size_t r = 0; r < (*sum)["rows"].size(); ++r)
    for (size_t c = 0; c < 2; ++c)
      EXPECT_LT((*leader)["rows"][r]["cells"][c]["value"].get<double>(),
                (*sum)["rows"][r]["cells"][c]["value"].get<double>());
}

// What each extra worker costs, row by row: memory(2) - memory(1), and memory(1) less it.
void ExpectPerWorkerFromTheMemoryTable(const json& j) {
  ASSERT_GE(j["tables"].size(), 2u);
  const json& mem = j["tables"][0];
  const json& per = j["tables"][1];
  ASSERT_EQ(per["key"], "host_memory_per_worker_gib");
  EXPECT_EQ(per["columns"], json::array({"per worker", "fixed"}));
  ASSERT_EQ(per["rows"].size(), mem["rows"].size());
  for (size_t i = 0; i < mem["rows"].size(); ++i) {
    const json &m = mem["rows"][i]["cells"], &p = per["rows"][i]["cells"];
    EXPECT_EQ(per["rows"][i]["labels"], mem["rows"][i]["labels"]);
    const double one = m[0]["value"], two = m[1]["value"];
    EXPECT_GT(p[0]["value"].get<double>(), 0) << "a second worker costs memory";
    EXPECT_DOUBLE_EQ(p[0]["value"].get<double>(), two - one);
    EXPECT_DOUBLE_EQ(p[1]["value"].get<double>(), one - (two - one));
  }
}

// Samples every 50 ms: a point's workers train for about 250 ms, one or two ticks at the default
// 200, and a 2-worker point whose ticks both fell before its workers grew would read no more
// memory than a 1-worker point (the per-worker check below failed once in a full ctest).
TEST_F(SweepE2E, GridOnRealDataFillsEveryCell) {
  CommandResult r = daemon_->Cli({"sweep",
                                  "--workers",
                                  "1,2",
                                  "--start",
                                  "fork,forkserver",
                                  "--share",
                                  "yes,no",
                                  "--device",
                                  "cpu",
                                  "--batches",
                                  "2",
                                  "--batch-size",
                                  "16",
                                  "--eval-samples",
                                  "0",
                                  "--dataset",
                                  kFashion,
                                  "--sample-interval-ms",
                                  "50",
                                  "--wait",
                                  "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  json j = Parse(r);
  const std::string id = j["sweep"]["id"];
  EXPECT_EQ(j["sweep"]["state"], "SUCCEEDED");
  EXPECT_EQ(j["experiments"].size(), 8u);
  ASSERT_NO_FATAL_FAILURE(ExpectEveryCellFilled(j));
  ASSERT_NO_FATAL_FAILURE(ExpectPerWorkerFromTheMemoryTable(j));
  // Listed, reportable in every format.
  json l = Parse(daemon_->Cli({"sweeps", "--json"}));
  ASSERT_EQ(l["sweeps"].size(), 1u);
  EXPECT_EQ(l["sweeps"][0]["id"], id);
  CommandResult md = daemon_->Cli({"report", id});
  EXPECT_EQ(md.exit_code, 0);
  EXPECT_NE(md.out.find("| forkserver | no |"), std::string::npos) << md.out;
  CommandResult csv = daemon_->Cli({"report", id, "--format", "csv"});
  EXPECT_EQ(std::count(csv.out.begin(), csv.out.end(), '\n'), 9);
  CommandResult svg = daemon_->Cli({"report", id, "--format", "svg", "--output", dir_ / "m.svg"});
  EXPECT_EQ(svg.exit_code, 0) << svg.err;
  CommandResult gpu = daemon_->Cli({"report", id, "--format", "svg", "--plot", "gpu-memory"});
  EXPECT_NE(gpu.exit_code, 0);
  EXPECT_NE(gpu.err.find("--plot gpu-memory: sweep " + id + " has no point on a GPU"),
            std::string::npos)
      << gpu.err;
  CommandResult cmp = daemon_->Cli({"report", "--compare", id, id});
  EXPECT_NE(cmp.out.find("| fork | yes | 1.00 | 1.00 |"), std::string::npos) << cmp.out;

  ExpectTheSavedJsonReportsTheSame(r.out, md.out, cmp.out);
}

// --repeats 3 over two points: six real runs, interleaved (every point once, then again), and a
// report whose every cell is the median of its three runs with their range beside it.
TEST_F(SweepE2E, RepeatsRunInterleavedAndTheReportShowsMediansAndSpreads) {
  CommandResult r =
      daemon_->Cli({"sweep", "--workers", "1,2", "--repeats", "3", "--batches", "2", "--batch-size",
                    "16", "--eval-samples", "0", "--dataset", kFashion, "--wait", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = Parse(r);
  const std::string id = j["sweep"]["id"];
  ASSERT_EQ(j["experiments"].size(), 6u);
  // Started in index order, and index i is run i/2 of point i%2.
  int64_t last_start = 0;
  for (int i = 0; i < 6; ++i) {
    const json& e = j["experiments"][i];
    EXPECT_EQ(e["sweep_index"].get<int>(), i);
    const int64_t started = e["started_unix_ms"].get<int64_t>();
    EXPECT_GE(started, last_start) << i;
    last_start = started;
    EXPECT_EQ(j["sweep"]["points"][i]["workers"], i % 2 + 1);
    EXPECT_EQ(j["sweep"]["points"][i]["repeat"].get<int>(), i / 2);
  }
  int checked = 0;
  for (const auto& t : j["tables"]) {
    if (t["key"] != "samples_per_sec" && t["key"] != "host_memory_gib") continue;
    ASSERT_EQ(t["rows"].size(), 1u);
    ASSERT_EQ(t["rows"][0]["cells"].size(), 2u);
    for (const auto& c : t["rows"][0]["cells"]) {
      EXPECT_EQ(c["runs"], 3) << c.dump();
      EXPECT_LE(c["min"].get<double>(), c["value"].get<double>());
      EXPECT_GE(c["max"].get<double>(), c["value"].get<double>());
      EXPECT_GT(c["min"].get<double>(), 0);
      EXPECT_NE(c["text"].get<std::string>().find(" ("), std::string::npos) << c.dump();
    }
    ++checked;
  }
  EXPECT_EQ(checked, 2);
  CommandResult md = daemon_->Cli({"report", id});
  EXPECT_NE(md.out.find("Runs: 3 per point, interleaved"), std::string::npos) << md.out;
  // A sweep against itself: every ratio 1, and the runs overlap.
  CommandResult cmp = daemon_->Cli({"report", "--compare", id, id});
  EXPECT_NE(cmp.out.find("1.00 ~"), std::string::npos) << cmp.out;
  const std::string x3 = j["sweep"]["points"][3]["experiment_id"];
  CommandResult get = daemon_->Cli({"get", x3});
  EXPECT_NE(get.out.find("sweep " + id + ", point 1, run 2 of 3; its runs:"), std::string::npos)
      << get.out;
  EXPECT_NE(get.out.find("  run 3 "), std::string::npos) << get.out;
}

// Admission refuses the largest batch (two workers of batch 4096 need ~57 GiB by its estimate):
// that point is skipped, saying why, and the rest of the sweep runs; the report shows "skipped".
TEST_F(SweepE2E, APointAdmissionRefusesIsSkippedAndTheRestRuns) {
  CommandResult r =
      daemon_->Cli({"sweep", "--batch-size", "16,4096", "--workers", "2", "--batches", "2",
                    "--eval-samples", "0", "--dataset", kFashion, "--wait", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = Parse(r);
  ASSERT_EQ(j["sweep"]["points"].size(), 2u);
  EXPECT_EQ(j["sweep"]["points"][0].value("note", ""), "");
  const std::string note = j["sweep"]["points"][1]["note"];
  EXPECT_EQ(note.rfind("skipped: sweep point 1 (batch_size 4096): does not fit: needs ~", 0), 0u)
      << note;
  EXPECT_EQ(j["experiments"].size(), 1u);  // nothing was started for it
  EXPECT_EQ(j["sweep"]["state"], "SUCCEEDED");
  CommandResult md = daemon_->Cli({"report", j["sweep"]["id"]});
  EXPECT_NE(md.out.find("| skipped [1] |"), std::string::npos) << md.out;
  EXPECT_NE(md.out.find("[1] " + note), std::string::npos) << md.out;
  // Without skipping, the sweep is refused as a whole, as before.
  CommandResult refused = daemon_->Cli({"sweep", "--batch-size", "16,4096", "--workers", "2",
                                        "--no-skip-after-oom", "--dataset", kFashion});
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.err.find("sweep point 1 (batch_size 4096): does not fit"), std::string::npos)
      << refused.err;
}

// --- The HTML report, in a real browser. ---

uint32_t Be32(const std::string& s, size_t at) {
  return uint32_t(uint8_t(s[at])) << 24 | uint32_t(uint8_t(s[at + 1])) << 16 |
         uint32_t(uint8_t(s[at + 2])) << 8 | uint32_t(uint8_t(s[at + 3]));
}

int Paeth(int a, int b, int c) {
  const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
  return pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
}

// The pixels of an 8-bit RGB or RGBA, non-interlaced PNG (what Chromium writes), unfiltered, as
// rows of bytes; empty when it is not such a PNG.
std::vector<std::string> DecodePng(const std::string& png, size_t* channels) {
  if (png.size() < 33 || png.compare(1, 3, "PNG") != 0) return {};
  const uint32_t width = Be32(png, 16), height = Be32(png, 20);
  const int depth = uint8_t(png[24]), color = uint8_t(png[25]), interlace = uint8_t(png[28]);
  if (depth != 8 || (color != 2 && color != 6) || interlace != 0) return {};
  *channels = color == 6 ? 4 : 3;
  std::string idat;
  for (size_t at = 8; at + 8 <= png.size();) {
    const uint32_t len = Be32(png, at);
    if (png.compare(at + 4, 4, "IDAT") == 0) idat += png.substr(at + 8, len);
    at += 12 + len;
  }
  const size_t stride = width * *channels;
  std::string raw((stride + 1) * height, '\0');
  uLongf out = raw.size();
  if (uncompress(reinterpret_cast<Bytef*>(raw.data()), &out,
                 reinterpret_cast<const Bytef*>(idat.data()), idat.size()) != Z_OK)
    return {};
  std::vector<std::string> rows(height, std::string(stride, '\0'));
  for (uint32_t y = 0; y < height; ++y) {
    const int filter = uint8_t(raw[y * (stride + 1)]);
    for (size_t x = 0; x < stride; ++x) {
      const int in = uint8_t(raw[y * (stride + 1) + 1 + x]);
      const int a = x >= *channels ? uint8_t(rows[y][x - *channels]) : 0;
      const int b = y > 0 ? uint8_t(rows[y - 1][x]) : 0;
      const int c = x >= *channels && y > 0 ? uint8_t(rows[y - 1][x - *channels]) : 0;
      const int pred = filter == 1   ? a
                       : filter == 2 ? b
                       : filter == 3 ? (a + b) / 2
                       : filter == 4 ? Paeth(a, b, c)
                                     : 0;
      rows[y][x] = char((in + pred) & 0xff);
    }
  }
  return rows;
}

// The share of pixels that are not white.
double InkedShare(const std::vector<std::string>& rows, size_t channels) {
  size_t inked = 0, all = 0;
  for (const auto& r : rows) {
    for (size_t x = 0; x + channels <= r.size(); x += channels, ++all)
      if (uint8_t(r[x]) < 250 || uint8_t(r[x + 1]) < 250 || uint8_t(r[x + 2]) < 250) ++inked;
  }
  return all == 0 ? 0 : double(inked) / double(all);
}

// The page is whole in itself: no script, no stylesheet, image, font or frame from elsewhere
// (SVG's xmlns names a namespace; nothing fetches it), and every picture has both its axes and
// their labels.
void ExpectSelfContained(const std::string& html) {
  for (const char* outside :
       {"src=", "href=", "url(", "@import", "<script", "<link", "<iframe", "<img", "https://"})
    EXPECT_EQ(html.find(outside), std::string::npos) << outside;
  std::string rest =
      std::regex_replace(html, std::regex("xmlns=\"http://www.w3.org/2000/svg\""), "");
  EXPECT_EQ(rest.find("http://"), std::string::npos);
  size_t svgs = 0;
  for (size_t at = html.find("<svg"); at != std::string::npos; at = html.find("<svg", at + 1)) {
    const std::string svg = html.substr(at, html.find("</svg>", at) - at);
    EXPECT_GE(std::count(svg.begin(), svg.end(), '\n'), 4u);
    EXPECT_NE(svg.find("stroke=\"black\""), std::string::npos) << "axes";
    EXPECT_NE(svg.find("rotate(-90"), std::string::npos) << "the y axis's label";
    ++svgs;
  }
  EXPECT_EQ(svgs, 3u);  // memory, throughput, pareto: a CPU sweep without an optimiser axis
}

TEST_F(SweepE2E, TheHtmlReportIsOnePageABrowserRendersWithNothingElse) {
  CommandResult r =
      daemon_->Cli({"sweep", "--workers", "1,2", "--batches", "2", "--batch-size", "16",
                    "--eval-samples", "0", "--dataset", kFashion, "--wait", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const std::string id = Parse(r)["sweep"]["id"];
  const std::string page = dir_ / "report.html", shot = dir_ / "report.png";
  CommandResult html = daemon_->Cli({"report", id, "--format", "html", "-o", page});
  ASSERT_EQ(html.exit_code, 0) << html.err;
  std::ifstream in(page);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_NO_FATAL_FAILURE(ExpectSelfContained(text));
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const std::string ran_on = "Host: " + std::string(host) + ": ";  // from the records
  for (const char* part :
       {"<h2>Fixed fields</h2>", "<h2>Tables</h2>", "<h2>Node that answered</h2>", "<dt>CPU</dt>",
        "<dt>libtorch</dt>", "<h2>Environment</h2>", "Runs: 1 run per point",
        "Throughput (samples/s, all workers)", ran_on.c_str()})
    EXPECT_NE(text.find(part), std::string::npos) << part;
  // Debian's Chromium, headless, with no way to resolve a name: what it draws came from the file.
  CommandResult browser = testing::RunCommand(
      {"/usr/bin/chromium", "--headless", "--no-sandbox", "--disable-gpu",
       "--disable-background-networking", "--host-resolver-rules=MAP * ~NOTFOUND",
       "--user-data-dir=" + (dir_ / "chromium"), "--window-size=1200,2400", "--screenshot=" + shot,
       "file://" + page});
  ASSERT_EQ(browser.exit_code, 0) << browser.err;
  std::ifstream png_in(shot, std::ios::binary);
  const std::string png((std::istreambuf_iterator<char>(png_in)), std::istreambuf_iterator<char>());
  size_t channels = 0;
  const auto rows = DecodePng(png, &channels);
  ASSERT_EQ(rows.size(), 2400u) << png.size() << " bytes";
  const double inked = InkedShare(rows, channels);
  std::printf("the rendered report: %.1f%% of its pixels inked\n", inked * 100);
  EXPECT_GT(inked, 0.01);  // tables, text and three charts: far from blank
  // A report read back from JSON has no daemon's node, and says so.
  std::ofstream(dir_ / "sweep.json") << r.out;
  CommandResult offline =
      testing::RunCommand({testing::BinDir() + "/shoal", "--socket", dir_ / "none.sock", "report",
                           "--from-json", dir_ / "sweep.json", "--format", "html"});
  ASSERT_EQ(offline.exit_code, 0) << offline.err;
  EXPECT_NE(offline.out.find("Not recorded: this report was read from a saved JSON file"),
            std::string::npos);
}

TEST_F(SweepE2E, KilledDaemonResumesWithoutRerunningFinishedPoints) {
  const std::string id = Parse(daemon_->Cli(
      {"sweep", "--workers", "1,2", "--start", "fork", "--share", "yes,no", "--batches", "6",
       "--batch-size", "8", "--eval-samples", "0", "--dataset", "synthetic", "--json"}))["id"];
  ASSERT_FALSE(id.empty());
  // Wait until at least one point finished and the next one trains.
  json sw;
  ASSERT_TRUE(WaitFor(
      [&] {
        sw = Sweep(id);
        int done = 0, running = 0;
        for (const auto& p : sw["points"]) {
          done += p["state"] == "SUCCEEDED";
          running += p["state"] == "RUNNING";
        }
        return done >= 1 && running == 1;
      },
      120));
  std::map<int, std::string> finished;
  int interrupted_index = -1;
  for (const auto& p : sw["points"]) {
    if (p["state"] == "SUCCEEDED") finished[p["index"]] = p["experiment_id"];
    if (p["state"] == "RUNNING") interrupted_index = p["index"];
  }
  daemon_->Stop(SIGKILL);
  ASSERT_TRUE(StartDaemon());
  ASSERT_TRUE(WaitFor([&] { return Sweep(id)["state"] == "SUCCEEDED"; }, 180)) << Sweep(id).dump(2);
  sw = Sweep(id);
  for (const auto& p : sw["points"]) {
    const int i = p["index"];
    if (finished.count(i)) {
      EXPECT_EQ(p["experiment_id"], finished[i]) << "point " << i << " was run again";
      EXPECT_EQ(p["attempts"], 1);
    }
    if (i == interrupted_index) {
      EXPECT_EQ(p["attempts"], 2);
    }
  }
  // The interrupted attempt stays on record as such.
  json l = Parse(daemon_->Cli({"list", "--json"}));
  int interrupted = 0;
  for (const auto& e : l["experiments"]) interrupted += e["state"] == "INTERRUPTED";
  EXPECT_EQ(interrupted, 1);
  EXPECT_EQ(l["experiments"].size(), 5u);
  // Deleting the sweep deletes that attempt too: no command could remove it once its sweep was
  // gone.
  CommandResult rm = daemon_->Cli({"rm", id});
  EXPECT_EQ(rm.exit_code, 0) << rm.err;
  EXPECT_NE(rm.out.find("(5 experiments)"), std::string::npos) << rm.out;
  EXPECT_EQ(Parse(daemon_->Cli({"list", "--json"})).value("experiments", json::array()).size(), 0u);
}

TEST_F(SweepE2E, CancelStopsTheSweep) {
  const std::string id =
      Parse(daemon_->Cli({"sweep", "--workers", "1,2", "--start", "fork", "--share", "yes",
                          "--batches", "100000", "--dataset", "synthetic", "--json"}))["id"];
  ASSERT_TRUE(WaitFor(
      [&] {
        const json sw = Sweep(id);  // (a range-for over a temporary's member would dangle)
        for (const auto& p : sw["points"])
          if (p["state"] == "RUNNING") return true;
        return false;
      },
      60));
  CommandResult c = daemon_->Cli({"cancel", id, "--json"});
  EXPECT_EQ(c.exit_code, 0) << c.err;
  ASSERT_TRUE(WaitFor([&] { return Sweep(id)["state"] == "CANCELLED"; }, 30)) << Sweep(id).dump(2);
  const json sw = Sweep(id);
  for (const auto& p : sw["points"]) {
    EXPECT_EQ(p["state"], "CANCELLED");
    EXPECT_TRUE(ListSegments(SegmentPrefix(p["experiment_id"])).empty());
  }
}

}  // namespace
}  // namespace shoal
