// A run's captured output: what comes through the pipe lands in the file up to the cap, the rest
// is counted and noted, EOF stops the polling, and slices read back with their offsets.
#include "server/log_capture.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <sstream>

#include "tests/testutil.h"

namespace shoal {
namespace {

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(LogCaptureTest, KeepsUpToTheCapAndSaysWhatItDropped) {
  testing::TempDir dir;
  const std::string path = LogPath(dir.path(), "x0123456789");
  auto log = LogCapture::Open(path, 10);
  ASSERT_TRUE(log.ok()) << log.status().message();
  const int w = ::dup((*log)->write_fd());
  (*log)->CloseWriteEnd();
  ASSERT_EQ(::write(w, "worker 0: hello\n", 16), 16);
  EXPECT_TRUE((*log)->Drain());  // more may come
  ::close(w);
  EXPECT_FALSE((*log)->Drain());     // every writer gone: EOF
  EXPECT_EQ((*log)->read_fd(), -1);  // nothing left to poll
  (*log)->Finish();
  EXPECT_EQ((*log)->written(), 10u);
  EXPECT_EQ((*log)->dropped(), 6u);
  EXPECT_EQ(Slurp(path),
            "worker 0: \n[shoald: 6 more bytes dropped: the log is capped at 10 bytes]\n");
}

TEST(LogCaptureTest, SlicesReadBackWithTheirOffsets) {
  testing::TempDir dir;
  const std::string path = dir / "x.log";
  std::ofstream(path) << "abcdef";
  auto first = ReadLog(path, 0, 4, /*ended=*/true);
  ASSERT_TRUE(first.ok());
  EXPECT_EQ(first->data(), "abcd");
  EXPECT_EQ(first->next_offset(), 4u);
  EXPECT_FALSE(first->complete());  // a full slice: there may be more
  auto rest = ReadLog(path, 4, 4, true);
  EXPECT_EQ(rest->data(), "ef");
  EXPECT_TRUE(rest->complete());
  EXPECT_FALSE(ReadLog(path, 6, 4, /*ended=*/false)->complete());  // still running
  auto none = ReadLog(dir / "missing.log", 0, 4, true);            // never started: empty, complete
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(none->data(), "");
  EXPECT_TRUE(none->complete());
}

}  // namespace
}  // namespace shoal
