// A run across nodes agreeing before its first collective (worker/kinds/data_parallel/
// agreement.h), its ranks in threads of this process meeting in an in-memory c10d HashStore: parts
// given different specs fail naming the field, and a node whose part never comes up is named
// once the run's timeout has passed, not waited on in silence.
#include "worker/kinds/data_parallel/agreement.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

namespace shoal {
namespace {

using std::chrono::milliseconds;

v1::ExperimentSpec Part(uint32_t node) {
  v1::ExperimentSpec s;
  s.set_kind("data_parallel");
  s.set_workers(2);
  s.set_nodes(2);
  s.set_node_rank(node);
  s.set_master("10.0.0.1:29500");
  s.set_batch_size(32);
  return s;
}

TEST(AgreementTest, PartsThatAgreeMeetAndOnesThatDoNotNameTheField) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  Status ranks[4];
  std::vector<std::thread> others;
  for (uint32_t r = 1; r < 4; ++r)
    others.emplace_back(
        [&, r] { ranks[r] = AgreeAcrossNodes(*store, Part(r / 2), r, milliseconds(5000)); });
  ranks[0] = AgreeAcrossNodes(*store, Part(0), 0, milliseconds(5000));
  for (auto& t : others) t.join();
  for (const Status& st : ranks) EXPECT_TRUE(st.ok()) << st.message();

  auto other = c10::make_intrusive<c10d::HashStore>();
  v1::ExperimentSpec bigger = Part(1);
  bigger.set_batch_size(64);
  std::thread node1([&] {
    (void)AgreeAcrossNodes(*other, Part(1), 2, milliseconds(5000));
    ranks[3] = AgreeAcrossNodes(*other, bigger, 3, milliseconds(5000));
  });
  // Rank 1 (node 0's second worker) answers too.
  std::thread rank1([&] { (void)AgreeAcrossNodes(*other, Part(0), 1, milliseconds(5000)); });
  ranks[0] = AgreeAcrossNodes(*other, Part(0), 0, milliseconds(5000));
  node1.join();
  rank1.join();
  EXPECT_EQ(ranks[3].message(), "nodes disagree: batch_size is '32' on node 0 and '64' on node 1");
  EXPECT_EQ(ranks[0].message(),
            "rank 3: nodes disagree: batch_size is '32' on node 0 and '64' on node 1");
}

// Node 1 never comes up: rank 0 fails after the run's timeout (once, not once per missing rank),
// naming node 1 and where it should have connected.
TEST(AgreementTest, ANodeThatNeverComesUpIsNamedAfterTheTimeout) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::thread rank1([&] { (void)AgreeAcrossNodes(*store, Part(0), 1, milliseconds(300)); });
  const auto t0 = std::chrono::steady_clock::now();
  const Status st = AgreeAcrossNodes(*store, Part(0), 0, milliseconds(300));
  const auto waited = std::chrono::steady_clock::now() - t0;
  rank1.join();
  EXPECT_EQ(st.code(), Code::kUnavailable);
  EXPECT_EQ(st.message().rfind("node 1 (rank 2) did not join the run within 0.3 s: its part never "
                               "started, or cannot reach node 0 at 10.0.0.1:29500 (c10d: ",
                               0),
            0u)
      << st.message();
  EXPECT_GE(waited, milliseconds(250));  // the store's own clock: a hair under 300
  EXPECT_LT(waited, milliseconds(550));  // not 300 ms for each of ranks 2 and 3
}

}  // namespace
}  // namespace shoal
