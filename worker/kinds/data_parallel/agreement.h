// A run across nodes, before its first collective: every node's part agrees on the run, and a part
// that never comes up is named rather than waited on in silence.
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include "shared/status.h"
#include "shoal/v1/shoal.pb.h"

namespace shoal {

// What every node's part must agree on: the spec less what is each daemon's own.
v1::ExperimentSpec Contract(v1::ExperimentSpec s);

// Global rank 0 publishes its part's contract; every other rank compares its own and answers, and
// rank 0 waits up to `timeout` for every answer: parts given different specs (worker counts,
// batches, model) fail at once, naming the field, instead of corrupting the ranks or hanging; a
// rank that never answers fails the run naming its node.
Status AgreeAcrossNodes(c10d::Store& store, const v1::ExperimentSpec& spec, uint32_t rank,
                        std::chrono::milliseconds timeout);

// Why a node other than node 0 could not join the store node 0 hosts (at spec.master) within
// `timeout`: what c10d said, in the words a user acts on.
Status NodeZeroUnreachable(const v1::ExperimentSpec& spec, std::chrono::milliseconds timeout,
                           const std::exception& c10d_error);

}  // namespace shoal
