#include "shared/idx.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <filesystem>
#include <fstream>

#include "tests/testutil.h"

namespace shoal {
namespace {

using testing::TempDir;

std::vector<uint8_t> Idx(std::vector<uint32_t> dims, uint8_t fill) {
  std::vector<uint8_t> b = {0, 0, 0x08, uint8_t(dims.size())};
  size_t n = 1;
  for (uint32_t d : dims) {
    b.push_back(uint8_t(d >> 24));
    b.push_back(uint8_t(d >> 16));
    b.push_back(uint8_t(d >> 8));
    b.push_back(uint8_t(d));
    n *= d;
  }
  for (size_t i = 0; i < n; ++i) b.push_back(uint8_t((fill + i) % 10));
  return b;
}

void WriteRaw(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

void WriteGz(const std::string& path, const std::vector<uint8_t>& b) {
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, b.data(), unsigned(b.size()));
  gzclose(f);
}

std::vector<uint8_t> ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), {}};
}

TEST(IdxTest, ReadsRawAndGzipped) {
  TempDir d;
  auto bytes = Idx({3, 28, 28}, 1);
  WriteRaw(d / "a", bytes);
  WriteGz(d / "a.gz", bytes);
  for (const auto& p : {d / "a", d / "a.gz"}) {
    auto r = ReadIdxFile(p);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->dims, (std::vector<uint32_t>{3, 28, 28}));
    EXPECT_EQ(r->data.size(), 3u * 28 * 28);
    EXPECT_EQ(r->data[5], (1 + 5) % 10);
  }
}

TEST(IdxTest, TruncatedRawFileIsAnError) {
  TempDir d;
  auto bytes = Idx({3, 28, 28}, 0);
  bytes.resize(bytes.size() - 100);
  WriteRaw(d / "t", bytes);
  auto r = ReadIdxFile(d / "t");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("truncated"), std::string::npos) << r.status().message();
}

TEST(IdxTest, TruncatedGzipIsAnError) {
  TempDir d;
  WriteGz(d / "t.gz", Idx({50, 28, 28}, 0));
  auto gz = ReadAll(d / "t.gz");
  gz.resize(gz.size() / 2);
  WriteRaw(d / "t.gz", gz);
  auto r = ReadIdxFile(d / "t.gz");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), Code::kDataLoss);
}

TEST(IdxTest, CorruptGzipIsAnError) {
  TempDir d;
  WriteGz(d / "c.gz", Idx({50, 28, 28}, 0));
  auto gz = ReadAll(d / "c.gz");
  for (size_t i = 20; i < gz.size() - 20; i += 7) gz[i] ^= 0x5a;
  WriteRaw(d / "c.gz", gz);
  auto r = ReadIdxFile(d / "c.gz");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("corrupt or truncated gzip"), std::string::npos)
      << r.status().message();
}

TEST(IdxTest, BadMagicTypeAndTrailingBytes) {
  std::vector<uint8_t> b = {1, 2, 3, 4};
  EXPECT_NE(ParseIdx(b.data(), b.size(), "x").status().message().find("bad magic"),
            std::string::npos);
  b = {0, 0, 0x0D, 1, 0, 0, 0, 1, 0, 0, 0, 0};  // float payload
  EXPECT_NE(ParseIdx(b.data(), b.size(), "x").status().message().find("only unsigned byte"),
            std::string::npos);
  auto ok = Idx({4}, 0);
  ok.push_back(9);
  EXPECT_NE(ParseIdx(ok.data(), ok.size(), "x").status().message().find("unexpected bytes"),
            std::string::npos);
  EXPECT_FALSE(ReadIdxFile("/nonexistent").ok());
}

// 10 training images gzipped, 4 test images raw in the dotted naming (labels start at 3).
void WriteMixedSet(const TempDir& d) {
  WriteGz(d / "train-images-idx3-ubyte.gz", Idx({10, 28, 28}, 0));
  WriteGz(d / "train-labels-idx1-ubyte.gz", Idx({10}, 0));
  WriteRaw(d / "t10k-images.idx3-ubyte", Idx({4, 28, 28}, 5));
  WriteRaw(d / "t10k-labels.idx1-ubyte", Idx({4}, 3));
}

TEST(IdxTest, LoadsADirectoryInEitherNaming) {
  TempDir d;
  WriteMixedSet(d);
  auto s = LoadMnistDir(d.path());
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->train_images.count(), 10u);
  EXPECT_EQ(s->test_labels.count(), 4u);
  EXPECT_EQ(s->test_labels.data[0], 3);
}

// The images decoded straight into place are the bytes a whole load reads; a file that changed
// between its header and its body is refused.
TEST(IdxTest, ImagesReadIntoPlaceAreTheLoadedOnes) {
  TempDir d;
  WriteMixedSet(d);
  auto whole = LoadMnistDir(d.path());
  auto heads = ReadMnistHeaders(d.path());
  ASSERT_TRUE(whole.ok() && heads.ok());
  EXPECT_TRUE(heads->train_images.data.empty());
  EXPECT_EQ(heads->train_labels.data, whole->train_labels.data);
  std::vector<uint8_t> train(10 * 28 * 28), test(4 * 28 * 28);
  Status st = ReadMnistImagesInto(*heads, train.data(), test.data());
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(train, whole->train_images.data);
  EXPECT_EQ(test, whole->test_images.data);
  WriteRaw(d / "t10k-images.idx3-ubyte", Idx({3, 28, 28}, 5));
  st = ReadMnistImagesInto(*heads, train.data(), test.data());
  EXPECT_NE(st.message().find("changed since its header was read"), std::string::npos)
      << st.message();
}

