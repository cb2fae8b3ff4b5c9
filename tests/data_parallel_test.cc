// data_parallel's arithmetic (buckets, bandwidth, the batch under weak and strong scaling) and
// its spec rules.
#include "shared/kinds/data_parallel/data_parallel.h"

#include <gtest/gtest.h>

#include "shared/spec/spec.h"

namespace shoal {
namespace {

v1::ExperimentSpec DataParallel(uint32_t workers, uint32_t batch, const char* scaling) {
  v1::ExperimentSpec s;
  s.set_kind("data_parallel");
  s.set_workers(workers);
  s.set_batch_size(batch);
  if (scaling != nullptr) s.mutable_data_parallel()->set_scaling(scaling);
  SpecLimits l;
  l.cores = 2;
  ApplyDefaults(&s, l);
  return s;
}

TEST(DataParallelTest, BucketsGoInReverseOrderWithASmallFirstOne) {
  // Parameters of 400, 300, 200, 100 and 50 bytes; caps 250 first, 500 after.
  auto b = AssignBuckets({400, 300, 200, 100, 50}, 250, 500);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].params, (std::vector<size_t>{4, 3}));  // 150 bytes; 200 more would pass 250
  EXPECT_EQ(b[0].bytes, 150u);
  EXPECT_EQ(b[1].params, (std::vector<size_t>{2, 1}));  // 500 bytes: exactly the cap
  EXPECT_EQ(b[1].bytes, 500u);
  EXPECT_EQ(b[2].params, (std::vector<size_t>{0}));
  EXPECT_EQ(b[2].bytes, 400u);
}

TEST(DataParallelTest, AParameterLargerThanTheCapHasABucketOfItsOwn) {
  auto b = AssignBuckets({10, 1000, 10}, 100, 100);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0].params, (std::vector<size_t>{2}));
  EXPECT_EQ(b[1].params, (std::vector<size_t>{1}));
  EXPECT_EQ(b[1].bytes, 1000u);
  EXPECT_EQ(b[2].params, (std::vector<size_t>{0}));
  EXPECT_TRUE(AssignBuckets({}, 100, 100).empty());
  // Every parameter lands in exactly one bucket.
  size_t n = 0;
  for (const auto& x :
       AssignBuckets(std::vector<uint64_t>(61, 4 << 20), kFirstBucketBytes, kBucketBytes))
    n += x.params.size();
  EXPECT_EQ(n, 61u);
}

