// A run's trace (client/report/trace.h) checked against the trace-event format as viewers read
// it: every event's fields and types, slices nested per track, counters in time order per
// track, and its totals equal to the record's.
#include "client/report/trace.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

namespace shoal {
namespace {

using nlohmann::json;

constexpr double kMiB = 1024.0 * 1024.0;

v1::Experiment TracedRecord() {
  v1::Experiment e;
  e.set_id("x0123456789");
  e.set_state(v1::SUCCEEDED);
  e.mutable_spec()->set_kind("hogwild");
  e.mutable_result()->set_wall_ms(1000);
  e.mutable_result()->set_peak_pss_sum_bytes(300 << 20);
  e.mutable_result()->set_steps(40);
  e.mutable_result()->set_forward_ms(120);
  auto* leader = e.add_processes();
  leader->set_pid(100);
  leader->set_role("leader");
  leader->set_index(-1);
  leader->set_exit_known(true);
  for (int w = 0; w < 2; ++w) {
    auto* p = e.add_processes();
    p->set_pid(101 + w);
    p->set_role("worker");
    p->set_index(w);
    p->set_ready_ms(100 + 10 * w);
    p->set_start_ms(50);
    p->set_steps(20);
    p->set_exit_known(true);
    p->set_signal(w == 1 ? 9 : 0);
  }
  return e;
}

std::vector<v1::Sample> TracedSamples(int n) {
  std::vector<v1::Sample> out;
  for (int i = 0; i < n; ++i) {
    v1::Sample s;
    s.set_t_ms(20.0 * i);
    s.set_steps(uint64_t(i));
    // The peak, 300 MiB, at the sample n/3; a higher sum read while sharing moved sets none.
    s.set_total_pss_bytes(i == n / 3 ? 300 << 20 : 100 << 20);
    if (i == n / 2) {
      s.set_total_pss_bytes(400 << 20);
      s.set_sharing_moved(true);
    }
    s.set_total_rss_bytes(500 << 20);
    for (int pid = 100; pid < 103; ++pid) {
      auto* p = s.add_processes();
      p->set_pid(pid);
      p->set_role(pid == 100 ? "leader" : "worker");
      p->set_index(pid - 101);
      p->set_pss_bytes(uint64_t(pid) << 20);
    }
    out.push_back(s);
  }
  return out;
}

std::vector<v1::Event> TracedEvents() {
  std::vector<v1::Event> out;
  for (const auto& [t, text] : std::vector<std::pair<double, std::string>>{
           {2, "leader started, pid 100"},
           {500, "disturbance: 12% of a core taken by others"},
           {900, "worker 1 killed by signal 9"},
           {950, "worker 0 exited with code 0"}}) {
    v1::Event ev;
    ev.set_t_ms(t);
    ev.set_text(text);
    out.push_back(ev);
  }
  return out;
}

// The format's rules, as Perfetto's JSON importer and chrome://tracing apply them.
void ExpectValidTrace(const json& trace) {
  ASSERT_TRUE(trace.contains("traceEvents"));
  std::map<int64_t, std::vector<std::pair<double, double>>> slices;  // per track, in order
  std::map<std::pair<int64_t, std::string>, double> last_counter;
  for (const json& ev : trace["traceEvents"]) {
    ASSERT_TRUE(ev["ph"].is_string()) << ev;
    ASSERT_TRUE(ev["name"].is_string()) << ev;
    ASSERT_TRUE(ev["pid"].is_number_integer()) << ev;
    ASSERT_TRUE(ev["tid"].is_number_integer()) << ev;
    const std::string ph = ev["ph"];
    ASSERT_TRUE(ph == "M" || ph == "X" || ph == "C" || ph == "i") << ev;
    if (ph == "M") {
      ASSERT_TRUE(ev["args"].is_object()) << ev;
      continue;
    }
    ASSERT_TRUE(ev["ts"].is_number()) << ev;
    const double ts = ev["ts"];
    EXPECT_GE(ts, 0) << ev;
    if (ph == "X") {
      ASSERT_TRUE(ev["dur"].is_number()) << ev;
      EXPECT_GE(ev["dur"].get<double>(), 0) << ev;
      slices[ev["pid"]].push_back({ts, ts + ev["dur"].get<double>()});
    }
    if (ph == "C") {
      ASSERT_TRUE(ev["args"].is_object()) << ev;
      for (const auto& [k, v] : ev["args"].items()) EXPECT_TRUE(v.is_number()) << k << ev;
      auto& last = last_counter[{ev["pid"], ev["name"]}];
      EXPECT_GE(ts, last) << "counter out of order: " << ev;
      last = ts;
    }
    if (ph == "i") {
      EXPECT_TRUE(ev["s"] == "g" || ev["s"] == "t" || ev["s"] == "p") << ev;
    }
  }
  // Slices of a track nest: each begins no earlier and ends no later than the one it is in.
  for (const auto& [pid, list] : slices) {
    std::vector<std::pair<double, double>> open;
    for (const auto& [b, e] : list) {
      while (!open.empty() && b >= open.back().second) open.pop_back();
      if (!open.empty()) {
        EXPECT_LE(e, open.back().second + 1e-6) << "track " << pid;
      }
      open.push_back({b, e});
    }
  }
}

TEST(TraceTest, ARecordIsAValidTraceWhoseTotalsAreTheRecords) {
  const json trace = RenderTrace(TracedRecord(), TracedSamples(30), TracedEvents());
  ExpectValidTrace(trace);
  double peak = 0, steps = 0;
  std::set<std::string> names, instants;
  std::map<std::string, std::string> ends;  // track name -> how it ended
  std::map<int64_t, std::string> track_names;
  for (const json& ev : trace["traceEvents"]) {
    if (ev["ph"] == "M" && ev["name"] == "process_name")
      track_names[ev["pid"]] = ev["args"]["name"];
    if (ev["ph"] == "C" && ev["name"] == "memory sum (MiB)")
      peak = std::max(peak, ev["args"]["pss"].get<double>());
    if (ev["ph"] == "C" && ev["name"] == "steps")
      steps = std::max(steps, ev["args"]["steps"].get<double>());
    if (ev["ph"] == "X") names.insert(ev["name"]);
    if (ev["ph"] == "i" && ev["s"] == "g") instants.insert(ev["name"]);
  }
  for (const json& ev : trace["traceEvents"])
    if (ev["ph"] == "X" && ev["name"] == "alive" && ev["args"].contains("end"))
      ends[track_names[ev["pid"]]] = ev["args"]["end"];
  EXPECT_EQ(peak * kMiB,
            double(TracedRecord().result().peak_pss_sum_bytes()));  // not sharing's 400
  EXPECT_EQ(steps, 29);
  EXPECT_EQ(names, (std::set<std::string>{"run", "alive", "starting", "training"}));
  EXPECT_EQ(instants.size(), 4u);  // every event
  EXPECT_EQ(ends["worker 1 (pid 102)"], "killed by signal 9");
  EXPECT_EQ(ends["worker 0 (pid 101)"], "exited with code 0");
  EXPECT_EQ(ends["leader (pid 100)"], "exited with code 0");
  EXPECT_EQ(trace["otherData"]["experiment"], "x0123456789");
}

// A run across nodes: node 1's worker started its run 1.5 s after node 0's; its ready_ms counts
// from its own start, so its slices are moved onto node 0's clock as the samples were.
TEST(TraceTest, ANodesProcessesAreOnNodeZerosClock) {
  v1::Experiment e = TracedRecord();
  for (uint32_t k = 0; k < 2; ++k) {
    auto* part = e.add_parts();
    part->set_node_rank(k);
    part->set_clock_offset_ms(k == 0 ? 0 : 1500);
  }
  e.mutable_processes(2)->set_node(1);  // worker 1: ready at its node's 110 ms
  const json trace = RenderTrace(e, TracedSamples(30), TracedEvents());
  ExpectValidTrace(trace);
  std::map<std::string, double> starting_at;  // track -> its starting slice's start (us)
  std::map<int64_t, std::string> names;
  for (const json& ev : trace["traceEvents"])
    if (ev["ph"] == "M" && ev["name"] == "process_name") names[ev["pid"]] = ev["args"]["name"];
  for (const json& ev : trace["traceEvents"])
    if (ev["ph"] == "X" && ev["name"] == "starting") starting_at[names[ev["pid"]]] = ev["ts"];
  // Requested 50 ms before ready: node 0's at 50 ms, node 1's at its 60 ms, 1560 ms on node 0's.
  EXPECT_DOUBLE_EQ(starting_at["node 0 worker 0 (pid 101)"], 50e3);
  EXPECT_DOUBLE_EQ(starting_at["node 1 worker 1 (pid 102)"], 1560e3);
}

// Worker 0's evaluations are slices inside its training, numbered, with how many it made when
// that is more than were recorded one by one.
TEST(TraceTest, WorkerZerosEvaluationsAreSlicesInsideItsTraining) {
  v1::Experiment e = TracedRecord();
  v1::ProcessInfo* w0 = e.mutable_processes(1);
  for (double at : {300.0, 500.0}) {
    v1::Interval* i = w0->add_evaluation_spans();
    i->set_from_ms(at);
    i->set_to_ms(at + 40);
  }
  w0->set_evaluations(18);
  const json trace = RenderTrace(e, TracedSamples(30), TracedEvents());
  ExpectValidTrace(trace);
  std::vector<json> evals;
  for (const json& ev : trace["traceEvents"])
    if (ev["ph"] == "X" && ev["name"] == "evaluating") evals.push_back(ev);
  ASSERT_EQ(evals.size(), 2u);
  EXPECT_DOUBLE_EQ(evals[0]["ts"].get<double>(), 300e3);
  EXPECT_DOUBLE_EQ(evals[0]["dur"].get<double>(), 40e3);
  EXPECT_EQ(evals[1]["args"]["evaluation"], 2);
  EXPECT_EQ(evals[1]["args"]["evaluations"], 18);
  EXPECT_EQ(evals[0]["pid"], evals[1]["pid"]);
}

// A worker's timed steps are slices inside its training, each with its phases back to back.
TEST(TraceTest, TimedStepsAreSlicesWithTheirPhasesInside) {
  v1::Experiment e = TracedRecord();
  for (uint64_t k : {1, 2}) {
    v1::TimedStep* s = e.mutable_processes(1)->add_timed_steps();
    s->set_step(k);
    s->set_start_ms(100 + 20.0 * double(k - 1));
    s->set_data_ms(2);
    s->set_forward_ms(5);
    s->set_backward_ms(8);
    s->set_optimizer_ms(3);
  }
  const json trace = RenderTrace(e, TracedSamples(30), TracedEvents());
  ExpectValidTrace(trace);
  std::map<std::string, std::vector<double>> at;  // slice name -> its starts (us)
  for (const json& ev : trace["traceEvents"])
    if (ev["ph"] == "X") at[ev["name"]].push_back(ev["ts"]);  // worker 0's steps alone
  ASSERT_EQ(at["step 2"].size(), 1u);
  EXPECT_DOUBLE_EQ(at["step 2"][0], 120e3);
  EXPECT_EQ(at["forward"], (std::vector<double>{102e3, 122e3}));
  EXPECT_EQ(at["optimizer"], (std::vector<double>{115e3, 135e3}));
  EXPECT_TRUE(at["all-reduce wait"].empty());  // not timed: not drawn
}

// A long run's counters are thinned to the cap, keeping the first, the last and the peak.
TEST(TraceTest, ALongRunStaysSmallAndKeepsItsPeak) {
  const auto samples = TracedSamples(10000);
  const json trace = RenderTrace(TracedRecord(), samples, TracedEvents(), 500);
  ExpectValidTrace(trace);
  size_t sums = 0;
  double peak = 0, last = 0;
  for (const json& ev : trace["traceEvents"])
    if (ev["ph"] == "C" && ev["name"] == "memory sum (MiB)") {
      ++sums;
      peak = std::max(peak, ev["args"]["pss"].get<double>());
      last = ev["ts"];
    }
  EXPECT_LE(sums, 502u);
  EXPECT_GE(sums, 400u);
  EXPECT_EQ(peak, 300.0);
  EXPECT_EQ(last, samples.back().t_ms() * 1000);
  EXPECT_EQ(trace["otherData"]["samples_recorded"], 10000);
}

}  // namespace
}  // namespace shoal