TEST(IdxTest, ImageAndLabelCountsMustAgree) {
  TempDir d;
  WriteRaw(d / "train-images-idx3-ubyte", Idx({10, 28, 28}, 0));
  WriteRaw(d / "train-labels-idx1-ubyte", Idx({9}, 0));
  auto s = LoadMnistDir(d.path());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("10 images but"), std::string::npos) << s.status().message();
}

TEST(IdxTest, RealFashionMnistLoads) {
  auto s = LoadMnistDir("/usr/share/datasets/fashion-mnist");
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->train_images.count(), 60000u);
  EXPECT_EQ(s->test_images.count(), 10000u);
}

// A set made by the test: train images (n, side x side) and labels, raw or gzipped.
void MakeSet(const TempDir& d, uint32_t n, uint32_t labels_n, uint32_t side = 28,
             uint8_t label_fill = 0) {
  WriteGz(d / "train-images-idx3-ubyte.gz", Idx({n, side, side}, 0));
  WriteGz(d / "train-labels-idx1-ubyte.gz", Idx({labels_n}, label_fill));
}

std::string CheckMessage(const std::string& dir) {
  Status st = CheckMnistDir(dir);
  return st.ok() ? "ok" : st.message();
}

TEST(IdxTest, SubmitTimeCheckRefusesEveryBrokenSetNamingTheFile) {
  {
    TempDir d;
    MakeSet(d, 0, 0);
    EXPECT_NE(CheckMessage(d.path()).find("no images"), std::string::npos);
  }
  {
    TempDir d;
    MakeSet(d, 10, 9);
    EXPECT_NE(CheckMessage(d.path()).find("10 images but"), std::string::npos);
  }
  {
    TempDir d;
    MakeSet(d, 10, 10, 32);
    EXPECT_NE(CheckMessage(d.path()).find("32x32"), std::string::npos);
  }
  {
    TempDir d;
    MakeSet(d, 20, 20);
    auto labels = Idx({20}, 0);
    labels.back() = 11;
    WriteGz(d / "train-labels-idx1-ubyte.gz", labels);
    EXPECT_NE(CheckMessage(d.path()).find("label 11 outside 0..9"), std::string::npos);
  }
  {
    TempDir d;
    MakeSet(d, 10, 10);
    auto gz = ReadAll(d / "train-images-idx3-ubyte.gz");
    gz.resize(gz.size() - 9);  // a cut stream: the trailer is gone
    WriteRaw(d / "train-images-idx3-ubyte.gz", gz);
    const std::string m = CheckMessage(d.path());
    EXPECT_NE(m.find("train-images-idx3-ubyte.gz"), std::string::npos) << m;
    EXPECT_NE(m.find("gzip trailer"), std::string::npos) << m;
  }
  {
    TempDir d;
    MakeSet(d, 10, 10);
    auto raw = Idx({10, 28, 28}, 0);
    raw.resize(raw.size() - 1);
    std::filesystem::remove(d / "train-images-idx3-ubyte.gz");
    WriteRaw(d / "train-images-idx3-ubyte", raw);
    EXPECT_NE(CheckMessage(d.path()).find("truncated: the header promises"), std::string::npos);
  }
}

// A small gzip whose header promises far more than deflate could hold is refused before any
// body is read (no gigabytes decompressed to find out).
TEST(IdxTest, AHeaderPromisingMoreThanTheFileCanHoldIsRefusedUnread) {
  TempDir d;
  auto head = Idx({1, 28, 28}, 0);
  head[5] = 0x10;  // 1 M images: 822 MB, from a file of a few dozen bytes
  WriteGz(d / "big.gz", head);
  auto r = ReadIdxFile(d / "big.gz", "", /*body=*/false);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("more than this"), std::string::npos) << r.status().message();
}

TEST(IdxTest, ASymlinkOutOfTheDataSetIsRefusedAtCheckAndAtLoad) {
  TempDir d, outside;
  MakeSet(d, 10, 10);
  WriteGz(outside / "labels.gz", Idx({10}, 0));
  std::filesystem::remove(d / "train-labels-idx1-ubyte.gz");
  std::filesystem::create_symlink(outside / "labels.gz", d / "train-labels-idx1-ubyte.gz");
  EXPECT_NE(CheckMessage(d.path()).find("outside its data set directory"), std::string::npos);
  auto s = LoadMnistDir(d.path());
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("outside its data set directory"), std::string::npos);
  // A symlink that stays inside is fine.
  std::filesystem::remove(d / "train-labels-idx1-ubyte.gz");
  WriteGz(d / "labels-real.gz", Idx({10}, 0));
  std::filesystem::create_symlink(d / "labels-real.gz", d / "train-labels-idx1-ubyte.gz");
  EXPECT_EQ(CheckMessage(d.path()), "ok");
}

}  // namespace
}  // namespace shoal
