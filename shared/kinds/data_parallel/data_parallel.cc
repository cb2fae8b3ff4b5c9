#include "shared/kinds/data_parallel/data_parallel.h"

#include <algorithm>

#include "shared/endpoint.h"
#include "shared/spec/spec.h"

namespace shoal {

uint32_t WorldSize(const v1::ExperimentSpec& spec) {
  return std::max<uint32_t>(1, spec.workers()) * std::max<uint32_t>(1, spec.nodes());
}

uint32_t GlobalRank(const v1::ExperimentSpec& spec, uint32_t index) {
  return spec.node_rank() * std::max<uint32_t>(1, spec.workers()) + index;
}

uint32_t WorkerBatch(const v1::ExperimentSpec& spec) {
  if (spec.data_parallel().scaling() == "strong") return spec.batch_size() / WorldSize(spec);
  return spec.batch_size();
}

uint32_t TotalBatch(const v1::ExperimentSpec& spec) {
  if (spec.kind() == "data_parallel" && spec.data_parallel().scaling() == "strong")
    return spec.batch_size();
  return spec.batch_size() * WorldSize(spec);
}

std::vector<GradBucket> AssignBuckets(const std::vector<uint64_t>& param_bytes, uint64_t first_cap,
                                      uint64_t cap) {
  std::vector<GradBucket> out;
  GradBucket cur;
  for (size_t k = param_bytes.size(); k-- > 0;) {
    const uint64_t limit = out.empty() ? first_cap : cap;
    if (!cur.params.empty() && cur.bytes + param_bytes[k] > limit) {
      out.push_back(std::move(cur));
      cur = GradBucket{};
    }
    cur.params.push_back(k);
    cur.bytes += param_bytes[k];
  }
  if (!cur.params.empty()) out.push_back(std::move(cur));
  return out;
}

double RingBusBytes(uint64_t bytes, uint32_t world) {
  if (world == 0) return 0;
  return 2.0 * double(world - 1) / double(world) * double(bytes);
}

std::optional<double> BusBandwidthGbps(uint64_t bytes, uint32_t world, double seconds) {
  if (world < 2 || seconds <= 0 || bytes == 0) return std::nullopt;
  return RingBusBytes(bytes, world) / seconds / 1e9;
}

}  // namespace shoal
