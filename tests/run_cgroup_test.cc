#include "server/run_cgroup.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "tests/testutil.h"

namespace shoal {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

// A cgroup's folder as the kernel shows it: its cgroup.procs listing `procs`, and the leaf
// `daemon`'s cgroup.procs ready to be written (the kernel makes it with the folder).
std::string Group(const TempDir& tmp, const std::string& procs) {
  const std::string dir = tmp.path() + "/service";
  fs::create_directories(dir + "/daemon");
  std::ofstream(dir + "/cgroup.procs") << procs;
  std::ofstream(dir + "/daemon/cgroup.procs");
  return dir;
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(RunCgroupsTest, ADaemonAloneInItsGroupMovesIntoALeafSoTheGroupCanHandControllersOn) {
  TempDir tmp;
  const std::string dir = Group(tmp, std::to_string(::getpid()) + "\n");
  EXPECT_TRUE(LeaveGroupIfAlone(dir));
  EXPECT_EQ(Read(dir + "/daemon/cgroup.procs"), std::to_string(::getpid()));
}

TEST(RunCgroupsTest, AGroupSharedWithOtherProcessesIsLeftAsItIs) {
  TempDir tmp;
  const std::string dir = Group(tmp, std::to_string(::getpid()) + "\n1\n");
  EXPECT_FALSE(LeaveGroupIfAlone(dir));
  EXPECT_EQ(Read(dir + "/daemon/cgroup.procs"), "");
  EXPECT_FALSE(LeaveGroupIfAlone(Group(tmp, "1\n")));  // this process is not even in it
  EXPECT_EQ(Read(dir + "/daemon/cgroup.procs"), "");
}

}  // namespace
}  // namespace shoal
