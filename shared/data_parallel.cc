#include "shared/data_parallel.h"

#include <algorithm>

#include "shared/spec.h"

namespace shoal {

uint32_t WorldSize(const v1::ExperimentSpec& spec) {
  return std::max<uint32_t>(1, spec.workers()) * std::max<uint32_t>(1, spec.nodes());
}

uint32_t GlobalRank(const v1::ExperimentSpec& spec, uint32_t index) {
  return spec.node_rank() * std::max<uint32_t>(1, spec.workers()) + index;
}

uint32_t WorkerBatch(const v1::ExperimentSpec& spec) {
  if (spec.kind() == "data_parallel" && spec.scaling() == "strong")
    return spec.batch_size() / WorldSize(spec);
  return spec.batch_size();
}

uint32_t TotalBatch(const v1::ExperimentSpec& spec) {
  if (spec.kind() == "data_parallel" && spec.scaling() == "strong") return spec.batch_size();
  return spec.batch_size() * WorldSize(spec);
}

StatusOr<std::pair<std::string, uint16_t>> ParseHostPort(const std::string& field,
                                                         const std::string& master) {
  const size_t colon = master.rfind(':');
  const std::string why = field + ": '" + master + "' is not HOST:PORT with a port 1..65535";
  if (colon == std::string::npos || colon == 0 || colon + 1 == master.size())
    return InvalidArgument(why);
  const std::string port = master.substr(colon + 1);
  if (port.size() > 5 || port.find_first_not_of("0123456789") != std::string::npos)
    return InvalidArgument(why);
  const unsigned long p = std::stoul(port);
  if (p < 1 || p > 65535) return InvalidArgument(why);
  std::string host = master.substr(0, colon);
  if (host.size() > 2 && host.front() == '[' && host.back() == ']')  // [IPv6]:PORT
    host = host.substr(1, host.size() - 2);
  return std::make_pair(host, uint16_t(p));
}

StatusOr<std::vector<std::string>> ParseNodeDaemons(const std::string& text) {
  const std::vector<std::string> out = SplitCommas(text);
  for (auto it = out.begin(); it != out.end(); ++it) {
    RETURN_IF_ERROR(ParseHostPort("node_daemons", *it).status());
    if (std::count(out.begin(), it, *it) > 0)
      return InvalidArgument("node_daemons: '" + *it + "' is named twice");
  }
  if (out.size() < 2 || out.size() > 64) {
    return InvalidArgument("node_daemons: " + std::to_string(out.size()) +
                           " daemon(s); a coordinated experiment spans 2..64 nodes");
  }
  return out;
}

std::string DefaultMaster(const std::string& node0_daemon) {
  const std::string host = node0_daemon.substr(0, node0_daemon.rfind(':'));
  return host + ":" + std::to_string(kDefaultMasterPort);  // [IPv6] keeps its brackets
}

v1::ExperimentSpec PartSpec(const v1::ExperimentSpec& spec, const std::string& group_id,
                            uint32_t node) {
  v1::ExperimentSpec part = spec;
  part.clear_node_daemons();
  part.set_node_rank(node);
  part.set_name((spec.has_name() ? spec.name() + " " : "") + group_id + " node " +
                std::to_string(node));
  return part;
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
