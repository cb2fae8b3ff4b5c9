// data_parallel's figures: its part of the result, its report tables, its lines in `shoal get`.
#include "shared/kinds/data_parallel/figures.h"

#include <algorithm>
#include <functional>
#include <set>

#include "shared/kinds/data_parallel/data_parallel.h"
#include "shared/report/text.h"

namespace shoal::data_parallel {
namespace {

using namespace report;
using namespace text;
using Reports = google::protobuf::RepeatedPtrField<ipc::v1::WorkerReading>;

// data_parallel: per-step means over every step of every replica, and whether the replicas ended
// with the same weights.
void FillDataParallel(const KindRunFacts& f, const Reports& ws, v1::Result* r) {
  v1::DataParallelResult* d = r->mutable_data_parallel();
  d->set_scaling(f.spec.data_parallel().scaling());
  d->set_world_size(WorldSize(f.spec));
  d->set_batch_per_worker(WorkerBatch(f.spec));
  d->set_batch_total(TotalBatch(f.spec));
  uint64_t steps = 0, data = 0, fwd = 0, bwd = 0, comm = 0, busy = 0, opt = 0, bytes = 0;
  std::set<uint64_t> sums;
  uint32_t finished = 0;
  for (const auto& w : ws) {
    steps += w.steps();
    data += w.data_ns();
    fwd += w.forward_ns();
    bwd += w.backward_ns();
    comm += w.comm_ns();
    busy += w.data_parallel().allreduce_busy_ns();
    opt += w.optimizer_ns();
    bytes += w.data_parallel().allreduce_bytes();
    d->set_buckets(std::max(d->buckets(), w.data_parallel().buckets()));
    d->set_parameters(std::max(d->parameters(), w.parameters()));
    if (w.phase() != ipc::v1::FINISHED) continue;
    ++finished;
    sums.insert(w.weights_checksum());
  }
  if (steps == 0) return;
  auto per_step = [&](uint64_t ns) { return NsToMs(ns) / double(steps); };
  const uint64_t workers = std::max<uint32_t>(1, f.spec.workers());
  d->set_steps_per_worker((steps + workers - 1) / workers);  // > 0 once any replica stepped
  d->set_allreduce_bytes_per_step(bytes / steps);
  d->set_data_ms(per_step(data));
  d->set_compute_ms(per_step(fwd + bwd));
  d->set_comm_ms(per_step(comm));
  d->set_allreduce_busy_ms(per_step(busy));
  d->set_optimizer_ms(per_step(opt));
  d->set_step_ms(per_step(data + fwd + bwd + comm + opt));
  if (auto bw =
          BusBandwidthGbps(bytes / steps, WorldSize(f.spec), double(busy) / double(steps) / 1e9))
    d->set_bus_bandwidth_gbps(*bw);
  if (finished == f.spec.workers()) d->set_replicas_identical(sums.size() == 1);
}

// data_parallel: the succeeded 1-worker point of the sweep that `e` is measured against — every
// varying field but the worker count equal (`same_worker_batch`: also the batch each worker
// takes, whatever the scaling, as the seed's subtractive estimate needs); nullptr when none ran.
const v1::Experiment* OneWorkerBaseline(const std::vector<PointView>& points,
                                        const v1::Experiment& e, bool same_worker_batch) {
  if (WorldSize(e.spec()) == 1) return &e;  // its own baseline, not a rerun's noise
  auto self = std::find_if(points.begin(), points.end(),
                           [&](const PointView& v) { return v.experiment == &e; });
  if (self == points.end()) return nullptr;
  const std::set<std::string> free = same_worker_batch
                                         ? std::set<std::string>{"workers", "batch_size", "scaling"}
                                         : std::set<std::string>{"workers"};
  for (const auto& q : points) {
    const v1::Experiment* x = q.experiment;
    if (x == nullptr || x->state() != v1::SUCCEEDED || WorldSize(x->spec()) != 1) continue;
    if (!x->result().has_data_parallel()) continue;
    bool same = true;
    for (const auto& [field, value] : self->values) {
      if (free.count(field) == 0 && (q.values.count(field) == 0 || q.values.at(field) != value))
        same = false;
    }
    if (same_worker_batch && x->result().data_parallel().batch_per_worker() !=
                                 e.result().data_parallel().batch_per_worker())
      same = false;
    if (same) return x;
  }
  return nullptr;
}

Cell DataParallelStep(const std::vector<PointView>& points, const v1::Experiment& e, size_t col) {
  if (!e.result().has_data_parallel()) return Missing();
  const v1::DataParallelResult& d = e.result().data_parallel();
  if (d.steps_per_worker() == 0) return Missing();  // no step ended: no per-step figure
  if (col == 0) return Value(d.step_ms(), "%.1f");
  if (col == 1) return Value(d.compute_ms(), "%.1f");
  if (col == 2) return Value(d.comm_ms(), "%.1f");
  if (col == 3) {  // the seed's way: this step minus a lone worker's step on the same batch
    const v1::Experiment* base = OneWorkerBaseline(points, e, true);
    if (base == nullptr || base->result().data_parallel().steps_per_worker() == 0) return Missing();
    return Value(d.step_ms() - base->result().data_parallel().step_ms(), "%.1f");
  }
  if (col == 4) return Value(d.allreduce_busy_ms(), "%.1f");
  return Value(d.optimizer_ms(), "%.1f");
}

Cell DataParallelScale(const std::vector<PointView>& points, const v1::Experiment& e, size_t col) {
  if (!e.result().has_data_parallel()) return Missing();
  const v1::DataParallelResult& d = e.result().data_parallel();
  switch (col) {
    case 0:
      return Value(d.batch_per_worker(), "%.0f");
    case 1:
      return Value(d.batch_total(), "%.0f");
    case 2:
      return ValueIf(e.result().has_samples_per_sec(), e.result().samples_per_sec(), "%.1f");
    case 3: {
      const v1::Experiment* base = OneWorkerBaseline(points, e, false);
      if (base == nullptr || !base->result().has_samples_per_sec() ||
          base->result().samples_per_sec() <= 0 || !e.result().has_samples_per_sec())
        return Missing();
      return Value(e.result().samples_per_sec() / base->result().samples_per_sec(), "%.2f");
    }
    case 4:
      if (d.steps_per_worker() == 0) return Missing();
      return Value(double(d.allreduce_bytes_per_step()) / double(1 << 20), "%.2f");
    case 5:
      return ValueIf(d.has_bus_bandwidth_gbps(), d.bus_bandwidth_gbps(), "%.3f");
    default: {
      Cell c;
      c.text = !d.has_replicas_identical() ? "-" : d.replicas_identical() ? "yes" : "no";
      return c;
    }
  }
}

std::vector<Table> DataParallelTables(const std::vector<PointView>& points,
                                      const std::vector<std::string>& fields) {
  using namespace std::placeholders;
  return {
      PointTable(points, fields, "data_parallel_step_ms",
                 "data_parallel (seed 002), one step (ms, mean over every step of every replica): "
                 "the whole step; compute (forward + backward); communication measured (blocked "
                 "waiting for the gradient all-reduces after backward, and for BatchNorm's "
                 "buffers before forward); communication the seed's "
                 "way (this step minus a 1-worker step on the same per-worker batch, from this "
                 "sweep); all-reduce busy (an all-reduce in flight, overlapping backward); update",
                 "figure",
                 {"step", "compute", "comm", "comm (subtractive)", "all-reduce busy", "update"},
                 std::bind(DataParallelStep, std::cref(points), _1, _2)),
      PointTable(points, fields, "data_parallel_scaling",
                 "data_parallel: batch per worker and per step, throughput (samples/s, all "
                 "replicas), speed-up over the 1-worker point of the same sweep with every other "
                 "field equal, gradient MiB all-reduced per step, ring bus bandwidth (GB/s: "
                 "2(k-1)/k x bytes / all-reduce busy time), and whether this node's replicas ended "
                 "with identical weights",
                 "figure",
                 {"batch/worker", "batch/step", "samples/s", "speed-up", "MiB/step", "bus GB/s",
                  "replicas identical"},
                 std::bind(DataParallelScale, std::cref(points), _1, _2)),
  };
}

bool AnyDataParallel(const std::vector<PointView>& points) {
  return std::any_of(points.begin(), points.end(), [](const PointView& v) {
    return v.experiment != nullptr && v.experiment->result().has_data_parallel();
  });
}

// data_parallel: how the batch split, and one step's compute against its communication.
std::string DataParallelLines(const v1::Result& r) {
  if (!r.has_data_parallel()) return "";
  const auto& d = r.data_parallel();
  const std::string bw =
      d.has_bus_bandwidth_gbps() ? F("%.3f GB/s", d.bus_bandwidth_gbps()) : std::string("-");
  return F("  replicas    %u (scaling %s: batch %u per worker, %u per step), %lu parameters in %u "
           "buckets, %s all-reduced per step; replicas identical: %s\n",
           d.world_size(), d.scaling().c_str(), d.batch_per_worker(), d.batch_total(),
           UL(d.parameters()), d.buckets(),
           (d.steps_per_worker() > 0 ? Mib(d.allreduce_bytes_per_step()) : std::string("-"))
               .c_str(),
           !d.has_replicas_identical() ? "-"
           : d.replicas_identical()    ? "yes"
                                       : "no") +
         (d.steps_per_worker() == 0
              ? std::string("  per step    - (no step ended)\n")
              : F("  per step    %.1f ms: data %.1f, compute %.1f, comm %.1f (blocked), update "
                  "%.1f; all-reduce busy %.1f ms, bus bandwidth %s\n",
                  d.step_ms(), d.data_ms(), d.compute_ms(), d.comm_ms(), d.optimizer_ms(),
                  d.allreduce_busy_ms(), bw.c_str()));
}

}  // namespace

void Summarize(const KindRunFacts& f, v1::Result* r) { FillDataParallel(f, f.workers, r); }

std::vector<Table> ReportTables(const KindTablesInput& in) {
  if (!AnyDataParallel(in.points)) return {};
  return DataParallelTables(in.points, in.fields);
}

std::string ResultLines(const v1::Result& r) { return DataParallelLines(r); }

}  // namespace shoal::data_parallel