TEST(DataParallelTest, RingBandwidthFollowsTwoNMinusOneOverN) {
  EXPECT_DOUBLE_EQ(RingBusBytes(1000, 2), 1000.0);  // 2(1)/2
  EXPECT_DOUBLE_EQ(RingBusBytes(1000, 4), 1500.0);  // 2(3)/4
  EXPECT_DOUBLE_EQ(RingBusBytes(1000, 1), 0.0);
  auto bw = BusBandwidthGbps(2'000'000'000, 4, 1.5);  // 3e9 bus bytes in 1.5 s
  ASSERT_TRUE(bw.has_value());
  EXPECT_DOUBLE_EQ(*bw, 2.0);
  EXPECT_FALSE(BusBandwidthGbps(1000, 1, 1.0).has_value());  // one rank moves nothing
  EXPECT_FALSE(BusBandwidthGbps(1000, 2, 0.0).has_value());
}

TEST(DataParallelTest, WeakScalingGrowsTheStepStrongSplitsIt) {
  auto weak = DataParallel(4, 32, "weak");
  EXPECT_EQ(WorkerBatch(weak), 32u);
  EXPECT_EQ(TotalBatch(weak), 128u);
  auto strong = DataParallel(4, 128, "strong");
  EXPECT_EQ(WorkerBatch(strong), 32u);
  EXPECT_EQ(TotalBatch(strong), 128u);
  // Epochs shard the set over the workers, each shard in per-worker batches.
  strong.clear_batches();
  strong.set_epochs(1);
  EXPECT_EQ(BatchesPerEpoch(strong, 6000), 47u);  // 1500 samples per worker, 32 a batch
  // Other kinds read batch_size as each worker's.
  v1::ExperimentSpec hog;
  hog.set_workers(4);
  hog.set_batch_size(128);
  EXPECT_EQ(WorkerBatch(hog), 128u);
}

TEST(DataParallelTest, DefaultsAndRefusalsNameTheField) {
  SpecLimits l;
  l.cores = 2;
  auto s = DataParallel(2, 32, nullptr);
  EXPECT_EQ(s.data_parallel().scaling(), "weak");
  EXPECT_FALSE(s.share());
  EXPECT_TRUE(ValidateSpec(s, l).ok()) << ValidateSpec(s, l).message();
  v1::ExperimentSpec dflt;
  dflt.set_kind("data_parallel");
  ApplyDefaults(&dflt, l);
  EXPECT_EQ(dflt.batch_size(), 32u);

  auto bad = DataParallel(2, 32, "sideways");
  EXPECT_EQ(ValidateSpec(bad, l).message(), "scaling: 'sideways' is not one of weak, strong");
  auto uneven = DataParallel(3, 32, "strong");
  EXPECT_NE(ValidateSpec(uneven, l).message().find("batch_size: strong scaling splits the step's "
                                                   "32 samples evenly over the workers; 3"),
            std::string::npos);
  auto shared = DataParallel(2, 32, "weak");
  shared.set_share(true);
  EXPECT_EQ(ValidateSpec(shared, l).message().rfind("share: data_parallel keeps one replica", 0),
            0u);
  auto resnet = DataParallel(2, 32, "weak");
  resnet.set_model("resnet18_cifar");
  resnet.set_dataset("/usr/share/datasets/fashion-mnist");
  EXPECT_EQ(ValidateSpec(resnet, l).message().rfind("dataset: resnet18_cifar trains on CIFAR", 0),
            0u);
  auto cuda = DataParallel(2, 32, "weak");
  cuda.set_device("cuda");
  EXPECT_EQ(ValidateSpec(cuda, l).message().rfind("device: kind data_parallel does not train on "
                                                  "cuda",
                                                  0),
            0u);
  // Only data_parallel reads scaling.
  v1::ExperimentSpec hog;
  hog.mutable_data_parallel()->set_scaling("weak");
  ApplyDefaults(&hog, l);
  EXPECT_EQ(ValidateSpec(hog, l).message(),
            "scaling: not a field of kind hogwild (it is data_parallel's)");
}

TEST(DataParallelTest, NodesMakeGlobalRanksAndNeedAMaster) {
  SpecLimits l;
  l.cores = 2;
  auto s = DataParallel(2, 64, "strong");
  s.set_nodes(2);
  s.set_node_rank(1);
  EXPECT_EQ(ValidateSpec(s, l).message(),
            "master: nodes 2 need HOST:PORT where node 0's worker 0 hosts the c10d store");
  s.set_master("node0:29500");
  EXPECT_TRUE(ValidateSpec(s, l).ok()) << ValidateSpec(s, l).message();
  EXPECT_EQ(WorldSize(s), 4u);
  EXPECT_EQ(GlobalRank(s, 0), 2u);
  EXPECT_EQ(GlobalRank(s, 1), 3u);
  EXPECT_EQ(WorkerBatch(s), 16u);  // 64 over 4 replicas on 2 nodes
  EXPECT_EQ(TotalBatch(s), 64u);
  for (const char* bad : {"node0", "node0:", ":29500", "node0:0", "node0:65536", "node0:29x"}) {
    s.set_master(bad);
    EXPECT_EQ(ValidateSpec(s, l).message(),
              std::string("master: '") + bad + "' is not HOST:PORT with a port 1..65535");
  }
  s.set_master("node0:29500");
  s.set_node_rank(2);
  EXPECT_EQ(ValidateSpec(s, l).message(), "node_rank: 2 is not below nodes (2)");
  auto one = DataParallel(2, 32, "weak");
  one.set_master("node0:29500");
  EXPECT_EQ(ValidateSpec(one, l).message().rfind("master: only with nodes > 1", 0), 0u);
  auto parsed = ParseMaster("[::1]:80");
  ASSERT_TRUE(parsed.ok());
  EXPECT_EQ(parsed->first, "::1");
  EXPECT_EQ(parsed->second, 80);
}

// The command kind reads the same node fields (torchrun's): defaults, refusals, Slurm's master;
// the other kinds refuse them.
TEST(DataParallelTest, TheCommandKindTakesTheNodeFieldsAndTheOthersRefuseThem) {
  SpecLimits l;
  l.cores = 2;
  v1::ExperimentSpec c;
  c.set_kind("command");
  c.mutable_command()->add_argv("python3");
  c.set_nodes(2);
  ApplyDefaults(&c, l);
  EXPECT_EQ(c.node_rank(), 0u);
  EXPECT_EQ(ValidateSpec(c, l).message(),
            "master: nodes 2 need HOST:PORT where node 0's worker 0 hosts the c10d store");
  c.set_master("node0:29500");
  EXPECT_TRUE(ValidateSpec(c, l).ok()) << ValidateSpec(c, l).message();
  SpecLimits slurm = l;
  slurm.placed_on_slurm = true;
  v1::ExperimentSpec placed = c;
  placed.clear_master();
  ApplyDefaults(&placed, slurm);
  EXPECT_EQ(placed.master(), kSlurmMaster);
  EXPECT_TRUE(ValidateSpec(placed, slurm).ok()) << ValidateSpec(placed, slurm).message();
  for (const char* kind : {"hogwild", "pipeline", "multi_model", "data_loading"}) {
    v1::ExperimentSpec other;
    other.set_kind(kind);
    other.set_nodes(2);
    ApplyDefaults(&other, l);
    EXPECT_NE(ValidateSpec(other, l).message().find("nodes"), std::string::npos)
        << kind << ": " << ValidateSpec(other, l).message();
  }
}

// On Slurm the allocation's first node is the master, written as "slurm" and filled in on each
// node as the job starts; a master or a node_rank of the user's own is refused there, and "slurm"
// anywhere else.
TEST(DataParallelTest, OnSlurmTheAllocationsFirstNodeIsTheMaster) {
  SpecLimits slurm;
  slurm.cores = 2;
  slurm.placed_on_slurm = true;
  v1::ExperimentSpec s = DataParallel(2, 32, "weak");
  s.set_nodes(2);
  ApplyDefaults(&s, slurm);
  EXPECT_EQ(s.master(), kSlurmMaster);
  EXPECT_TRUE(ValidateSpec(s, slurm).ok()) << ValidateSpec(s, slurm).message();
  SpecLimits here;
  here.cores = 2;
  EXPECT_EQ(ValidateSpec(s, here).message(),
            "master: slurm is the first node of a Slurm allocation: only on Slurm (--slurm)");
  v1::ExperimentSpec own = s;
  own.set_master("node0:29500");
  EXPECT_EQ(ValidateSpec(own, slurm).message().rfind("master: on Slurm the first node", 0), 0u);
  v1::ExperimentSpec ranked = s;
  ranked.set_node_rank(1);
  EXPECT_EQ(ValidateSpec(ranked, slurm).message().rfind("node_rank: on Slurm", 0), 0u);
  v1::ExperimentSpec one = DataParallel(2, 32, "weak");  // one node: no master to meet at
  ApplyDefaults(&one, slurm);
  EXPECT_FALSE(one.has_master());
  EXPECT_TRUE(ValidateSpec(one, slurm).ok());
}

TEST(DataParallelTest, ResNetDefaultsToNoEvaluationButKeepsAnExplicitOne) {
  SpecLimits l;
  l.cores = 2;
  v1::ExperimentSpec s;
  s.set_kind("data_parallel");
  s.set_model("resnet18_cifar");
  ApplyDefaults(&s, l);
  EXPECT_EQ(s.eval_samples(), 0u);
  v1::ExperimentSpec e = s;
  e.clear_eval_samples();
  e.set_eval_samples(100);
  ApplyDefaults(&e, l);
  EXPECT_EQ(e.eval_samples(), 100u);
  EXPECT_TRUE(ValidateSpec(e, l).ok()) << ValidateSpec(e, l).message();
}

}  // namespace
}  // namespace shoal
