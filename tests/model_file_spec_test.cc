// A user's model described by flags: the --input grammar, the spec's checks of model_file and
// its description, and the CLI's list splitting that keeps a bracketed input whole.
#include <gtest/gtest.h>

#include <functional>

#include "client/spec_flags.h"
#include "shared/spec/input_spec.h"
#include "shared/spec/spec.h"
#include "shared/spec/spec_fields.h"

namespace shoal {
namespace {

const std::string kRef = "sha256:" + std::string(64, 'a');

TEST(InputSpecTest, ParsesEveryPartWithItsBatchAndRange) {
  auto in = ParseInputs("float32[B,3,32,32];int64[B,16]:1000;bfloat16[7,B]");
  ASSERT_TRUE(in.ok()) << in.status().message();
  ASSERT_EQ(in->size(), 3u);
  EXPECT_EQ((*in)[0].dims, (std::vector<int64_t>{kBatchDim, 3, 32, 32}));
  EXPECT_EQ((*in)[0].SampleBytes(), 3 * 32 * 32 * 4);
  EXPECT_TRUE((*in)[0].floating());
  EXPECT_EQ((*in)[1].high, 1000);
  EXPECT_EQ((*in)[1].SampleBytes(), 16 * 8);
  EXPECT_EQ((*in)[2].batch_pos, 1);
  EXPECT_EQ(InputText((*in)[1]), "int64[B,16]:1000");
  EXPECT_EQ(InputText((*in)[2]), "bfloat16[7,B]");
}

TEST(InputSpecTest, RefusesNamingThePartAndWhatIsWrong) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"float32[3,32,32]", "no batch dimension B"},
      {"float32[B,B]", "names the batch B twice"},
      {"float31[B,3]", "dtype 'float31'"},
      {"int64[B,16]", "without its range"},
      {"int64[B,16]:0", "without its range"},
      {"float32[B,3]:10", "only integer inputs take :N"},
      {"uint8[B,3]:300", "past uint8's 256 values"},
      {"float32[B,0]", "dimension '0'"},
      {"float32[B,-3]", "dimension '-3'"},
      {"float32[B,1,1,1,1,1,1]", "at most 6"},
      {"float32[B,100000,100000]", "bytes a sample"},
      {"float32 B,3", "is not DTYPE[...]"},
      {"float32[B,3];;int64[B]:2", "empty part"},
      {"", "empty"},
  };
  for (const auto& [text, why] : bad) {
    auto in = ParseInputs(text);
    ASSERT_FALSE(in.ok()) << text;
    EXPECT_EQ(in.status().code(), Code::kInvalidArgument) << text;
    EXPECT_NE(in.status().message().find(why), std::string::npos)
        << text << ": " << in.status().message();
    EXPECT_EQ(in.status().message().rfind("input: ", 0), 0u) << in.status().message();
  }
  std::string nine;
  for (int i = 0; i < 9; ++i) nine += (i ? ";" : "") + std::string("float32[B,2]");
  EXPECT_NE(ParseInputs(nine).status().message().find("more than 8"), std::string::npos);
}

TEST(InputSpecTest, SyntheticSetHoldsAtLeastABatch) {
  EXPECT_EQ(SyntheticSamples(100, 64), 1024);
  EXPECT_EQ(SyntheticSamples(int64_t(1) << 20, 64), 256);  // 256 MiB of 1 MiB samples
  EXPECT_EQ(SyntheticSamples(int64_t(64) << 20, 8), 8);    // never fewer than a batch
}

v1::ExperimentSpec WithModelFile() {
  v1::ExperimentSpec s;
  s.set_model_file(kRef);
  s.set_input("float32[B,784]");
  s.set_classes(10);
  return s;
}

Status Checked(v1::ExperimentSpec s) {
  SpecLimits l;
  l.cores = 2;
  l.cuda_missing = "";  // a GPU node: what a spec may do there
  l.cuda_devices = 1;
  ApplyDefaults(&s, l);
  return ValidateSpec(s, l);
}

TEST(ModelFileSpecTest, DefaultsMakeATorchscriptModelWithNoTestSet) {
  v1::ExperimentSpec s = WithModelFile();
  SpecLimits l;
  ApplyDefaults(&s, l);
  EXPECT_EQ(s.model(), "torchscript");
  EXPECT_EQ(s.loss(), "cross_entropy");
  EXPECT_EQ(s.eval_samples(), 0u);
  EXPECT_TRUE(ValidateSpec(s, l).ok()) << ValidateSpec(s, l).message();
  s.set_kind("data_parallel");
  s.clear_share();
  s.clear_hogwild();  // hogwild's settings
  ApplyDefaults(&s, l);
  EXPECT_TRUE(ValidateSpec(s, l).ok()) << ValidateSpec(s, l).message();
}

