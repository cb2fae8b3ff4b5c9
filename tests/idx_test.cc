#include "shared/idx.h"

#include <gtest/gtest.h>
#include <zlib.h>

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

TEST(IdxTest, LoadsADirectoryInEitherNaming) {
  TempDir d;
  WriteGz(d / "train-images-idx3-ubyte.gz", Idx({10, 28, 28}, 0));
  WriteGz(d / "train-labels-idx1-ubyte.gz", Idx({10}, 0));
  WriteRaw(d / "t10k-images.idx3-ubyte", Idx({4, 28, 28}, 0));
  WriteRaw(d / "t10k-labels.idx1-ubyte", Idx({4}, 3));
  auto s = LoadMnistDir(d.path());
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->train_images.count(), 10u);
  EXPECT_EQ(s->test_labels.count(), 4u);
  EXPECT_EQ(s->test_labels.data[0], 3);
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

}  // namespace
}  // namespace shoal
