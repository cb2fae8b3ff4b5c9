#include "shared/report.h"

#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <sstream>

#include "shared/sweep.h"

namespace shoal {
namespace {

v1::SweepSpec Spec(std::vector<uint32_t> workers, std::vector<std::string> starts,
                   std::vector<bool> shares, std::vector<std::string> devices) {
  v1::SweepSpec s;
  s.mutable_base()->set_dataset("synthetic");
  for (auto w : workers) s.add_workers(w);
  for (auto& x : starts) s.add_start(x);
  for (bool b : shares) s.add_share(b);
  for (auto& d : devices) s.add_device(d);
  return s;
}

TEST(GridTest, CartesianProductInStableOrder) {
  auto g = ExpandGrid(Spec({1, 2}, {"fork", "spawn"}, {true, false}, {"cpu"}), SpecLimits{});
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_EQ(g->size(), 8u);
  const char* want[] = {"fork/1/1",  "fork/1/2",  "fork/0/1",  "fork/0/2",
                        "spawn/1/1", "spawn/1/2", "spawn/0/1", "spawn/0/2"};
  for (size_t i = 0; i < 8; ++i) {
    const auto& p = (*g)[i].point;
    EXPECT_EQ(p.index(), i);
    EXPECT_EQ(p.start() + "/" + std::to_string(p.share()) + "/" + std::to_string(p.workers()),
              want[i]);
    EXPECT_EQ((*g)[i].spec.workers(), p.workers());
    EXPECT_EQ((*g)[i].spec.threads(), std::max(1u, SpecLimits{}.cores / p.workers()));
  }
}

TEST(GridTest, GpuPointsAreExplainedNotRun) {
  auto g = ExpandGrid(Spec({1}, {"fork", "spawn"}, {true}, {"cpu", "cuda"}), SpecLimits{});
  ASSERT_TRUE(g.ok());
  ASSERT_EQ(g->size(), 4u);
  EXPECT_TRUE((*g)[0].point.note().empty());
  EXPECT_EQ((*g)[1].point.note().rfind("impossible: fork + cuda + shared weights", 0), 0u);
  EXPECT_EQ((*g)[3].point.note().rfind("no GPU", 0), 0u);
}

TEST(GridTest, BadValuesRefuseTheSweep) {
  EXPECT_NE(ExpandGrid(Spec({1, 100}, {"fork"}, {true}, {"cpu"}), SpecLimits{})
                .status()
                .message()
                .find("workers: 100"),
            std::string::npos);
  EXPECT_NE(ExpandGrid(Spec({1}, {"vfork"}, {true}, {"cpu"}), SpecLimits{})
                .status()
                .message()
                .find("start: 'vfork'"),
            std::string::npos);
  EXPECT_NE(ExpandGrid(Spec({1, 1}, {"fork"}, {true}, {"cpu"}), SpecLimits{})
                .status()
                .message()
                .find("listed twice"),
            std::string::npos);
  std::vector<uint32_t> many;
  for (uint32_t i = 1; i <= 100; ++i) many.push_back(i);
  SpecLimits wide;
  wide.max_workers = 1000;
  EXPECT_NE(
      ExpandGrid(Spec(many, {"fork", "spawn", "forkserver"}, {true, false}, {"cpu", "cuda"}), wide)
          .status()
          .message()
          .find("at most 1000"),
      std::string::npos);
}

// A sweep of 2 x 2 x 1 x 2 with made-up results.
ReportInput Input() {
  ReportInput in;
  auto g = ExpandGrid(Spec({1, 2}, {"fork", "spawn"}, {true}, {"cpu", "cuda"}), SpecLimits{});
  in.sweep.set_id("sTEST");
  *in.sweep.mutable_spec() = Spec({1, 2}, {"fork", "spawn"}, {true}, {"cpu", "cuda"});
  int k = 0;
  for (auto& gp : *g) {
    auto* p = in.sweep.add_points();
    *p = gp.point;
    if (!p->note().empty()) continue;
    v1::Experiment e;
    e.set_id("x" + std::to_string(k));
    *e.mutable_spec() = gp.spec;
    e.set_state(k == 3 ? v1::FAILED : v1::SUCCEEDED);
    auto* r = e.mutable_result();
    r->set_peak_pss_sum_bytes(uint64_t(k + 1) << 30);
    r->set_samples_per_sec(100.0 + k);
    r->set_start_ms(10.0 * (k + 1));
    if (k == 0) r->set_test_accuracy(0.5);
    p->set_experiment_id(e.id());
    p->set_state(e.state());
    in.experiments[e.id()] = e;
    ++k;
  }
  in.sweep.set_state(SweepState(in.sweep, false));
  return in;
}

TEST(ReportTest, MarkdownTablesInThePublishedLayout) {
  const std::string md = RenderMarkdown(Input());
  const std::string host =
      "## Host memory: peak sum of PSS over all processes (GiB)\n\n"
      "| start | share | device | 1 | 2 |\n"
      "| --- | --- | --- | --- | --- |\n"
      "| fork | yes | CPU | 1.00 | 2.00 |\n"
      "| fork | yes | GPU | - [1] | - [1] |\n"
      "| spawn | yes | CPU | 3.00 | failed |\n"
      "| spawn | yes | GPU | n/a [2] | n/a [2] |\n"
      "\n[1] impossible: fork + cuda + shared weights (a forked child cannot use the CUDA context "
      "of its parent)\n"
      "\n[2] no GPU: this shoald runs CPU experiments only\n";
  EXPECT_NE(md.find(host), std::string::npos) << md;
  EXPECT_NE(md.find("| spawn | yes | CPU | 102.0 | failed |"), std::string::npos) << md;
  EXPECT_NE(md.find("| fork | yes | CPU | 10 | 20 |"), std::string::npos) << md;
  // GPU tables hold the GPU rows only, never a zero.
  const auto gpu =
      md.substr(md.find("## GPU memory"), md.find("## GPU utilisation") - md.find("## GPU memory"));
  EXPECT_EQ(gpu.find("| CPU |"), std::string::npos);
  EXPECT_EQ(gpu.find("0.00"), std::string::npos);
  EXPECT_EQ(SweepState(Input().sweep, false), v1::FAILED);
}

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

TEST(ReportTest, CsvCarriesEveryFigureOfEveryPoint) {
  const ReportInput in = Input();
  std::istringstream csv(RenderCsv(in));
  std::string line;
  std::getline(csv, line);
  const auto header = SplitCsv(line);
  // Every Result field is a column.
  const auto* d = v1::Result::descriptor();
  for (int i = 0; i < d->field_count(); ++i) {
    EXPECT_NE(std::find(header.begin(), header.end(), d->field(i)->name()), header.end())
        << d->field(i)->name();
  }
  auto col = [&](const std::string& name) {
    return std::find(header.begin(), header.end(), name) - header.begin();
  };
  int rows = 0;
  while (std::getline(csv, line)) {
    const auto f = SplitCsv(line);
    ASSERT_EQ(f.size(), header.size()) << line;
    const auto& p = in.sweep.points(rows);
    EXPECT_EQ(f[col("workers")], std::to_string(p.workers()));
    EXPECT_EQ(f[col("note")], p.note());  // notes hold commas: quoted and back
    if (!p.experiment_id().empty()) {
      const auto& r = in.experiments.at(p.experiment_id()).result();
      EXPECT_EQ(std::stoull(f[col("peak_pss_sum_bytes")]), r.peak_pss_sum_bytes());
      EXPECT_DOUBLE_EQ(std::stod(f[col("samples_per_sec")]), r.samples_per_sec());
      EXPECT_EQ(f[col("test_accuracy")].empty(), !r.has_test_accuracy());
    }
    ++rows;
  }
  EXPECT_EQ(rows, in.sweep.points_size());
}

TEST(ReportTest, JsonRoundTripsEveryExperiment) {
  const ReportInput in = Input();
  const nlohmann::json j = nlohmann::json::parse(RenderJson(in).dump());
  ASSERT_EQ(j["experiments"].size(), in.experiments.size());
  for (const auto& je : j["experiments"]) {
    v1::Experiment back;
    auto st = google::protobuf::util::JsonStringToMessage(je.dump(), &back);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(back.SerializeAsString(), in.experiments.at(back.id()).SerializeAsString());
  }
  EXPECT_EQ(j["tables"][0]["rows"][0]["cells"][1]["value"].get<double>(), 2.0);
  EXPECT_TRUE(j["tables"][0]["rows"][1]["cells"][0]["value"].is_null());
}

// Tags open and close in order: enough to call the SVG well-formed for our purposes.
bool WellFormed(const std::string& xml, std::string* why) {
  std::vector<std::string> stack;
  size_t i = 0;
  while ((i = xml.find('<', i)) != std::string::npos) {
    const size_t end = xml.find('>', i);
    if (end == std::string::npos) return (*why = "unterminated tag"), false;
    std::string tag = xml.substr(i + 1, end - i - 1);
    i = end + 1;
    if (tag[0] == '?' || tag[0] == '!') continue;
    if (tag[0] == '/') {
      if (stack.empty() || stack.back() != tag.substr(1))
        return (*why = "mismatched </" + tag.substr(1) + ">"), false;
      stack.pop_back();
      continue;
    }
    const bool self_closing = tag.back() == '/';
    const std::string name = tag.substr(0, tag.find_first_of(" /"));
    if (std::count(tag.begin(), tag.end(), '"') % 2 != 0)
      return (*why = "unbalanced quotes in <" + name + ">"), false;
    if (!self_closing) stack.push_back(name);
  }
  if (!stack.empty()) return (*why = "unclosed <" + stack.back() + ">"), false;
  return true;
}

TEST(ReportTest, SvgIsWellFormedWithOnePolylinePerRowWithData) {
  const std::string svg = RenderSvg(Input());
  std::string why;
  EXPECT_TRUE(WellFormed(svg, &why)) << why;
  size_t polylines = 0;
  for (size_t i = 0; (i = svg.find("<polyline", i)) != std::string::npos; ++i) ++polylines;
  EXPECT_EQ(polylines, 2u);  // fork/yes/CPU and spawn/yes/CPU; the GPU rows have no data
  EXPECT_NE(svg.find("worker processes"), std::string::npos);
  EXPECT_NE(svg.find("host memory, GiB"), std::string::npos);
  EXPECT_NE(svg.find("(no data)"), std::string::npos);
}

TEST(ReportTest, CompareIsTheRatioOfEachCell) {
  ReportInput a = Input(), b = Input();
  for (auto& [id, e] : b.experiments) {
    e.mutable_result()->set_peak_pss_sum_bytes(e.result().peak_pss_sum_bytes() * 2);
  }
  const std::string md = RenderCompareMarkdown(a, b);
  EXPECT_NE(md.find("| fork | yes | CPU | 2.00 | 2.00 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| spawn | yes | CPU | 2.00 | - |"), std::string::npos) << md;
}

}  // namespace
}  // namespace shoal
