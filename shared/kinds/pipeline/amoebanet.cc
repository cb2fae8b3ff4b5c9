#include "shared/kinds/pipeline/amoebanet.h"

#include <numeric>

namespace shoal {

const std::vector<AmoebaStep>& AmoebaNormalSteps() {
  using O = AmoebaOp;
  static const std::vector<AmoebaStep> steps = {
      {1, O::kConv1x1},    {1, O::kMaxPool3x3},  {1, O::kNone},       {0, O::kConv1x7_7x1},
      {0, O::kConv1x1},    {0, O::kConv1x7_7x1}, {2, O::kMaxPool3x3}, {2, O::kNone},
      {1, O::kAvgPool3x3}, {5, O::kConv1x1}};
  return steps;
}

const std::vector<AmoebaStep>& AmoebaReductionSteps() {
  using O = AmoebaOp;
  static const std::vector<AmoebaStep> steps = {
      {0, O::kMaxPool2x2},  {0, O::kMaxPool3x3}, {2, O::kNone}, {1, O::kConv3x3},
      {2, O::kConv1x7_7x1}, {2, O::kMaxPool3x3}, {3, O::kNone}, {1, O::kMaxPool2x2},
      {2, O::kAvgPool3x3},  {3, O::kConv1x1}};
  return steps;
}

const std::vector<int>& AmoebaNormalConcat() {
  static const std::vector<int> c = {0, 3, 4, 6};
  return c;
}

const std::vector<int>& AmoebaReductionConcat() {
  static const std::vector<int> c = {4, 5, 6};
  return c;
}

uint32_t AmoebaCell::out_channels() const {
  return channels *
         uint32_t(reduction ? AmoebaReductionConcat().size() : AmoebaNormalConcat().size());
}

namespace {

uint64_t Conv(uint64_t in, uint64_t out, uint64_t kh, uint64_t kw) { return in * out * kh * kw; }
uint64_t Bn(uint64_t c) { return 2 * c; }
uint64_t ReluConvBn(uint64_t in, uint64_t out) { return Conv(in, out, 1, 1) + Bn(out); }
uint64_t FactorizedReduce(uint64_t in, uint64_t out) {
  return 2 * Conv(in, out / 2, 1, 1) + Bn(out);
}

uint64_t OpParams(AmoebaOp op, uint64_t c, uint32_t stride) {
  const uint64_t q = c / 4;
  switch (op) {
    case AmoebaOp::kNone:
      return stride == 1 ? 0 : FactorizedReduce(c, c);
    case AmoebaOp::kConv1x1:
      return Conv(c, c, 1, 1) + Bn(c);
    case AmoebaOp::kConv3x3:
      return Conv(c, q, 1, 1) + Bn(q) + Conv(q, q, 3, 3) + Bn(q) + Conv(q, c, 1, 1) + Bn(c);
    case AmoebaOp::kConv1x7_7x1:
      return Conv(c, q, 1, 1) + Bn(q) + 2 * (Conv(q, q, 1, 7) + Bn(q)) + Conv(q, c, 1, 1) + Bn(c);
    default:
      return 0;  // pools
  }
}

uint64_t CellParams(const AmoebaCell& cell) {
  uint64_t n = ReluConvBn(cell.channels_prev, cell.channels);
  if (cell.reduction_prev) {
    n += FactorizedReduce(cell.channels_prev_prev, cell.channels);
  } else if (cell.channels_prev_prev != cell.channels) {
    n += ReluConvBn(cell.channels_prev_prev, cell.channels);
  }
  const auto& steps = cell.reduction ? AmoebaReductionSteps() : AmoebaNormalSteps();
  for (const auto& s : steps)
    n += OpParams(s.op, cell.channels, cell.reduction && s.input < 2 ? 2 : 1);
  return n;
}

// torchgpipe's amoebanetd(): the running channel counts threaded through the cells.
class Planner {
 public:
  explicit Planner(uint32_t filters)
      : channels_(filters / 4), prev_prev_(channels_), prev_(channels_) {}
  AmoebaLayer Cell(const std::string& name, bool reduction) {
    AmoebaLayer l;
    l.name = name;
    l.is_cell = true;
    l.cell = {prev_prev_, prev_, channels_, reduction, reduction_prev_};
    l.params = CellParams(l.cell);
    prev_prev_ = prev_;
    prev_ = l.cell.out_channels();
    reduction_prev_ = reduction;
    return l;
  }
  void Scale(uint32_t by) { channels_ *= by; }
  uint32_t channels() const { return channels_; }
  uint32_t prev() const { return prev_; }

 private:
  uint32_t channels_, prev_prev_, prev_;
  bool reduction_prev_ = false;
};

}  // namespace

StatusOr<std::vector<AmoebaLayer>> PlanAmoebaNet(uint32_t layers, uint32_t filters,
                                                 uint32_t classes) {
  if (layers < 3 || layers % 3 != 0 || layers > 300)
    return InvalidArgument("layers: " + std::to_string(layers) +
                           " is not a multiple of 3 in 3..300");
  if (filters < 8 || filters % 8 != 0 || filters > 4096)
    return InvalidArgument("filters: " + std::to_string(filters) +
                           " is not a multiple of 8 in 8..4096 (its quarter must halve evenly)");
  if (classes < 2) return InvalidArgument("classes: " + std::to_string(classes) + " is below 2");
  Planner p(filters);
  std::vector<AmoebaLayer> out;
  AmoebaLayer stem;
  stem.name = "stem1";
  stem.channels = p.channels();
  stem.params = Conv(3, p.channels(), 3, 3) + Bn(p.channels());
  out.push_back(stem);
  auto reduction = [&](const std::string& name) {
    p.Scale(2);
    out.push_back(p.Cell(name, true));
  };
  auto normals = [&](int group) {
    for (uint32_t i = 0; i < layers / 3; ++i)
      out.push_back(
          p.Cell("cell" + std::to_string(group) + "_normal" + std::to_string(i + 1), false));
  };
  reduction("stem2");
  reduction("stem3");
  normals(1);
  reduction("cell2_reduction");
  normals(3);
  reduction("cell4_reduction");
  normals(5);
  AmoebaLayer classify;
  classify.name = "classify";
  classify.channels = p.prev();
  classify.params = uint64_t(p.prev()) * classes + classes;
  out.push_back(classify);
  return out;
}

uint64_t AmoebaNetParams(const std::vector<AmoebaLayer>& plan) {
  return std::accumulate(plan.begin(), plan.end(), uint64_t(0),
                         [](uint64_t n, const AmoebaLayer& l) { return n + l.params; });
}

}  // namespace shoal
