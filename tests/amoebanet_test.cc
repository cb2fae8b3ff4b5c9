// AmoebaNet-D's plan and parameter counts (seed 004), from the definitions: the five configurations
// of GPipe's Table 1 as torchgpipe counts them, without building a 1.8-billion-parameter model.
#include "shared/kinds/pipeline/amoebanet.h"

#include <gtest/gtest.h>

namespace shoal {
namespace {

uint64_t Params(uint32_t layers, uint32_t filters) {
  auto plan = PlanAmoebaNet(layers, filters, 1000);
  EXPECT_TRUE(plan.ok()) << plan.status().message();
  return plan.ok() ? AmoebaNetParams(*plan) : 0;
}

TEST(AmoebaNetTest, TheSeedsFiveConfigurationsHaveTheirParameterCounts) {
  // The seed's table, in millions to two decimals: 81.51, 319.02, 542.73, 1055.83, 1844.86.
  const struct {
    uint32_t layers, filters;
    double millions;
  } table[] = {{18, 208, 81.51},
               {18, 416, 319.02},
               {18, 544, 542.73},
               {36, 544, 1055.83},
               {72, 512, 1844.86}};
  for (const auto& row : table) {
    const double m = double(Params(row.layers, row.filters)) / 1e6;
    EXPECT_NEAR(m, row.millions, 0.005) << row.layers << ", " << row.filters;
  }
  // Exactly, as torchgpipe's Python model counts them (sum of numel over parameters), read once
  // with Debian's PyTorch from its benchmarks/models/amoebanet at v0.0.7.
  EXPECT_EQ(Params(18, 208), 81505540u);
  EXPECT_EQ(Params(18, 64), 8462440u);
  EXPECT_EQ(Params(6, 32), 1187448u);
}

TEST(AmoebaNetTest, TheLayersAreLPlusSixWithTheSeedsNamesAndChannels) {
  auto plan = PlanAmoebaNet(18, 208, 1000);
  ASSERT_TRUE(plan.ok());
  ASSERT_EQ(plan->size(), 24u);  // the seed's balances sum to 24 for L = 18
  EXPECT_EQ((*plan)[0].name, "stem1");
  EXPECT_EQ((*plan)[0].channels, 52u);  // D / 4
  EXPECT_EQ((*plan)[1].name, "stem2");
  EXPECT_TRUE((*plan)[1].cell.reduction);
  EXPECT_EQ((*plan)[3].name, "cell1_normal1");
  EXPECT_TRUE((*plan)[3].cell.reduction_prev);
  EXPECT_EQ((*plan)[9].name, "cell2_reduction");
  EXPECT_EQ((*plan)[23].name, "classify");
  // Three reductions after the stem double D / 4 three times; a normal cell concatenates four
  // states: 52 x 2^4 x 4 features reach the classifier.
  EXPECT_EQ((*plan)[23].channels, 52u * 16 * 4);
  EXPECT_EQ((*plan)[23].params, uint64_t(52 * 16 * 4) * 1000 + 1000);
}

TEST(AmoebaNetTest, ShapesThatCannotBeBuiltAreRefusedNamingTheField) {
  EXPECT_EQ(PlanAmoebaNet(19, 208, 1000).status().message(),
            "layers: 19 is not a multiple of 3 in 3..300");
  EXPECT_EQ(PlanAmoebaNet(18, 212, 1000).status().message(),
            "filters: 212 is not a multiple of 8 in 8..4096 (its quarter must halve evenly)");
}

}  // namespace
}  // namespace shoal