TEST(ModelFileSpecTest, EveryBadDescriptionIsNamed) {
  struct Case {
    std::function<void(v1::ExperimentSpec*)> edit;
    std::string why;
  };
  const std::vector<Case> cases = {
      {[](auto* s) { s->set_model_file("mynet.pt"); }, "model_file: 'mynet.pt' is not sha256"},
      {[](auto* s) { s->set_model_file("sha256:" + std::string(64, 'G')); }, "not sha256"},
      {[](auto* s) { s->clear_input(); }, "input: required with model_file"},
      {[](auto* s) { s->set_input("float32[3]"); }, "no batch dimension"},
      {[](auto* s) { s->set_loss("hinge"); }, "loss: 'hinge' is not one of"},
      {[](auto* s) { s->clear_classes(); }, "classes: required with loss cross_entropy"},
      {[](auto* s) { s->set_loss("mse"); }, "classes: loss mse has no classes"},
      {[](auto* s) { s->set_classes(1); }, "classes"},
      {[](auto* s) { s->set_model("mnist_convnet"); }, "beside model_file"},
      {[](auto* s) { s->set_dataset("/usr/share/datasets/fashion-mnist"); }, "synthetic"},
      {[](auto* s) { s->set_eval_samples(100); }, "no test set"},
      {[](auto* s) { s->set_activations("lean"); }, "lean"},
      {[](auto* s) { s->set_kind("pipeline"); }, "model_file: not a field of kind pipeline"},
      {[](auto* s) { s->set_kind("multi_model"); }, "not a field of kind multi_model"},
  };
  for (const auto& c : cases) {
    v1::ExperimentSpec s = WithModelFile();
    c.edit(&s);
    Status st = Checked(s);
    ASSERT_FALSE(st.ok()) << c.why;
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.message();
    EXPECT_NE(st.message().find(c.why), std::string::npos) << st.message();
  }
}

TEST(ModelFileSpecTest, ItsFieldsNeedAModelFile) {
  for (const char* f : {"input", "loss", "classes"}) {
    v1::ExperimentSpec s;
    ASSERT_TRUE(
        SetSpecField(&s, *FindSpecField(f), f == std::string("classes") ? "3" : "mse").ok());
    Status st = Checked(s);
    EXPECT_NE(st.message().find(std::string(f) + ": only with model_file"), std::string::npos)
        << st.message();
  }
  v1::ExperimentSpec s;
  s.set_model("torchscript");
  EXPECT_NE(Checked(s).message().find("give model_file"), std::string::npos);
  v1::ExperimentSpec d;
  d.set_dataset(kRef);
  EXPECT_NE(Checked(d).message().find("an uploaded tensor file is for a model_file"),
            std::string::npos);
  v1::ExperimentSpec t = WithModelFile();  // a tensor file with a model file is taken
  t.set_dataset(kRef);
  EXPECT_TRUE(Checked(t).ok()) << Checked(t).message();
}

TEST(ModelFileSpecTest, CudaTrainsButNotUnderCpuAutocast) {
  v1::ExperimentSpec s = WithModelFile();
  s.set_device("cuda");
  s.set_start("spawn");
  EXPECT_TRUE(Checked(s).ok()) << Checked(s).message();
  s.set_autocast("bfloat16");
  EXPECT_NE(Checked(s).message().find("autocast: bfloat16 is CPU autocast"), std::string::npos)
      << Checked(s).message();
  s.clear_autocast();
  s.set_kind("multi_model");  // a kind without a CUDA path still says so
  EXPECT_FALSE(Checked(s).ok());
}

TEST(SweepListTest, ACommaInsideBracketsIsADimensions) {
  auto v = cli::SplitList("input", "float32[B,3,32,32],float32[B,784]");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, (std::vector<std::string>{"float32[B,3,32,32]", "float32[B,784]"}));
  EXPECT_EQ(cli::SplitList("workers", "1,2,4").value(), (std::vector<std::string>{"1", "2", "4"}));
  EXPECT_FALSE(cli::SplitList("workers", "1,,4").ok());
  EXPECT_EQ(cli::SplitList("input", "float32[B,3]")->size(), 1u);
}

}  // namespace
}  // namespace shoal
