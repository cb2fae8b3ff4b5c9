// The daemon's store of uploaded files: content-addressed, checked against sha256sum; whole or
// absent (an interrupted or oversized upload leaves nothing); removed when nothing uses it.
#include "server/blob_store.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/testutil.h"

namespace shoal {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

// Every file in `dir`, by name.
std::vector<std::string> Files(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// sha256sum's reading of `bytes`: an independent hash of what was uploaded.
std::string Sha256Sum(const TempDir& tmp, const std::string& bytes) {
  const std::string path = tmp / "plain";
  std::ofstream(path, std::ios::binary) << bytes;
  auto r = testing::RunCommand({"/usr/bin/sha256sum", path});
  return "sha256:" + r.out.substr(0, 64);
}

StatusOr<v1::StoredFile> UploadAll(BlobStore& store, const std::string& name,
                                   const std::string& bytes, size_t chunk = 7) {
  ASSIGN_OR_RETURN(auto up, store.Begin(name, bytes.size()));
  for (size_t off = 0; off < bytes.size(); off += chunk)
    RETURN_IF_ERROR(up->Append(bytes.substr(off, chunk)));
  return up->Commit();
}

class BlobStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(store_.Init().ok()); }
  TempDir tmp_;
  std::string dir_ = tmp_ / "blobs";
  BlobStore store_{dir_, 1000};
};

TEST_F(BlobStoreTest, StoresUnderTheContentsSha256) {
  const std::string bytes = "not a model, but bytes all the same\n";
  auto f = UploadAll(store_, "/home/u/models/mynet.pt", bytes);
  ASSERT_TRUE(f.ok()) << f.status().message();
  EXPECT_EQ(f->ref(), Sha256Sum(tmp_, bytes));
  EXPECT_EQ(f->name(), "mynet.pt");  // the base name only
  EXPECT_EQ(f->size_bytes(), bytes.size());
  const std::string hex = f->ref().substr(7);
  EXPECT_EQ(Files(dir_), (std::vector<std::string>{hex, hex + ".name"}));
  std::ifstream in(dir_ + "/" + hex, std::ios::binary);
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), bytes);
  auto found = store_.Find(f->ref());
  ASSERT_TRUE(found.ok());
  EXPECT_EQ(found->name(), "mynet.pt");
  EXPECT_EQ(found->size_bytes(), bytes.size());
}

TEST_F(BlobStoreTest, TheSameContentIsStoredOnceUnderItsFirstName) {
  auto a = UploadAll(store_, "a.pt", "same bytes");
  auto b = UploadAll(store_, "b.pt", "same bytes", 3);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->ref(), b->ref());
  EXPECT_EQ(b->name(), "a.pt");
  EXPECT_EQ(Files(dir_).size(), 2u);
}

TEST_F(BlobStoreTest, AnUploadThatDoesNotFinishLeavesNothing) {
  {
    auto up = store_.Begin("half.pt", 100);
    ASSERT_TRUE(up.ok());
    ASSERT_TRUE((*up)->Append(std::string(50, 'x')).ok());
    EXPECT_EQ(Files(dir_).size(), 1u);  // the partial file, while it lasts
  }                                     // the call ended: cancelled, the client gone
  EXPECT_TRUE(Files(dir_).empty());
  auto up = store_.Begin("short.pt", 100);
  ASSERT_TRUE((*up)->Append(std::string(99, 'x')).ok());
  auto f = (*up)->Commit();
  EXPECT_EQ(f.status().code(), Code::kInvalidArgument);
  EXPECT_NE(f.status().message().find("after 99 of the 100 bytes"), std::string::npos);
  EXPECT_TRUE(Files(dir_).empty());
}

TEST_F(BlobStoreTest, RefusesWhatIsTooLargeOrBadlyNamed) {
  auto big = store_.Begin("big.pt", 1001);
  EXPECT_EQ(big.status().code(), Code::kResourceExhausted);
  EXPECT_NE(big.status().message().find("--max-upload-mb"), std::string::npos);
  auto up = store_.Begin("liar.pt", 10);
  ASSERT_TRUE(up.ok());
  EXPECT_EQ((*up)->Append(std::string(11, 'x')).code(), Code::kInvalidArgument);
  for (const std::string& name :
       std::vector<std::string>{"", "dir/", "..", "bad\x1b[2Jname", std::string(300, 'n')})
    EXPECT_EQ(store_.Begin(name, 10).status().code(), Code::kInvalidArgument) << name;
  EXPECT_EQ(store_.Begin("empty.pt", 0).status().code(), Code::kInvalidArgument);
}

TEST_F(BlobStoreTest, UnknownOrMalformedRefs) {
  EXPECT_EQ(store_.Find("sha256:" + std::string(64, '0')).status().code(), Code::kNotFound);
  EXPECT_EQ(store_.Find("../shoal.db").status().code(), Code::kInvalidArgument);
}

TEST_F(BlobStoreTest, RemovesOnlyWhatNothingUsesOnceItsGraceHasPassed) {
  auto used = UploadAll(store_, "used.pt", "used");
  auto unused = UploadAll(store_, "unused.pt", "unused");
  ASSERT_TRUE(used.ok() && unused.ok());
  EXPECT_EQ(store_.RemoveUnreferenced({used->ref()}, std::chrono::hours(1)), 0u);  // too new
  EXPECT_EQ(store_.RemoveUnreferenced({used->ref()}, std::chrono::seconds(0)), 1u);
  EXPECT_TRUE(store_.Find(used->ref()).ok());
  EXPECT_EQ(store_.Find(unused->ref()).status().code(), Code::kNotFound);
  EXPECT_EQ(Files(dir_).size(), 2u);  // the used file and its name
}

TEST_F(BlobStoreTest, StartUpRemovesPartialFilesAStoppedDaemonLeft) {
  std::ofstream(dir_ + "/.part-0123456789abcdef") << "half";
  ASSERT_TRUE(store_.Init().ok());
  EXPECT_TRUE(Files(dir_).empty());
  EXPECT_EQ((fs::status(dir_).permissions() & fs::perms::all), fs::perms::owner_all);
}

}  // namespace
}  // namespace shoal
